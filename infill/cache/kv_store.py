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
