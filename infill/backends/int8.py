"""int8 weights for the offline default on a CPU with native bf16 (an AVX2-only CPU gets bf16 weights instead:
infill/backends/prefill_weights.py): each `nn.Linear` (the transformer's projections and the 262,144-row
output head) keeps its weights as int8 with one scale per output row; activations stay in the model's float dtype
(weight-only quantization, torch's `_weight_int8pack_mm`). A decoding forward of Gemma 3 270M reads half the bytes
of bf16 and the int8 kernel runs near memory bandwidth where bf16's one-row matmul does not.

Weight-only, not fbgemm's dynamic int8 (which also quantizes activations, one scale per call): that one was faster
still (6 ms for the head against 14) but lost exact match on benchmarks/ar_quality.py (23/60 against bf16's
24/60), and its shared activation scale made a token's logits depend on the other tokens in the same forward, so a
fill would have depended on how the prompt was cut into cached chunks and on the drafts verified with it. Here
every row of a decoding forward is computed alone (25/60 on the same holes).

The int8 kernel is a matrix-vector product per row: from about 8 rows on, bf16 is faster (256 rows: 365 ms for the
body against 135 ms). So the body's layers also keep their int8 weights dequantized to bf16 (about 200 MB more) and
a forward of more than DENSE_ROWS tokens (a prompt's prefill) uses those: the same weights, rounded once more to
bf16. The output head never needs them (a prefill keeps one row of logits; drafts verify at most 4).
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

DENSE_ROWS = 16  # forwards of more rows than this use the dequantized bf16 copy (when the layer keeps one)


QUANTIZE_BLOCK_ROWS = 8192  # rows rounded at a time: the head's float copy would be 671 MB (and 3x slower)


def _quantize_rows(weight):
    """int8 rows and one float32 scale per row (the row's largest magnitude maps to 127)."""
    import torch

    parts, scales = [], []
    for block in weight.split(QUANTIZE_BLOCK_ROWS):
        block = block.float()
        scale = (block.abs().amax(dim=1) / 127).clamp_min(1e-12)
        parts.append((block / scale[:, None]).round().clamp(-127, 127).to(torch.int8))
        scales.append(scale)
    return torch.cat(parts), torch.cat(scales)


def _linear_class():
    import torch

    class Int8Linear(torch.nn.Module):
        """y = x W^T + b with W in int8 and a scale per output row; x keeps its dtype (bf16 or float32)."""

        def __init__(self, linear: torch.nn.Linear, keep_dense: bool) -> None:
            super().__init__()
            quantized, scale = _quantize_rows(linear.weight.detach())
            self.register_buffer("weight_int8", quantized)
            self.register_buffer("scale", scale.to(linear.weight.dtype))
            self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().clone())
            dense = self.weight_int8.float() * self.scale.float()[:, None] if keep_dense else None
            self.register_buffer("dense", None if dense is None else dense.to(linear.weight.dtype))
            self.in_features, self.out_features = linear.in_features, linear.out_features

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            rows = x.reshape(-1, self.in_features)
            if self.dense is not None and rows.shape[0] > DENSE_ROWS:
                y = torch.nn.functional.linear(rows, self.dense)
            else:
                y = torch.ops.aten._weight_int8pack_mm(rows, self.weight_int8, self.scale)
            y = y.reshape(*x.shape[:-1], self.out_features)
            return y if self.bias is None else y + self.bias

        def extra_repr(self) -> str:
            return f"in_features={self.in_features}, out_features={self.out_features}, int8 weights"

    return Int8Linear


def quantize_linears(model, keep_dense: bool = True) -> int:
    """Replace every nn.Linear of `model` (bf16 or float32) by its int8 form, in place; returns how many. With
    `keep_dense`, all but the output head also keep a dequantized copy for long forwards. A head tied to the
    embedding gets its own int8 copy and the embedding keeps its float weights (lookups read a few rows)."""
    import torch

    linear_class = _linear_class()
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    replaced = 0
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, torch.nn.Linear):
                setattr(module, name, linear_class(child, keep_dense and child is not head))
                replaced += 1
    log.info("int8 weights for %d linear layers", replaced)
    return replaced
