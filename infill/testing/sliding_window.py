"""Decoder key masks for vLLM's reading of the sliding window, for the checks that compare the engine with vLLM
and with transformers (tests/engine/test_engine_sliding_window.py, tests/vllm/cross_check.py). Not product code.

transformers' DiffusionGemma decoder (the engine's reference) attends bidirectionally to everything its cache holds:
in sliding layers the last W - 1 prompt tokens, the same for every canvas slot. vLLM 0.32 applies the sliding
window per query position instead, as a causal sliding window would: the canvas slot at position q sees prompt keys
at positions > q - W, so later slots see fewer prompt tokens. These masks reproduce vLLM's reading on the engine's
decoder view, so a check can show that the window is the whole difference between the two.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from infill.testing.hf_reference import layer_keys_values

if TYPE_CHECKING:
    from transformers import DynamicCache


def per_slot_window_masks(
    view: DynamicCache,
    layer_types: list[str] | tuple[str, ...],
    sliding_window: int,
    prompt_length: int,
    width: int,
    additive: bool,
    rows: int = 1,
) -> dict[str, torch.Tensor]:
    """{layer type: (rows, 1, width, held + width) mask} over a decoder view holding the last `held` prompt keys
    per layer: slot q (position prompt_length + q) sees the whole canvas, prompt keys at positions > q - W in
    sliding layers, every prompt key in full-attention layers. `additive`: float masks (eager attention)."""
    masks: dict[str, torch.Tensor] = {}
    queries = prompt_length + torch.arange(width)
    for kind in set(layer_types):
        held = layer_keys_values(view, list(layer_types).index(kind))[0].shape[-2]
        keys = torch.cat([torch.arange(prompt_length - held, prompt_length), queries])
        keep = torch.ones(width, held + width, dtype=torch.bool)
        if kind == "sliding_attention":
            keep = ((queries[:, None] - keys[None, :]) < sliding_window) | (keys[None, :] >= prompt_length)
        mask = keep[None, None].expand(rows, 1, width, held + width)
        if additive:
            mask = torch.zeros(mask.shape).masked_fill(~mask, torch.finfo(torch.float32).min)
        masks[kind] = mask
    return masks
