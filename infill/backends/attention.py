"""Grouped-query attention for the offline default's forwards on a CPU, as two matmuls per layer.

Gemma 3 270M has 4 query heads over 1 key/value head. For a decoding forward (1 to 4 new tokens), torch's
scaled_dot_product_attention spends most of its time outside arithmetic: on one query row, transformers packs the
heads and calls the flash kernel, 0.36 ms per layer over 400 cached tokens and 0.87 ms over 1,000 (6-16 ms of a
~40 ms forward). Here the query heads that share a key/value head are stacked into rows of one matrix, so attention
is one matmul against the keys and one against the values: 0.12 and 0.17 ms for the same layers, and no slower for a
prefill chunk (256 rows over 512 keys: 2.9 ms against 3.3).

Scores are computed in float32 (as the flash kernel accumulates them) and the softmax too; its probabilities are
rounded to the values' dtype for the second matmul, as the flash kernel does, except on a CPU without native bf16,
where that matmul would be emulated (0.8 s of a 256-token prefill of bf16 Gemma 3 270M held to AVX2) and runs in
float32 instead. The mask is transformers' boolean sdpa mask (causal, sliding window); where transformers leaves it
out (a causal prompt without a cache), it is built here.
"""

from __future__ import annotations

from infill.device import cpu_supports_bf16

NAME = "infill_gqa"


def grouped_query_attention(module, query, key, value, attention_mask, scaling=None, dropout: float = 0.0,
                            **kwargs):
    """query (b, heads, q, d), key/value (b, kv_heads, s, d) -> (b, q, heads, d), None."""
    import torch

    batch, heads, rows, dim = query.shape
    kv_heads, length = key.shape[1], key.shape[2]
    group = heads // kv_heads  # query heads h*group .. h*group+group-1 read key/value head h
    scale = dim ** -0.5 if scaling is None else scaling
    stacked = query.reshape(batch, kv_heads, group * rows, dim).float()
    scores = torch.matmul(stacked, key.float().transpose(-1, -2)).mul_(scale)
    softcap = kwargs.get("softcap")
    if softcap is not None:
        scores = torch.tanh(scores / softcap).mul_(softcap)
    scores = scores.view(batch, kv_heads, group, rows, length)
    if attention_mask is not None and rows == 1 and attention_mask.dtype == torch.bool \
            and bool(attention_mask[..., -1:, -length:].all()):
        attention_mask = None  # one new token that sees every key (most decoding steps): masking would change nothing
    if attention_mask is not None:
        mask = attention_mask[..., -rows:, -length:].unsqueeze(2)  # (b, 1, 1, q, s) over the stacked heads
        scores = (scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool
                  else scores + mask.float())
    elif rows > 1:  # the new rows are the last `rows` positions of the keys
        causal = torch.ones(rows, length, dtype=torch.bool, device=scores.device).tril(length - rows)
        scores = scores.masked_fill(~causal, float("-inf"))
    probs = torch.softmax(scores, dim=-1).view(batch, kv_heads, group * rows, length)
    if value.dtype == torch.bfloat16 and value.device.type == "cpu" and not cpu_supports_bf16():
        out = torch.matmul(probs, value.float()).to(value.dtype)  # emulated bf16 matmuls are slow (AVX2)
    else:
        out = torch.matmul(probs.to(value.dtype), value)
    out = out.view(batch, heads, rows, dim)
    return out.transpose(1, 2).contiguous(), None


def register() -> str:
    """Make NAME a transformers attention implementation (with the sdpa boolean masks); returns NAME."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NAME, grouped_query_attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    return NAME
