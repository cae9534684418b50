"""Backends on the other end of an HTTP endpoint: `RemoteBackend` (backend.py) speaks OpenAI-style completions,
or vLLM's native DiffusionGemma protocol (native.py, vllm_diffusion.py); http.py holds the shared plumbing."""

from infill.backends.remote.backend import RemoteBackend

__all__ = ["RemoteBackend"]
