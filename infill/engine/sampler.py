"""Per-step sampling math: entropy-bound acceptance, linear temperature, stable+confident stopping.

Two implementations of the same step:
- `fast_step`: in-place softcap+temperature, one max/exp/sum pass that yields argmax, probabilities and entropy
  together (H = log Z - sum p*(x - max)), and exact two-level inverse-CDF sampling (block sums, then one block)
  instead of a multinomial over the whole vocabulary. The probabilities double as the next step's
  self-conditioning input, so the decoder does not recompute the softmax.
- `reference_step`: transformers' ops in transformers' RNG order (multinomial, `Categorical.entropy`), so the loop
  can be proven equal to `model.generate()` token for token with a fixed seed.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class StepOutput:
    argmax: torch.Tensor  # (B, W) long
    sample: torch.Tensor  # (B, W) long, drawn at the step's temperature
    entropy: torch.Tensor  # (B, W) float32
    probs: torch.Tensor | None  # (B, W, V) temperature-scaled probabilities (fast) or None (reference)
    processed_logits: torch.Tensor | None  # (B, W, V) temperature-scaled logits (reference only)
    max_prob: torch.Tensor  # (B, W) probability of the argmax token (draft confidence)


def temperature(step_remaining: int, steps: int, t_min: float, t_max: float) -> float:
    """transformers' LinearTemperatureScheduleLogitsProcessor: `step_remaining` counts down steps..1."""
    return t_min + (t_max - t_min) * (step_remaining / steps)


def softcap_(logits: torch.Tensor, cap: float | None, inv_temperature: float) -> torch.Tensor:
    """In place: cap * tanh(logits / cap) / T (the model's final softcapping fused with the temperature)."""
    if cap:
        return logits.div_(cap).tanh_().mul_(cap * inv_temperature)
    return logits.mul_(inv_temperature)


def sample_inverse_cdf(probs: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """Exact categorical sampling from normalised `probs` (..., V) with one uniform per row, reading the
    vocabulary once: pick a block of ~sqrt(V) tokens by its mass, then a token inside that block."""
    *lead, vocab = probs.shape
    flat = probs.reshape(-1, vocab)
    rows = flat.shape[0]
    block = 1 << max(1, (vocab.bit_length() + 1) // 2)
    if vocab % block:  # small or odd vocabularies: one cumulative sum is cheap enough
        cdf = flat.cumsum(-1)
        target = (uniform.reshape(-1, 1) * cdf[:, -1:])
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


def fast_step(logits: torch.Tensor, cap: float | None, inv_temperature: float,
              generator: torch.Generator) -> StepOutput:
    """`logits` are the raw LM-head outputs (float32); they are overwritten."""
    scaled = softcap_(logits, cap, inv_temperature)
    peak, argmax = scaled.max(-1, keepdim=True)
    scaled.sub_(peak)
    probs = scaled.exp()
    total = probs.sum(-1, keepdim=True)
    probs.div_(total)
    entropy = total.squeeze(-1).log() - torch.linalg.vecdot(probs, scaled)
    uniform = torch.rand(argmax.shape[:-1], generator=generator, device=logits.device)
    sample = sample_inverse_cdf(probs, uniform)
    return StepOutput(argmax.squeeze(-1), sample, entropy.clamp_(min=0), probs, None,
                      total.squeeze(-1).reciprocal())


def reference_step(logits: torch.Tensor, inv_temperature: float, generator: torch.Generator) -> StepOutput:
    """`logits` are the model's (already softcapped) outputs; ops and RNG order as in transformers 5.24."""
    processed = logits * inv_temperature
    batch, width, vocab = processed.shape
    probs = torch.softmax(processed, dim=-1, dtype=torch.float32)
    sample = torch.multinomial(probs.view(-1, vocab), num_samples=1, generator=generator).view(batch, width)
    argmax = torch.argmax(processed, dim=-1)
    entropy = torch.distributions.Categorical(logits=processed).entropy()
    return StepOutput(argmax, sample, entropy, None, processed, probs.max(-1).values)


def entropy_bound_accept(entropy: torch.Tensor, bound: float) -> torch.Tensor:
    """Accept the k lowest-entropy slots while (sum of their entropies - the largest) <= bound (at least one)."""
    ordered, order = torch.sort(entropy, dim=-1)
    selected = (ordered.cumsum(-1) - ordered) <= bound
    return torch.zeros_like(selected).scatter_(-1, order, selected)


class StableConfidentStop:
    """Per row: argmax canvas unchanged for `stability` steps and mean entropy over free slots < `confidence`."""

    def __init__(self, stability: int, confidence: float) -> None:
        self.stability = stability
        self.confidence = confidence
        self.history: torch.Tensor | None = None

    def __call__(self, argmax: torch.Tensor, entropy: torch.Tensor, free: torch.Tensor) -> torch.Tensor:
        if self.stability == 0:
            stable = torch.ones(argmax.shape[0], dtype=torch.bool, device=argmax.device)
        else:
            if self.history is None:
                self.history = torch.full((self.stability, *argmax.shape), -1, dtype=argmax.dtype,
                                          device=argmax.device)
            same = (self.history == argmax[None]) | ~free[None]
            stable = same.all(dim=-1).all(dim=0)
            self.history = torch.roll(self.history, shifts=-1, dims=0)
            self.history[-1] = argmax
        free_count = free.sum(-1).clamp_(min=1)
        mean_entropy = (entropy * free).sum(-1) / free_count
        return stable & (mean_entropy < self.confidence)
