"""Prompt tokenisation that costs one line per keystroke, not one file.

Text is split into chunks after each line break (runs of blank lines stay with the line before them), and each
chunk is tokenised on its own and memoised by content. A one-character edit re-tokenises only the chunk it
touches, and every token before that chunk is unchanged, so the prefix-KV store can reuse their cache.
"""

from __future__ import annotations

import re
from collections import OrderedDict

_CHUNK_BOUNDARY = re.compile(r"(?<=\n)(?=[^\n])")


def clean_text(text: str) -> str:
    """Lone surrogates (undecodable bytes smuggled in by surrogateescape) become U+FFFD instead of crashing the
    tokenizer."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def split_chunks(text: str) -> list[str]:
    return [c for c in _CHUNK_BOUNDARY.split(text) if c]


class ChunkedTokenizer:
    def __init__(self, tokenizer, max_entries: int = 50_000) -> None:
        self.tokenizer = tokenizer
        self.max_entries = max_entries
        self._memo: OrderedDict[str, tuple[int, ...]] = OrderedDict()
        self.chunks_tokenised = 0  # counts real tokeniser calls (tests check keystrokes stay cheap)

    def _chunk_ids(self, chunk: str) -> tuple[int, ...]:
        ids = self._memo.get(chunk)
        if ids is not None:
            self._memo.move_to_end(chunk)
            return ids
        ids = tuple(self.tokenizer.encode(clean_text(chunk), add_special_tokens=False))
        self.chunks_tokenised += 1
        self._memo[chunk] = ids
        if len(self._memo) > self.max_entries:
            self._memo.popitem(last=False)
        return ids

    def encode_chunks(self, text: str) -> list[tuple[int, ...]]:
        return [self._chunk_ids(c) for c in split_chunks(text)]

    def encode(self, text: str) -> list[int]:
        return [i for chunk in self.encode_chunks(text) for i in chunk]

    def encode_tail(self, text: str, max_tokens: int) -> list[int]:
        """Token ids of `text`, keeping only whole trailing chunks that fit in `max_tokens` (the near context).
        Cutting at chunk boundaries keeps the kept prefix stable across keystrokes, so KV reuse still works."""
        chunks = self.encode_chunks(text)
        kept, total = [], 0
        for ids in reversed(chunks):
            if total + len(ids) > max_tokens:
                if not kept:  # a single huge line: keep its end
                    kept.append(ids[len(ids) - max_tokens:])
                break
            kept.append(ids)
            total += len(ids)
        return [i for chunk in reversed(kept) for i in chunk]

    def encode_head(self, text: str, max_tokens: int, max_chars_per_token: int = 16) -> list[int]:
        """The first `max_tokens` tokens of `text`, tokenising only a bounded head of it (suffix anchors)."""
        head = text[: max_tokens * max_chars_per_token]
        return list(self.tokenizer.encode(clean_text(head), add_special_tokens=False))[:max_tokens]
