"""Prompt tokenisation that costs one line per keystroke, not one file, and the one rule for where a prompt starts
(`choose_start`: the in-process backends' prompts in tokens, `fit_prompt`; the context's window in characters).

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
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Protocol

from infill.languages import encodable

_CHUNK_BOUNDARY = re.compile(r"(?<=\n)(?=[^\n])")

# The most tokens of other files' code (InfillRequest.extra_context) an in-process backend's prompt holds, its last
# whole lines: the DiffusionGemma engine's and the offline default's (ARSettings.extra_context_tokens) budget.
# infill/context/related.py selects about this much (its max_chars, ~250 tokens of code).
EXTRA_CONTEXT_TOKENS = 256

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

    def _chunk_ids(self, chunk: str) -> tuple[int, ...]:
        ids = self._memo.get(chunk)
        if ids is not None:
            self._memo.move_to_end(chunk)
            return ids
        ids = tuple(self.tokenizer.encode(encodable(chunk), add_special_tokens=False))
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
    """`head` (e.g. BOS) + the near end of the text within `budget` tokens, dropping whole leading chunks (where
    the prompt starts is `choose_start`'s, at any line start: cutting only where a whole syntactic unit starts,
    as the context's window does, kept less context and lost exact matches, see docs/offline-default.md)."""
    head = list(head)
    texts, counts = [text for text, _ in chunks], [len(ids) for _, ids in chunks]
    room = budget - len(head)
    if room <= 0 and len(head) + sum(counts) > budget:
        return FittedPrompt(head[: max(0, budget)], sum(map(len, texts)), "")
    refit_room = max(1, int(budget * refit_fraction)) - len(head)
    start = choose_start(texts, counts, room, refit_room, anchor=anchor, keep_anchor=keep_anchor)
    if start == 0 and sum(counts) <= room:
        return FittedPrompt(head + [i for _, ids in chunks for i in ids], 0, "")
    kept = [i for _, ids in chunks[start:] for i in ids][-room:]  # one chunk longer than the budget: its end
    return FittedPrompt(head + kept, sum(map(len, texts[:start])), anchor_at(texts, start))


def choose_start(
    texts: Sequence[str],
    counts: Sequence[int],
    room: int,
    refit_room: int,
    *,
    anchor: str = "",
    keep_anchor: bool = False,
    cuts: Collection[int] = (),
    truncated: bool = False,
) -> int:
    """The one rule for where a prompt starts: the index of the first chunk kept of chunks `texts` costing
    `counts` (tokens for a backend's prompt, characters for the context's window) within `room`.

    All of it when it fits. Otherwise the previous cut (`anchor`, the first kept chunks last time) while it fits,
    so that the prompt start, and with it the reusable KV, stays put while the user types; otherwise a new cut
    within `refit_room`, below `room` to leave room for the next keystrokes before it must cut again (equal: as
    many whole chunks as fit). A new cut is one of `cuts` (char offsets into the joined texts: the starts of
    whole syntactic units the context proposed) where one fits, else any chunk start. With `keep_anchor`, the
    anchor is kept even where the whole text would fit (a prompt that grows from a cached start instead of
    starting over). `truncated`: the chunks are the tail of a longer text, so never "all of it" but from chunk 0.
    """
    if not texts:
        return 0
    tails = [0] * (len(texts) + 1)  # tails[k]: the cost of chunks[k:]
    for k in range(len(texts) - 1, -1, -1):
        tails[k] = tails[k + 1] + counts[k]
    fits = tails[0] <= room and not truncated
    if fits and not (keep_anchor and anchor):
        return 0
    first = 0 if truncated else 1  # (chunk 0 of a whole text: the "all of it" above)
    if anchor:
        kept = next((k for k in range(first, len(texts)) if tails[k] <= room and _starts_with(texts, k, anchor)), None)
        if kept is not None:
            return kept
    if fits:
        return 0
    fitting = [k for k in range(first, len(texts)) if tails[k] <= refit_room]
    if cuts and fitting:
        offsets, at, proposed = [], 0, set(cuts)
        for text in texts:
            offsets.append(at)
            at += len(text)
        return next((k for k in fitting if offsets[k] in proposed), fitting[0])
    return fitting[0] if fitting else len(texts) - 1


def anchor_at(texts: Sequence[str], start: int) -> str:
    """What identifies a cut on the next keystroke: the text of the first three chunks kept."""
    return "".join(texts[start : start + 3])


def _starts_with(texts: Sequence[str], k: int, anchor: str) -> bool:
    joined = ""
    for text in texts[k : k + 3]:
        joined += text
        if len(joined) >= len(anchor):
            break
    return joined == anchor
