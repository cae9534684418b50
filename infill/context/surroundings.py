"""What the parsed document says around a gap: whether it sits in a comment or string, in a Markdown fence (and of
which language), and whether its fill is one line or a block (the context builder's questions to the tree).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from infill.context.syntax import DocumentSnapshot, resolve_language
from infill.context.windows import byte_offset, char_index
from infill.languages import opens_block

if TYPE_CHECKING:
    from tree_sitter import Node

# Nodes whose children sit one per line (call arguments, literals): an empty line there gets one more element.
_ONE_PER_LINE = frozenset(
    {
        "argument_list",
        "arguments",
        "list",
        "dictionary",
        "set",
        "tuple",
        "array",
        "object",
        "parameters",
        "formal_parameters",
        "parameter_list",
        "field_declaration_list",
        "object_type",
        "enum_body",
        "enum_variant_list",
        "literal_value",
        "import_spec_list",
        "use_list",
        "named_imports",
    }
)
_IN_LINE_NODES = (
    "comment",
    "string",
    "template_string",
    "line_comment",
    "block_comment",
    "raw_string_literal",
    "interpreted_string_literal",
    "string_content",
    "string_literal",
)


def looks_like_prose(line: str) -> bool:
    words = line.split()
    return len(words) >= 4 and sum(w.isalpha() for w in words) >= 0.75 * len(words)


def node_at(doc: DocumentSnapshot, index: int) -> Node | None:
    if doc.tree is None:
        return None
    offset = byte_offset(doc, index)
    return doc.tree.root_node.descendant_for_byte_range(offset, offset)


def inside_inline_node(doc: DocumentSnapshot, offset: int) -> bool:
    """The gap is inside a comment (or at the end of a line comment, trailing spaces allowed) or strictly inside a
    string (right after a closing quote is code again)."""
    root = doc.tree.root_node  # type: ignore[union-attr]
    for probe in (offset, max(0, offset - 1)):
        node = root.descendant_for_byte_range(probe, probe)
        while node is not None:
            if node.type in _IN_LINE_NODES and node.start_byte < offset:
                if offset < node.end_byte:
                    return True
                gap = doc.byte_slice(node.end_byte, offset)
                if (
                    "comment" in node.type
                    and not gap.strip()
                    and b"\n" not in gap
                    and not doc.byte_slice(node.start_byte, node.end_byte).endswith(b"*/")
                ):
                    return True
            node = node.parent
    return False


def fence_language(doc: DocumentSnapshot, node: Node | None) -> str | None:
    while node is not None and node.type != "fenced_code_block":
        node = node.parent
    info = next((c for c in node.children if c.type == "info_string"), None) if node is not None else None
    if info is None or info.end_byte <= info.start_byte:
        return None
    words = doc.byte_slice(info.start_byte, info.end_byte).decode("utf-8", "replace").split()
    return resolve_language(words[0]) if words else None


def fence_content(doc: DocumentSnapshot, node: Node | None) -> tuple[int, int] | None:
    while node is not None and node.type not in ("fenced_code_block", "indented_code_block"):
        node = node.parent
    if node is None:
        return None
    content = next((c for c in node.children if c.type == "code_fence_content"), None)
    if node.type == "indented_code_block":
        content = node
    if content is None:
        return None
    return char_index(doc, content.start_byte), char_index(doc, content.end_byte)


def inside(node: Node | None, types: tuple[str, ...]) -> bool:
    while node is not None:
        if node.type in types:
            return True
        node = node.parent
    return False


def single_line(
    mode: str,
    text: str,
    spans: list[tuple[int, int]],
    line_before: str,
    line_after: str,
    node: Node | None,
    is_prose: bool,
    in_comment: bool,
    language: str | None,
) -> bool:
    if mode != "inline":
        # A gap inside a line (a placeholder in a sentence, a selected expression) is filled in that line.
        return all("\n" not in text[a:b] for a, b in spans) and bool(line_before.strip() or line_after.strip())
    if line_after.strip() or in_comment:
        return True
    before = line_before.rstrip()
    if before:
        if is_prose:
            return True
        return not opens_block(before, language)
    if is_prose:
        return _in_markdown_table(text, spans[0][0])
    return _enclosing_container(node) in _ONE_PER_LINE


def _enclosing_container(node: Node | None) -> str | None:
    while node is not None:
        if node.is_named and node.child_count > 0:
            return node.type
        node = node.parent
    return None


def _in_markdown_table(text: str, index: int) -> bool:
    line_start = text.rfind("\n", 0, index) + 1
    previous_start = text.rfind("\n", 0, max(0, line_start - 1)) + 1
    return text[previous_start:line_start].lstrip().startswith("|") and line_start > 0
