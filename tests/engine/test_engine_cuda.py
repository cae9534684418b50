"""The engine's CUDA-only paths on a real (tiny, random-weight) model: the encode and step programs captured as CUDA
graphs give, replayed, the tokens their bodies give run eagerly; FP8 runs through torch's scaled matmuls; loading
turns cuDNN's attention off. Skipped where no GPU is present (the full-size figures come from benchmarks/gpu.sh).
The same programs' arithmetic is checked on CPU by tests/engine/test_engine_forward.py."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from infill.engine.config import EngineConfig
from infill.engine.diffusion import DiffusionEngine
from infill.engine.loading import load_diffusion_model
from infill.types import InfillRequest

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

PREFIX = "def area(w, h):\n    return " * 20
SUFFIX = "\n\nprint(area(2, 3))\n"


@pytest.fixture(scope="module")
def loaded(tiny_checkpoint):
    return load_diffusion_model(str(tiny_checkpoint), device="cuda", dtype="bfloat16")


def test_loading_turns_cudnn_attention_off(loaded):
    assert not torch.backends.cuda.cudnn_sdp_enabled()


@pytest.mark.parametrize("compiled", [False, True])
def test_every_program_captures_and_replays_the_eager_tokens(loaded, compiled):
    config = EngineConfig(max_denoising_steps=12, confidence_threshold=1e-9, compile=compiled)
    captured = DiffusionEngine(loaded, replace(config, static_programs=True))
    captured.warm_up()
    assert captured.programs["captured"] == captured.programs["programs"] > 0, captured.programs
    uncaptured = DiffusionEngine(
        loaded, replace(config, static_programs=True)
    )  # the same programs, their bodies run eagerly
    if compiled:
        uncaptured.runner.layer_fn, uncaptured.runner.sample = captured.runner.layer_fn, captured.runner.sample
    for single_line in (True, False):
        request = InfillRequest(prefix=PREFIX, suffix=SUFFIX, single_line=single_line, document_id="graphs")
        replayed, eager = captured.infill(request), uncaptured.infill(request)
        assert replayed.outcome == eager.outcome == "ok", (replayed.error, eager.error)
        assert replayed.steps == eager.steps > 2
        assert replayed.middles == eager.middles


def test_fp8_weights_run_through_scaled_matmuls(tiny_checkpoint):
    fp8 = load_diffusion_model(str(tiny_checkpoint), device="cuda", dtype="bfloat16", quantization="fp8")
    assert fp8.weights.weight_format.startswith("fp8") and fp8.weights.decoder[0].q.weight.dtype == torch.float8_e4m3fn
    engine = DiffusionEngine(fp8, EngineConfig(max_denoising_steps=8))
    engine.warm_up()
    result = engine.infill(InfillRequest(prefix=PREFIX, suffix=SUFFIX, single_line=True))
    assert result.outcome in ("ok", "empty"), result.error
    assert result.versions["weights"].startswith("fp8")
