"""Full-history prefix KV caches kept per document, reused across keystrokes.

The stock `DynamicCache(config)` keeps only the last `sliding_window - 1` tokens in sliding layers and cannot crop
back past them, so an edit could never roll it back. This store keeps full-history caches (`DynamicCache()` without
a config: every layer holds every token), crops them to the longest common token prefix with the new prompt, and
lets the engine encode only the new tail. Memory is bounded in bytes; least recently used entries go first.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass

import torch
from transformers import DynamicCache

log = logging.getLogger(__name__)


@dataclass
class _Entry:
    ids: torch.Tensor  # (n,) int64 on CPU: the prompt the cache holds
    cache: DynamicCache
    nbytes: int


def cache_nbytes(cache: DynamicCache) -> int:
    total = 0
    for layer in cache.layers:
        for t in (getattr(layer, "keys", None), getattr(layer, "values", None)):
            if isinstance(t, torch.Tensor):
                total += t.numel() * t.element_size()
    return total


def common_prefix_length(a: torch.Tensor, b: torch.Tensor) -> int:
    n = min(a.numel(), b.numel())
    if n == 0:
        return 0
    differ = torch.nonzero(a[:n] != b[:n])
    return int(differ[0, 0]) if differ.numel() else n


class PrefixKVStore:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._warned: set[str] = set()  # keys whose prompt was too large to keep (logged once)

    @property
    def nbytes(self) -> int:
        return sum(e.nbytes for e in self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    def take(self, key: str, ids: torch.Tensor) -> tuple[DynamicCache, int]:
        """Remove and return the cache for `key` cropped to its common prefix with `ids`, and that prefix length.
        The caller owns the cache until it `put`s it back (so a failure mid-request can never leave a half-written
        cache in the store)."""
        entry = self._entries.pop(key, None)
        if entry is None:
            return DynamicCache(), 0
        keep = common_prefix_length(entry.ids, ids)
        drop = entry.ids.numel() - keep
        if keep == 0:
            return DynamicCache(), 0
        if drop:
            entry.cache.crop(-drop)
        return entry.cache, keep

    def put(self, key: str, ids: torch.Tensor, cache: DynamicCache) -> None:
        entry = _Entry(ids.detach().to("cpu", torch.long), cache, cache_nbytes(cache))
        self._entries.pop(key, None)
        if entry.nbytes > self.max_bytes:
            if key not in self._warned:  # once per document: it happens on every keystroke
                self._warned.add(key)
                log.warning("prompt cache for %s not kept: %d tokens need %.0f MiB, over kv_store_bytes (%.0f MiB); "
                            "every request re-encodes the whole prompt", key, entry.ids.numel(),
                            entry.nbytes / 2**20, self.max_bytes / 2**20)
            return
        self._entries[key] = entry
        while self.nbytes > self.max_bytes:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        self._entries.clear()
