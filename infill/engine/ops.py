"""The small operations the engine's forward is made of, written as transformers' DiffusionGemma computes them
(same dtypes at each step, so the results agree to float tolerance) but over plain tensors: RMSNorm, rotary
embeddings, linear layers in the model's dtype or FP8, and attention that reads the KV buffers in place.

Attention folds the grouped-query heads into the query axis: the queries of the `groups` heads that share a KV
head become one longer query block against that KV head, so keys and values are read once, never repeated per
query head. Which keys a query sees is a boolean mask (forward.py builds it), so the same call serves an exact
slice of the buffers (eager) and the whole buffer at a fixed shape (CUDA graphs).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from infill.engine.weights import Linear, Rope
from infill.types import InfillError

Activation = Callable[[torch.Tensor], torch.Tensor]
FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0  # the largest finite E4M3 value


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    """transformers' DiffusionGemmaRMSNorm: in float32, x * (mean(x^2) + eps)^-0.5 [* weight], back to x's dtype;
    torch's fused RMSNorm does it in one kernel on CUDA (the same float32 arithmetic)."""
    return F.rms_norm(x.float(), x.shape[-1:], None if weight is None else weight.float(), eps).type_as(x)


def activation(name: str) -> Activation:
    if name in ("gelu_pytorch_tanh", "gelu_tanh"):
        return lambda x: F.gelu(x, approximate="tanh")
    if name == "gelu":
        return F.gelu
    if name == "silu":
        return F.silu
    raise InfillError(f"the engine does not implement the activation {name!r}")


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Dynamic per-row (per-token) E4M3 quantization: (x / s, s) with s = max|row| / 448, float32 (rows, 1)."""
    xf = x.float()
    scale = xf.abs().amax(-1, keepdim=True).clamp_(min=1e-12).div_(FP8_MAX)
    return (xf / scale).clamp_(-FP8_MAX, FP8_MAX).to(FP8), scale


def linear(x: torch.Tensor, layer: Linear) -> torch.Tensor:
    """x @ W.T. FP8 weights: activations quantized per token, one scaled matmul with per-token and per-output-channel
    scales, out in x's dtype (torch._scaled_mm: cuBLASLt on Hopper, and a CPU kernel, so CPU tests run this very
    call)."""
    if layer.scale is None:  # not FP8
        return F.linear(x, layer.weight)
    rows = x.reshape(-1, x.shape[-1])
    xq, xs = quantize_rows(rows)
    out = torch._scaled_mm(xq, layer.weight.t(), scale_a=xs, scale_b=layer.scale.view(1, -1), out_dtype=x.dtype)
    return out.view(*x.shape[:-1], layer.out_features)


def rope_tables(rope: Rope, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin (..., head_dim) for `positions`, as transformers' rotary embedding computes them."""
    freqs = positions.float()[..., None] * rope.inv_freq  # (on the weights' device: this runs inside CUDA graphs)
    emb = torch.cat((freqs, freqs), dim=-1)
    return (emb.cos() * rope.scaling).to(dtype), (emb.sin() * rope.scaling).to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x (T, heads, D) rotated by cos/sin (T, D)."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos[:, None] + rotated * sin[:, None]


def fold_mask(visible: torch.Tensor, groups: int, dtype: torch.dtype) -> torch.Tensor:
    """An additive mask for `attend` from visible (T, S) bool: repeated for the `groups` query heads folded onto
    each KV head, in the model's dtype (so attention converts nothing per call). Made once per forward and layer
    kind; every query sees at least one key, so no row is all masked."""
    folded = visible.repeat(groups, 1) if groups > 1 else visible
    return torch.zeros(folded.shape, dtype=dtype, device=folded.device).masked_fill_(~folded, torch.finfo(dtype).min)


def attend(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """q (T, heads, D) against keys/values (kv_heads, S, D), views of the KV buffers; `mask` from `fold_mask`.
    Returns (T, heads * D). The model's queries are normed, so the scale is 1."""
    tokens, heads, dim = q.shape
    kv_heads = keys.shape[0]
    groups = heads // kv_heads
    # query heads h = j * groups + g share KV head j (transformers' repeat_kv order)
    folded = q.view(tokens, kv_heads, groups, dim).permute(1, 2, 0, 3).reshape(1, kv_heads, groups * tokens, dim)
    out = F.scaled_dot_product_attention(folded, keys[None], values[None], attn_mask=mask[None, None], scale=1.0)
    return out.view(kv_heads, groups, tokens, dim).permute(2, 0, 1, 3).reshape(tokens, heads * dim)
