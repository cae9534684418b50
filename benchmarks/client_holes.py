"""Holes cut the way editors and generic FIM clients send them (`fill_quality.py --set clients` / `clients-dev`).

The pilot's single-line cutter (infill/pilot/spans.py) cuts ordinary lines after their first token. Clients send
any line: a decorator, a line inside a docstring, a line above or below a comment, a block opener (`try:`), the
first line of a bracketed construct (`return (`, `def name(`), a line inside brackets (an argument), and the cursor
is as often at the start of the line (a new line, after Enter) as inside it. The rule here:

- a line of a Python file whose text (without indentation) is 4-60 characters, not a comment and not starting with
  a quote (a string's first line); lines inside a multi-line string count (docstring text, doctest lines);
- the cursor at the line's indentation (half the holes) or at a token boundary after its first token leaving at
  least 3 characters (the other half); the middle is the rest of the line, the suffix the rest of the file;
- lines drawn with a seed, one file at a time in turn (so large files do not dominate).

Each hole carries the line's kind, read from the file's tokens, for the figures by kind (`KINDS`).
"""

from __future__ import annotations

import ast
import io
import random
import re
import tokenize
from dataclasses import dataclass

from infill.pilot.files import Discovery, SourceFile
from infill.pilot.holes import Hole

# decorator: `@x`; docstring: a line inside a docstring; in-string: inside another multi-line string;
# bracket-opener: opens a bracket that a later line closes; inside-brackets: starts inside an open bracket;
# block-opener: a compound statement's header (`if x:`, `try:`); comment-adjacent: a statement next to a comment
# line; statement: any other statement.
KINDS = (
    "decorator",
    "docstring",
    "in-string",
    "bracket-opener",
    "inside-brackets",
    "block-opener",
    "comment-adjacent",
    "statement",
)
CURSORS = ("line-start", "mid-line")
MIN_CHARS, MAX_CHARS = 4, 60
_BLOCK_KEYWORDS = re.compile(r"(async\s+)?(if|elif|else|for|while|try|except|finally|with|def|class|match|case)\b")
_OPENS_STRING = re.compile(r"[rbfuRBFU]{0,2}[\"']")
_BOUNDARY = re.compile(r"(?<=[\w)\]}\"'])(?=[^\w])|(?<=[^\w\s])(?=\w)|(?<=\s)(?=\S)")


@dataclass(frozen=True)
class ClientHole:
    hole: Hole
    kind: str  # one of KINDS
    cursor: str  # one of CURSORS


def _docstring_lines(tree: ast.AST) -> set[int]:
    """1-based lines of docstrings (module, class, function)."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return lines


def line_kinds(text: str) -> dict[int, str]:
    """0-based line -> kind, for every line the rule admits (an empty dict for a file Python cannot read)."""
    try:
        tree = ast.parse(text)
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (SyntaxError, tokenize.TokenError, ValueError):
        return {}
    lines = text.split("\n")
    docstrings = _docstring_lines(tree)
    inside_string: set[int] = set()  # 0-based lines that start inside a multi-line string token
    depth_at_start: dict[int, int] = {}
    depth_at_end: dict[int, int] = {}
    depth = 0
    for tok in tokens:
        (row, _), (end_row, _) = tok.start, tok.end
        depth_at_start.setdefault(row - 1, depth)
        if tok.type == tokenize.STRING or tok.type == getattr(tokenize, "FSTRING_START", -1):
            inside_string.update(range(row, end_row))  # lines after the token's first
        if tok.type == tokenize.OP and tok.string in "([{":
            depth += 1
        elif tok.type == tokenize.OP and tok.string in ")]}":
            depth = max(0, depth - 1)
        depth_at_end[end_row - 1] = depth
    comment_line = [line.lstrip().startswith("#") for line in lines]
    kinds: dict[int, str] = {}
    for number, line in enumerate(lines):
        content = line.strip()
        if not MIN_CHARS <= len(content) <= MAX_CHARS or content.startswith("#") or _OPENS_STRING.match(content):
            continue
        if number in inside_string:
            kinds[number] = "docstring" if number + 1 in docstrings else "in-string"
            continue
        start, end = depth_at_start.get(number, 0), depth_at_end.get(number, 0)
        if content.startswith("@"):
            kind = "decorator"
        elif start > 0:
            kind = "inside-brackets"
        elif end > 0:
            kind = "bracket-opener"
        elif content.endswith(":") and _BLOCK_KEYWORDS.match(content):
            kind = "block-opener"
        elif (number > 0 and comment_line[number - 1]) or (number + 1 < len(lines) and comment_line[number + 1]):
            kind = "comment-adjacent"
        else:
            kind = "statement"
        kinds[number] = kind
    return kinds


def _cursor(line: str, rng: random.Random) -> tuple[int, str]:
    """Column of the cursor in `line`, and which kind of cursor it is."""
    indent = len(line) - len(line.lstrip())
    end = len(line.rstrip())
    cuts = [m.start() for m in _BOUNDARY.finditer(line, indent + 1) if m.start() <= end - 3]
    if rng.random() < 0.5 or not cuts:
        return indent, "line-start"
    return rng.choice(cuts), "mid-line"


def cut_client_holes(found: Discovery, n: int, seed: int) -> list[ClientHole]:
    """`n` holes (fewer if the files hold fewer lines), the same for the same files and seed."""
    rng = random.Random(seed)
    files = sorted((f for f in found.files if f.language == "python" and "\r" not in f.text), key=lambda f: f.path)
    rng.shuffle(files)
    pools: list[tuple[SourceFile, list[tuple[int, str]]]] = []
    for source in files:
        kinds = sorted(line_kinds(source.text).items())
        if kinds:
            pools.append((source, kinds))
    picked: list[ClientHole] = []
    while len(picked) < n and pools:
        for source, lines in pools:
            if len(picked) >= n:
                break
            number, kind = lines.pop(rng.randrange(len(lines)))
            picked.append(_make(source, number, kind, rng, len(picked)))
        pools = [(s, lines) for s, lines in pools if lines]
    return picked


def _make(source: SourceFile, number: int, kind: str, rng: random.Random, index: int) -> ClientHole:
    text = source.text
    line_start = sum(len(line) + 1 for line in text.split("\n")[:number])
    line = text[line_start : text.find("\n", line_start) if "\n" in text[line_start:] else len(text)]
    column, cursor = _cursor(line, rng)
    start, end = line_start + column, line_start + len(line.rstrip())
    hole = Hole(
        id=f"{index:04d}-{kind}",
        path=source.path,
        language="python",
        kind="single-line",
        line=number + 1,
        prefix=text[:start],
        middle=text[start:end],
        suffix=text[end:],
        mode="inline",
    )
    return ClientHole(hole, kind, cursor)
