"""The fast sampling math against transformers' own ops, and the fast decoder forward against the stock one."""

from __future__ import annotations

import pytest
import torch
from reference_sampler import reference_step
from transformers.models.diffusion_gemma.generation_diffusion_gemma import (
    EntropyBoundSampler,
    EntropyBoundSamplerConfig,
)

from infill.engine import forward
from infill.engine.canvas import build_canvas
from infill.engine.sampler import entropy_bound_accept, fast_step, logit_scale, sample_inverse_cdf
from infill.testing.hf_reference import decoder_cache_view, hf_prefill


@pytest.mark.parametrize("vocab", [1024, 1000])  # two-level path (1024 = 32 blocks of 32) and single cumsum path
def test_inverse_cdf_sampling_follows_the_distribution(vocab):
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(vocab, generator=gen) * 3
    probs = torch.softmax(logits, -1)
    draws = 200_000
    rows = probs.expand(draws, vocab).contiguous()
    samples = sample_inverse_cdf(rows, torch.rand(draws, generator=gen))
    freq = torch.bincount(samples, minlength=vocab).double() / draws
    top = probs.topk(20).indices
    # each of the 20 most likely tokens within 5 standard errors of its probability
    se = (probs[top].double() * (1 - probs[top].double()) / draws).sqrt()
    assert torch.all((freq[top] - probs[top].double()).abs() < 5 * se + 1e-4)
    zero = probs.clone()
    zero[: vocab // 2] = 0
    zero /= zero.sum()
    picked = sample_inverse_cdf(zero.expand(5000, vocab).contiguous(), torch.rand(5000, generator=gen))
    assert bool((picked >= vocab // 2).all())  # never a zero-probability token


def test_fast_step_agrees_with_transformers_ops():
    gen = torch.Generator().manual_seed(1)
    raw = torch.randn(2, 16, 512, generator=gen) * 20
    cap, temp = 30.0, 0.6
    softcapped = torch.tanh(raw / cap) * cap
    ref = reference_step(softcapped.clone(), 1 / temp, torch.Generator().manual_seed(2))
    fast = fast_step(raw.clone(), cap, logit_scale(cap, 1 / temp), torch.rand(2, 16, generator=gen))
    assert torch.equal(fast.argmax, ref.argmax)
    assert torch.allclose(fast.entropy, ref.entropy, atol=1e-4)
    assert torch.allclose(fast.probs, torch.softmax(softcapped / temp, -1), atol=1e-6)
    assert torch.allclose(fast.max_prob, ref.max_prob, atol=1e-6)


def test_acceptance_equals_transformers_sampler():
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(3, 64, 256, generator=gen) * 4
    stock = EntropyBoundSampler(EntropyBoundSamplerConfig(entropy_bound=0.1), 64, 256, 8)
    current, denoised = torch.zeros(3, 64, dtype=torch.long), torch.ones(3, 64, dtype=torch.long)
    accepted_stock = stock.accept_canvas(current, denoised, logits, 1) == 1
    entropy = torch.distributions.Categorical(logits=logits).entropy()
    ours = entropy_bound_accept(entropy, 0.1)
    assert torch.equal(ours, accepted_stock)
    assert bool(ours.any(-1).all())  # at least one slot per row


def test_fast_decoder_forward_equals_stock_forward(tiny_engine):
    """Our decoder forward (self-conditioning passed as embeddings) equals the model's forward given logits."""
    engine = tiny_engine
    model = engine.loaded.model
    ids = torch.tensor(engine.prompt_ids("def add(a, b):\n    return a + b\n" * 4))
    view, ours_forward = both_forwards(engine, ids)
    gen = torch.Generator().manual_seed(4)
    canvas = torch.randint(0, 512, (1, 24), generator=gen)
    positions = ids.numel() + torch.arange(24)[None]
    prev_logits = torch.randn(1, 24, 512, generator=gen) * 5
    free = torch.ones(1, 24, dtype=torch.bool)
    with torch.inference_mode():
        stock = model(
            decoder_input_ids=canvas, cache=view, self_conditioning_logits=prev_logits, decoder_position_ids=positions
        ).logits
        soft = forward.soft_embeddings(
            torch.softmax(prev_logits, -1),
            engine.weights.embed,
            engine.weights.embed_scale,
            torch.zeros(1, 24, 64),
            free,
        )
        ours = ours_forward(canvas, soft)
        cap = model.config.text_config.final_logit_softcapping
        ours = torch.tanh(ours / cap) * cap
    assert torch.allclose(ours, stock, atol=1e-4)


def both_forwards(engine, ids: torch.Tensor):
    """transformers' decoder view of its own prefill of `ids`, and the engine's forward over its own buffers."""
    text = engine.loaded.model.config.text_config
    view = decoder_cache_view(hf_prefill(engine.loaded.model, ids), text.layer_types, text.sliding_window, 1)
    with torch.inference_mode():
        engine._encode_prompt("sampler-test", ids)
    return view, engine.runner.forward_for(build_canvas([24], [[]], ids.numel(), engine.pad_id, engine.device))


def test_clamped_slots_self_conditioning_equals_one_hot_logits_through_the_stock_forward(tiny_engine):
    """A pinned slot's self-conditioning is its own embedding in the fast path; the model's own forward reaches
    the same decoder input from one-hot logits at that slot (tests/reference_sampler.py's input)."""
    from reference_sampler import one_hot_logits

    engine = tiny_engine
    model = engine.loaded.model
    ids = torch.tensor(engine.prompt_ids("x = {'a': 1, 'b': 2}\n" * 3))
    view, ours_forward = both_forwards(engine, ids)
    gen = torch.Generator().manual_seed(5)
    canvas = torch.randint(3, 512, (1, 24), generator=gen)
    free = torch.ones(1, 24, dtype=torch.bool)
    free[0, 16:] = False  # the last 8 slots are a pinned suffix
    positions = ids.numel() + torch.arange(24)[None]
    prev_logits = torch.randn(1, 24, 512, generator=gen) * 5
    with torch.inference_mode():
        stock = model(
            decoder_input_ids=canvas,
            cache=view,
            decoder_position_ids=positions,
            self_conditioning_logits=one_hot_logits(prev_logits, canvas, free),
        ).logits
        clamp = model.model.decoder.embed_tokens(canvas)
        soft = forward.soft_embeddings(
            torch.softmax(prev_logits, -1), engine.weights.embed, engine.weights.embed_scale, clamp, free
        )
        ours = ours_forward(canvas, soft)
        cap = model.config.text_config.final_logit_softcapping
        ours = torch.tanh(ours / cap) * cap
        free_only = model(
            decoder_input_ids=canvas, cache=view, decoder_position_ids=positions, self_conditioning_logits=prev_logits
        ).logits
    assert torch.allclose(ours, stock, atol=1e-4)
    assert not torch.allclose(free_only, stock, atol=1e-2)  # the pinned slots' input does change the output
