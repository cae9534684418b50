"""Prompt tokens and prefix-KV reuse for the autoregressive backend.

Between keystrokes almost all of a prompt stays the same, so two things are kept across requests:
- token ids per line (a one-character edit retokenises one line, not the file). Line-wise ids are a valid
  tokenisation that decodes back to exactly the same text, just not always the one the tokenizer would pick for
  the whole text (measured: ~2.5 % more tokens on Python source).
- the KV cache of the last prompt per document, cropped to the longest common token prefix with the next prompt
  so only the new tail is encoded. Memory is bounded in bytes with least-recently-used eviction.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from infill.cache.kv_store import cache_nbytes
from infill.cache.tokens import clean_text


class LineTokenizer:
    """Tokenises text line by line with a bounded memo of line → ids (no special tokens)."""

    def __init__(self, tokenizer: Any, memo_lines: int = 50_000) -> None:
        self.tokenizer = tokenizer
        self.memo_lines = memo_lines
        self._memo: OrderedDict[str, tuple[int, ...]] = OrderedDict()
        self._lock = threading.Lock()

    def line_ids(self, line: str) -> tuple[int, ...]:
        with self._lock:
            ids = self._memo.get(line)
            if ids is not None:
                self._memo.move_to_end(line)
                return ids
        text = clean_text(line)  # a lone surrogate becomes U+FFFD (the tokenizer cannot take it)
        ids = tuple(self.tokenizer(text, add_special_tokens=False).input_ids)
        if self.tokenizer.decode(ids) != text:  # never seen on Gemma's tokenizer; keep prompts exact regardless
            raise ValueError(f"line tokenisation does not round-trip: {text!r}")
        with self._lock:
            self._memo[line] = ids
            while len(self._memo) > self.memo_lines:
                self._memo.popitem(last=False)
        return ids

    def lines(self, text: str) -> list[tuple[str, tuple[int, ...]]]:
        return [(line, self.line_ids(line)) for line in text.splitlines(keepends=True)]

    def encode(self, text: str) -> list[int]:
        return [i for _, ids in self.lines(text) for i in ids]


@dataclass(frozen=True)
class FittedPrompt:
    ids: list[int]  # BOS + the kept lines
    dropped_chars: int  # leading characters of the text that did not fit
    anchor: str  # the first kept lines, to keep the same start on the next keystroke (KV reuse)


def fit_prompt(lines: list[tuple[str, tuple[int, ...]]], bos: int, budget: int, anchor: str = "",
               refit_fraction: float = 0.75) -> FittedPrompt:
    """Keep the near end of the text within `budget` tokens by dropping whole leading lines.

    When it must cut, it first tries the previous cut (`anchor`, the first kept lines last time) so that the prompt
    start, and with it the reusable KV, stays put while the user types; otherwise it cuts down to
    `refit_fraction` of the budget, leaving room for the next keystrokes before it must cut again.
    """
    counts = [len(ids) for _, ids in lines]
    total = 1 + sum(counts)
    if total <= budget:
        return FittedPrompt([bos] + [i for _, ids in lines for i in ids], 0, "")
    tails = [0] * (len(lines) + 1)  # tails[k]: tokens of lines[k:]
    for k in range(len(lines) - 1, -1, -1):
        tails[k] = tails[k + 1] + counts[k]
    start = None
    if anchor:
        for k in range(1, len(lines)):
            if 1 + tails[k] <= budget and _starts_with(lines, k, anchor):
                start = k
                break
    if start is None:
        target = max(1, int(budget * refit_fraction))
        start = next((k for k in range(1, len(lines)) if 1 + tails[k] <= target), len(lines) - 1)
    kept = [i for _, ids in lines[start:] for i in ids]
    kept = kept[-(budget - 1):]  # a single line longer than the budget: keep its end
    dropped = sum(len(text) for text, _ in lines[:start])
    return FittedPrompt([bos] + kept, dropped, "".join(text for text, _ in lines[start:start + 3]))


def _starts_with(lines: list[tuple[str, tuple[int, ...]]], k: int, anchor: str) -> bool:
    joined = ""
    for text, _ in lines[k:k + 3]:
        joined += text
        if len(joined) >= len(anchor):
            break
    return joined == anchor


@dataclass
class KVEntry:
    ids: list[int]  # the tokens whose keys/values the cache holds, in order
    cache: Any  # transformers DynamicCache (full-length layers, so it can be cropped anywhere)
    anchor: str = ""


class PrefixKVStore:
    """document id → KV of its last prompt, least recently used evicted beyond `max_bytes`."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[str | None, tuple[KVEntry, int]] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, document_id: str | None) -> KVEntry | None:
        """Remove and return the entry (the caller owns and mutates it, then `put`s it back)."""
        with self._lock:
            item = self._entries.pop(document_id, None)
        return None if item is None else item[0]

    def put(self, document_id: str | None, entry: KVEntry) -> None:
        size = cache_nbytes(entry.cache)
        if size > self.max_bytes:
            return
        with self._lock:
            self._entries.pop(document_id, None)
            self._entries[document_id] = (entry, size)
            while sum(s for _, s in self._entries.values()) > self.max_bytes:
                self._entries.popitem(last=False)

    @property
    def total_bytes(self) -> int:
        with self._lock:
            return sum(s for _, s in self._entries.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
