"""transformers' exact sampler (its ops in its RNG order: multinomial, `Categorical.entropy`, self-conditioning
through the model's own forward, and its own `StableAndConfidentStoppingCriteria`), as a drop-in `denoiser` for
DiffusionEngine. With no pinned slots this is `model.generate()`'s loop, and tests check it yields generate()'s
tokens; with pinned slots it is that loop plus the clamping (one-hot self-conditioning, stopping judged per row
over its free slots). tests/engine/test_stopping.py compares the engine's fast sampler with it where the two are
deterministic. Test and benchmark code only."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers.models.diffusion_gemma.generation_diffusion_gemma import StableAndConfidentStoppingCriteria

from infill.engine.denoise import CanvasFill, DenoiseOutput, join_score
from infill.engine.sampler import entropy_bound_accept, temperature
from infill.testing.hf_reference import decoder_cache_view, hf_decoder_masks, hf_prefill


@dataclass
class ReferenceStep:
    argmax: torch.Tensor  # (B, W)
    sample: torch.Tensor  # (B, W)
    entropy: torch.Tensor  # (B, W)
    processed_logits: torch.Tensor  # (B, W, V) temperature-scaled logits
    max_prob: torch.Tensor  # (B, W)


def reference_step(logits: torch.Tensor, inv_temperature: float, generator: torch.Generator) -> ReferenceStep:
    """`logits` are the model's (already softcapped) outputs; ops and RNG order as in transformers 5.24."""
    processed = logits * inv_temperature
    batch, width, vocab = processed.shape
    probs = torch.softmax(processed, dim=-1, dtype=torch.float32)
    sample = torch.multinomial(probs.view(-1, vocab), num_samples=1, generator=generator).view(batch, width)
    argmax = torch.argmax(processed, dim=-1)
    entropy = torch.distributions.Categorical(logits=processed).entropy()
    return ReferenceStep(argmax, sample, entropy, processed, probs.max(-1).values)


def one_hot_logits(logits: torch.Tensor, tokens: torch.Tensor, free: torch.Tensor) -> torch.Tensor:
    """Self-conditioning input: clamped slots get logits whose softmax is one-hot."""
    if bool(free.all()):
        return logits
    one_hot = torch.full_like(logits, -1e4).scatter_(-1, tokens[..., None], 0.0)
    return torch.where(free[..., None], logits, one_hot)


def reference_denoiser(model) -> Callable[..., DenoiseOutput]:
    """`reference_denoise` over transformers' `model` (`LoadedModel.model`: the engine's checkpoint), with the
    engine's denoiser signature (a `DiffusionEngine(denoiser=...)`)."""
    return functools.partial(reference_denoise, model=model)


def reference_denoise(
    fill: CanvasFill,
    config,
    generator: torch.Generator,
    *,
    model,
    cancel=None,
    deadline: float | None = None,
    on_step=None,
) -> DenoiseOutput:
    """The engine's `denoise` with transformers' ops and transformers' own forward over its own prefill of the
    prompt."""
    canvas = fill.canvas
    text = model.config.text_config
    layer_types = text.layer_types[: text.num_hidden_layers]
    view = decoder_cache_view(
        hf_prefill(model, fill.prompt_ids.to(canvas.free.device)), layer_types, text.sliding_window, canvas.shape[0]
    )
    masks = hf_decoder_masks(canvas.valid, view, layer_types, model.dtype, text._attn_implementation == "eager")
    vocab = text.vocab_size
    rows, width = canvas.shape
    device = canvas.free.device
    free, fixed = canvas.free, canvas.fixed_tokens
    finished = torch.zeros(rows, dtype=torch.bool, device=device)
    current = torch.where(free, torch.randint(0, vocab, (rows, width), generator=generator, device=device), fixed)
    argmax, score = current, torch.zeros(rows, device=device)
    # One criterion per row, fed only that row's free slots: transformers' rule with pinned and pad slots left out
    criteria = [
        StableAndConfidentStoppingCriteria(config.stability_threshold, config.confidence_threshold) for _ in range(rows)
    ]
    prev_logits = None
    steps, outcome, n = 0, "ok", config.max_denoising_steps
    attention = None if masks[next(iter(masks))] is None else masks
    for remaining in range(n, 0, -1):
        if cancel is not None and cancel.cancelled:
            outcome = "cancelled"
            break
        if deadline is not None and steps > 0 and time.monotonic() >= deadline:
            outcome = "cut_short"
            break
        sc = None if prev_logits is None else one_hot_logits(prev_logits, fixed, free)
        logits = model(
            decoder_input_ids=current,
            cache=view,
            self_conditioning_logits=sc,
            decoder_attention_mask=attention,
            decoder_position_ids=canvas.position_ids,
        ).logits
        out = reference_step(logits, 1.0 / temperature(remaining, n, config.t_min, config.t_max), generator)
        at_tokens = torch.softmax(out.processed_logits, -1).gather(-1, fixed[..., None]).squeeze(-1)
        entropy = out.entropy.masked_fill(~free, 0.0)
        accepted = entropy_bound_accept(entropy, config.entropy_bound)
        noise = torch.randint(0, vocab, (rows, width), generator=generator, device=device)
        nxt = torch.where(free, torch.where(accepted, out.sample, noise), fixed)
        new_argmax, new_score = torch.where(free, out.argmax, fixed), join_score(at_tokens, canvas.anchor)
        keep = finished[:, None]  # finished rows keep their tokens and score, as in transformers
        new_argmax, nxt = torch.where(keep, argmax, new_argmax), torch.where(keep, current, nxt)
        new_score = torch.where(finished, score, new_score)
        stopped = torch.tensor(
            [
                bool(criteria[r](new_argmax[r : r + 1, free[r]], out.processed_logits[r : r + 1, free[r]])[0])
                for r in range(rows)
            ],
            device=device,
        )
        finished = finished | stopped
        current, argmax, score, prev_logits = nxt, new_argmax, new_score, out.processed_logits
        steps += 1
        if on_step is not None:
            on_step(steps, argmax, out.max_prob, score, finished)
        if bool(finished.all()):
            break
    return DenoiseOutput(argmax, score, steps, outcome)


class RowForwards:
    """An `on_step` counting each canvas row's decoder forwards until it stopped (transformers' count, its
    `tokens_per_forward`): a row runs a step's forward unless it had finished before that step."""

    def __init__(self) -> None:
        self.counts: list[int] = []
        self._finished_before: torch.Tensor | None = None

    def __call__(self, step, argmax, max_prob, score, finished: torch.Tensor) -> None:
        before = self._finished_before if self._finished_before is not None else torch.zeros_like(finished)
        ran = (~before).tolist()
        self.counts = [n + r for n, r in zip(self.counts, ran)] if self.counts else [int(r) for r in ran]
        self._finished_before = finished.clone()
