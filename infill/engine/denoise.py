"""The denoising loop over one infill canvas.

Each step: decoder forward over the canvas (reading the prompt KV, never writing it) → sampling math (see
sampler.py) → entropy-bound accept / renoise of free slots → fixed slots clamped back → stable+confident
stopping per row. Cancellation and the deadline are checked between steps, never inside a forward. The only host
sync per step is the "all rows finished?" check (plus the draft, when a draft callback asks for one).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import torch

from infill.engine.canvas import Canvas
from infill.engine.config import EngineConfig
from infill.engine.sampler import StableConfidentStop, entropy_bound_accept, fast_step, reference_step, temperature
from infill.types import CancelToken


@dataclass
class DenoiseOutput:
    tokens: torch.Tensor  # (B, W) final argmax canvas, fixed slots clamped
    join_score: torch.Tensor  # (B,) mean log-prob of the clamped anchor tokens at the last step
    steps: int  # decoder forwards
    outcome: str  # "ok", "cut_short" or "cancelled"


StepCallback = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], None]  # (step, argmax, max_prob, score)


def self_conditioning_embeddings(model, probs: torch.Tensor, clamp_embeddings: torch.Tensor,
                                 free: torch.Tensor) -> torch.Tensor:
    """softmax(previous logits) @ embeddings × √H, as the decoder computes it, with clamped slots one-hot."""
    embed = model.model.decoder.embed_tokens
    soft = torch.matmul(probs.to(embed.weight.dtype), embed.weight) * embed.embed_scale.to(embed.weight.dtype)
    return torch.where(free[..., None], soft, clamp_embeddings)


def decoder_logits(model, canvas_ids: torch.Tensor, soft: torch.Tensor | None, view, position_ids: torch.Tensor,
                   masks: dict) -> torch.Tensor:
    """The decoder forward with self-conditioning given as embeddings (so the softmax the sampler already
    computed is not recomputed) and the raw LM head output (softcap applied by the sampler, in place)."""
    decoder = model.model.decoder
    hidden = decoder.embed_tokens(canvas_ids)
    hidden = decoder.self_conditioning(hidden, torch.zeros_like(hidden) if soft is None else soft)
    layer_types = decoder.text_config.layer_types
    rotary = {kind: decoder.rotary_emb(hidden, position_ids, kind) for kind in decoder.unique_layer_types}
    for i, layer in enumerate(decoder.layers[: decoder.text_config.num_hidden_layers]):
        hidden = layer(hidden, position_embeddings=rotary[layer_types[i]], attention_mask=masks[layer_types[i]],
                       position_ids=position_ids, cache=view)
    return model.lm_head(decoder.norm(hidden)).float()


def _one_hot_logits(logits: torch.Tensor, tokens: torch.Tensor, free: torch.Tensor, all_free: bool) -> torch.Tensor:
    """Self-conditioning for the reference path: clamped slots get logits whose softmax is one-hot."""
    if all_free:
        return logits
    one_hot = torch.full_like(logits, -1e4).scatter_(-1, tokens[..., None], 0.0)
    return torch.where(free[..., None], logits, one_hot)


def _join_score(probs_at_tokens: torch.Tensor, anchor: torch.Tensor) -> torch.Tensor:
    logp = probs_at_tokens.clamp_min(1e-30).log()
    count = anchor.sum(-1)
    return torch.where(count > 0, (logp * anchor).sum(-1) / count.clamp_min(1), torch.zeros_like(count, dtype=logp.dtype))


def denoise(model, config: EngineConfig, canvas: Canvas, view, masks: dict, generator: torch.Generator, *,
            cancel: CancelToken | None = None, deadline: float | None = None,
            on_step: StepCallback | None = None) -> DenoiseOutput:
    vocab = model.config.text_config.vocab_size
    cap = model.config.text_config.final_logit_softcapping
    rows, width = canvas.shape
    device = canvas.free.device
    free, fixed = canvas.free, canvas.fixed_tokens
    embed = model.model.decoder.embed_tokens
    clamp_embeddings = embed(fixed)  # one-hot self-conditioning of clamped slots = their own embedding
    stop = StableConfidentStop(config.stability_threshold, config.confidence_threshold)
    finished = torch.zeros(rows, dtype=torch.bool, device=device)
    current = torch.where(free, torch.randint(0, vocab, (rows, width), generator=generator, device=device), fixed)
    argmax = current
    score = torch.zeros(rows, device=device)
    soft: torch.Tensor | None = None  # fast path: self-conditioning embeddings
    prev_logits: torch.Tensor | None = None  # reference path: previous processed logits (self-conditioning)
    all_free = config.sampler == "reference" and bool(free.all())  # (once: `free` never changes)
    steps, outcome, any_finished = 0, "ok", False
    n = config.max_denoising_steps
    for remaining in range(n, 0, -1):
        if cancel is not None and cancel.cancelled:
            outcome = "cancelled"
            break
        if deadline is not None and steps > 0 and time.monotonic() >= deadline:
            outcome = "cut_short"
            break
        inv_t = 1.0 / temperature(remaining, n, config.t_min, config.t_max)
        if config.sampler == "fast":
            out = fast_step(decoder_logits(model, current, soft, view, canvas.position_ids, masks), cap, inv_t,
                            generator)
            at_tokens = out.probs.gather(-1, fixed[..., None]).squeeze(-1)
        else:
            sc = None if prev_logits is None else _one_hot_logits(prev_logits, fixed, free, all_free)
            logits = model(decoder_input_ids=current, cache=view, self_conditioning_logits=sc,
                           decoder_attention_mask=None if masks[next(iter(masks))] is None else masks,
                           decoder_position_ids=canvas.position_ids).logits
            out = reference_step(logits, inv_t, generator)
            at_tokens = torch.softmax(out.processed_logits, -1).gather(-1, fixed[..., None]).squeeze(-1)
        entropy = out.entropy.masked_fill(~free, 0.0)
        accepted = entropy_bound_accept(entropy, config.entropy_bound)
        noise = torch.randint(0, vocab, (rows, width), generator=generator, device=device)
        nxt = torch.where(free, torch.where(accepted, out.sample, noise), fixed)
        new_argmax = torch.where(free, out.argmax, fixed)
        new_score = _join_score(at_tokens, canvas.anchor)
        if any_finished:  # finished rows keep their tokens and score, as in transformers
            # (not their probabilities: rows never see each other, so what a finished row's next forward reads
            # changes nothing; keeping them cost a full-vocabulary copy per step)
            keep = finished[:, None]
            new_argmax, nxt = torch.where(keep, argmax, new_argmax), torch.where(keep, current, nxt)
            new_score = torch.where(finished, score, new_score)
        finished = finished | stop(new_argmax, entropy, free)
        current, argmax, score = nxt, new_argmax, new_score
        prev_logits = out.processed_logits
        if out.probs is not None:
            soft = self_conditioning_embeddings(model, out.probs, clamp_embeddings, free)
        steps += 1
        if on_step is not None:
            on_step(steps, argmax, out.max_prob, score)
        any_finished, all_finished = torch.stack([finished.any(), finished.all()]).tolist()  # the step's one sync
        if all_finished:
            break
    return DenoiseOutput(argmax, score, steps, outcome)
