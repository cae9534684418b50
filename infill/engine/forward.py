"""The engine's forward over the checkpoint's own weights (weights.py) and preallocated KV buffers (kv.py).

Two passes share one layer function, as DiffusionGemma's encoder and decoder share one stack:
- `encode`: prompt tokens at positions start.., causal (sliding layers see a token and the W - 1 before it); each
  layer writes the tokens' keys and values into its buffer. Only the keys and values are kept, so the last layer
  stops once it has written them.
- `decode`: the canvas rows, bidirectional: each slot sees the prompt (sliding layers its last W - 1 tokens, what
  transformers' DynamicCache(config) keeps) and the valid slots of its own row. Its keys and values are written
  into the buffers' tail, right after the prompt, and read in place from there; the prompt's length stays as it
  was, so the next step, or the next keystroke, overwrites them.

Both take where to read as a `KeySpan` per layer kind: an exact slice of the buffers (host integers: eager runs),
or the whole buffer at a fixed shape with the prompt length as a device tensor (graphs.py replays them as CUDA
graphs). The visibility masks make the two compute the same thing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import torch
import torch.nn.functional as F

from infill.engine.experts import KERNELS, route
from infill.engine.kv import KVBuffers
from infill.engine.ops import activation, apply_rope, attend, fold_mask, linear, rms_norm, rope_tables
from infill.engine.weights import FULL, SLIDING, EngineWeights, Layer

KernelChoice = Callable[[int], str]  # tokens in a call -> experts kernel name (experts.KERNELS)
Masks = dict[str, torch.Tensor]  # layer kind -> its attention mask
Ropes = dict[str, tuple[torch.Tensor, torch.Tensor]]  # layer kind -> (cos, sin)


@dataclass(frozen=True)
class KeySpan:
    """Buffer positions [lo, hi) a layer kind reads."""

    lo: int
    hi: int


def exact_spans(weights: EngineWeights, end: int, first_query: int) -> dict[str, KeySpan]:
    """The exact slices for keys up to `end` when the earliest query sits at position `first_query` (a prompt
    chunk's start, or the canvas's: the prompt length): sliding layers need no key before first_query - (W - 1)."""
    lo = max(0, first_query - (weights.sliding_window - 1))
    return {FULL: KeySpan(0, end), SLIDING: KeySpan(lo, end)}


def whole_spans(kv: KVBuffers) -> dict[str, KeySpan]:
    return {FULL: KeySpan(0, kv.capacity), SLIDING: KeySpan(0, kv.capacity)}


def _span_positions(span: KeySpan, device: torch.device) -> torch.Tensor:
    return torch.arange(span.lo, span.hi, device=device)


def encoder_masks(weights: EngineWeights, spans: dict[str, KeySpan], positions: torch.Tensor) -> Masks:
    """(T, S) per layer kind: a token sees the keys at or before its own position, sliding layers the last W."""
    out: Masks = {}
    for kind, span in spans.items():
        keys = _span_positions(span, positions.device)
        mask = keys[None, :] <= positions[:, None]
        if kind == SLIDING:
            mask &= keys[None, :] > positions[:, None] - weights.sliding_window
        out[kind] = mask
    return out


def canvas_masks(
    weights: EngineWeights, spans: dict[str, KeySpan], prompt_length: torch.Tensor | int, valid: torch.Tensor
) -> Masks:
    """(R*W, S) per layer kind for canvas slots written at prompt_length.. (row-major): the prompt (sliding: its
    last W - 1 tokens) and the valid slots of the slot's own row."""
    rows, width = valid.shape
    slots = rows * width
    row_of = torch.arange(rows, device=valid.device).repeat_interleave(width)
    out: Masks = {}
    for kind, span in spans.items():
        keys = _span_positions(span, valid.device)
        prompt = keys < prompt_length
        if kind == SLIDING:
            prompt &= keys >= prompt_length - (weights.sliding_window - 1)
        slot = keys - prompt_length
        in_canvas = (slot >= 0) & (slot < slots)
        slot = slot.clamp(0, slots - 1)
        canvas = in_canvas & valid.reshape(-1)[slot]
        out[kind] = prompt[None, :] | (canvas[None, :] & (row_of[slot][None, :] == row_of[:, None]))
    return out


def layer_forward(
    layer: Layer,
    x: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    write_at: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    lo: int,
    hi: int,
    mask: torch.Tensor,
    eps: float,
    act: str,
    top_k: int,
    kernel: str,
    keys_only: bool = False,
) -> torch.Tensor | None:
    """One layer over tokens x (T, H) at buffer positions `write_at` (T,): transformers' DiffusionGemma layer, its
    keys and values written into `keys`/`values` (this layer's buffers) before attention reads [lo, hi) of them.
    Tensors and plain values only, so torch.compile can take it whole (runner.py does, on CUDA)."""
    fn = activation(act)
    tokens = x.shape[0]
    h = rms_norm(x, layer.norms.input, eps)
    k_raw = linear(h, layer.k).view(tokens, layer.kv_heads, layer.head_dim)
    v = linear(h, layer.v).view(tokens, layer.kv_heads, layer.head_dim) if layer.v is not None else k_raw
    keys.index_copy_(1, write_at, apply_rope(rms_norm(k_raw, layer.k_norm, eps), cos, sin).transpose(0, 1))
    values.index_copy_(1, write_at, rms_norm(v, None, eps).transpose(0, 1))
    if keys_only:
        return None
    q = apply_rope(rms_norm(linear(h, layer.q).view(tokens, layer.heads, layer.head_dim), layer.q_norm, eps), cos, sin)
    x = x + rms_norm(
        linear(attend(q, keys[:, lo:hi], values[:, lo:hi], mask), layer.o), layer.norms.post_attention, eps
    )
    dense_in = rms_norm(x, layer.norms.pre_feedforward, eps)
    dense = linear(fn(linear(dense_in, layer.gate)) * linear(dense_in, layer.up), layer.down)
    route_weights, ids = route(x, layer, top_k, eps)
    routed = KERNELS[kernel](rms_norm(x, layer.norms.pre_feedforward_2, eps), ids, route_weights, layer.experts, fn)
    mixed = rms_norm(dense, layer.norms.post_feedforward_1, eps) + rms_norm(routed, layer.norms.post_feedforward_2, eps)
    return (x + rms_norm(mixed, layer.norms.post_feedforward, eps)) * layer.scalar


LayerForward = Callable[..., "torch.Tensor | None"]  # layer_forward, or a compiled copy of it


def _run_layer(
    weights: EngineWeights,
    layer_fn: LayerForward,
    layer: Layer,
    index: int,
    x: torch.Tensor,
    kv: KVBuffers,
    write_at: torch.Tensor,
    ropes: Ropes,
    spans: dict[str, KeySpan],
    masks: Masks,
    kernel: str,
    keys_only: bool = False,
) -> torch.Tensor | None:
    cos, sin = ropes[layer.kind]
    span = spans[layer.kind]
    return layer_fn(
        layer,
        x,
        kv.keys[index],
        kv.values[index],
        write_at,
        cos,
        sin,
        span.lo,
        span.hi,
        masks[layer.kind],
        weights.eps,
        weights.activation,
        weights.top_k,
        kernel,
        keys_only,
    )


def _ropes(weights: EngineWeights, positions: torch.Tensor, dtype: torch.dtype) -> Ropes:
    return {kind: rope_tables(table, positions, dtype) for kind, table in weights.rope.items()}


def _folded(weights: EngineWeights, visible: Masks, dtype: torch.dtype) -> Masks:
    """Each kind's mask folded for its layers' query groups (the same for every layer of a kind)."""
    groups = {layer.kind: layer.groups for layer in weights.decoder}
    return {kind: fold_mask(mask, groups[kind], dtype) for kind, mask in visible.items() if kind in groups}


def encode(
    weights: EngineWeights,
    kv: KVBuffers,
    tokens: torch.Tensor,
    start: torch.Tensor | int,
    spans: dict[str, KeySpan],
    kernel: str,
    layer_fn: LayerForward = layer_forward,
) -> None:
    """Write the keys and values of `tokens` (T,) at positions start.. into `kv`. Tokens after the real ones may be
    padding (a fixed-size graph): causal attention keeps them out of every real token's sight."""
    positions = start + torch.arange(tokens.shape[0], device=tokens.device)
    x = F.embedding(tokens, weights.encoder_embed) * weights.embed_scale
    ropes = _ropes(weights, positions, x.dtype)
    masks = _folded(weights, encoder_masks(weights, spans, positions), x.dtype)
    last = len(weights.encoder) - 1
    for i, layer in enumerate(weights.encoder):
        out = _run_layer(weights, layer_fn, layer, i, x, kv, positions, ropes, spans, masks, kernel, i == last)
        if out is not None:  # the last layer writes its keys and values, and nothing else
            x = out


def self_conditioned(weights: EngineWeights, tokens: torch.Tensor, soft: torch.Tensor) -> torch.Tensor:
    """The decoder's input: token embeddings plus the self-conditioning MLP of `soft` (the previous step's
    probability-weighted embeddings; zeros on the first step), normed without a scale."""
    pre_norm, gate, up, down = weights.self_conditioning
    x = F.embedding(tokens, weights.embed) * weights.embed_scale
    normed = rms_norm(soft, pre_norm, weights.eps)
    signal = linear(activation(weights.activation)(linear(normed, gate)) * linear(normed, up), down)
    return rms_norm(x + signal, None, weights.eps)


def decode_masks(
    weights: EngineWeights, spans: dict[str, KeySpan], prompt_length: torch.Tensor | int, valid: torch.Tensor
) -> Masks:
    """The attention masks of a canvas (`canvas_masks`, folded): the same for every step of one fill."""
    return _folded(weights, canvas_masks(weights, spans, prompt_length, valid), weights.dtype)


def decode(
    weights: EngineWeights,
    kv: KVBuffers,
    tokens: torch.Tensor,
    soft: torch.Tensor,
    prompt_length: torch.Tensor | int,
    valid: torch.Tensor,
    spans: dict[str, KeySpan],
    kernel: str,
    layer_fn: LayerForward = layer_forward,
    masks: Masks | None = None,
) -> torch.Tensor:
    """Raw LM-head logits (R, W, V) float32 for canvas rows `tokens` (R, W) after a prompt of `prompt_length`
    tokens; `valid` (R, W) marks real slots (padding is neither seen nor scored). `masks`: `decode_masks` of the
    same arguments, when the caller keeps them across steps."""
    rows, width = tokens.shape
    x = self_conditioned(weights, tokens, soft).reshape(rows * width, -1)
    offsets = torch.arange(width, device=tokens.device)
    ropes = _ropes(weights, (prompt_length + offsets).repeat(rows), x.dtype)
    write_at = prompt_length + torch.arange(rows * width, device=tokens.device)
    masks = masks if masks is not None else decode_masks(weights, spans, prompt_length, valid)
    for i, layer in enumerate(weights.decoder):
        # a layer returns nothing only when asked for its keys and values alone (keys_only), never here
        x = cast(torch.Tensor, _run_layer(weights, layer_fn, layer, i, x, kv, write_at, ropes, spans, masks, kernel))
    hidden = rms_norm(x, weights.final_norm, weights.eps)
    return F.linear(hidden, weights.head).float().view(rows, width, -1)


def soft_embeddings(
    probs: torch.Tensor,
    embed: torch.Tensor,
    embed_scale: torch.Tensor,
    clamp_embeddings: torch.Tensor,
    free: torch.Tensor,
) -> torch.Tensor:
    """The next step's self-conditioning input: softmax(previous logits) @ embeddings (`embed`, the decoder's
    table) x sqrt(H) (`embed_scale`), as transformers' decoder computes it, with clamped slots one-hot (their own
    embedding). Pure tensor math (the compiled step, denoise.sample_step)."""
    soft = torch.matmul(probs.to(embed.dtype), embed) * embed_scale
    return torch.where(free[..., None], soft, clamp_embeddings)


def embed(weights: EngineWeights, tokens: torch.Tensor) -> torch.Tensor:
    """The decoder's scaled embeddings of `tokens`."""
    return F.embedding(tokens, weights.embed) * weights.embed_scale
