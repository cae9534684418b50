"""Does a filled file still parse? Python through `ast`; other languages through tree-sitter, where "valid" means
no more ERROR/MISSING nodes than the original file has (grammars are not perfect, and files may carry errors)."""

from __future__ import annotations

import ast
import functools
import importlib
import warnings

_GRAMMARS = {
    "python": ("tree_sitter_python", "language"), "javascript": ("tree_sitter_javascript", "language"),
    "typescript": ("tree_sitter_typescript", "language_typescript"),
    "tsx": ("tree_sitter_typescript", "language_tsx"), "go": ("tree_sitter_go", "language"),
    "rust": ("tree_sitter_rust", "language"), "json": ("tree_sitter_json", "language"),
    "markdown": ("tree_sitter_markdown", "language"),
}


@functools.lru_cache(maxsize=None)
def _language(name: str):
    from tree_sitter import Language

    module_name, attr = _GRAMMARS[name]
    return Language(getattr(importlib.import_module(module_name), attr)())


def parse_tree(language: str, text: str):
    """A tree-sitter tree, or None when no grammar is installed for `language`. A fresh Parser per call: parsers
    are not shared between threads."""
    if language not in _GRAMMARS:
        return None
    from tree_sitter import Parser

    try:
        return Parser(_language(language)).parse(text.encode("utf-8"))
    except (ImportError, AttributeError, ValueError):
        return None


def error_count(tree) -> int:
    """ERROR and MISSING nodes, descending only into subtrees that contain one."""
    count = 0
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        if node.type == "ERROR" or node.is_missing:
            count += 1
        stack.extend(child for child in node.children if child.has_error)
    return count


def _python_parses(text: str) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escape sequences in old files are not our business
            ast.parse(text)
        return True
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False


@functools.lru_cache(maxsize=512)
def _baseline(language: str, original: str) -> int | None:
    """The original file's parse status: errors for tree-sitter, 0/1 for Python, None when it cannot be judged."""
    if language == "python":
        return 0 if _python_parses(original) else None  # an unparsable original gives no baseline
    tree = parse_tree(language, original)
    return None if tree is None else error_count(tree)


def syntax_valid(language: str, original: str, filled: str) -> bool | None:
    """True/False, or None when the language has no checker or the original itself does not parse (Python)."""
    baseline = _baseline(language, original)
    if baseline is None:
        return None
    if language == "python":
        return _python_parses(filled)
    tree = parse_tree(language, filled)
    return None if tree is None else error_count(tree) <= baseline
