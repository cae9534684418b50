"""Tree-sitter grammars from the per-language wheels, incremental documents, and error counting.

Only the grammar wheels installed with the project are used (never a loader that downloads grammars at run time).
A grammar that fails to load is logged once and the caller falls back to line-based handling.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from dataclasses import dataclass
from functools import cached_property, lru_cache

log = logging.getLogger(__name__)

# LSP languageId -> (module, function returning the language pointer)
_GRAMMARS: dict[str, tuple[str, str]] = {
    "python": ("tree_sitter_python", "language"),
    "javascript": ("tree_sitter_javascript", "language"),
    "typescript": ("tree_sitter_typescript", "language_typescript"),
    "typescriptreact": ("tree_sitter_typescript", "language_tsx"),
    "go": ("tree_sitter_go", "language"),
    "rust": ("tree_sitter_rust", "language"),
    "json": ("tree_sitter_json", "language"),
    "markdown": ("tree_sitter_markdown", "language"),
}
_ALIASES = {
    "py": "python", "python3": "python", "javascriptreact": "javascript", "js": "javascript", "jsx": "javascript",
    "ts": "typescript", "tsx": "typescriptreact", "golang": "go", "rs": "rust", "jsonc": "json", "md": "markdown",
}
_EXTENSIONS = {
    ".py": "python", ".pyi": "python", ".js": "javascript", ".mjs": "javascript", ".cjs": "javascript",
    ".jsx": "javascript", ".ts": "typescript", ".mts": "typescript", ".cts": "typescript", ".tsx": "typescriptreact",
    ".go": "go", ".rs": "rust", ".json": "json", ".jsonc": "json", ".md": "markdown", ".markdown": "markdown",
}
_READ_CHUNK = 16384  # bytes handed to tree-sitter per read of an ASCII document
# Notes kept for a document nobody asks a context for (completions disabled, language refused): past this many,
# they are dropped and the next context compares texts instead, so memory stays bounded.
MAX_PENDING_NOTES = 1000
PROSE_LANGUAGES = frozenset({"markdown", "plaintext", "text"})
# Languages whose blocks are delimited by indentation rather than braces.
INDENT_LANGUAGES = frozenset({"python"})


def resolve_language(language: str | None, document_id: str | None = None) -> str | None:
    """Normalise an LSP languageId (or, failing that, the document's file extension) to a grammar key.
    Unknown languages come back lower-cased as given, so prose/code decisions still see them."""
    if language:
        key = language.strip().lower()
        key = _ALIASES.get(key, key)
        if key in _GRAMMARS or key not in ("", "plaintext"):
            return key
    if document_id:
        ext = os.path.splitext(document_id.split("?", 1)[0])[1].lower()
        if ext in _EXTENSIONS:
            return _EXTENSIONS[ext]
    return language.strip().lower() if language else None


@lru_cache(maxsize=None)
def load_language(key: str | None):
    """The tree-sitter Language for a grammar key, or None (unknown language, or a grammar that failed to load)."""
    if key not in _GRAMMARS:
        return None
    module_name, attr = _GRAMMARS[key]
    try:
        import tree_sitter

        module = importlib.import_module(module_name)
        return tree_sitter.Language(getattr(module, attr)())
    except Exception as exc:  # a broken wheel must not take completions down: line-based windows still work
        log.warning("tree-sitter grammar for %s failed to load (%s); using line-based context", key, exc)
        return None


def new_parser(key: str | None):
    language = load_language(key)
    if language is None:
        return None
    import tree_sitter

    return tree_sitter.Parser(language)


def _point(data: bytes, offset: int) -> tuple[int, int]:
    row = data.count(b"\n", 0, offset)
    line_start = data.rfind(b"\n", 0, offset) + 1
    return row, offset - line_start


def common_affixes(old: bytes, new: bytes) -> tuple[int, int]:
    """Lengths of the common prefix and (non-overlapping) common suffix of two byte strings.
    Binary search over slice equality keeps the comparisons in C (memcmp), fast on large files."""
    limit = min(len(old), len(new))
    lo, hi = 0, limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if old[:mid] == new[:mid]:
            lo = mid
        else:
            hi = mid - 1
    head = lo
    lo, hi = 0, limit - head
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if old[len(old) - mid:] == new[len(new) - mid:]:
            lo = mid
        else:
            hi = mid - 1
    return head, lo


@dataclass(frozen=True)
class Edit:
    start: int  # byte offsets
    old_end: int
    new_end: int


def diff_edit(old: bytes, new: bytes) -> Edit | None:
    """The single changed range turning `old` into `new` (None when equal)."""
    if old == new:
        return None
    head, tail = common_affixes(old, new)
    return Edit(head, len(old) - tail, len(new) - tail)


def apply_edit(tree, old: bytes, new: bytes, edit: Edit) -> None:
    """Tell `tree` (parsed from `old`) about an edit, so the next parse with it as old tree is incremental."""
    tree.edit(start_byte=edit.start, old_end_byte=edit.old_end, new_end_byte=edit.new_end,
              start_point=_point(old, edit.start), old_end_point=_point(old, edit.old_end),
              new_end_point=_point(new, edit.new_end))


def apply_fills(text: str, spans: list[tuple[int, int]], middles: list[str]) -> str:
    """`text` with each `middles[i]` in place of `spans[i]` (sorted, non-overlapping str spans)."""
    pieces, cursor = [], 0
    for (a, b), middle in zip(spans, middles):
        pieces += [text[cursor:a], middle]
        cursor = b
    pieces.append(text[cursor:])
    return "".join(pieces)


@dataclass(frozen=True)
class DocumentSnapshot:
    """One version of a document and its tree, safe to read from any thread (trees are never edited in place
    once published). `data` (the UTF-8 bytes) is made on first use: an ASCII document never needs it per
    keystroke, since its byte offsets are its str offsets."""

    language: str | None
    text: str
    tree: object | None

    @property
    def has_grammar(self) -> bool:
        return self.tree is not None

    @property
    def is_ascii(self) -> bool:
        return self.text.isascii()  # O(1): CPython flags ASCII strings when it makes them

    @cached_property
    def data(self) -> bytes:
        return self.text.encode("utf-8")

    def byte_slice(self, start: int, end: int) -> bytes:
        """data[start:end] without encoding the whole document when it is ASCII."""
        return self.text[start:end].encode("ascii") if self.is_ascii else self.data[start:end]

    def parse_filled(self, spans: list[tuple[int, int]], middles: list[str]):
        """The tree of this document with each `middles[i]` in place of `spans[i]` (sorted str spans), parsed
        incrementally from this tree with a private parser. The changed range is known, so unlike
        `parse_variant` nothing is compared."""
        parser = new_parser(self.language) if self.tree is not None else None
        if parser is None:
            return None
        filled = apply_fills(self.text, spans, middles)
        start, old_end = spans[0][0], spans[-1][1]
        region = ChangedRegion(len(self.text))
        region.add(NotedEdit(start, old_end, filled[start:len(filled) - (len(self.text) - old_end)]))
        tree = self.tree.copy()  # type: ignore[union-attr]
        edit_tree(tree, self.text, filled, region)
        return parse_text(parser, filled, tree)

    def parse_variant(self, new_text: str):
        """Parse an edited copy (a candidate fill applied), incrementally from this tree, with a private parser."""
        parser = new_parser(self.language) if self.tree is not None else None
        if parser is None:
            return None
        data = new_text.encode("utf-8")
        edit = diff_edit(self.data, data)
        if edit is None:
            return self.tree
        tree = self.tree.copy()  # type: ignore[union-attr]
        apply_edit(tree, self.data, data, edit)
        return parser.parse(data, tree)


@dataclass(frozen=True)
class NotedEdit:
    """One change the editor reported: text[start:old_end] became `new_text` (str offsets into the text as it
    was just before this change), making document version `version` (None: unversioned)."""

    start: int
    old_end: int
    new_text: str
    version: int | None = None


class ChangedRegion:
    """Folds a run of noted edits into one changed region, with O(1) work per edit: old text = A + X + B and new
    text = A + Y + B, with `start` = len(A), `old_end` = len(A + X), `new_end` = len(A + Y) (str offsets). One
    tree.edit over that region makes the incremental parse give the same tree as a fresh one."""

    def __init__(self, old_length: int) -> None:
        self.old_length = old_length
        self.length = old_length  # the text's length after the edits folded so far
        self.start = self.old_end = self.new_end = -1  # no change yet

    def add(self, edit: NotedEdit) -> None:
        a, b, inserted = edit.start, edit.old_end, len(edit.new_text)
        delta = inserted - (b - a)
        if self.start < 0:
            start, end = a, a + inserted
        else:
            mapped_end = self.new_end + delta if self.new_end >= b else (self.new_end if self.new_end <= a
                                                                         else a + inserted)
            start, end = min(self.start, a), max(mapped_end, a + inserted)
        self.length += delta
        self.start, self.new_end = start, end
        self.old_end = self.old_length - (self.length - end)  # the unchanged tail B is as long in both texts


def edit_tree(tree, old: str, new: str, region: ChangedRegion) -> None:
    """tree.edit for a region of str offsets (old[start:old_end] became new[start:new_end]); byte offsets are the
    str offsets for ASCII text, else only the text before the region's end is encoded."""
    ascii_old, ascii_new = old.isascii(), new.isascii()
    if ascii_old and ascii_new:
        start_byte, old_end_byte, new_end_byte = region.start, region.old_end, region.new_end
    else:
        start_byte = len(old[:region.start].encode("utf-8"))
        old_end_byte = start_byte + len(old[region.start:region.old_end].encode("utf-8"))
        new_end_byte = start_byte + len(new[region.start:region.new_end].encode("utf-8"))
    tree.edit(start_byte=start_byte, old_end_byte=old_end_byte, new_end_byte=new_end_byte,
              start_point=_point_at(old, region.start, ascii_old),
              old_end_point=_point_at(old, region.old_end, ascii_old),
              new_end_point=_point_at(new, region.new_end, ascii_new))


def parse_text(parser, text: str, old_tree=None):
    if text.isascii():
        # Read what the parser asks for: an incremental parse reads little beyond the edit, so the whole
        # document is never encoded.
        source = lambda offset, _point: text[offset:offset + _READ_CHUNK].encode("ascii")  # noqa: E731
    else:
        source = text.encode("utf-8")
    return parser.parse(source) if old_tree is None else parser.parse(source, old_tree)


def _point_at(text: str, index: int, ascii_text: bool) -> tuple[int, int]:
    """Tree-sitter point (row, UTF-8 byte column) of a str index; rows end at "\n" only."""
    line_start = text.rfind("\n", 0, index) + 1
    column = index - line_start if ascii_text else len(text[line_start:index].encode("utf-8"))
    return text.count("\n", 0, index), column


class ParsedDocument:
    """One document's latest text and syntax tree. The editor's changes are noted as they arrive (`note_edit`,
    O(1), any thread); `update` folds the notes up to the requested version into one tree.edit and re-parses
    incrementally, only when a context is asked for. Without notes (callers that only pass whole texts) the
    changed range is found by comparing the old and new text. `update` calls are serialised by the caller
    (the ContextBuilder holds a per-document lock); notes have their own small lock so they never wait on a parse."""

    def __init__(self, language: str | None) -> None:
        self.language = language
        self.parser = new_parser(language)
        self.tree = None
        self.text = ""
        self.lock = threading.Lock()  # serialises update (held by the ContextBuilder)
        self._notes: list[NotedEdit] = []
        self._notes_dropped = False  # too many notes piled up: the next update compares texts
        self._notes_lock = threading.Lock()

    @property
    def has_grammar(self) -> bool:
        return self.parser is not None

    def note_edit(self, edit: NotedEdit) -> None:
        with self._notes_lock:
            if self._notes_dropped:
                return
            if len(self._notes) >= MAX_PENDING_NOTES:
                self._notes.clear()
                self._notes_dropped = True
                return
            self._notes.append(edit)

    def update(self, text: str, version: int | None = None) -> "DocumentSnapshot":
        notes = self._take_notes(version)
        dropped = notes is None  # too many notes piled up: only a comparison can tell what changed
        notes = notes or []
        if self.parser is None or (self.tree is not None and not notes and not dropped and text == self.text):
            self.text = text
            return self.snapshot()
        if self.tree is None:
            self.tree = self._parse(text, None)
        else:
            region = None if dropped else self._fold(notes, len(text))
            old = self.tree.copy()  # snapshots may still hold the previous tree: edit a copy
            if region is not None:
                self._edit(old, text, region)
            else:  # no usable notes: find the changed range by comparison
                with self._notes_lock:
                    self._notes.clear()  # later notes may be relative to another text than this one
                old_data, data = self.text.encode("utf-8"), text.encode("utf-8")
                edit = diff_edit(old_data, data)
                if edit is None:
                    self.text = text
                    return self.snapshot()
                apply_edit(old, old_data, data, edit)
            self.tree = self._parse(text, old)
        self.text = text
        return self.snapshot()

    def _take_notes(self, version: int | None) -> list[NotedEdit] | None:
        """The notes that lead up to `version` (all of them for an unversioned request); later ones stay.
        None when notes were dropped (too many piled up)."""
        with self._notes_lock:
            if self._notes_dropped:
                self._notes.clear()
                self._notes_dropped = False
                return None
            count = 0
            for note in self._notes:
                if version is not None and note.version is not None and note.version > version:
                    break
                count += 1
            taken, self._notes = self._notes[:count], self._notes[count:]
        return taken

    def _fold(self, notes: list[NotedEdit], new_length: int) -> ChangedRegion | None:
        if not notes:
            return None
        region = ChangedRegion(len(self.text))
        for note in notes:
            if not 0 <= note.start <= note.old_end <= region.length:
                log.debug("edit %s..%s outside the noted text; comparing texts instead", note.start, note.old_end)
                return None
            region.add(note)
        if region.length != new_length:  # an edit was missed: the notes do not lead to this text
            log.debug("noted edits give %d chars, the text has %d; comparing texts instead", region.length,
                      new_length)
            return None
        return region

    def _edit(self, tree, text: str, region: ChangedRegion) -> None:
        edit_tree(tree, self.text, text, region)

    def _parse(self, text: str, old_tree):
        return parse_text(self.parser, text, old_tree)

    def snapshot(self) -> DocumentSnapshot:
        return DocumentSnapshot(self.language, self.text, self.tree)

    def parse_variant(self, new_text: str):
        return self.snapshot().parse_variant(new_text)


def error_nodes(tree, start_byte: int = 0, end_byte: int | None = None) -> int:
    """ERROR and MISSING nodes overlapping [start_byte, end_byte); only subtrees flagged with errors are walked."""
    if tree is None:
        return 0
    end_byte = tree.root_node.end_byte if end_byte is None else end_byte
    count = 0
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        if node.end_byte < start_byte or node.start_byte > end_byte:
            continue
        if node.is_error or node.is_missing:
            count += 1
            if node.is_missing:
                continue
        if node.has_error:
            stack.extend(node.children)
    return count


def errors_inside(tree, start_byte: int, end_byte: int) -> int:
    """ERROR nodes lying wholly inside [start_byte, end_byte): broken text that nothing outside it caused."""
    if tree is None or end_byte <= start_byte:
        return 0
    count = 0
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        if node.end_byte <= start_byte or node.start_byte >= end_byte or not node.has_error:
            continue
        if node.is_error and start_byte <= node.start_byte and node.end_byte <= end_byte:
            count += 1
            continue
        stack.extend(node.children)
    return count
