"""Compiler half of the stand-in: it refuses to compile (TRITON_INTERPRET=1 never asks it to)."""

from triton.backends.compiler import BaseBackend, GPUTarget, Language


class StandInCPUBackend(BaseBackend):
    @staticmethod
    def supports_target(target: GPUTarget):
        return target.backend == "cpu"

    def hash(self) -> str:
        return "infill-vllm-cpu-harness-standin"

    def parse_options(self, options: dict) -> object:
        raise RuntimeError("the stand-in Triton 'cpu' backend compiles nothing: run with TRITON_INTERPRET=1")

    def add_stages(self, stages: dict, options: object, language: Language) -> None:
        raise RuntimeError("the stand-in Triton 'cpu' backend compiles nothing: run with TRITON_INTERPRET=1")

    def load_dialects(self, context):
        return None

    def get_module_map(self):
        return {}
