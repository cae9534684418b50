"""Prompt keys and values: the live buffers the forward reads in place, and the documents kept beside them.

`KVBuffers`: per layer, keys and values of one prompt, preallocated once (`capacity` tokens: the longest prompt
plus the widest canvas or encode pad written after it), so a step never allocates or concatenates, and a CUDA
graph can read them at a fixed address. Its valid length is a host integer and, for graphs, a device tensor.

`PromptCache`: which document the buffers hold, and the other documents' prompts stashed beside them (copied out
when another document takes the buffers, copied back when it returns: a device-to-device copy, not a re-encode),
least recently used evicted beyond `stash_bytes`. Every layer keeps every token (sliding layers too), so an edit
rolls back to the common prefix by shortening the length; nothing is cropped or copied for a keystroke.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import torch

log = logging.getLogger(__name__)


class KVBuffers:
    def __init__(
        self, shapes: Sequence[tuple[int, int]], capacity: int, dtype: torch.dtype, device: torch.device | str
    ) -> None:
        self.capacity = capacity
        self.keys = [torch.zeros(heads, capacity, dim, dtype=dtype, device=device) for heads, dim in shapes]
        self.values = [torch.zeros(heads, capacity, dim, dtype=dtype, device=device) for heads, dim in shapes]
        self.length = 0
        self.length_tensor = torch.zeros((), dtype=torch.long, device=device)  # read by replayed graphs

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.keys + self.values)

    def bytes_per_token(self) -> int:
        return self.nbytes // self.capacity

    def set_length(self, length: int) -> None:
        if not 0 <= length <= self.capacity:
            raise ValueError(f"a prompt of {length} tokens does not fit buffers of {self.capacity}")
        self.length = length
        self.length_tensor.fill_(length)


def common_prefix_length(a: torch.Tensor, b: torch.Tensor) -> int:
    n = min(a.numel(), b.numel())
    if n == 0:
        return 0
    differ = torch.nonzero(a[:n] != b[:n])
    return int(differ[0, 0]) if differ.numel() else n


def as_ids(ids: torch.Tensor | Sequence[int]) -> torch.Tensor:
    if isinstance(ids, torch.Tensor):
        return ids.detach().to("cpu", torch.long)
    return torch.tensor(list(ids), dtype=torch.long)


@dataclass
class _Stashed:
    ids: torch.Tensor  # (n,) on CPU
    keys: list[torch.Tensor]  # per layer (heads, n, dim), on the buffers' device
    values: list[torch.Tensor]
    nbytes: int


class PromptCache:
    """document key -> its prompt's keys and values: the live one in `buffers`, others stashed."""

    def __init__(self, buffers: KVBuffers, stash_bytes: int) -> None:
        self.buffers = buffers
        self.stash_bytes = stash_bytes
        self.owner: str | None = None  # the document whose prompt the buffers hold
        self.ids = torch.empty(0, dtype=torch.long)  # what they hold (length == buffers.length)
        self._stash: OrderedDict[str, _Stashed] = OrderedDict()
        self._warned: set[str] = set()  # documents too large to stash (said once)
        # document -> where its last prompt's text started (cache/tokens.py's anchor), so the next keystroke's
        # prompt starts there too and shares these keys and values; kept for the documents held here
        self._anchors: dict[str, str] = {}

    @property
    def stashed_bytes(self) -> int:
        return sum(entry.nbytes for entry in self._stash.values())

    def __len__(self) -> int:
        """Documents whose prompt is kept (the live one included)."""
        return len(self._stash) + (self.owner is not None and self.buffers.length > 0)

    def anchor(self, key: str) -> str:
        """Where `key`'s last prompt started (its first kept chunks; "" when it started at the text's start)."""
        return self._anchors.get(key, "")

    def set_anchor(self, key: str, anchor: str) -> None:
        self._anchors[key] = anchor

    def claim(self, key: str, ids: torch.Tensor | Sequence[int]) -> int:
        """Make the buffers hold the longest prefix of `ids` kept for `key` (stashing the document they held) and
        return its length: the tokens of `ids` that need no encoding."""
        ids = as_ids(ids)
        if key != self.owner:
            self._stash_owner()
            self.owner = key
            self.ids = torch.empty(0, dtype=torch.long)
            self.buffers.set_length(0)
            entry = self._stash.pop(key, None)
            if entry is not None:
                keep = common_prefix_length(entry.ids, ids)
                for buffer, part in zip(self.buffers.keys + self.buffers.values, entry.keys + entry.values):
                    buffer[:, :keep].copy_(part[:, :keep])
                self._hold(ids, keep)
            kept = set(self._stash) | {key}
            self._anchors = {k: a for k, a in self._anchors.items() if k in kept}
        keep = common_prefix_length(self.ids, ids)
        self._hold(ids, keep)
        return keep

    def extend(self, ids: torch.Tensor | Sequence[int], length: int) -> None:
        """The buffers now hold `ids[:length]` for the current owner (after an encode)."""
        self._hold(as_ids(ids), length)

    def _hold(self, ids: torch.Tensor, length: int) -> None:
        self.ids = ids[:length].clone()
        self.buffers.set_length(length)

    def _stash_owner(self) -> None:
        if self.owner is None or self.buffers.length == 0:
            return
        n = self.buffers.length
        nbytes = n * self.buffers.bytes_per_token()
        if nbytes > self.stash_bytes:
            if self.owner not in self._warned:
                self._warned.add(self.owner)
                log.warning(
                    "prompt cache for %s not kept when another document took the buffers: %d tokens need "
                    "%.0f MiB, over kv_store_bytes (%.0f MiB); it is encoded again when it returns",
                    self.owner,
                    n,
                    nbytes / 2**20,
                    self.stash_bytes / 2**20,
                )
            return
        self._stash[self.owner] = _Stashed(
            self.ids.clone(),
            [k[:, :n].clone() for k in self.buffers.keys],
            [v[:, :n].clone() for v in self.buffers.values],
            nbytes,
        )
        while self.stashed_bytes > self.stash_bytes:
            self._stash.popitem(last=False)

    def forget(self, key: str) -> None:
        self._stash.pop(key, None)
        self._anchors.pop(key, None)
        if key == self.owner:
            self.owner = None
            self._hold(torch.empty(0, dtype=torch.long), 0)

    def clear(self) -> None:
        self._stash.clear()
        self._anchors.clear()
        self.owner = None
        self._hold(torch.empty(0, dtype=torch.long), 0)


def kv_bytes_per_token(shapes: Sequence[tuple[int, int]], dtype: torch.dtype) -> int:
    """Bytes one prompt token takes in the buffers: keys and values of every layer ((kv heads, head dim) each)."""
    element = torch.empty((), dtype=dtype).element_size()
    return sum(2 * heads * dim * element for heads, dim in shapes)


CUDA_FREE_SHARE = 0.5  # of the memory free once the model and buffers are in place; the rest is for activations
CPU_RAM_SHARE = 0.25  # of physical memory, at most
CPU_PROMPTS = 4  # full-length prompts the CPU stash makes room for (documents open at once)
MIN_STASH_BYTES = 512 * 2**20


def physical_memory_bytes() -> int:
    import os

    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def stash_budget(per_token: int, device: torch.device | str, max_prompt_tokens: int) -> int:
    """The byte bound on stashed documents when none is set. CUDA: a share of the device memory free now (call it
    once the model and buffers are allocated). CPU: room for a few full-length prompts, at least 512 MiB, at most
    a share of physical memory."""
    device = torch.device(device)
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        budget = int(free * CUDA_FREE_SHARE)
    else:
        wanted = max(MIN_STASH_BYTES, CPU_PROMPTS * max_prompt_tokens * per_token)
        budget = min(wanted, int(physical_memory_bytes() * CPU_RAM_SHARE))
    if budget < max_prompt_tokens * per_token:
        log.warning(
            "other documents' prompts are kept up to %d tokens (%.0f MiB at %d bytes a token), fewer than "
            "one full prompt (%d): a long document is encoded again when it returns; set kv_store_bytes to "
            "change it",
            budget // max(per_token, 1),
            budget / 2**20,
            per_token,
            max_prompt_tokens,
        )
    return budget
