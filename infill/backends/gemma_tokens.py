"""What the offline default knows about its tokens: their texts, token healing, and drafts from the context."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class TokenTexts:
    """Token id -> its text (the tokenizer's piece with "▁" as a space; "" for control and byte-fallback tokens),
    built once (262,144 pieces), and the token-healing masks made from them."""

    def __init__(self, tokenizer: Any, vocab_size: int, device: str) -> None:
        self._tokenizer = tokenizer
        self._vocab_size = vocab_size
        self._device = device
        self._texts: list[str] | None = None
        self._heal_masks: dict[str, Any] = {}

    @property
    def texts(self) -> list[str]:
        if self._texts is None:
            pieces = self._tokenizer.convert_ids_to_tokens(list(range(len(self._tokenizer))))
            # byte-fallback pieces (<0x..>) never start a healed word; control tokens are not text
            self._texts = ["" if p is None or p.startswith("<") and p.endswith(">") and len(p) > 2
                           else p.replace("\u2581", " ") for p in pieces]
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
        return ids[:-1], text

    def allowed_after_heal(self, text: str) -> Any:
        """A boolean mask over the vocabulary: the tokens whose text starts with `text`."""
        import torch

        mask = self._heal_masks.get(text)
        if mask is None:
            starts = [i for i, piece in enumerate(self.texts) if piece.startswith(text)]
            mask = torch.zeros(max(self._vocab_size, len(self.texts)), dtype=torch.bool, device=self._device)
            mask[torch.tensor(starts, device=self._device)] = True
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
            if ids[start] == first and ids[start:start + n] == tail:
                return ids[start + n:start + n + count]
        for start in range(len(later) - n):
            if later[start] == first and list(later[start:start + n]) == tail:
                return list(later[start + n:start + n + count])
    return []
