"""The offline default's output head, over the whole vocabulary or only the tokens of ASCII text.

Gemma 3's head multiplies by 262,144 rows: 15 ms of a ~40 ms decoding forward with int8 weights on two cores. Most
code is ASCII, and 144,000 of those rows are tokens of ASCII text. When every token of a prompt is one of them, the
head is computed over those rows only (9.5 ms; the others get -inf): a fill can then differ from the full head's
only where the model's first choice was a token of non-ASCII text in a document that has none in view. A prompt
with any other token (accents, CJK, emoji, byte fallbacks) gets the whole vocabulary.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

ASCII_TEXT = frozenset(chr(c) for c in range(32, 127)) | {"\n", "\t", "\r"}


def ascii_token_ids(texts: Sequence[str]) -> list[int]:
    """Ids whose text (the tokenizer's pieces with "▁" as a space) is non-empty ASCII text."""
    return [i for i, text in enumerate(texts) if text and ASCII_TEXT.issuperset(text)]


class OutputHead:
    """logits for the last rows of a hidden state, over all tokens or the ASCII-text ones (plus `always`, e.g. the
    stop tokens). Works on the model's own head module: an nn.Linear or infill/backends/int8.py's Int8Linear."""

    def __init__(self, head: Any, texts: Sequence[str], always: Iterable[int], vocab_size: int,
                 softcap: float | None = None) -> None:
        import torch

        self._head = head
        self.vocab_size = vocab_size
        self._softcap = softcap
        rows = sorted(set(ascii_token_ids(texts)) | {i for i in always if 0 <= i < vocab_size})
        self.rows = torch.tensor(rows, dtype=torch.long)
        self.in_rows = torch.zeros(max(vocab_size, len(texts)), dtype=torch.bool)
        self.in_rows[self.rows] = True
        self._bias = None if getattr(head, "bias", None) is None else head.bias.detach()[self.rows].contiguous()
        if hasattr(head, "weight_int8"):
            self._int8 = (head.weight_int8[self.rows].contiguous(), head.scale[self.rows].contiguous())
            self._weight = None
        else:
            self._int8 = None
            self._weight = head.weight.detach()[self.rows].contiguous()

    def covers(self, ids: Sequence[int]) -> bool:
        """Whether every id is an ASCII-text token (the prompt can use the short head)."""
        import torch

        if not ids:
            return True
        index = torch.tensor(ids, dtype=torch.long)
        if int(index.min()) < 0 or int(index.max()) >= len(self.in_rows):
            return False
        return bool(self.in_rows[index].all())

    def __call__(self, hidden: Any, ascii_only: bool) -> Any:
        """hidden (rows, d) -> logits (rows, vocab_size)."""
        import torch

        if not ascii_only:
            logits = self._head(hidden)
        else:
            if self._int8 is not None:
                short = torch.ops.aten._weight_int8pack_mm(hidden.reshape(-1, hidden.shape[-1]), *self._int8)
            else:
                short = torch.nn.functional.linear(hidden, self._weight)
            if self._bias is not None:
                short = short + self._bias
            logits = torch.full((hidden.shape[0], self.vocab_size), float("-inf"), dtype=short.dtype,
                                device=short.device)
            logits.index_copy_(1, self.rows, short)
        if self._softcap is not None:
            logits = torch.tanh(logits / self._softcap) * self._softcap
        return logits
