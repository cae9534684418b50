"""transformers' own DiffusionGemma forward, driven the way the engine drives its own: the arbiter the engine's
forward (infill/engine/forward.py) is tested against, and the model-side half of the vLLM cross-check. Not product
code: the engine never calls it.

- `hf_encode`: the encoder over prompt ids, appending to a full-history `DynamicCache()` (every layer keeps every
  token, so an edit can roll back).
- `decoder_cache_view`: that cache as the decoder expects it (sliding layers see the last W - 1 tokens, what
  `DynamicCache(config)` keeps), batch expanded to the canvas rows.
- `hf_decoder_masks`: per-row key masks for padded rows (None: the model's own full bidirectional attention).
- `hf_decoder_logits`: the decoder with self-conditioning given as embeddings, raw LM-head logits.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


def hf_encode(model, ids: torch.Tensor, cache: DynamicCache, start: int) -> None:
    """Run the encoder over `ids` (1-D, positions start..), appending their keys/values to `cache`."""
    positions = torch.arange(start, start + ids.numel(), device=ids.device)[None]
    model.model.encoder(input_ids=ids[None], cache=cache, position_ids=positions)


def hf_prefill(model, ids: torch.Tensor) -> DynamicCache:
    cache = DynamicCache()
    with torch.inference_mode():
        hf_encode(model, ids, cache, 0)
    return cache


def hf_embed(model, tokens: torch.Tensor) -> torch.Tensor:
    return model.model.decoder.embed_tokens(tokens)


def self_conditioning_embeddings(
    model, probs: torch.Tensor, clamp_embeddings: torch.Tensor, free: torch.Tensor
) -> torch.Tensor:
    """softmax(previous logits) @ embeddings x sqrt(H) with clamped slots one-hot, from the model's own table."""
    table = model.model.decoder.embed_tokens
    soft = torch.matmul(probs.to(table.weight.dtype), table.weight) * table.embed_scale.to(table.weight.dtype)
    return torch.where(free[..., None], soft, clamp_embeddings)


def decoder_cache_view(cache: DynamicCache, layer_types, sliding_window: int, rows: int) -> DynamicCache:
    view = DynamicCache()
    keep = sliding_window - 1
    for layer, kind in zip(cache.layers, layer_types):
        keys, values = layer.keys, layer.values
        if kind == "sliding_attention" and keys.shape[-2] > keep:
            keys, values = keys[..., -keep:, :], values[..., -keep:, :]
        if rows != keys.shape[0]:
            keys, values = keys.expand(rows, -1, -1, -1), values.expand(rows, -1, -1, -1)
        clone = DynamicLayer()
        clone.lazy_initialization(keys, values)
        clone.keys, clone.values = keys, values
        view.layers.append(clone)
    return view


def hf_decoder_masks(valid: torch.Tensor, view: DynamicCache, layer_types, dtype: torch.dtype, additive: bool) -> dict:
    """Every query sees the whole visible prompt and the valid canvas slots of its row (`valid` (R, W))."""
    if bool(valid.all()):
        return dict.fromkeys(set(layer_types))
    rows, width = valid.shape
    masks = {}
    for kind in set(layer_types):
        prompt_keys = view.layers[list(layer_types).index(kind)].keys.shape[-2]
        keep = torch.cat([torch.ones((rows, prompt_keys), dtype=torch.bool, device=valid.device), valid], dim=1)
        mask = keep[:, None, None, :].expand(rows, 1, width, prompt_keys + width)
        if additive:
            mask = torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, torch.finfo(dtype).min)
        masks[kind] = mask
    return masks


def hf_decoder_logits(
    model, canvas_ids: torch.Tensor, soft: torch.Tensor, view: DynamicCache, position_ids: torch.Tensor, masks: dict
) -> torch.Tensor:
    decoder = model.model.decoder
    hidden = decoder.embed_tokens(canvas_ids)
    hidden = decoder.self_conditioning(hidden, soft)
    layer_types = decoder.text_config.layer_types
    rotary = {kind: decoder.rotary_emb(hidden, position_ids, kind) for kind in decoder.unique_layer_types}
    for i, layer in enumerate(decoder.layers[: decoder.text_config.num_hidden_layers]):
        hidden = layer(
            hidden,
            position_embeddings=rotary[layer_types[i]],
            attention_mask=masks[layer_types[i]],
            position_ids=position_ids,
            cache=view,
        )
    return model.lm_head(decoder.norm(hidden)).float()


def hf_canvas_logits(
    model, prompt: torch.Tensor, tokens: torch.Tensor, soft: torch.Tensor, valid: torch.Tensor | None = None
) -> torch.Tensor:
    """transformers' logits for canvas rows `tokens` (R, W) after `prompt`, padded slots masked by `valid`."""
    text = model.config.text_config
    layer_types = text.layer_types[: text.num_hidden_layers]
    rows, width = tokens.shape
    valid = torch.ones_like(tokens, dtype=torch.bool) if valid is None else valid
    cache = hf_prefill(model, prompt)
    view = decoder_cache_view(cache, layer_types, text.sliding_window, rows)
    masks = hf_decoder_masks(valid, view, layer_types, model.dtype, text._attn_implementation == "eager")
    positions = (prompt.numel() + torch.arange(width, device=tokens.device)).expand(rows, width)
    with torch.inference_mode():
        return hf_decoder_logits(model, tokens, soft, view, positions, masks)
