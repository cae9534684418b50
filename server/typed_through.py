"""Answers that stay valid while the person types through them.

When an inline suggestion is on screen and the person types its first characters, the document becomes exactly
what it would be with those characters of the suggestion accepted: the rest of the suggestion is still the
model's answer for the new text, already checked by the watchdog (the filled document is the same). So the
server answers it at once, without a debounce or the model. It remembers, per document, the last suggestion it
sent and the text it was computed for; a request whose text is that text with a prefix of the suggestion typed
at the cursor (nothing else changed) gets the remainder.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

MAX_DOCUMENTS = 32  # documents remembered (each holds a reference to one text, not a copy)


@dataclass(frozen=True)
class SentSuggestion:
    """The last suggestion sent for a document, with the text it was computed for."""

    text: str  # the document text the suggestion was computed for
    cursor: int  # where it was inserted (str offset)
    end: int  # it replaced text[cursor:end] (normally end == cursor)
    insert: str


class TypedThrough:
    def __init__(self) -> None:
        self._last: OrderedDict[str, SentSuggestion] = OrderedDict()
        self.answered = 0

    def remember(self, uri: str, text: str, cursor: int, start: int, end: int, insert: str) -> None:
        """The suggestion sent for `uri` at `cursor`: `insert` replacing text[start:end]. Only one that starts at
        the cursor can be typed through; anything else forgets the document's last one."""
        self._last.pop(uri, None)
        if start == cursor <= end and insert.strip():
            self._last[uri] = SentSuggestion(text, cursor, end, insert)
            while len(self._last) > MAX_DOCUMENTS:
                self._last.popitem(last=False)

    def completed(self, uri: str, text: str, cursor: int) -> bool:
        """`text` is the last suggestion's text with all of the suggestion in it (accepted, or typed through to
        its end) and the cursor right after it."""
        last = self._last.get(uri)
        if last is None or last.end != last.cursor or cursor != last.cursor + len(last.insert):
            return False
        return (
            len(text) == len(last.text) + len(last.insert)
            and text[last.cursor : cursor] == last.insert
            and text[: last.cursor] == last.text[: last.cursor]
            and text[cursor:] == last.text[last.cursor :]
        )

    def forget(self, uri: str) -> None:
        self._last.pop(uri, None)

    def answer(self, uri: str, text: str, cursor: int) -> SentSuggestion | None:
        """The rest of the last suggestion when `text` is its text with the suggestion's first characters typed
        (zero or more) and the cursor right after them; None otherwise. A hit becomes the new last suggestion."""
        last = self._last.get(uri)
        if last is None:
            return None
        typed = cursor - last.cursor
        if not 0 <= typed < len(last.insert) or len(text) != len(last.text) + typed:
            return None
        if text[last.cursor : cursor] != last.insert[:typed]:
            return None  # a cheap test first: most misses differ right here
        if text[cursor:] != last.text[last.cursor :] or text[: last.cursor] != last.text[: last.cursor]:
            return None
        rest = last.insert[typed:]
        if not rest.strip():
            return None  # only spaces left: nothing worth showing
        hit = SentSuggestion(text, cursor, cursor + last.end - last.cursor, rest)
        self._last[uri] = hit
        self._last.move_to_end(uri)
        self.answered += 1
        return hit
