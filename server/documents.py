"""Open documents kept as lists of lines, with LSP position (UTF-16 code units) <-> Python str offset conversion.

pygls' own workspace re-joins the whole document on every incremental change; on a 5,000-line file that alone costs
more than our per-keystroke budget, so the server keeps its own store: an edit touches only the lines it spans.
Line endings are what LSP says they are: "\\n", "\\r\\n" and "\\r" (not the extra separators of str.splitlines).
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlparse

from lsprotocol import types

from infill.context.lines import line_content as _content
from infill.context.lines import split_lines
from infill.pipeline import OpenDocument

EAGER_TEXT_CHARS = 1 << 19  # documents up to this size keep their whole text edited in place
SESSION = secrets.token_hex(4)  # this server process: code-action data from another process never matches


def utf16_units(text: str) -> int:
    """Length of `text` in UTF-16 code units. JSON can carry a lone surrogate ("\\ud800") and editors count it as
    one unit: "surrogatepass" encodes it as one unit instead of raising, so this cannot fail on any str."""
    return len(text) if text.isascii() else len(text.encode("utf-16-le", "surrogatepass")) // 2


def utf16_to_index(line: str, units: int) -> int:
    """Index into `line` of the UTF-16 column `units` (clamped to the line; a column inside a surrogate pair rounds
    down to the start of that character)."""
    if units <= 0:
        return 0
    if utf16_units(line) == len(line):
        return min(units, len(line))
    count = 0
    for index, char in enumerate(line):
        width = 2 if ord(char) > 0xFFFF else 1
        if count + width > units:
            return index
        count += width
    return len(line)


def index_to_utf16(line: str, index: int) -> int:
    return utf16_units(line[:index])


def document_name(uri: str) -> str:
    """What the model is told a file is: its last two path parts (`pkg/module.py`), or the URI itself."""
    path = unquote(urlparse(uri).path)
    parts = [p for p in path.replace("\\", "/").split("/") if p]
    return "/".join(parts[-2:]) if parts else uri


def text_fingerprint(text: str) -> str:
    """Identifies one exact text within this server process: Python's str hash (computed at C speed once, then
    cached on the str object), salted per process by PYTHONHASHSEED and tagged with SESSION."""
    return f"{SESSION}:{hash(text) & 0xFFFFFFFFFFFFFFFF:016x}:{len(text)}"


@dataclass
class Clamp:
    """Set when a client position lay outside the document and was moved onto it (the handler logs it)."""

    note: str = ""


class Document:
    """One open document. A document opened (or fully replaced) with more than `max_chars` characters is kept as
    its length only: it is never sent to a model, so splitting and editing it would be work for nothing; it stays
    refused until a full-text change brings it under the limit or it is reopened."""

    def __init__(
        self,
        uri: str,
        text: str,
        version: int | None,
        language_id: str | None,
        max_chars: int | None = None,
        generation: int = 0,
    ) -> None:
        self.uri = uri
        self.language_id = language_id
        self.version = version
        self.max_chars = max_chars
        self.generation = generation  # which open of this uri (a close and reopen may restart versions)
        self.untrusted = ""  # why the text may differ from the editor's ("" when it is the editor's text)
        self._set_text(text)
        self.last_change_ms = 0.0  # server time spent applying the latest didChange (benchmarks/server.py)
        self.last_change_cpu_ms = 0.0  # the same in CPU time of the event-loop thread
        self.last_edit_line: int | None = None  # the line of the latest edit or warm (scheduling.after_edit, warming)
        # The placeholders a listing found (text, start, end, spans): its "Fill all gaps" fill reuses them for
        # the same text and selection instead of scanning again (server/fills.py)
        self.placeholders: tuple[str, int, int, tuple[tuple[int, int], ...]] | None = None

    def _set_text(self, text: str) -> None:
        self.untrusted = ""  # a full text is the editor's text again
        self.length = len(text)
        self.oversized = self.max_chars is not None and self.length > self.max_chars
        self.lines = [""] if self.oversized else split_lines(text)
        # The whole text is kept too, edited by slicing: a request reads it at once, where re-joining thousands of
        # line objects costs ten times more on a cold cache. Past EAGER_TEXT_CHARS two copies per keystroke would
        # cost more than one join per request: the text is then joined when asked for.
        self._text: str | None = "" if self.oversized else text
        self._has_nul: bool | None = None  # unknown until asked
        self._fingerprint: tuple[str, str] | None = None
        # Line start offsets, correct up to index _valid (an edit invalidates only the lines after it, so typing
        # on one line never re-sums the whole document); the list always has len(lines) + 1 entries.
        self._starts: list[int] = [0] * (len(self.lines) + 1)
        self._valid = 0

    # -- reading ---------------------------------------------------------------------------------------------------
    @property
    def text(self) -> str:
        if self._text is None:
            self._text = "".join(self.lines)
        return self._text

    @property
    def fingerprint(self) -> str:
        """The identity of the current text (see text_fingerprint); O(1) once computed for this text."""
        text = self.text
        cached = self._fingerprint
        if cached is None or cached[0] is not text:
            cached = self._fingerprint = (text, text_fingerprint(text))
        return cached[1]

    def identity(self) -> dict[str, Any]:
        """What code-action data carries to name this exact text: the open, the version and the text itself."""
        return {"generation": f"{SESSION}:{self.generation}", "version": self.version, "text": self.fingerprint}

    def distrust(self, reason: str) -> None:
        """The editor's text can no longer be known from ours (a change failed to apply): drop ours and refuse
        every request until the editor sends a full text or reopens the document. Never guess."""
        self._set_text("")
        self.untrusted = reason

    @property
    def has_nul(self) -> bool:
        """The text holds a NUL character (a binary file); known from the edits when possible."""
        if self._has_nul is None:
            self._has_nul = "\x00" in self.text
        return self._has_nul

    def line_start(self, line: int) -> int:
        if line > self._valid:
            self._extend_starts(line)
        return self._starts[line]

    def _extend_starts(self, line: int) -> None:
        """Make line starts valid up to `line` (summing only the lines since the last valid one)."""
        valid, starts = self._valid, self._starts
        sums = itertools.accumulate(map(len, self.lines[valid:line]), initial=starts[valid])
        next(sums)  # the initial value: starts[valid] itself
        starts[valid + 1 : line + 1] = sums
        self._valid = line

    def offset_at(self, position: types.Position, clamp: Clamp | None = None) -> int:
        """Python str offset of an LSP position; positions past a line end or the document end are clamped."""
        line, character = position.line, position.character
        if line < 0 or character < 0:
            if clamp is not None:
                clamp.note = f"negative position {line}:{character}"
            line, character = max(line, 0), max(character, 0)
        if line >= len(self.lines):
            if clamp is not None:
                clamp.note = f"line {line} is past the end of the document ({len(self.lines)} lines)"
            return self.length
        content = _content(self.lines[line])
        index = utf16_to_index(content, character)
        if clamp is not None and index_to_utf16(content, index) != character:
            clamp.note = f"character {character} is not a position on line {line}"
        return self.line_start(line) + index

    def position_at(self, offset: int) -> types.Position:
        offset = max(0, min(offset, self.length))
        if self._starts[self._valid] <= offset:  # past the valid part: extend it to the line holding `offset`
            self._extend_to_offset(offset)
        starts = self._starts
        line = _bisect_right(starts, offset, hi=min(len(self.lines), self._valid + 1)) - 1
        return types.Position(line=line, character=index_to_utf16(self.lines[line], offset - starts[line]))

    def _extend_to_offset(self, offset: int) -> None:
        lines, starts, valid = self.lines, self._starts, self._valid
        while valid < len(lines) and starts[valid] <= offset:
            starts[valid + 1] = starts[valid] + len(lines[valid])
            valid += 1
        self._valid = valid

    def range_of(self, start: int, end: int) -> types.Range:
        return types.Range(start=self.position_at(start), end=self.position_at(end))

    # -- editing ---------------------------------------------------------------------------------------------------
    def apply(self, change: types.TextDocumentContentChangeEvent) -> tuple[int, int] | None:
        """Apply one change; returns the str range (start, old end) it replaced in the text before it, or None
        for a document kept as its length only."""
        if not isinstance(change, types.TextDocumentContentChangePartial):
            old_length, was_unknown = self.length, self.oversized or bool(self.untrusted)
            self._set_text(change.text)
            return None if was_unknown else (0, old_length)
        if self.oversized or self.untrusted:
            return None
        lines = self.lines
        start_line = min(max(change.range.start.line, 0), len(lines) - 1)
        end_line = min(max(change.range.end.line, 0), len(lines) - 1)
        start = self._column(change.range.start, start_line)
        end = self._column(change.range.end, end_line)
        if (end_line, end) < (start_line, start):
            start_line, start, end_line, end = end_line, end, start_line, start
        replaced = (self.line_start(start_line) + start, self.line_start(end_line) + end)
        chunk = lines[start_line][:start] + change.text + lines[end_line][end:]
        first, last = start_line, end_line + 1
        # An edit may split or join a "\r\n" pair with the neighbouring line: re-split the neighbours too.
        if first > 0 and lines[first - 1].endswith("\r") and chunk.startswith("\n"):
            first -= 1
            chunk = lines[first] + chunk
        if chunk.endswith("\r") and last < len(lines) and lines[last].startswith("\n"):
            chunk += lines[last]
            last += 1
        removed = sum(map(len, lines[first:last]))
        new_lines = split_lines(chunk)
        if last < len(lines) and new_lines[-1] == "":
            new_lines.pop()  # the chunk ended with a line ending: the next line follows, not an empty last line
        lines[first:last] = new_lines
        self.length += len(chunk) - removed
        text = self._text
        self._text = (
            None
            if text is None or len(text) > EAGER_TEXT_CHARS
            else text[: replaced[0]] + change.text + text[replaced[1] :]
        )
        if self._has_nul is False and "\x00" in change.text:
            self._has_nul = True
        elif self._has_nul:
            self._has_nul = None  # the edit may have removed it: look again when asked
        if len(new_lines) != last - first:
            self._starts[first + 1 : last + 1] = [0] * len(new_lines)
        self._valid = min(self._valid, first)
        return replaced

    def _column(self, position: types.Position, line: int) -> int:
        if position.line >= len(self.lines):
            return len(self.lines[line])  # past the end: the end of the document
        return utf16_to_index(_content(self.lines[line]), position.character)


class DocumentDistrusted(Exception):
    """A didChange could not be applied; the document now refuses requests until full text or reopen."""


def _bisect_right(values: list[int], x: int, hi: int) -> int:
    import bisect

    return bisect.bisect_right(values, x, 0, hi)


class DocumentStore:
    def __init__(self) -> None:
        self._documents: dict[str, Document] = {}
        self._opens = 0  # generation counter: every didOpen gets a new one

    def open(self, item: types.TextDocumentItem, max_chars: int | None = None) -> Document:
        self._opens += 1
        document = Document(item.uri, item.text, item.version, item.language_id, max_chars, self._opens)
        self._documents[item.uri] = document
        return document

    def change(
        self, params: types.DidChangeTextDocumentParams, on_edit: Callable[[int, int, str], None] | None = None
    ) -> Document | None:
        """Apply a didChange, all or nothing: either every change applies and the version moves on, or the
        document is distrusted (its text dropped) at the new version. `on_edit(start, old_end, new_text)` hears
        each change as a str range of the text before it (what the pipeline needs to re-parse incrementally)."""
        document = self._documents.get(params.text_document.uri)
        if document is None:
            return None
        document.version = params.text_document.version
        self._documents[document.uri] = self._documents.pop(document.uri)  # the most recently edited last
        try:
            for change in params.content_changes:
                replaced = document.apply(change)
                if replaced is not None and on_edit is not None:
                    on_edit(replaced[0], replaced[1], change.text)
        except Exception as exc:  # noqa: BLE001 - a bug here must cost trust in this text, never a drifted copy
            document.distrust(f"a change at version {document.version} failed to apply ({type(exc).__name__}: {exc})")
            raise DocumentDistrusted(document.untrusted) from exc
        return document

    def close(self, uri: str) -> None:
        self._documents.pop(uri, None)

    def others(self, uri: str, limit: int = 8) -> tuple[OpenDocument, ...]:
        """The other open documents a fill of `uri` may read (infill/context/related.py), the most recently
        opened or edited first; never one that is oversized, distrusted or binary."""
        found: list[OpenDocument] = []
        for document in reversed(self._documents.values()):
            if len(found) == limit:
                break
            if document.uri != uri and not (document.oversized or document.untrusted or document.has_nul):
                found.append(OpenDocument(document.uri, document_name(document.uri), document.text, document.version))
        return tuple(found)

    def get(self, uri: str) -> Document | None:
        return self._documents.get(uri)

    def __len__(self) -> int:
        return len(self._documents)
