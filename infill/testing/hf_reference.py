"""transformers' own DiffusionGemma forward, driven the way the engine drives its own: the arbiter the engine's
forward (infill/engine/forward.py) is tested against, and the model-side half of the vLLM cross-check. Not product
code: the engine never calls it.

- `hf_encode`: the encoder over prompt ids, appending to a full-history `DynamicCache()` (every layer keeps every
  token, so an edit can roll back).
- `decoder_cache_view`: that cache as the decoder expects it (sliding layers see the last W - 1 tokens, what
  `DynamicCache(config)` keeps), batch expanded to the canvas rows.
- `hf_decoder_masks`: per-row key masks for padded rows (None: the model's own full bidirectional attention).
- `hf_decoder_logits`: the decoder with self-conditioning given as embeddings, raw LM-head logits.
- `engine_weights`: a transformers model's own tensors as the engine's weights (through the loader's one name map,
  checkpoint.py), nothing copied unless quantized.
- `engine_prefill`: the other side of `hf_prefill`: the engine's own encode of a prompt, in chunks, into new KV
  buffers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, cast

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from infill.engine import forward
from infill.engine.checkpoint import StateDict, read_weights
from infill.engine.kv import KVBuffers
from infill.engine.model import text_config
from infill.engine.weights import EngineWeights

if TYPE_CHECKING:
    from transformers import DiffusionGemmaForBlockDiffusion, DiffusionGemmaTextConfig

Masks = dict[str, "torch.Tensor | None"]  # layer type -> its mask (None: the model's own attention)


def engine_weights(model: DiffusionGemmaForBlockDiffusion, *, quantize: bool = False) -> EngineWeights:
    """`model`'s tensors as the engine reads them (views of the very tensors; `quantize`: projections in FP8)."""
    first = model.model.decoder.embed_tokens.weight
    return read_weights(StateDict(model.state_dict()), model.config, first.device, first.dtype, quantize)


def engine_prefill(weights: EngineWeights, prompt: torch.Tensor, chunk: int, capacity: int = 256) -> KVBuffers:
    """The engine's encode of `prompt` (1-D ids), `chunk` tokens at a time, into KV buffers of `capacity` tokens."""
    kv = KVBuffers(weights.kv_shapes(), capacity, weights.dtype, "cpu")
    with torch.inference_mode():
        for start in range(0, prompt.numel(), chunk):
            ids = prompt[start : start + chunk]
            forward.encode(weights, kv, ids, start, forward.exact_spans(weights, start + ids.numel(), start), "grouped")
    kv.set_length(prompt.numel())
    return kv


def hf_encode(model: DiffusionGemmaForBlockDiffusion, ids: torch.Tensor, cache: DynamicCache, start: int) -> None:
    """Run the encoder over `ids` (1-D, positions start..), appending their keys/values to `cache`."""
    positions = torch.arange(start, start + ids.numel(), device=ids.device)[None]
    model.model.encoder(input_ids=ids[None], cache=cache, position_ids=positions)


def hf_prefill(model: DiffusionGemmaForBlockDiffusion, ids: torch.Tensor) -> DynamicCache:
    cache = DynamicCache()
    with torch.inference_mode():
        hf_encode(model, ids, cache, 0)
    return cache


def hf_embed(model: DiffusionGemmaForBlockDiffusion, tokens: torch.Tensor) -> torch.Tensor:
    embedded: torch.Tensor = model.model.decoder.embed_tokens(tokens)
    return embedded


def self_conditioning_embeddings(
    model: DiffusionGemmaForBlockDiffusion, probs: torch.Tensor, clamp_embeddings: torch.Tensor, free: torch.Tensor
) -> torch.Tensor:
    """softmax(previous logits) @ embeddings x sqrt(H) with clamped slots one-hot, from the model's own table."""
    table = model.model.decoder.embed_tokens
    soft = torch.matmul(probs.to(table.weight.dtype), table.weight) * table.embed_scale.to(table.weight.dtype)
    return torch.where(free[..., None], soft, clamp_embeddings)


def layer_keys_values(cache: DynamicCache, index: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The keys and values a cache's layer `index` holds (a DynamicCache's layers are DynamicLayers)."""
    layer = cast(DynamicLayer, cache.layers[index])
    assert layer.keys is not None and layer.values is not None, f"layer {index} of the cache holds nothing"
    return layer.keys, layer.values


def decoder_cache_view(cache: DynamicCache, layer_types: Sequence[str], sliding_window: int, rows: int) -> DynamicCache:
    view = DynamicCache()
    keep = sliding_window - 1
    for index, kind in zip(range(len(cache.layers)), layer_types):
        keys, values = layer_keys_values(cache, index)
        if kind == "sliding_attention" and keys.shape[-2] > keep:
            keys, values = keys[..., -keep:, :], values[..., -keep:, :]
        if rows != keys.shape[0]:
            keys, values = keys.expand(rows, -1, -1, -1), values.expand(rows, -1, -1, -1)
        clone = DynamicLayer()
        clone.lazy_initialization(keys, values)
        clone.keys, clone.values = keys, values
        view.layers.append(clone)
    return view


def hf_decoder_masks(
    valid: torch.Tensor, view: DynamicCache, layer_types: Sequence[str], dtype: torch.dtype, additive: bool
) -> Masks:
    """Every query sees the whole visible prompt and the valid canvas slots of its row (`valid` (R, W))."""
    if bool(valid.all()):
        return dict.fromkeys(set(layer_types))
    rows, width = valid.shape
    masks: Masks = {}
    for kind in set(layer_types):
        prompt_keys = layer_keys_values(view, list(layer_types).index(kind))[0].shape[-2]
        keep = torch.cat([torch.ones((rows, prompt_keys), dtype=torch.bool, device=valid.device), valid], dim=1)
        mask = keep[:, None, None, :].expand(rows, 1, width, prompt_keys + width)
        if additive:
            mask = torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, torch.finfo(dtype).min)
        masks[kind] = mask
    return masks


def hf_decoder_logits(
    model: DiffusionGemmaForBlockDiffusion,
    canvas_ids: torch.Tensor,
    soft: torch.Tensor,
    view: DynamicCache,
    position_ids: torch.Tensor,
    masks: Mapping[str, torch.Tensor | None],
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
    logits: torch.Tensor = model.lm_head(decoder.norm(hidden))
    return logits.float()


def hf_canvas_logits(
    model: DiffusionGemmaForBlockDiffusion,
    prompt: torch.Tensor,
    tokens: torch.Tensor,
    soft: torch.Tensor,
    valid: torch.Tensor | None = None,
) -> torch.Tensor:
    """transformers' logits for canvas rows `tokens` (R, W) after `prompt`, padded slots masked by `valid`."""
    text = text_config(model.config)
    eager = cast("DiffusionGemmaTextConfig", model.config.text_config)._attn_implementation == "eager"
    layer_types = text.layer_types[: text.num_hidden_layers]
    rows, width = tokens.shape
    valid = torch.ones_like(tokens, dtype=torch.bool) if valid is None else valid
    cache = hf_prefill(model, prompt)
    view = decoder_cache_view(cache, layer_types, text.sliding_window, rows)
    masks = hf_decoder_masks(valid, view, layer_types, model.dtype, eager)
    positions = (prompt.numel() + torch.arange(width, device=tokens.device)).expand(rows, width)
    with torch.inference_mode():
        return hf_decoder_logits(model, tokens, soft, view, positions, masks)
