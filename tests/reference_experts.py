"""The reference experts kernel: one matmul pair per expert that was hit (reading the hit counts on the host, so it
cannot be captured in a CUDA graph). The engine's kernels (infill/engine/experts.py) are checked against it in
tests/engine/test_engine_forward.py, and benchmarks/engine_gpu.py reports each kernel's largest difference from it.
Test and benchmark code only."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from infill.engine.ops import Activation
from infill.engine.weights import Experts


def loop(x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor, experts: Experts, act: Activation) -> torch.Tensor:
    """Tokens x (N, H), their experts `ids` (N, k) and route `weights` (N, k): the weighted sum of each token's
    experts, taken in float32 as the engine's kernels take it."""
    tokens, _ = ids.shape
    total = torch.zeros(tokens, x.shape[-1], dtype=torch.float32, device=x.device)
    for expert in torch.unique(ids).tolist():
        token, slot = torch.nonzero(ids == expert, as_tuple=True)
        gate_up = experts.gate_up.pick(expert).dequantized(x.dtype)
        gate, up = F.linear(x[token], gate_up).chunk(2, dim=-1)
        down = experts.down.pick(expert).dequantized(x.dtype)
        out = F.linear(act(gate) * up, down)
        total.index_add_(0, token, out.float() * weights[token, slot, None])
    return total.to(x.dtype)
