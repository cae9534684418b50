"""The one module that reaches into transformers' DiffusionGemma internals (encoder, decoder layers, embeddings,
cache layers). Everything else in the engine calls these functions, so a transformers upgrade that moves an
internal is fixed here alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


@dataclass(frozen=True)
class ModelShape:
    """What the engine needs to know about a DiffusionGemmaForBlockDiffusion."""

    vocab_size: int
    softcap: float | None  # final logit softcapping (None: none)
    layer_types: tuple[str, ...]  # "sliding_attention" / "full_attention" per decoder layer
    sliding_window: int
    max_positions: int
    canvas_length: int
    additive_masks: bool  # eager attention takes additive float masks, the others boolean
    dtype: torch.dtype
    device: torch.device


def shape_of(model) -> ModelShape:
    text = model.config.text_config
    return ModelShape(vocab_size=text.vocab_size, softcap=text.final_logit_softcapping,
                      layer_types=tuple(text.layer_types), sliding_window=text.sliding_window,
                      max_positions=text.max_position_embeddings, canvas_length=model.config.canvas_length,
                      additive_masks=text._attn_implementation == "eager", dtype=model.dtype,
                      device=next(model.parameters()).device)


def encode(model, ids: torch.Tensor, cache: DynamicCache, start: int) -> None:
    """Run the encoder over `ids` (1-D, positions start..), appending their keys/values to `cache`."""
    positions = torch.arange(start, start + ids.numel(), device=ids.device)[None]
    model.model.encoder(input_ids=ids[None], cache=cache, position_ids=positions)


def embed(model, tokens: torch.Tensor) -> torch.Tensor:
    """The decoder's (scaled) token embeddings."""
    return model.model.decoder.embed_tokens(tokens)


def embedding_table(model) -> tuple[torch.Tensor, torch.Tensor]:
    """(weight (V, H), scale) of the decoder's scaled embedding, for self-conditioning inside the hot step."""
    table = model.model.decoder.embed_tokens
    return table.weight, table.embed_scale.to(table.weight.dtype)


def soft_embeddings(probs: torch.Tensor, weight: torch.Tensor, scale: torch.Tensor, clamp_embeddings: torch.Tensor,
                    free: torch.Tensor) -> torch.Tensor:
    """softmax(previous logits) @ embeddings × √H, as the decoder computes it, with clamped slots one-hot (their
    own embedding). Pure tensor math: it runs inside the compiled step."""
    soft = torch.matmul(probs.to(weight.dtype), weight) * scale
    return torch.where(free[..., None], soft, clamp_embeddings)


def self_conditioning_embeddings(model, probs: torch.Tensor, clamp_embeddings: torch.Tensor,
                                 free: torch.Tensor) -> torch.Tensor:
    weight, scale = embedding_table(model)
    return soft_embeddings(probs, weight, scale, clamp_embeddings, free)


def decoder_logits(model, canvas_ids: torch.Tensor, soft: torch.Tensor, view: DynamicCache,
                   position_ids: torch.Tensor, masks: dict) -> torch.Tensor:
    """The decoder forward with self-conditioning given as embeddings (so the softmax the sampler already
    computed is not recomputed; zeros before the first step, as the model does without self-conditioning) and the
    raw LM head output (softcap applied by the sampler)."""
    decoder = model.model.decoder
    hidden = decoder.embed_tokens(canvas_ids)
    hidden = decoder.self_conditioning(hidden, soft)
    layer_types = decoder.text_config.layer_types
    rotary = {kind: decoder.rotary_emb(hidden, position_ids, kind) for kind in decoder.unique_layer_types}
    for i, layer in enumerate(decoder.layers[: decoder.text_config.num_hidden_layers]):
        hidden = layer(hidden, position_embeddings=rotary[layer_types[i]], attention_mask=masks[layer_types[i]],
                       position_ids=position_ids, cache=view)
    return model.lm_head(decoder.norm(hidden)).float()


def decoder_cache_view(cache: DynamicCache, layer_types: tuple[str, ...] | list[str], sliding_window: int,
                       rows: int) -> DynamicCache:
    """A read-only view of a full-history cache as the decoder expects it: sliding layers see only the last
    `sliding_window - 1` prompt tokens (what `DynamicCache(config)` would hold), batch expanded to `rows`."""
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


def visible_keys(view: DynamicCache, layer: int) -> int:
    """How many prompt keys layer `layer` of a decoder view holds."""
    return view.layers[layer].keys.shape[-2]
