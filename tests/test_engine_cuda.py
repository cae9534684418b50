"""The engine's CUDA-only paths on a real (tiny, random-weight) model: the decoder forward replayed as a CUDA graph
gives the tokens eager gives, and loading turns cuDNN's attention off. Skipped where no GPU is present (the
full-size figures come from benchmarks/gpu.sh)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from infill.engine.canvas import build_canvas, decoder_masks
from infill.engine.config import EngineConfig
from infill.engine.denoise import denoise
from infill.engine.diffusion import DiffusionEngine
from infill.engine.loading import load_diffusion_model
from infill.engine.graphs import capture_forward
from infill.engine.model import decoder_cache_view, decoder_logits, embed

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.fixture(scope="module")
def cuda_engine(tiny_checkpoint):
    engine = DiffusionEngine(load_diffusion_model(str(tiny_checkpoint), device="cuda", dtype="bfloat16"),
                             EngineConfig(max_denoising_steps=12))
    yield engine
    engine.close()


def test_loading_turns_cudnn_attention_off(cuda_engine):
    assert not torch.backends.cuda.cudnn_sdp_enabled()


def test_graph_replayed_steps_give_the_eager_tokens(cuda_engine):
    engine = cuda_engine
    ids = torch.tensor(engine.prompt_ids("def area(w, h):\n    return " * 20))
    with torch.inference_mode():
        cache, _, _ = engine._encode_prompt("graphs", ids)
        canvas = build_canvas([6, 12, 24], [list(range(3, 11))], ids.numel(), engine.pad_id, engine.device)
        view = decoder_cache_view(cache, engine.layer_types, engine.sliding_window, 3)
        masks = decoder_masks(canvas, view, engine.layer_types, engine.model.dtype, engine.additive_masks)
        runs = {}
        for graphs in (True, False):
            config = replace(engine.config, cuda_graph_steps=graphs, confidence_threshold=1e-9)
            generator = torch.Generator(engine.device).manual_seed(3)
            runs[graphs] = denoise(engine.model, config, canvas, view, masks, generator)
        # The run above could have fallen back to eager: the capture itself must succeed for this model.
        def forward(tokens, soft):
            return decoder_logits(engine.model, tokens, soft, view, canvas.position_ids, masks)

        soft = torch.zeros_like(embed(engine.model, runs[True].tokens))
        assert capture_forward(engine.model, forward, runs[True].tokens, soft) is not None
    assert runs[True].steps == runs[False].steps > 2  # replays happened
    assert torch.equal(runs[True].tokens, runs[False].tokens)
