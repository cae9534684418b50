"""Tree-sitter grammars from the per-language wheels, incremental documents, and error counting.

Only the grammar wheels installed with the project are used (never a loader that downloads grammars at run time).
A grammar that fails to load is logged once and the caller falls back to line-based handling.
"""

from __future__ import annotations

import importlib
import logging
import os
from dataclasses import dataclass
from functools import lru_cache

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


@dataclass(frozen=True)
class DocumentSnapshot:
    """One version of a document and its tree, safe to read from any thread (trees are never edited in place
    once published)."""

    language: str | None
    text: str
    data: bytes
    tree: object | None

    @property
    def has_grammar(self) -> bool:
        return self.tree is not None

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


class ParsedDocument:
    """One document's latest text and syntax tree; `update` re-parses incrementally from the previous tree.
    Not thread-safe: callers serialise `update` (the ContextBuilder holds a lock) and hand out snapshots."""

    def __init__(self, language: str | None) -> None:
        self.language = language
        self.parser = new_parser(language)
        self.data = b""
        self.tree = None
        self.text = ""

    @property
    def has_grammar(self) -> bool:
        return self.parser is not None

    def update(self, text: str) -> "DocumentSnapshot":
        if self.parser is None or (self.tree is not None and text == self.text):
            self.text = text
            return self.snapshot()
        data = text.encode("utf-8")
        if self.tree is None:
            self.tree = self.parser.parse(data)
        else:
            edit = diff_edit(self.data, data)
            if edit is not None:
                old = self.tree.copy()  # snapshots may still hold the previous tree: edit a copy
                apply_edit(old, self.data, data, edit)
                self.tree = self.parser.parse(data, old)
        self.data, self.text = data, text
        return self.snapshot()

    def snapshot(self) -> DocumentSnapshot:
        data = self.data if self.tree is not None else self.text.encode("utf-8")
        return DocumentSnapshot(self.language, self.text, data, self.tree)

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
