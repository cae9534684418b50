"""The shipped sampler against transformers, token for token, where both are deterministic; and stable+confident
stopping firing for real, at the step transformers' `StableAndConfidentStoppingCriteria` stops.

Two deterministic regimes, both on real DiffusionGemmaForBlockDiffusion checkpoints:
- a *confident* tiny checkpoint (infill.testing.tiny_checkpoint.make_confident): every slot's distribution is
  near one-hot at the default temperatures, so sampling is argmax in both samplers (their random draws differ,
  but no draw can change a token), every slot is accepted, and stopping fires once the canvas is stable;
- the ordinary random tiny checkpoint at temperatures near zero (1e-4..2e-4), where the same holds.
The initial canvas comes from the same generator stream in both (its first draw), so the canvases match.
"""

from __future__ import annotations

import pytest
import torch
from reference_sampler import RowForwards, reference_denoiser

from infill.engine.canvas import build_canvas
from infill.engine.config import EngineConfig
from infill.engine.denoise import CanvasFill, denoise
from infill.engine.diffusion import DiffusionEngine
from infill.engine.loading import load_diffusion_model
from infill.testing.tiny_checkpoint import write_tiny_checkpoint
from infill.types import InfillRequest

PREFIX = "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = "
SUFFIX = "\n\n    def norm(self):\n        return (self.x ** 2 + self.y ** 2) ** 0.5\n"
WINNERS = (100, 200)  # ordinary tokens of the tiny tokenizer (not pad/eos/bos)
# Near zero: at 1e-4 a slot whose top two logits differ by ~1e-4 still has entropy ~0.6, is not accepted, and is
# renoised, and the renoise token comes from differently ordered draws in the two samplers (seen: they part at
# step 5 of 8). At 1e-6 every entropy here is 0.
NEAR_ZERO = {"t_min": 1e-6, "t_max": 2e-6}


@pytest.fixture(scope="module")
def confident(tmp_path_factory):
    path = write_tiny_checkpoint(tmp_path_factory.mktemp("confident-diffusiongemma"), confident=WINNERS)
    return load_diffusion_model(str(path))


@pytest.fixture(scope="module")
def random_model(tiny_engine):
    return tiny_engine.loaded


def generate_rows(loaded, prompt: list[int], rows: int, seed: int, **settings) -> tuple[torch.Tensor, list[int]]:
    """transformers' own generate() for one canvas of `rows` copies of `prompt`: (canvas tokens, forwards per row).
    Forwards per row come from its `tokens_per_forward` (non-pad tokens / decoder forwards of that row)."""
    width = loaded.model.config.canvas_length
    ids = torch.tensor([prompt] * rows)
    torch.manual_seed(seed)
    with torch.inference_mode():
        out = loaded.model.generate(ids, max_new_tokens=width, **settings)
    tokens = out.sequences[:, ids.shape[1] :]
    valid = (tokens != loaded.model.generation_config.pad_token_id).sum(-1)
    assert bool((valid > 0).all()), "a row with no valid token has no forward count"
    forwards = [round(float(v) / float(t)) for v, t in zip(valid, out.tokens_per_forward)]
    return tokens, forwards


def denoise_rows(
    loaded, denoiser, config: EngineConfig, prompt: list[int], lengths: list[int], fixed: list[list[int]], seed: int
):
    """One of the engine's denoisers on a canvas built as the engine builds it (rows = candidate lengths): the
    canvas, the denoiser's output and each row's forwards."""
    engine = DiffusionEngine(loaded, config)
    ids = torch.tensor(prompt)
    with torch.inference_mode():
        engine._encode_prompt("stopping-test", ids)
        canvas = build_canvas(lengths, fixed, ids.numel(), engine.pad_id, engine.device)
        forwards = RowForwards()
        out = denoiser(
            CanvasFill(canvas, ids, engine.runner), config, torch.Generator().manual_seed(seed), on_step=forwards
        )
    return canvas, out, forwards.counts


def after_eos_as_pad(tokens: torch.Tensor, loaded) -> torch.Tensor:
    """transformers' canvas finalisation: every token after a row's first EOS becomes pad."""
    gen = loaded.model.generation_config
    is_eos = tokens == gen.eos_token_id
    seen = is_eos.cumsum(-1)
    return tokens.masked_fill((seen > 0) & ~((seen == 1) & is_eos), gen.pad_token_id)


def prompt_of(loaded, prefix: str = PREFIX) -> list[int]:
    return DiffusionEngine(loaded, EngineConfig()).prompt_ids(prefix)


@pytest.mark.parametrize("seed,stability", [(0, 1), (7, 1), (7, 3)])
def test_confident_model_stops_early_at_generates_step_in_every_row(confident, seed, stability):
    """No suffix, three canvas-wide rows, the default settings (48 steps, T 0.8→0.4, confidence 0.005) with
    stability 1 or 3: the engine's fast sampler and the reference loop both yield generate()'s canvas token for
    token, and each row stops after exactly as many forwards as transformers' StableAndConfidentStoppingCriteria
    let it run (here the canvas is stable from the first step on, so that is stability + 1)."""
    width = confident.model.config.canvas_length
    prompt = prompt_of(confident)
    theirs, their_forwards = generate_rows(confident, prompt, 3, seed, stability_threshold=stability)
    config = EngineConfig(stability_threshold=stability)
    _, fast, fast_forwards = denoise_rows(confident, denoise, config, prompt, [width] * 3, [[]], seed)
    reference = reference_denoiser(confident.model)
    _, ref, ref_forwards = denoise_rows(confident, reference, config, prompt, [width] * 3, [[]], seed)
    assert fast_forwards == their_forwards == ref_forwards
    assert max(their_forwards) < config.max_denoising_steps  # it stopped early, for real
    assert min(their_forwards) >= stability + 1  # stability needs repeats: never sooner
    assert torch.equal(fast.tokens, theirs) and torch.equal(ref.tokens, theirs)  # 3 x 64 tokens
    assert set(theirs.unique().tolist()) <= set(WINNERS)  # the canvas is the confident model's, not noise


@pytest.mark.parametrize("seed", [0, 3])
def test_random_model_near_zero_temperature_matches_generate(random_model, seed):
    """The ordinary random checkpoint, temperatures near zero: every slot is accepted, sampling is argmax, so the
    fast sampler equals generate() token for token (2 rows x 64) and stops on the same step per row (stability
    alone decides there: the entropy is ~0)."""
    width = random_model.model.config.canvas_length
    prompt = prompt_of(random_model)
    steps = 12
    theirs, their_forwards = generate_rows(random_model, prompt, 2, seed, max_denoising_steps=steps, **NEAR_ZERO)
    config = EngineConfig(max_denoising_steps=steps, **NEAR_ZERO)
    _, fast, fast_forwards = denoise_rows(random_model, denoise, config, prompt, [width] * 2, [[]], seed)
    assert fast_forwards == their_forwards
    assert torch.equal(after_eos_as_pad(fast.tokens, random_model), theirs)


def test_pinned_suffix_rows_stop_where_transformers_criteria_say(confident):
    """A pinned suffix and three candidate rows of different lengths (padded): the fast sampler (clamped slots'
    self-conditioning as their own embedding, stopping on free slots) against the reference loop (the model's own
    forward given one-hot logits at clamped slots, transformers' criterion per row on its free slots): same tokens,
    same forwards per row, same join scores, and the stop is early."""
    engine = DiffusionEngine(confident, EngineConfig())
    prompt = engine.prompt_ids(PREFIX)
    anchor = engine.tokens.encode_head(SUFFIX, 16)
    config = EngineConfig()
    canvas, fast, fast_forwards = denoise_rows(confident, denoise, config, prompt, [4, 8, 16], [anchor], seed=5)
    reference = reference_denoiser(confident.model)
    _, ref, ref_forwards = denoise_rows(confident, reference, config, prompt, [4, 8, 16], [anchor], seed=5)
    assert not bool(canvas.valid.all())  # padded
    assert fast_forwards == ref_forwards
    assert max(fast_forwards) < config.max_denoising_steps
    assert torch.equal(fast.tokens, ref.tokens)
    assert torch.allclose(fast.join_score, ref.join_score, atol=1e-4)
    assert torch.equal(fast.tokens[canvas.anchor], canvas.fixed_tokens[canvas.anchor])


def test_engine_infill_agrees_with_the_reference_on_a_confident_model(confident):
    """Through the public infill(): the same middle and the same step count with either sampler, fewer steps than
    the cap (stopping fired), at the default settings."""
    request = InfillRequest(prefix=PREFIX, suffix=SUFFIX, seed=11)
    fast = DiffusionEngine(confident, EngineConfig()).infill(request)
    ref = DiffusionEngine(confident, EngineConfig(), denoiser=reference_denoiser(confident.model)).infill(request)
    assert fast.outcome == ref.outcome == "ok", (fast.error, ref.error)
    assert fast.middle == ref.middle and fast.steps == ref.steps
    assert fast.steps < EngineConfig().max_denoising_steps
    assert fast.versions["middle_length"] == ref.versions["middle_length"]
