"""Prompt tokenisation that costs one line per keystroke, not one file, and the one prompt fitter.

Text is split into chunks after each line break (runs of blank lines stay with the line before them; only "\n"
ends a chunk, never the form feeds and other separators `str.splitlines` breaks at), and each chunk is tokenised
on its own and memoised by content. A one-character edit re-tokenises only the chunk it touches, and every token
before that chunk is unchanged, so the engine's prompt cache (infill/engine/kv.py) and llama.cpp's sequences keep
their keys and values. Chunk-wise ids are a valid tokenisation that decodes back to exactly the same text, just not
always the one the tokenizer would pick for the whole text. Both in-process backends (DiffusionGemma and the Gemma 3
270M default) use this module.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from infill.languages import encodable

_CHUNK_BOUNDARY = re.compile(r"(?<=\n)(?=[^\n])")

Chunk = tuple[str, tuple[int, ...]]  # a chunk's text and its token ids


def split_chunks(text: str) -> list[str]:
    return [c for c in _CHUNK_BOUNDARY.split(text) if c]


class Tokenizer(Protocol):
    """What a tokenizer gives this module: ids for text (Hugging Face's call shape; llama.cpp's runtime has it)."""

    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...


class ChunkedTokenizer:
    """Token ids per chunk, memoised by content (bounded, least recently used dropped)."""

    def __init__(self, tokenizer: Tokenizer, max_entries: int = 50_000) -> None:
        self.tokenizer = tokenizer
        self.max_entries = max_entries
        self._memo: OrderedDict[str, tuple[int, ...]] = OrderedDict()
        self.chunks_tokenised = 0  # counts real tokeniser calls (tests check keystrokes stay cheap)

    def _chunk_ids(self, chunk: str) -> tuple[int, ...]:
        ids = self._memo.get(chunk)
        if ids is not None:
            self._memo.move_to_end(chunk)
            return ids
        ids = tuple(self.tokenizer.encode(encodable(chunk), add_special_tokens=False))
        self.chunks_tokenised += 1
        self._memo[chunk] = ids
        if len(self._memo) > self.max_entries:
            self._memo.popitem(last=False)
        return ids

    def chunks(self, text: str) -> list[Chunk]:
        return [(c, self._chunk_ids(c)) for c in split_chunks(text)]

    def encode(self, text: str) -> list[int]:
        return [i for _, ids in self.chunks(text) for i in ids]

    def encode_tail(self, text: str, max_tokens: int) -> list[int]:
        """Token ids of `text`, keeping only whole trailing chunks that fit in `max_tokens` (the near context)."""
        return fit_prompt(self.chunks(text), (), max_tokens, refit_fraction=1.0).ids

    def encode_head(self, text: str, max_tokens: int, max_chars_per_token: int = 16) -> list[int]:
        """The first `max_tokens` tokens of `text`, tokenising only a bounded head of it (suffix anchors)."""
        head = text[: max_tokens * max_chars_per_token]
        return list(self.tokenizer.encode(encodable(head), add_special_tokens=False))[:max_tokens]


@dataclass(frozen=True)
class FittedPrompt:
    ids: list[int]  # the head ids + the kept chunks
    dropped_chars: int  # leading characters of the text that did not fit
    anchor: str  # the first kept chunks, to keep the same start on the next keystroke (KV reuse)


def fit_prompt(
    chunks: list[Chunk],
    head: Sequence[int],
    budget: int,
    anchor: str = "",
    refit_fraction: float = 0.75,
    keep_anchor: bool = False,
) -> FittedPrompt:
    """`head` (e.g. BOS) + the near end of the text within `budget` tokens, dropping whole leading chunks.

    When it must cut, it first tries the previous cut (`anchor`, the first kept chunks last time) so that the prompt
    start, and with it the reusable KV, stays put while the user types; otherwise it cuts down to
    `refit_fraction` of the budget, leaving room for the next keystrokes before it must cut again (1.0: keep as
    many whole chunks as fit). With `keep_anchor`, the anchor is kept even where the whole text would fit (a
    prompt that grows from a cached start instead of starting over).
    """
    head = list(head)
    counts = [len(ids) for _, ids in chunks]
    fits = len(head) + sum(counts) <= budget
    if fits and not (keep_anchor and anchor):
        return FittedPrompt(head + [i for _, ids in chunks for i in ids], 0, "")
    room = budget - len(head)
    if room <= 0:
        return FittedPrompt(head[: max(0, budget)], sum(len(text) for text, _ in chunks), "")
    tails = [0] * (len(chunks) + 1)  # tails[k]: tokens of chunks[k:]
    for k in range(len(chunks) - 1, -1, -1):
        tails[k] = tails[k + 1] + counts[k]
    start = None
    if anchor:
        start = next((k for k in range(1, len(chunks)) if tails[k] <= room and _starts_with(chunks, k, anchor)), None)
    if start is None and fits:
        return FittedPrompt(head + [i for _, ids in chunks for i in ids], 0, "")
    if start is None:
        target = max(1, int(budget * refit_fraction)) - len(head)
        start = next((k for k in range(1, len(chunks)) if tails[k] <= target), len(chunks) - 1)
    kept = [i for _, ids in chunks[start:] for i in ids][-room:]  # one chunk longer than the budget: its end
    dropped = sum(len(text) for text, _ in chunks[:start])
    return FittedPrompt(head + kept, dropped, "".join(text for text, _ in chunks[start : start + 3]))


def _starts_with(chunks: list[Chunk], k: int, anchor: str) -> bool:
    joined = ""
    for text, _ in chunks[k : k + 3]:
        joined += text
        if len(joined) >= len(anchor):
            break
    return joined == anchor
