"""Which document's prompt each llama.cpp KV sequence holds, reused across keystrokes.

The offline default keeps a sequence per recently used document in one llama.cpp context
(infill/backends/offline/runtime.py). A request `take`s its document's sequence cut back to the longest common
token prefix with its new prompt, feeds the rest, and `put`s it back with the ids it then holds. A document that has
none gets a free sequence or the least recently used one, emptied. A request that fails half-way `drop`s what it
took instead, so a half-written sequence is never reused. A document the editor closes is `forget`ten: its sequence
is emptied and freed at once.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


class Cuttable(Protocol):
    def cut(self, seq: int, keep: int) -> None: ...


@dataclass
class _Held:
    seq: int
    ids: list[int]  # the prompt the sequence holds
    anchor: str  # where the prompt fitter cut the text last time (infill/cache/tokens.fit_prompt)


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


class DocumentSequences:
    """document key -> the llama.cpp sequence holding its last prompt; the least recently used goes first."""

    def __init__(self, runtime: Cuttable, sequences: int) -> None:
        self._runtime = runtime
        self._held: OrderedDict[str | None, _Held] = OrderedDict()
        self._free = list(range(sequences))

    def __len__(self) -> int:
        return len(self._held)

    def __contains__(self, key: str | None) -> bool:
        return key in self._held

    def anchor(self, key: str | None) -> str:
        held = self._held.get(key)
        return held.anchor if held is not None else ""

    def reusable(self, key: str | None, ids: Sequence[int]) -> int:
        """How many leading tokens of `ids` the sequence of `key` holds."""
        held = self._held.get(key)
        return 0 if held is None else common_prefix_length(held.ids, ids)

    def take(self, key: str | None, ids: Sequence[int], max_keep: int | None = None) -> tuple[int, int]:
        """(sequence, tokens kept): the sequence of `key` cut back to its common prefix with `ids` (at most
        `max_keep` tokens), or an empty one and 0. The caller owns it until it `put`s or `drop`s it."""
        held = self._held.pop(key, None)
        if held is None:
            seq = self._free.pop() if self._free else self._held.popitem(last=False)[1].seq
            self._runtime.cut(seq, 0)
            return seq, 0
        keep = common_prefix_length(held.ids, ids)
        if max_keep is not None:
            keep = max(0, min(keep, max_keep))
        if keep < len(held.ids):
            self._runtime.cut(held.seq, keep)
        return held.seq, keep

    def put(self, key: str | None, seq: int, ids: Sequence[int], anchor: str = "") -> None:
        """Keep `seq`, which holds exactly the KV of `ids`, as the sequence of `key`."""
        self._held.pop(key, None)
        self._held[key] = _Held(seq, list(ids), anchor)

    def drop(self, seq: int) -> None:
        """A taken sequence that is not put back: empty it and make it free."""
        self._runtime.cut(seq, 0)
        self._free.append(seq)

    def forget(self, key: str | None) -> None:
        """The document of `key` is closed: empty its sequence and make it free."""
        held = self._held.pop(key, None)
        if held is not None:
            self.drop(held.seq)

    def clear(self) -> None:
        for held in self._held.values():
            self._runtime.cut(held.seq, 0)
            self._free.append(held.seq)
        self._held.clear()
