"""The fuzzer's own model of a document, written independently of the server: LSP lines (ending at \\r\\n, \\r or
\\n), UTF-16 positions with a lone surrogate counted as one unit, and random texts and edits full of what breaks
position arithmetic (astral characters, lone surrogates, NUL, U+2028, CR-only and mixed endings, huge lines)."""

from __future__ import annotations

import random

PIECES = [
    "word",
    " ",
    "  ",
    "\t",
    "x = 1",
    "(",
    ")",
    "{",
    "}",
    "é",
    "中文",
    "\U0001f600",
    "\U00010348",
    "\ud800",
    "\udfff",
    "\x00",
    "\u2028",
    "\u2029",
    "\x0c",
    "\x85",
    "___",
    "[[a gap]]",
    "{{name}}",
    "# title",
    "- item",
]
ENDINGS = ["\n", "\r\n", "\r"]


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def line_spans(text: str) -> list[tuple[int, int]]:
    """(start, end of content) of each LSP line; the last line may be empty."""
    spans, start, i = [], 0, 0
    while i < len(text):
        char = text[i]
        if char == "\r" or char == "\n":
            spans.append((start, i))
            i += 2 if char == "\r" and text[i + 1 : i + 2] == "\n" else 1
            start = i
        else:
            i += 1
    spans.append((start, len(text)))
    return spans


def offset_of(text: str, spans: list[tuple[int, int]], line: int, character: int) -> int | None:
    """Str offset of a UTF-16 position, or None when it is not a position in `text`."""
    if not 0 <= line < len(spans):
        return None
    start, end = spans[line]
    units = 0
    for offset in range(start, end + 1):
        if units == character:
            return offset
        if units > character or offset == end:
            return None
        units += 2 if ord(text[offset]) > 0xFFFF else 1
    return None


def position_of(text: str, spans: list[tuple[int, int]], offset: int) -> tuple[int, int]:
    for line, (start, end) in enumerate(spans):
        if offset <= end:
            return line, utf16_len(text[start:offset])
    return len(spans) - 1, utf16_len(text[spans[-1][0] : spans[-1][1]])


def random_text(rng: random.Random, size: int) -> str:
    ending = rng.choice(ENDINGS + ["mixed"])
    parts, total = [], 0
    while total < size:
        piece = rng.choice(PIECES) if rng.random() < 0.85 else (rng.choice(ENDINGS) if ending == "mixed" else ending)
        parts.append(piece)
        total += len(piece)
    return "".join(parts)


def random_document(rng: random.Random) -> tuple[str, str]:
    """(languageId, text): mostly small, sometimes one huge line or a large CR-only Markdown file."""
    roll = rng.random()
    if roll < 0.05:
        return "markdown", ("a ___ b [[gap]] " * rng.randint(5_000, 40_000))  # one huge line
    if roll < 0.10:
        return "markdown", ("prose ___ more\r___\r" * rng.randint(5_000, 30_000))  # CR-only
    language = rng.choice(["plaintext", "markdown", "python"])
    return language, random_text(rng, rng.randint(0, 600))


def random_position(rng: random.Random, text: str, spans: list[tuple[int, int]]) -> tuple[int, int, int]:
    """A valid (line, character, offset), never inside a surrogate pair."""
    line = rng.randrange(len(spans))
    start, end = spans[line]
    offset = rng.randint(start, end)
    return line, utf16_len(text[start:offset]), offset
