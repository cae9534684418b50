"""Driver half of the stand-in: reports the CPU as the active device."""

import torch
from triton.backends.compiler import GPUTarget
from triton.backends.driver import DriverBase


class StandInCPUDriver(DriverBase):
    @classmethod
    def is_active(cls):
        return True

    def map_python_to_cpp_type(self, ty: str) -> str:
        raise RuntimeError("the stand-in Triton 'cpu' backend launches nothing: run with TRITON_INTERPRET=1")

    def get_current_target(self):
        return GPUTarget("cpu", 0, 0)

    def get_active_torch_device(self):
        return torch.device("cpu")

    def get_benchmarker(self):
        raise RuntimeError("the stand-in Triton 'cpu' backend has no benchmarker")
