"""Full-history prefix KV caches kept per document, reused across keystrokes.

The stock `DynamicCache(config)` keeps only the last `sliding_window - 1` tokens in sliding layers and cannot crop
back past them, so an edit could never roll it back. This store keeps full-history caches (`DynamicCache()` without
a config: every layer holds every token), crops them to the longest common token prefix with the new prompt, and
lets the engine encode only the new tail. Memory is bounded in bytes; least recently used entries go first.
The DiffusionGemma engine keeps its prompts here (the offline default keeps its own in llama.cpp's sequences,
infill/backends/offline/sequences.py). A caller `take`s a document's cache (it then owns and mutates it) and `put`s
it back with the ids it then holds, so a request that fails half-way never leaves a half-written cache in the store.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache

log = logging.getLogger(__name__)


@dataclass
class _Entry:
    ids: torch.Tensor  # (n,) int64 on CPU: the prompt the cache holds
    cache: DynamicCache
    nbytes: int
    anchor: str  # where the prompt fitter cut the text last time (infill/cache/tokens.fit_prompt)


def cache_nbytes(cache: DynamicCache) -> int:
    total = 0
    for layer in cache.layers:
        for t in (getattr(layer, "keys", None), getattr(layer, "values", None)):
            if isinstance(t, torch.Tensor):
                total += t.numel() * t.element_size()
    return total


def kv_bytes_per_token(text_config, dtype: torch.dtype) -> int:
    """Bytes one prompt token takes in a full-history cache: keys and values of every layer (sliding layers keep
    every token here, so that an edit can roll back; layers whose V comes from K still cache both)."""
    per_layer = getattr(text_config, "per_layer_config", None)
    layers = [per_layer[i] if per_layer is not None else text_config for i in range(text_config.num_hidden_layers)]
    element = torch.empty((), dtype=dtype).element_size()
    return sum(2 * layer.num_key_value_heads * layer.head_dim * element for layer in layers)


CUDA_FREE_SHARE = 0.5  # of the memory free once the model is loaded; the rest is for activations (262k-wide logits)
CPU_RAM_SHARE = 0.25  # of physical memory, at most
CPU_PROMPTS = 4  # full-length prompts the CPU store makes room for (documents open at once)
MIN_STORE_BYTES = 512 * 2**20


def physical_memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def store_budget(per_token: int, device: torch.device | str, max_prompt_tokens: int) -> int:
    """The prefix-KV store's byte bound for a model whose prompt tokens take `per_token` bytes each. CUDA: a
    share of the device memory free now (call it after loading the model). CPU: room for a few full-length
    prompts, at least 512 MiB, at most a share of physical memory."""
    device = torch.device(device)
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        budget = int(free * CUDA_FREE_SHARE)
    else:
        wanted = max(MIN_STORE_BYTES, CPU_PROMPTS * max_prompt_tokens * per_token)
        budget = min(wanted, int(physical_memory_bytes() * CPU_RAM_SHARE))
    if budget < max_prompt_tokens * per_token:
        log.warning("the prompt cache holds %d tokens (%.0f MiB at %d bytes a token), fewer than one full prompt "
                    "(%d): longer prompts are re-encoded on every request; set kv_store_bytes to change it",
                    budget // max(per_token, 1), budget / 2**20, per_token, max_prompt_tokens)
    return budget


def common_prefix_length(a: torch.Tensor, b: torch.Tensor) -> int:
    n = min(a.numel(), b.numel())
    if n == 0:
        return 0
    differ = torch.nonzero(a[:n] != b[:n])
    return int(differ[0, 0]) if differ.numel() else n


def _as_ids(ids: torch.Tensor | Sequence[int]) -> torch.Tensor:
    if isinstance(ids, torch.Tensor):
        return ids.detach().to("cpu", torch.long)
    return torch.tensor(list(ids), dtype=torch.long)


class PrefixKVStore:
    """document key → the KV cache of its last prompt, least recently used evicted beyond `max_bytes`."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str | None, _Entry] = OrderedDict()
        self._warned: set[str | None] = set()  # keys whose prompt was too large to keep (logged once)
        self._lock = threading.Lock()  # guards the dict only; a taken cache belongs to its caller

    @property
    def nbytes(self) -> int:
        with self._lock:
            return sum(e.nbytes for e in self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    def anchor(self, key: str | None) -> str:
        """The prompt start kept for `key` last time ("" when none), for the prompt fitter to keep it."""
        with self._lock:
            entry = self._entries.get(key)
        return entry.anchor if entry is not None else ""

    def reusable(self, key: str | None, ids: torch.Tensor | Sequence[int]) -> int:
        """How many leading tokens of `ids` the cache kept for `key` holds (it stays in the store)."""
        with self._lock:
            entry = self._entries.get(key)
            held = entry.ids if entry is not None else None
        return 0 if held is None else common_prefix_length(held, _as_ids(ids))

    def take(self, key: str | None, ids: torch.Tensor | Sequence[int],
             max_keep: int | None = None) -> tuple[DynamicCache, int]:
        """Remove and return the cache for `key` cropped to its common prefix with `ids` (at most `max_keep`
        tokens), and that prefix length; an empty cache and 0 when nothing is reusable."""
        with self._lock:
            entry = self._entries.pop(key, None)
        if entry is None:
            return DynamicCache(), 0
        keep = common_prefix_length(entry.ids, _as_ids(ids))
        if max_keep is not None:
            keep = min(keep, max_keep)
        if keep <= 0:
            return DynamicCache(), 0
        drop = entry.ids.numel() - keep
        if drop:
            entry.cache.crop(-drop)
        return entry.cache, keep

    def put(self, key: str | None, ids: torch.Tensor | Sequence[int], cache: DynamicCache,
            anchor: str = "") -> None:
        """Keep `cache`, which holds exactly the keys/values of `ids`, for `key`."""
        entry = _Entry(_as_ids(ids), cache, cache_nbytes(cache), anchor)
        with self._lock:
            self._entries.pop(key, None)
            if entry.nbytes > self.max_bytes:
                if key not in self._warned:  # once per document: it happens on every keystroke
                    self._warned.add(key)
                    log.warning("prompt cache for %s not kept: %d tokens need %.0f MiB, over kv_store_bytes "
                                "(%.0f MiB); every request re-encodes the whole prompt", key, entry.ids.numel(),
                                entry.nbytes / 2**20, self.max_bytes / 2**20)
                return
            self._entries[key] = entry
            while sum(e.nbytes for e in self._entries.values()) > self.max_bytes:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
