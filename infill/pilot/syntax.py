"""Does a filled file still parse? Python through `ast`; other languages through tree-sitter, where "valid" means
no more ERROR/MISSING nodes than the original file has (grammars are not perfect, and files may carry errors)."""

from __future__ import annotations

import functools

from tree_sitter import Tree

from infill.context.syntax import error_nodes, new_parser, resolve_language
from infill.languages import python_error


def parse_tree(language: str, text: str) -> Tree | None:
    """A tree-sitter tree from the project's grammars (infill.syntax), or None when `language` has none. A fresh
    parser per call: parsers are not shared between threads."""
    parser = new_parser(resolve_language(language))
    return None if parser is None else parser.parse(text.encode("utf-8"))


def _python_parses(text: str) -> bool:
    return python_error(text) is None  # serialised with every other ast.parse (the pilot runs worker threads)


@functools.lru_cache(maxsize=512)
def _baseline(language: str, original: str) -> int | None:
    """The original file's parse status: errors for tree-sitter, 0/1 for Python, None when it cannot be judged."""
    if language == "python":
        return 0 if _python_parses(original) else None  # an unparsable original gives no baseline
    tree = parse_tree(language, original)
    return None if tree is None else error_nodes(tree)


def syntax_valid(language: str, original: str, filled: str) -> bool | None:
    """True/False, or None when the language has no checker or the original itself does not parse (Python)."""
    baseline = _baseline(language, original)
    if baseline is None:
        return None
    if language == "python":
        return _python_parses(filled)
    tree = parse_tree(language, filled)
    return None if tree is None else error_nodes(tree) <= baseline
