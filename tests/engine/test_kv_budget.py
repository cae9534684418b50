"""The prompt's keys and values are sized from the model and the device, so that a long prompt of the real 26B-A4B
architecture stays in the live buffers across keystrokes and other documents' prompts wait beside them. No GPU
here: the CUDA branch reads a mocked `mem_get_info` (said where), and the full-size buffers are meta tensors (real
shapes and byte counts, no memory)."""

from __future__ import annotations

import torch
from transformers import DiffusionGemmaForBlockDiffusion, DynamicCache

from infill.engine.config import EngineConfig
from infill.engine.diffusion import DiffusionEngine
from infill.engine.kv import CUDA_FREE_SHARE, MIN_STASH_BYTES, KVBuffers, PromptCache, kv_bytes_per_token, stash_budget
from infill.testing.full_size import FULL_SIZE_TEXT, full_size_config, kv_shapes
from infill.testing.hf_reference import engine_weights, hf_encode

PROMPT = 8192


def real_geometry_small_model(layers: int):
    """The full-size config's attention (8 KV heads x 256 in sliding layers, 2 x 512 with K=V in full ones) with
    everything else small, so a real encode is cheap."""
    config = full_size_config(layers)
    small = {"hidden_size": 64, "intermediate_size": 128, "vocab_size": 512, "num_experts": 4, "top_k_experts": 2}
    for name, value in {**small, "moe_intermediate_size": 32}.items():
        setattr(config.text_config, name, value)
    torch.manual_seed(0)
    return DiffusionGemmaForBlockDiffusion(config).eval()


def test_bytes_per_token_match_transformers_own_cache():
    model = real_geometry_small_model(6)  # five sliding layers and one full one, as the real pattern starts
    cache = DynamicCache()
    with torch.inference_mode():
        hf_encode(model, torch.arange(3, 43), cache, 0)
    held = sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))
    shapes = kv_shapes(model.config.text_config)
    assert shapes == engine_weights(model).kv_shapes()
    assert held == 40 * kv_bytes_per_token(shapes, torch.float32)
    assert KVBuffers(shapes, 40, torch.float32, "cpu").nbytes == held


def test_the_real_config_takes_220_kib_a_token():
    per_token = kv_bytes_per_token(kv_shapes(full_size_config().text_config), torch.bfloat16)
    t = FULL_SIZE_TEXT
    sliding = 2 * t["num_key_value_heads"] * t["head_dim"] * 2  # K and V, bf16
    full = 2 * t["num_global_key_value_heads"] * t["global_head_dim"] * 2
    assert per_token == 25 * sliding + 5 * full == 220 * 1024


def test_an_8k_prompt_of_the_real_config_stays_held_across_200_keystrokes_and_a_document_switch():
    """Real-size buffers (meta tensors): 200 keystrokes at the end of an 8,192-token prompt (each edits the last
    token and types one more) each keep all but the edited tail; another document takes the buffers and the first
    one, stashed beside them, comes back whole."""
    shapes = kv_shapes(full_size_config().text_config)
    buffers = KVBuffers(shapes, PROMPT + 256 + 1280, torch.bfloat16, "meta")
    per_token = buffers.bytes_per_token()
    budget = stash_budget(per_token, "cpu", PROMPT + 256)
    assert budget >= (PROMPT + 256) * per_token
    cache = PromptCache(buffers, budget)
    ids = torch.randint(3, 262_144, (PROMPT,), generator=torch.Generator().manual_seed(0))
    assert cache.claim("doc", ids) == 0
    cache.extend(ids, ids.numel())
    for key in range(200):
        typed = torch.cat([ids[:-1], torch.tensor([1000 + key, 2000 + key])])  # edit the last token, add one
        assert cache.claim("doc", typed) == ids.numel() - 1  # only the edited token and the new one are encoded
        cache.extend(typed, typed.numel())
        ids = typed
    assert buffers.length == PROMPT + 200 and cache.owner == "doc" and torch.equal(cache.ids, ids)
    other = torch.arange(3, 1003)
    assert cache.claim("other", other) == 0
    cache.extend(other, other.numel())
    assert cache.stashed_bytes == (PROMPT + 200) * per_token and len(cache) == 2
    assert cache.claim("doc", ids) == ids.numel()  # copied back, nothing to encode
    assert torch.equal(cache._stash["other"].ids, other)  # and the other one now waits beside it


def test_cuda_takes_a_share_of_free_memory(monkeypatch):
    # A GPU cannot exist here: torch.cuda.mem_get_info is mocked to report 80 GiB free.
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (80 * 2**30, 141 * 2**30))
    per_token = kv_bytes_per_token(kv_shapes(full_size_config().text_config), torch.bfloat16)
    budget = stash_budget(per_token, "cuda:0", PROMPT)
    assert budget == int(80 * 2**30 * CUDA_FREE_SHARE)
    assert budget // per_token > 20 * PROMPT  # some 20 documents' 8k prompts


def test_tiny_models_keep_at_least_the_floor_and_explicit_settings_win(tiny_engine):
    engine = DiffusionEngine(tiny_engine.loaded)
    per_token = engine.runner.kv.bytes_per_token()
    assert engine.prompts.stash_bytes == max(MIN_STASH_BYTES, 4 * engine.max_prompt * per_token)
    assert engine.versions()["kv_store_bytes"] == engine.prompts.stash_bytes
    assert DiffusionEngine(tiny_engine.loaded, EngineConfig(kv_store_bytes=2**20)).prompts.stash_bytes == 2**20


def test_a_budget_below_one_prompt_is_said(caplog):
    with caplog.at_level("WARNING", logger="infill.engine.kv"):
        stash_budget(10**9, "cpu", PROMPT)  # a token of 1 GB: nothing fits in a share of RAM
    assert "fewer than one full prompt" in caplog.text
