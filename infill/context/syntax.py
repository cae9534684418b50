"""Tree-sitter grammars from the per-language wheels, incremental documents, and error counting.

Only the grammar wheels installed with the project are used (never a loader that downloads grammars at run time).
A grammar that fails to load is logged once and the caller falls back to line-based handling.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from dataclasses import dataclass, field
from functools import cache, cached_property
from typing import TYPE_CHECKING, Any

from infill.context.edits import ChangedSpan, Edit
from infill.context.regions import REGION_MIN_CHARS, Cuts, covers, region_for, shift_region
from infill.context.tree_edits import apply_edit, diff_edit, edit_tree, included_range, parse_text

if TYPE_CHECKING:
    from tree_sitter import Language, Parser, Tree

log = logging.getLogger(__name__)

# LSP languageId -> (module, function returning the language pointer): the one list of languages with a grammar
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
GRAMMAR_LANGUAGES = frozenset(_GRAMMARS)
CODE_GRAMMARS = GRAMMAR_LANGUAGES - {"json", "markdown"}  # the grammars of programming languages (not data, prose)
_ALIASES = {
    "py": "python",
    "python3": "python",
    "javascriptreact": "javascript",
    "js": "javascript",
    "jsx": "javascript",
    "ts": "typescript",
    "tsx": "typescriptreact",
    "golang": "go",
    "rs": "rust",
    "jsonc": "json",
    "md": "markdown",
}
# A file name's extension -> LSP languageId (for a document whose client named no language, and the pilot's files)
LANGUAGE_BY_EXTENSION = {
    ".py": "python",
    ".pyi": "python",
    ".js": "javascript",
    ".mjs": "javascript",
    ".cjs": "javascript",
    ".jsx": "javascript",
    ".ts": "typescript",
    ".mts": "typescript",
    ".cts": "typescript",
    ".tsx": "typescriptreact",
    ".go": "go",
    ".rs": "rust",
    ".json": "json",
    ".jsonc": "json",
    ".md": "markdown",
    ".markdown": "markdown",
}
# Notes kept for a document nobody asks a context for (completions disabled, language refused): past this many,
# they are dropped and the next context compares texts instead, so memory stays bounded.
MAX_PENDING_NOTES = 1000


def resolve_language(language: str | None, document_id: str | None = None) -> str | None:
    """Normalise an LSP languageId (or, failing that, the document's file extension) to a grammar key.
    Unknown languages come back lower-cased as given, so prose/code decisions still see them."""
    if language:
        key = language.strip().lower()
        key = _ALIASES.get(key, key)
        if key in _GRAMMARS or key not in ("", "plaintext"):
            return key
    if document_id:
        by_path = language_of_path(document_id.split("?", 1)[0])
        if by_path is not None:
            return by_path
    return language.strip().lower() if language else None


def language_of_path(path: str) -> str | None:
    """The LSP languageId a file's extension says, or None."""
    return LANGUAGE_BY_EXTENSION.get(os.path.splitext(path)[1].lower())


@cache
def load_language(key: str | None) -> Language | None:
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


def new_parser(key: str | None) -> Parser | None:
    language = load_language(key)
    if language is None:
        return None
    import tree_sitter

    return tree_sitter.Parser(language)


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
    tree: Tree | None
    region: tuple[int, int] | None = None  # the tree covers only text[region[0]:region[1]] (a large document)
    # The document's own scratch space, kept across versions (the ContextBuilder keeps its last window there).
    memo: dict[str, Any] | None = field(default=None, compare=False, repr=False)

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

    def parse_filled(self, spans: list[tuple[int, int]], middles: list[str]) -> Tree | None:
        """The tree of this document with each `middles[i]` in place of `spans[i]` (sorted str spans), parsed
        incrementally from this tree with a private parser (the changed range is known: nothing is compared)."""
        parser = new_parser(self.language) if self.tree is not None else None
        if parser is None:
            return None
        filled = apply_fills(self.text, spans, middles)
        start, old_end = spans[0][0], spans[-1][1]
        change = Edit(start, old_end, old_end + len(filled) - len(self.text))
        tree = self.tree.copy()  # type: ignore[union-attr]
        edit_tree(tree, self.text, filled, change)
        if self.region is not None:  # the region grows or shrinks with the fill
            end = self.region[1] + len(filled) - len(self.text)
            parser.included_ranges = [included_range(filled, self.region[0], end)]
        return parse_text(parser, filled, tree)


class ParsedDocument:
    """One document's latest text and syntax tree. The editor's changes are noted as they arrive (`note_edit`,
    O(1), any thread); `update` folds the notes up to the requested version into one tree.edit and re-parses
    incrementally, only when a context is asked for. Without notes (callers that only pass whole texts) the
    changed range is found by comparing the old and new text. A large ASCII document asked about at a `focus` is
    parsed only in a region around it (see regions.py). `update` calls are serialised by the caller (the
    ContextBuilder holds a per-document lock); notes have their own small lock so they never wait on a parse."""

    def __init__(self, language: str | None) -> None:
        self.language = language
        self.parser = new_parser(language)
        self.tree: Tree | None = None
        self.text = ""
        self.region: tuple[int, int] | None = None  # the tree covers only this part of the text
        self.lock = threading.Lock()  # serialises update (held by the ContextBuilder)
        self._cuts: Cuts | None = None  # top-level statement starts, for choosing regions
        self.memo: dict[str, Any] = {}  # see DocumentSnapshot.memo
        self._region_parser: Parser | None = None
        # (version, edit) for each change the editor reported, in str offsets of the text just before it;
        # version None: unversioned.
        self._notes: list[tuple[int | None, Edit]] = []
        self._notes_dropped = False  # too many notes piled up: the next update compares texts
        self._notes_lock = threading.Lock()

    @property
    def has_grammar(self) -> bool:
        return self.parser is not None

    def note_edit(self, edit: Edit, version: int | None = None) -> None:
        with self._notes_lock:
            if self._notes_dropped:
                return
            if len(self._notes) >= MAX_PENDING_NOTES:
                self._notes.clear()
                self._notes_dropped = True
                return
            self._notes.append((version, edit))

    def update(
        self,
        text: str,
        version: int | None = None,
        focus: tuple[int, int] | None = None,
        reach: tuple[int, int] = (0, 0),
    ) -> DocumentSnapshot:
        """Bring the tree up to `text` (version `version`). With a `focus` (the gap) and the `reach` of its context
        (chars before and after), a large ASCII document is parsed only in a region that holds that context."""
        notes = self._take_notes(version)
        dropped = notes is None  # too many notes piled up: only a comparison can tell what changed
        notes = notes or []
        if self.parser is None:
            self.text = text
            return self.snapshot()
        use_region = focus is not None and len(text) >= REGION_MIN_CHARS and text.isascii()
        if (
            self.tree is not None
            and not notes
            and not dropped
            and text == self.text
            and (self.region is None or (focus is not None and covers(self.region, focus, reach, len(text))))
        ):
            return self.snapshot()
        old_tree, span = None, None
        if self.tree is not None:
            old_tree = self.tree.copy()  # snapshots may still hold the previous tree: edit a copy
            span = self._edit(old_tree, text, None if dropped else notes)
        if self._cuts is not None and self.tree is not None:
            if span is None:
                self._cuts = None  # a change known only as a byte range: the cuts are lost
            elif span.changed:
                self._cuts.note(span.edit)  # type: ignore[arg-type]
        region = None
        if use_region and focus is not None and old_tree is not None:
            region = self._choose_region(text, span, focus, reach)
        if region is None:
            # The whole document; from scratch when the old tree covered only a region.
            self.tree = parse_text(self.parser, text, old_tree if self.region is None else None)
            self.region = None
            if use_region:
                self._cuts = Cuts(_line_start_children(self.tree, text), len(text))
        else:
            if self._region_parser is None:
                self._region_parser = new_parser(self.language)
            parser = self._region_parser
            assert parser is not None  # a region is chosen only where the document has a tree, so a grammar
            parser.included_ranges = [included_range(text, *region)]
            reuse = self.region is not None and span is not None and shift_region(self.region, span.edit) == region
            self.tree = parse_text(parser, text, old_tree if reuse else None)
            self.region = region
        self.text = text
        return self.snapshot()

    def _choose_region(
        self, text: str, span: ChangedSpan | None, focus: tuple[int, int], reach: tuple[int, int]
    ) -> tuple[int, int] | None:
        """The current region moved with the edits when it still holds the gap's context, else a new one from the
        cuts (None: parse the whole document, which also renews the cuts)."""
        if self.region is not None and span is not None:
            shifted = shift_region(self.region, span.edit)
            if shifted is not None and covers(shifted, focus, reach, len(text)):
                return shifted
        if self._cuts is None:
            return None
        return region_for(self._cuts, len(text), focus, reach)

    def _edit(self, tree: Tree, text: str, notes: list[tuple[int | None, Edit]] | None) -> ChangedSpan | None:
        """Tell `tree` (of self.text) what changed to make `text`: from the notes, or by comparing the texts. The
        change as a str span, or None when only a byte range is known (non-ASCII text compared)."""
        span = self._fold(notes, len(text)) if notes else None
        if span is not None:
            if span.changed:
                edit_tree(tree, self.text, text, span.edit)  # type: ignore[arg-type]
            return span
        with self._notes_lock:
            self._notes.clear()  # later notes may be relative to another text than this one
        ascii_text = self.text.isascii() and text.isascii()
        old_data, data = (
            (self.text.encode("ascii"), text.encode("ascii"))
            if ascii_text
            else (self.text.encode("utf-8"), text.encode("utf-8"))
        )
        edit = diff_edit(old_data, data)
        if edit is None:
            return ChangedSpan(len(text))  # nothing changed
        apply_edit(tree, old_data, data, edit)
        if not ascii_text:
            return None
        span = ChangedSpan(len(self.text))
        span.add(edit)  # ASCII: byte offsets are str offsets
        return span

    def _take_notes(self, version: int | None) -> list[tuple[int | None, Edit]] | None:
        """The notes that lead up to `version` (all of them for an unversioned request); later ones stay.
        None when notes were dropped (too many piled up)."""
        with self._notes_lock:
            if self._notes_dropped:
                self._notes.clear()
                self._notes_dropped = False
                return None
            count = 0
            for noted_version, _ in self._notes:
                if version is not None and noted_version is not None and noted_version > version:
                    break
                count += 1
            taken, self._notes = self._notes[:count], self._notes[count:]
        return taken

    def _fold(self, notes: list[tuple[int | None, Edit]], new_length: int) -> ChangedSpan | None:
        span = ChangedSpan(len(self.text))
        for _, edit in notes:
            if not 0 <= edit.start <= edit.old_end <= span.length:
                log.debug("edit %s..%s outside the noted text; comparing texts instead", edit.start, edit.old_end)
                return None
            span.add(edit)
        if span.length != new_length:  # an edit was missed: the notes do not lead to this text
            log.debug("noted edits give %d chars, the text has %d; comparing texts instead", span.length, new_length)
            return None
        return span

    def snapshot(self) -> DocumentSnapshot:
        return DocumentSnapshot(self.language, self.text, self.tree, self.region, self.memo)


def _line_start_children(tree: Tree, text: str) -> list[int]:
    """Starts of the root's children that begin a line (a statement after `;` is no place to start parsing)."""
    return [
        c.start_byte
        for c in tree.root_node.children
        if c.start_byte == 0 or text[c.start_byte - 1 : c.start_byte] == "\n"
    ]


def error_nodes(tree: Tree | None, start_byte: int = 0, end_byte: int | None = None) -> int:
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


def errors_inside(tree: Tree | None, start_byte: int, end_byte: int) -> int:
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
