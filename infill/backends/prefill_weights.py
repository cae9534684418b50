"""bf16 weights on a CPU without native bf16 (an AVX2-only laptop), with float32 copies for prompts.

There a decoding forward (a token and its drafts) multiplies by the bf16 weights with torch's matrix-vector
kernels, which read them at memory speed: 34 ms a token for Gemma 3 270M, against 109 ms with float32 weights and
142 ms with int8 weights (whose kernel then computes with float32 activations). A prompt's prefill would multiply
bf16 matrices in emulation (2.2 s for 256 tokens); the layers therefore keep float32 copies of their weights, and a
forward of more than DENSE_ROWS rows multiplies by those (0.48 s). The copies cost ~400 MB for the body; the output
head keeps none (a prefill computes one row of logits). Measured with torch held to AVX2 on an AVX-512 machine
(`ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2`).
"""

from __future__ import annotations

import logging

from infill.backends.int8 import DENSE_ROWS

log = logging.getLogger(__name__)


def _linear_class():
    import torch

    class Bf16LinearWithFloat32Prefill(torch.nn.Module):
        """y = x W^T + b: bf16 W for a few rows, its float32 copy (the same numbers) for many."""

        def __init__(self, linear: torch.nn.Linear) -> None:
            super().__init__()
            self.register_buffer("weight", linear.weight.detach().to(torch.bfloat16))
            self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().to(torch.bfloat16))
            self.register_buffer("dense", self.weight.float())
            self.in_features, self.out_features = linear.in_features, linear.out_features

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            rows = x.reshape(-1, self.in_features)
            if rows.shape[0] > DENSE_ROWS:
                y = torch.nn.functional.linear(rows.float(), self.dense).to(x.dtype)
            else:
                y = torch.nn.functional.linear(rows, self.weight)
            y = y.reshape(*x.shape[:-1], self.out_features)
            return y if self.bias is None else y + self.bias

        def extra_repr(self) -> str:
            return f"in_features={self.in_features}, out_features={self.out_features}, float32 copy for prefills"

    return Bf16LinearWithFloat32Prefill


def add_float32_prefill_copies(model) -> int:
    """Give every nn.Linear of a bf16 `model` but its output head a float32 copy for long forwards, in place;
    returns how many layers."""
    import torch

    linear_class = _linear_class()
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    replaced = 0
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, torch.nn.Linear) and child is not head:
                setattr(module, name, linear_class(child))
                replaced += 1
    log.info("float32 prefill copies for %d linear layers", replaced)
    return replaced
