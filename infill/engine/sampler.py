"""Per-step sampling math: entropy-bound acceptance, linear temperature, stable+confident stopping.

`fast_step`: softcap+temperature (one new buffer, then in place: the step never writes its inputs, which would
keep torch.compile from using CUDA graphs), one max/exp/sum pass that yields argmax, probabilities and entropy
together (H = log Z - sum p*(x - max)), and exact two-level inverse-CDF sampling (block sums, then one block)
instead of a multinomial over the whole vocabulary. The probabilities double as the next step's self-conditioning
input, so the decoder does not recompute the softmax. Everything here is pure tensor math with no host sync (the
random numbers come in as tensors), so it runs inside the compiled step. transformers' own ops, in its RNG order,
live in tests/reference_sampler.py. The two draw their random numbers differently, so they agree token for token
only where no draw can change a token (near one-hot distributions: tests/engine/test_stopping.py); elsewhere they agree
piece by piece (argmax, entropy to 1e-4, acceptance, sampling frequencies: tests/engine/test_sampler.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class StepOutput:
    argmax: torch.Tensor  # (B, W) long
    sample: torch.Tensor  # (B, W) long, drawn at the step's temperature
    entropy: torch.Tensor  # (B, W) float32
    probs: torch.Tensor  # (B, W, V) temperature-scaled probabilities
    max_prob: torch.Tensor  # (B, W) probability of the argmax token (draft confidence)


def temperature(step_remaining: int, steps: int, t_min: float, t_max: float) -> float:
    """transformers' LinearTemperatureScheduleLogitsProcessor: `step_remaining` counts down steps..1."""
    return t_min + (t_max - t_min) * (step_remaining / steps)


def logit_scale(cap: float | None, inv_temperature: float) -> float:
    """The factor `softcap` multiplies by: the softcap's `cap` fused with 1/T."""
    return cap * inv_temperature if cap else inv_temperature


def softcap(logits: torch.Tensor, cap: float | None, scale: torch.Tensor | float) -> torch.Tensor:
    """cap * tanh(logits / cap) / T in a new tensor, with `scale` = logit_scale(cap, 1/T) (a tensor inside the
    compiled step, so a new temperature is a new input rather than a new graph)."""
    if cap:
        return logits.div(cap).tanh_().mul_(scale)
    return logits.mul(scale)


def sample_inverse_cdf(probs: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """Exact categorical sampling from normalised `probs` (..., V) with one uniform per row, reading the
    vocabulary once: pick a block of ~sqrt(V) tokens by its mass, then a token inside that block."""
    *lead, vocab = probs.shape
    flat = probs.reshape(-1, vocab)
    rows = flat.shape[0]
    block = 1 << max(1, (vocab.bit_length() + 1) // 2)
    if vocab % block:  # small or odd vocabularies: one cumulative sum is cheap enough
        cdf = flat.cumsum(-1)
        target = uniform.reshape(-1, 1) * cdf[:, -1:]
        return torch.searchsorted(cdf, target, side="right").clamp_(max=vocab - 1).reshape(lead)
    blocks = flat.view(rows, vocab // block, block)
    block_mass = blocks.sum(-1)
    block_cdf = block_mass.cumsum(-1)
    target = uniform.reshape(-1, 1) * block_cdf[:, -1:]
    chosen = torch.searchsorted(block_cdf, target, side="right").clamp_(max=block_mass.shape[1] - 1)
    inside = blocks.gather(1, chosen[:, :, None].expand(rows, 1, block)).squeeze(1)
    before = block_cdf.gather(1, chosen) - block_mass.gather(1, chosen)
    offset = torch.searchsorted(inside.cumsum(-1) + before, target, side="right").clamp_(max=block - 1)
    return (chosen * block + offset).reshape(lead)


def fast_step(
    logits: torch.Tensor, cap: float | None, scale: torch.Tensor | float, uniform: torch.Tensor
) -> StepOutput:
    """`logits` are the raw LM-head outputs (float32), left as they are. `uniform` (B, W) in [0, 1) draws the
    samples."""
    scaled = softcap(logits, cap, scale)
    peak, argmax = scaled.max(-1, keepdim=True)
    scaled.sub_(peak)
    probs = scaled.exp()
    total = probs.sum(-1, keepdim=True)
    probs.div_(total)
    entropy = total.squeeze(-1).log() - torch.linalg.vecdot(probs, scaled)
    sample = sample_inverse_cdf(probs, uniform)
    return StepOutput(argmax.squeeze(-1), sample, entropy.clamp_(min=0), probs, total.squeeze(-1).reciprocal())


def entropy_bound_accept(entropy: torch.Tensor, bound: float) -> torch.Tensor:
    """Accept the k lowest-entropy slots while (sum of their entropies - the largest) <= bound (at least one)."""
    ordered, order = torch.sort(entropy, dim=-1)
    selected = (ordered.cumsum(-1) - ordered) <= bound
    return torch.zeros_like(selected).scatter_(-1, order, selected)


def stable_and_confident(
    history: torch.Tensor, argmax: torch.Tensor, entropy: torch.Tensor, free: torch.Tensor, confidence: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row: the argmax canvas equals each of the last S in `history` (S, B, W) (S = 0: always stable) and the
    mean entropy over free slots is below `confidence`. Returns (stopped (B,), history with `argmax` appended)."""
    stable = ((history == argmax[None]) | ~free[None]).all(dim=-1).all(dim=0)
    if history.shape[0]:  # (a shape, fixed per engine: no branch on values)
        history = torch.cat([history[1:], argmax[None]])
    mean_entropy = (entropy * free).sum(-1) / free.sum(-1).clamp_(min=1)
    return stable & (mean_entropy < confidence), history
