"""Candidate hole spans per kind. Each cutter is a pure function of the file (the seeded choice among candidates
happens in holes.py), so the same tree always offers the same candidates."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass

from infill.context.syntax import CODE_GRAMMARS
from infill.languages import python_tree
from infill.pilot.files import SourceFile

KINDS = ("single-line", "multi-line", "function-body", "sentence", "json-value")
CODE_LANGUAGES = CODE_GRAMMARS  # code kinds are cut where a grammar reads the file
MAX_BLOCK_LINES = 12  # longer middles exceed a typical completion budget (the pipeline's max_middle_tokens)
MAX_MIDDLE_CHARS = 600


@dataclass(frozen=True)
class Span:
    start: int  # str offsets into the file text; the middle is text[start:end]
    end: int


def _line_starts(text: str) -> list[int]:
    starts = [0]
    starts.extend(i + 1 for i, ch in enumerate(text) if ch == "\n")
    return starts


def _line_end(text: str, start: int) -> int:
    """Offset of the line's end (its "\n" or "\r\n", or the end of text) for a line starting at `start`."""
    end = text.find("\n", start)
    end = len(text) if end < 0 else end
    return end - 1 if end > start and text[end - 1] == "\r" else end


def _meaningful(line: str) -> bool:
    """A line worth predicting: some letters or digits, not only a comment marker or brackets."""
    stripped = line.strip()
    return len(stripped) >= 4 and re.search(r"[A-Za-z0-9]", stripped) is not None


_BOUNDARY = re.compile(r"(?<=[\w)\]}\"'])(?=[^\w])|(?<=[^\w\s])(?=\w)|(?<=\s)(?=\S)")


def single_line(source: SourceFile) -> list[Span]:
    """The rest of a line from a cursor inside it (after at least one token), as an editor's inline completion."""
    if source.language not in CODE_LANGUAGES:
        return []
    text = source.text
    spans = []
    for start in _line_starts(text):
        end = _line_end(text, start)
        line = text[start:end]
        if not _meaningful(line):
            continue
        indent = len(line) - len(line.lstrip())
        # Token boundaries after the first token and leaving at least 3 characters to predict.
        cuts = [m.start() for m in _BOUNDARY.finditer(line, indent + 1) if m.start() <= len(line.rstrip()) - 3]
        for cut in cuts[:: max(1, len(cuts) // 3)][:3]:
            if re.search(r"[A-Za-z0-9]", line[cut:]):
                spans.append(Span(start + cut, start + len(line.rstrip())))
    return spans


def multi_line(source: SourceFile) -> list[Span]:
    """2 to 5 whole consecutive lines (indentation included, final line break excluded), starting and ending on a
    meaningful line."""
    if source.language not in CODE_LANGUAGES:
        return []
    text = source.text
    starts = _line_starts(text)
    lines = [text[s : _line_end(text, s)] for s in starts]
    spans = []
    for first in range(len(lines)):
        if not _meaningful(lines[first]):
            continue
        count = 2 + first % 4  # a deterministic spread of block sizes
        last = first + count - 1
        if last >= len(lines) or not _meaningful(lines[last]):
            continue
        span = Span(starts[first], starts[last] + len(lines[last]))
        if span.end - span.start <= MAX_MIDDLE_CHARS:
            spans.append(span)
    return spans


def _python_bodies(text: str) -> list[tuple[int, int]]:
    """(first line, last line), 1-based, of each function body, after its docstring (which stays as context)."""
    tree = python_tree(text)
    if tree is None:
        return []
    lines = text.split("\n")  # ast numbers lines by "\n"; str.splitlines also splits at form feeds and others
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or not node.body:
            continue
        body = node.body
        first = body[0]
        if (
            len(body) > 1
            and isinstance(first, ast.Expr)
            and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)
        ):
            body = body[1:]
        start = body[0]
        # The body must begin on its own line (not "def f(): return 1" nor after a ";").
        before = lines[start.lineno - 1].encode("utf-8")[: start.col_offset] if start.lineno <= len(lines) else b"x"
        if before.strip():
            continue
        out.append((start.lineno, body[-1].end_lineno or body[-1].lineno))
    return out


_TS_FUNCTIONS = {
    "javascript": {
        "function_declaration",
        "method_definition",
        "arrow_function",
        "function_expression",
        "generator_function_declaration",
    },
    "go": {"function_declaration", "method_declaration", "func_literal"},
    "rust": {"function_item"},
}
_TS_FUNCTIONS["typescript"] = _TS_FUNCTIONS["typescriptreact"] = _TS_FUNCTIONS["javascript"]


def _tree_sitter_bodies(source: SourceFile) -> list[tuple[int, int]]:
    """Braced function bodies: the lines strictly between a line ending with "{" and a line starting with "}"."""
    from infill.pilot.syntax import parse_tree

    tree = parse_tree(source.language, source.text)
    if tree is None:
        return []
    lines = source.text.encode("utf-8").split(b"\n")
    out = []
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        stack.extend(node.children)
        if node.type not in _TS_FUNCTIONS.get(source.language, ()):
            continue
        body = node.child_by_field_name("body")
        if body is None or body.end_point[0] - body.start_point[0] < 2:
            continue
        (open_row, open_col), (close_row, close_col) = body.start_point, body.end_point
        opens_line = lines[open_row][open_col:].strip() == b"{"
        closes_line = lines[close_row][:close_col].strip() == b"}"
        if opens_line and closes_line:
            out.append((open_row + 2, close_row))  # 1-based rows strictly inside the braces
    return out


def function_body(source: SourceFile) -> list[Span]:
    """A whole function body (Python via ast, braced languages via tree-sitter), as whole lines."""
    if source.language == "python":
        bodies = _python_bodies(source.text)
    elif source.language in _TS_FUNCTIONS:
        bodies = _tree_sitter_bodies(source)
    else:
        return []
    text = source.text
    starts = _line_starts(text)
    spans = []
    for first, last in bodies:
        if not (1 <= first <= last <= len(starts)) or last - first + 1 > MAX_BLOCK_LINES:
            continue
        if source.language != "python" and text[starts[last - 1] : _line_end(text, starts[last - 1])].strip() == "":
            continue
        span = Span(starts[first - 1], _line_end(text, starts[last - 1]))
        if text[span.start : span.end].strip() and span.end - span.start <= MAX_MIDDLE_CHARS:
            spans.append(span)
    return spans


_FENCE = re.compile(r"^\s*(```|~~~)")
_SENTENCE = re.compile(r"[A-Z][^.!?\n]*(?:\n(?![ \t]*(?:\n|[-*+#>|]|\d+\.))[^.!?\n]*)*[.!?](?=\s|$)")


def _prose_regions(text: str) -> list[tuple[int, int]]:
    """Line ranges (str offsets) of Markdown prose: outside code fences, front matter, tables, HTML and headings."""
    regions = []
    in_fence = False
    offset = 0
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if _FENCE.match(line):
            in_fence = not in_fence
        elif (
            not in_fence
            and stripped
            and not stripped.startswith(("#", "|", "<", "    ", "---", "[", "!"))
            and not line.startswith(("    ", "\t"))
        ):
            regions.append((offset, offset + len(line)))
        offset += len(line)
    return regions


def sentence(source: SourceFile) -> list[Span]:
    """A Markdown sentence (capital to full stop) of 5+ words, or the clause after its first comma."""
    if source.language != "markdown":
        return []
    text = source.text
    spans = []
    for start, end in _prose_regions(text):
        for match in _SENTENCE.finditer(text, start, end):
            words = match.group().split()
            if len(words) < 5 or "`" in match.group() or "](" in match.group():
                continue
            spans.append(Span(match.start(), match.end()))
            comma = match.group().find(", ")
            if comma > 0 and len(match.group()[comma + 2 :].split()) >= 3:
                spans.append(Span(match.start() + comma + 2, match.end()))
    return spans


_JSON_SCALARS = {"string", "number", "true", "false", "null"}


def json_value(source: SourceFile) -> list[Span]:
    """The value of an object member or an array element: scalars, and arrays/objects on one short line."""
    if source.language != "json":
        return []
    from infill.pilot.syntax import parse_tree

    tree = parse_tree("json", source.text)
    if tree is None or tree.root_node.has_error:
        return []
    data = source.text.encode("utf-8")
    spans = []
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        stack.extend(node.children)
        parent = node.parent
        in_pair = parent is not None and parent.type == "pair" and parent.child_by_field_name("value") == node
        in_array = parent is not None and parent.type == "array" and node.is_named
        if not (in_pair or in_array) or node.type == "comment":
            continue
        one_line = node.start_point[0] == node.end_point[0] and node.end_byte - node.start_byte <= 160
        if node.type in _JSON_SCALARS or (node.type in ("array", "object") and one_line):
            start = len(data[: node.start_byte].decode("utf-8"))
            spans.append(Span(start, start + len(data[node.start_byte : node.end_byte].decode("utf-8"))))
    spans.sort(key=lambda s: s.start)
    return spans


CUTTERS: dict[str, Callable[[SourceFile], list[Span]]] = {
    "single-line": single_line,
    "multi-line": multi_line,
    "function-body": function_body,
    "sentence": sentence,
    "json-value": json_value,
}
