"""The prefix-KV store is sized from the model and the device, so that a long prompt of the real 26B-A4B
architecture stays cached across keystrokes. No GPU here: the CUDA branch reads a mocked `mem_get_info` (said
where), and the full-size caches are meta tensors (real shapes and byte counts, no memory)."""

from __future__ import annotations

import pytest
import torch
from transformers import DiffusionGemmaForBlockDiffusion, DynamicCache

from infill.cache.kv_store import (CUDA_FREE_SHARE, MIN_STORE_BYTES, PrefixKVStore, cache_nbytes,
                                   kv_bytes_per_token, store_budget)
from infill.engine.config import EngineConfig
from infill.engine.diffusion import DiffusionEngine
from infill.engine.model import encode
from infill.testing.full_size import FULL_SIZE_TEXT, full_size_config

PROMPT = 8192


def real_geometry_small_model(layers: int):
    """The full-size config's attention (8 KV heads x 256 in sliding layers, 2 x 512 with K=V in full ones) with
    everything else small, so a real encode is cheap."""
    config = full_size_config(layers)
    for name, value in dict(hidden_size=64, intermediate_size=128, vocab_size=512, num_experts=4, top_k_experts=2,
                            moe_intermediate_size=32).items():
        setattr(config.text_config, name, value)
    torch.manual_seed(0)
    return DiffusionGemmaForBlockDiffusion(config).eval()


def test_bytes_per_token_match_a_real_cache():
    model = real_geometry_small_model(6)  # five sliding layers and one full one, as the real pattern starts
    cache = DynamicCache()
    with torch.inference_mode():
        encode(model, torch.arange(3, 43), cache, 0)
    assert cache_nbytes(cache) == 40 * kv_bytes_per_token(model.config.text_config, torch.float32)


def test_the_real_config_takes_220_kib_a_token():
    per_token = kv_bytes_per_token(full_size_config().text_config, torch.bfloat16)
    t = FULL_SIZE_TEXT
    sliding = 2 * t["num_key_value_heads"] * t["head_dim"] * 2  # K and V, bf16
    full = 2 * t["num_global_key_value_heads"] * t["global_head_dim"] * 2
    assert per_token == 25 * sliding + 5 * full == 220 * 1024
    assert PROMPT * per_token > 512 * 2**20  # the old fixed 512 MiB could not keep one 8k prompt


def meta_cache(per_layer: list[tuple[int, int]], tokens: int) -> DynamicCache:
    """A full-history cache of `tokens` tokens with the given (kv heads, head dim) per layer, as meta tensors."""
    cache = DynamicCache()
    for heads, dim in per_layer:
        cache.layers.append(_layer(heads, dim, tokens))
    return cache


def _layer(heads: int, dim: int, tokens: int):
    from transformers.cache_utils import DynamicLayer

    layer = DynamicLayer()
    keys = torch.empty(1, heads, tokens, dim, dtype=torch.bfloat16, device="meta")
    layer.lazy_initialization(keys, keys)
    layer.keys, layer.values = keys, keys.clone()
    return layer


def append_tokens(cache: DynamicCache, per_layer: list[tuple[int, int]], tokens: int) -> None:
    for i, (heads, dim) in enumerate(per_layer):
        new = torch.empty(1, heads, tokens, dim, dtype=torch.bfloat16, device="meta")
        cache.layers[i].update(new, new.clone())


def test_an_8k_prompt_of_the_real_config_stays_cached_across_200_keystrokes():
    """The CPU budget for the real config keeps an 8,192-token prompt; 200 keystrokes at its end (each edits the
    last token and types one more) each reuse all but the edited tail, and the store keeps the grown prompt."""
    text = full_size_config().text_config
    per_layer = [(text.per_layer_config[i].num_key_value_heads, text.per_layer_config[i].head_dim)
                 for i in range(text.num_hidden_layers)]
    per_token = kv_bytes_per_token(text, torch.bfloat16)
    budget = store_budget(per_token, "cpu", PROMPT + 256)
    assert budget >= (PROMPT + 256) * per_token
    store = PrefixKVStore(budget)
    ids = torch.randint(3, 262_144, (PROMPT,), generator=torch.Generator().manual_seed(0))
    store.put("doc", ids, meta_cache(per_layer, PROMPT))
    assert store.nbytes == PROMPT * per_token and len(store) == 1
    for key in range(200):
        typed = torch.cat([ids[:-1], torch.tensor([1000 + key, 2000 + key])])  # edit the last token, add one
        cache, reused = store.take("doc", typed)
        assert reused == ids.numel() - 1  # only the edited token and the new one are encoded
        append_tokens(cache, per_layer, typed.numel() - reused)
        store.put("doc", typed, cache)
        ids = typed
        assert len(store) == 1 and store.reusable("doc", ids) == ids.numel()
    assert store.nbytes == (PROMPT + 200) * per_token


def test_cuda_takes_a_share_of_free_memory(monkeypatch):
    # A GPU cannot exist here: torch.cuda.mem_get_info is mocked to report 80 GiB free.
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (80 * 2**30, 141 * 2**30))
    per_token = kv_bytes_per_token(full_size_config().text_config, torch.bfloat16)
    budget = store_budget(per_token, "cuda:0", PROMPT)
    assert budget == int(80 * 2**30 * CUDA_FREE_SHARE)
    assert budget // per_token > 20 * PROMPT  # some 20 documents' 8k prompts


def test_tiny_models_keep_at_least_the_old_bound_and_explicit_settings_win(tiny_engine, caplog):
    engine = DiffusionEngine(tiny_engine.loaded)
    assert engine.store.max_bytes == max(MIN_STORE_BYTES, 4 * engine.max_prompt * engine.kv_bytes_per_token)
    assert engine.versions()["kv_store_bytes"] == engine.store.max_bytes
    assert DiffusionEngine(tiny_engine.loaded, EngineConfig(kv_store_bytes=2**20)).store.max_bytes == 2**20


def test_a_budget_below_one_prompt_is_said(caplog):
    with caplog.at_level("WARNING", logger="infill.cache.kv_store"):
        store_budget(10**9, "cpu", PROMPT)  # a token of 1 GB: nothing fits in a share of RAM
    assert "fewer than one full prompt" in caplog.text
