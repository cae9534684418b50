"""The offline default's attention (infill/backends/attention.py) against torch's scaled_dot_product_attention, and
a real Gemma 3 model's forwards with it: decoding over a cache with a sliding window, drafts, and a prefill."""

from __future__ import annotations

import pytest
import torch

from infill.backends import attention


class _Layer:
    num_key_value_groups = 4


def _reference(query, key, value, mask):
    groups = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
    out = torch.nn.functional.scaled_dot_product_attention(query.float(), key.float(), value.float(),
                                                           attn_mask=mask, scale=0.0625)
    return out.transpose(1, 2)


@pytest.mark.parametrize("rows,length,window", [(1, 40, None), (3, 40, None), (3, 40, 16), (24, 24, None),
                                                 (24, 64, 32)])
def test_it_computes_what_sdpa_computes(rows, length, window):
    torch.manual_seed(rows * 100 + length)
    query = torch.randn(1, 4, rows, 64).to(torch.bfloat16)
    key, value = (torch.randn(1, 1, length, 64).to(torch.bfloat16) for _ in range(2))
    positions = torch.arange(length - rows, length)[:, None]  # the new rows are the last positions
    keys = torch.arange(length)[None, :]
    mask = keys <= positions
    if window is not None:
        mask &= keys > positions - window
    mask = mask[None, None]
    # transformers leaves the mask out when it is plain causal over a prompt without a cache (or one row)
    given = None if window is None and (rows == 1 or rows == length) else mask
    out, weights = attention.grouped_query_attention(_Layer(), query, key, value, given, scaling=0.0625)
    assert weights is None and out.shape == (1, rows, 4, 64) and out.dtype == torch.bfloat16
    want = _reference(query, key, value, mask)
    assert torch.allclose(out.float(), want, atol=2e-2, rtol=2e-2), (out.float() - want).abs().max()


def test_a_gemma3_model_gives_sdpa_s_predictions_through_a_cache():
    from transformers import DynamicCache, Gemma3ForCausalLM, Gemma3TextConfig

    config = Gemma3TextConfig(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=4,
                              num_attention_heads=4, num_key_value_heads=1, head_dim=64, sliding_window=16)
    torch.manual_seed(2)
    model = Gemma3ForCausalLM(config).to(torch.bfloat16).eval()
    ids = torch.randint(0, 512, (1, 48))

    def forwards(implementation):
        model.config._attn_implementation = implementation
        for layer in model.model.layers:
            layer.self_attn.config._attn_implementation = implementation
        cache = DynamicCache()  # full history, as the prefix-KV store keeps it: the window is masked, not cut
        with torch.inference_mode():
            parts = [model(input_ids=ids[:, :30], cache=cache, use_cache=True).logits]
            for start, stop in ((30, 31), (31, 35), (35, 48)):  # a token, drafts, a chunk past the window
                parts.append(model(input_ids=ids[:, start:stop], cache=cache, use_cache=True).logits)
        return torch.cat(parts, dim=1).float()

    mine = forwards(attention.register())
    theirs = forwards("sdpa")
    assert (mine.argmax(-1) == theirs.argmax(-1)).all()
    assert torch.allclose(mine, theirs, atol=5e-2, rtol=5e-2), (mine - theirs).abs().max()


def test_the_offline_default_loads_with_it(ar_backend):
    assert ar_backend._model.config._attn_implementation == attention.NAME
