"""What the offline default knows about its tokens: their texts, token healing, and drafts from the context."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence

import numpy as np


class TokenTexts:
    """Token id -> its text ("" for control and byte-fallback tokens), read once from the model (262,144 texts),
    and the token-healing masks made from them."""

    def __init__(self, read_vocabulary: Callable[[], list[str]]) -> None:
        self._read = read_vocabulary
        self._texts: list[str] | None = None
        self._sorted: list[str] = []  # the texts in order, and the token id of each, to find a prefix's tokens
        self._sorted_ids = np.zeros(0, dtype=np.int64)
        self._heal_masks: dict[str, np.ndarray] = {}
        self._word_masks: dict[tuple[str, ...], np.ndarray] = {}
        self._line_ends: np.ndarray | None = None

    @property
    def texts(self) -> list[str]:
        if self._texts is None:
            self._texts = self._read()
        return self._texts

    def heal(self, ids: list[int]) -> tuple[list[int], str]:
        """Token healing: drop a trailing partial token (`return ` ends in a bare space token, which a model
        rarely sees before a word) so that decoding picks a token that starts with its text instead. Returns the
        shortened ids and that text ("" when nothing is dropped)."""
        if len(ids) < 3:
            return ids, ""
        text = self.texts[ids[-1]]
        if not text or "\n" in text:
            return ids, ""
        if not text.strip() and self.texts[ids[-2]].endswith("\n"):
            return ids, ""  # a line's indentation: code follows it as its own token (healing it chose only spaces)
        return ids[:-1], text

    def warm_up(self, *word_lists: tuple[str, ...]) -> None:
        """Read the texts and build the masks decoding asks for (`word_lists`: those of `word_starts`) now."""
        self.allowed_after_heal(" ")
        self.line_ends()
        for words in word_lists:
            self.word_starts(words)

    def line_ends(self) -> np.ndarray:
        """A boolean mask over the vocabulary: the tokens that end a line (a line break in their text) or the
        text (control tokens, whose text is empty; byte-fallback tokens are empty too and go with them)."""
        if self._line_ends is None:
            self._line_ends = np.array(["\n" in t or not t for t in self.texts], dtype=bool)
        return self._line_ends

    def word_starts(self, words: tuple[str, ...]) -> np.ndarray:
        """A boolean mask over the vocabulary: the tokens that are one of `words` (spaces around aside) or start
        with one and a space."""
        mask = self._word_masks.get(words)
        if mask is None:
            mask = np.array(
                [t.strip() in words or t.lstrip().startswith(tuple(w + " " for w in words)) for t in self.texts],
                dtype=bool,
            )
            self._word_masks[words] = mask
        return mask

    def allowed_after_heal(self, text: str) -> np.ndarray:
        """A boolean mask over the vocabulary: the tokens whose text starts with `text`. The texts that do are
        one run of the sorted texts (found by bisection: testing every text took 50 ms a keystroke on an EPYC
        core)."""
        mask = self._heal_masks.get(text)
        if mask is None:
            if not self._sorted:
                order = sorted(range(len(self.texts)), key=self.texts.__getitem__)
                self._sorted, self._sorted_ids = [self.texts[i] for i in order], np.array(order, dtype=np.int64)
            first = bisect.bisect_left(self._sorted, text)
            end = bisect.bisect_left(self._sorted, text + "\U0010ffff", first)  # past every text text+anything
            mask = np.zeros(len(self.texts), dtype=bool)
            mask[self._sorted_ids[first:end]] = True
            if len(self._heal_masks) > 512:
                self._heal_masks.clear()
            self._heal_masks[text] = mask
        return mask


def draft_from_context(ids: list[int], count: int, max_ngram: int, later: Sequence[int] = ()) -> list[int]:
    """Prompt-lookup drafting: find the latest earlier occurrence of the last `max_ngram` (then fewer, down to 2)
    tokens of `ids` and propose the `count` tokens that followed it. Code repeats its identifiers and lines, so
    these guesses are often right, and a wrong one costs little. `later` (the text after the gap, tokenised) is
    searched too, nearest the gap first, when `ids` has no occurrence of that length: the lines below often
    repeat the one being written."""
    if count <= 0:
        return []
    for n in range(min(max_ngram, len(ids) - 1), 1, -1):
        tail = ids[-n:]
        first = tail[0]
        for start in range(len(ids) - n - 1, -1, -1):
            if ids[start] == first and ids[start : start + n] == tail:
                return ids[start + n : start + n + count]
        for start in range(len(later) - n):
            if later[start] == first and list(later[start : start + n]) == tail:
                return list(later[start + n : start + n + count])
    return []
