"""FP8 weights in-process: E4M3 weights with one scale per output channel, activations quantized per token at run
time (ops.linear, experts.grouped), the scheme the published FP8-dynamic DiffusionGemma checkpoints use.

Two ways in, both read by checkpoint.py:
- a bf16 checkpoint quantized at load (`--quantization fp8`): attention, dense MLP and expert projections become
  FP8 (`quantize_rows_of`, a slice at a time); embeddings (and so the tied LM head), routers, norms and the
  self-conditioning MLP stay in the model's dtype, as the published checkpoints keep them.
- a checkpoint in the compressed-tensors "float-quantized" format (what LLM Compressor writes and vLLM reads),
  which `compressed_fp8_scheme` recognises: FP8 `weight` plus `weight_scale` (out, 1) per quantized Linear,
  experts split per expert (`experts.{e}.gate_proj/up_proj/down_proj`), everything else as in the bf16 checkpoint.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from infill.engine.ops import FP8, FP8_MAX
from infill.types import InfillError

if TYPE_CHECKING:
    from transformers import DiffusionGemmaConfig


def quantize_rows_of(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(E4M3 weight, float32 scale per output row) for weight (..., out, in): each row scaled to fill [-448, 448]."""
    w = weight.to(torch.float32, copy=True)  # divided in place below: one float32 temporary (quantizing at load
    # runs this slice by slice, and each temporary adds to the load's peak)
    scale = w.abs().amax(-1).clamp(min=1e-12) / FP8_MAX
    return w.div_(scale[..., None]).clamp_(-FP8_MAX, FP8_MAX).to(FP8), scale


# ---- the compressed-tensors checkpoint format ------------------------------------------------------------------


def compressed_fp8_scheme(config: DiffusionGemmaConfig) -> dict[str, Any] | None:
    """The FP8-dynamic scheme of a checkpoint's `quantization_config` (None: not quantized). Raises InfillError for
    any other quantization, naming it."""
    qc = getattr(config, "quantization_config", None)
    if qc is None:
        return None
    qc = qc if isinstance(qc, dict) else qc.to_dict()
    method = qc.get("quant_method")
    if method != "compressed-tensors":
        raise InfillError(
            f"the checkpoint is quantized with {method!r}; infill-ls loads compressed-tensors FP8 "
            "(FP8-dynamic) checkpoints or unquantized ones (use --quantization fp8 on those)"
        )
    for name, group in (qc.get("config_groups") or {}).items():
        w, a = group.get("weights") or {}, group.get("input_activations") or {}
        fmt = group.get("format") or qc.get("format")
        if not (
            fmt == "float-quantized"
            and w.get("num_bits") == 8
            and w.get("type") == "float"
            and w.get("strategy") == "channel"
            and a.get("num_bits") == 8
            and a.get("type") == "float"
            and a.get("strategy") == "token"
            and a.get("dynamic") is True
        ):
            raise InfillError(
                f"compressed-tensors group {name!r} is not FP8 per-channel weights with dynamic "
                f"per-token activations (format {fmt!r}, weights {w}, activations {a}): not supported"
            )
    return qc
