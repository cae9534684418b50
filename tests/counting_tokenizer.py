"""A tokenizer that counts its calls, for tests that check a keystroke tokenises only the chunk it touched
(infill/cache/tokens.py memoises the rest)."""

from __future__ import annotations


class CountingTokenizer:
    """Wraps a tokenizer (`cache.tokens.Tokenizer`): `texts` are the texts it was asked to tokenise, in order."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.texts: list[str] = []

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        self.texts.append(text)
        return self.tokenizer.encode(text, add_special_tokens=add_special_tokens)
