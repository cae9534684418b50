"""The routed experts: the router, and the kernels that apply each token's top-k experts.

Which kernel is fastest depends on how many tokens a call carries (a 2-token keystroke encode touches ~16 of 128
experts a layer; a 96-slot canvas nearly all of them), so two are kept, each exact to float tolerance against a
reference (tests/reference_experts.py), and benchmarks/engine_gpu.py measures them at the real shapes. Both run
without a host sync, so they can be captured in a CUDA graph:
- `grouped`: pairs (token, expert) sorted by expert, one grouped matmul for gate/up and one for down
  (torch.nn.functional.grouped_mm; FP8: torch._scaled_grouped_mm on CUDA);
- `pairs`: each pair's expert weights gathered and applied with a batched matmul (reads a weight once per pair:
  only for calls with very few tokens).
The weighted sum over a token's experts is taken in float32, as transformers' grouped and batched kernels do.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from infill.engine.ops import Activation, quantize_rows, rms_norm
from infill.engine.weights import Experts, Layer, Linear

Kernel = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, Experts, Activation], torch.Tensor]


def route(x: torch.Tensor, layer: Layer, top_k: int, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' DiffusionGemmaTextRouter: (weights (N, k) float32, expert ids (N, k)) for tokens x (N, H)."""
    h = rms_norm(x, None, eps) * layer.router_scale * (x.shape[-1] ** -0.5)
    probs = torch.softmax(F.linear(h, layer.router), dim=-1, dtype=torch.float32)
    weights, ids = torch.topk(probs, k=top_k, dim=-1)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights * layer.expert_scale[ids], ids


def _grouped_matmul(x: torch.Tensor, linear: Linear, offsets: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
    """Rows of x (sorted by group) times their group's weight.T; weight (G, out, in)."""
    weight, scale = linear.weight, linear.scale
    if scale is None:
        return F.grouped_mm(x, weight.transpose(-2, -1), offs=offsets)
    xq, xs = quantize_rows(x)
    if x.is_cuda:
        return torch._scaled_grouped_mm(
            xq, weight.transpose(-2, -1), scale_a=xs.view(-1), scale_b=scale, offs=offsets, out_dtype=out_dtype
        )
    # No grouped FP8 kernel on CPU: the same arithmetic one group at a time (tests and CPU runs only).
    out = torch.empty(x.shape[0], weight.shape[1], dtype=out_dtype)
    start = 0
    for group, end in enumerate(offsets.tolist()):
        if end > start:
            out[start:end] = torch._scaled_mm(
                xq[start:end],
                weight[group].t(),
                scale_a=xs[start:end],
                scale_b=scale[group].view(1, -1),
                out_dtype=out_dtype,
            )
        start = end
    return out


def grouped(
    x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor, experts: Experts, act: Activation
) -> torch.Tensor:
    tokens, top_k = ids.shape
    flat = ids.reshape(-1)
    sorted_ids, order = torch.sort(flat, stable=True)
    rows = x[order // top_k]
    # histc, not bincount: its output size does not depend on the values, so no host sync (CUDA graphs)
    counts = torch.histc(
        sorted_ids.float() if not x.is_cuda else sorted_ids.int(), bins=experts.count, min=0, max=experts.count - 1
    )
    offsets = torch.cumsum(counts, dim=0, dtype=torch.int32)
    gate, up = _grouped_matmul(rows, experts.gate_up, offsets, x.dtype).chunk(2, dim=-1)
    out = _grouped_matmul(act(gate) * up, experts.down, offsets, x.dtype)
    weighted = out.float() * weights.reshape(-1)[order, None]
    unsorted = torch.empty_like(weighted).index_copy_(0, order, weighted)
    return unsorted.view(tokens, top_k, -1).sum(dim=1).to(x.dtype)


def pairs(x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor, experts: Experts, act: Activation) -> torch.Tensor:
    tokens, top_k = ids.shape
    flat = ids.reshape(-1)
    rows = x.repeat_interleave(top_k, dim=0)
    gate_up = experts.gate_up.pick(flat).dequantized(x.dtype)
    gate, up = torch.bmm(gate_up, rows[..., None]).squeeze(-1).chunk(2, dim=-1)
    down = experts.down.pick(flat).dequantized(x.dtype)
    out = torch.bmm(down, (act(gate) * up)[..., None]).squeeze(-1)
    return (out.float() * weights.reshape(-1, 1)).view(tokens, top_k, -1).sum(dim=1).to(x.dtype)


KERNELS: dict[str, Kernel] = {"grouped": grouped, "pairs": pairs}
