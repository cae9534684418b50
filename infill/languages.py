"""The language tables and text scanners every stage uses to reason about a gap, in one place.

The context builder (is this prose, does this line open a block), Gemma's stop rules (where a fill ends), the
post-processing (which closer the fill doubles), the watchdog (comment-only, stutter, does Python compile) and the
pilot (does the filled file parse) all ask the same questions; they ask them here so they get the same answers.
"""

from __future__ import annotations

import ast
import re
import threading
import warnings
from collections.abc import Iterator

# -- language tables --------------------------------------------------------------------------------------------

PROSE_LANGUAGES = frozenset({"markdown", "plaintext", "text", "restructuredtext", "latex", "tex"})
INDENT_LANGUAGES = frozenset({"python"})  # blocks are delimited by indentation rather than braces
_HASH = ("#",)
_SLASH = ("//", "/*", "*")
_COMMENT_MARKERS: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(
        ("python", "shellscript", "shell", "bash", "sh", "ruby", "yaml", "toml", "r", "perl", "dockerfile", "makefile")
        + ("cmake", "elixir", "nix"),
        _HASH,
    ),
    **dict.fromkeys(
        ("javascript", "typescript", "javascriptreact", "typescriptreact", "go", "rust", "java", "c", "cpp", "csharp")
        + ("kotlin", "swift", "php", "scala", "dart", "zig"),
        _SLASH,
    ),
    **dict.fromkeys(("lua", "sql", "haskell"), ("--",)),
}
# A language nobody listed: the markers most languages use. No language at all, or JSON: no comments to judge.
_ANY_MARKERS = ("#", "//", "/*", "*")
_NO_COMMENTS = frozenset({"", "json"})


def is_prose_language(language: str | None) -> bool:
    return (language or "").lower() in PROSE_LANGUAGES


def comment_markers(language: str | None) -> tuple[str, ...]:
    """How a line comment starts in `language` (nothing for prose, where `#` is a heading)."""
    lang = (language or "").lower()
    if lang in PROSE_LANGUAGES or lang in _NO_COMMENTS:
        return ()
    return _COMMENT_MARKERS.get(lang, _ANY_MARKERS)


_BLOCK_OPENERS = ("{", "(", "[", "=>")
_PY_BLOCK = re.compile(r"(async\s+)?(def|class|if|elif|else|for|while|with|try|except|finally|match|case)\b")


def opens_block(line: str, language: str | None) -> bool:
    """The line ends by opening a block whose body goes on the next lines: a bracket, or in Python a colon after
    a compound-statement keyword (not a dict key, a lambda or a slice)."""
    stripped = line.rstrip()
    if stripped.endswith(_BLOCK_OPENERS):
        return True
    return language in INDENT_LANGUAGES and stripped.endswith(":") and bool(_PY_BLOCK.match(stripped.lstrip()))


def indent_width(line: str) -> int:
    """Characters of leading spaces and tabs."""
    return len(line) - len(line.lstrip(" \t"))


def encodable(text: str) -> str:
    """`text` with lone surrogates (undecodable bytes smuggled in by surrogateescape, or a JSON "\\ud800") as
    U+FFFD, one character for one, so that UTF-8 encoders (the tokenizers, tree-sitter's input) take it."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


# -- comment-only and stutter tests -----------------------------------------------------------------------------


def comment_only(fill: str, language: str | None, line_before: str = "") -> bool:
    """Every non-blank line the fill writes is a comment, read as the lines will stand in the document (the
    first one after `line_before`, the text before the gap on its line): `x = 1  # note` is code with a note.
    False when the cursor's line is already a comment."""
    markers = comment_markers(language)
    if not markers or not fill.strip() or line_before.lstrip().startswith(markers):
        return False
    written = [line.strip() for line in (line_before + fill).split("\n") if line.strip()]
    return all(line.startswith(markers) for line in written)


_WORDY = re.compile(r"[A-Za-z]{2}")


def has_words(line: str) -> bool:
    """Two letters in a row: a line that says something (not `}`, `---` or `2, 2`)."""
    return bool(_WORDY.search(line))


def stutters(lines: list[str], j: int, min_chars: int) -> bool:
    """Line `j` repeats the nearest non-blank line above it and is long and wordy enough to be a loop, not
    structure (`}` twice, `pass` in two branches): a small model repeating its last line."""
    line = lines[j].strip()
    if len(line) < min_chars or not has_words(line):
        return False
    previous = next((lines[k].strip() for k in range(j - 1, -1, -1) if lines[k].strip()), "")
    return line == previous


# -- bracket and quote scanning ---------------------------------------------------------------------------------

_PAIRS = {"(": ")", "[": "]", "{": "}"}


def opens_quote(text: str, i: int) -> bool:
    """A string starts here; an apostrophe after a letter (`don't`, `It's`) does not start one."""
    ch = text[i]
    return ch in '"`' or (ch == "'" and (i == 0 or not text[i - 1].isalnum()))


def _closes_quote(text: str, i: int, quote: str) -> bool:
    return text[i] == quote and (i == 0 or text[i - 1] != "\\")


def code_characters(text: str) -> Iterator[tuple[int, str, bool, bool]]:
    """Yields (index, char, code, in_string) per character: `code` is False for a string's quotes and contents,
    `in_string` says whether a string is still open after this character."""
    quote = ""
    for i, ch in enumerate(text):
        if quote:
            if _closes_quote(text, i, quote):
                quote = ""
            yield i, ch, False, bool(quote)
        elif opens_quote(text, i):
            quote = ch
            yield i, ch, False, True
        else:
            yield i, ch, True, False


def first_unopened(text: str, closers: str) -> int | None:
    """Index of the first character of `closers` that stands outside every bracket and string opened within
    `text` (a bracket closed that `text` never opened, a separator at the fill's own level), if any."""
    stack: list[str] = []
    for i, ch, code, _ in code_characters(text):
        if not code:
            continue
        if ch in _PAIRS:
            stack.append(_PAIRS[ch])
        elif stack and ch == stack[-1]:
            stack.pop()
        elif not stack and ch in closers:
            return i
    return None


def balance_points(text: str) -> Iterator[tuple[int, str, bool, bool]]:
    """Walk `text` tracking the brackets and strings the fill itself opens. Yields, after each character,
    (index, char, balanced, in_string); `balanced` means no bracket opened within `text` is still open (closing
    brackets of the prefix is fine)."""
    depth, floor = 0, 0
    for i, ch, code, in_string in code_characters(text):
        if code and ch in "([{":
            depth += 1
        elif code and ch in ")]}":
            depth -= 1
            floor = min(floor, depth)
        yield i, ch, depth <= floor, in_string


def first_line_end(text: str) -> tuple[str, bool]:
    """A one-line fill's text: up to the first newline outside brackets the fill opened (`f(a,` ends its line only
    once the call closes, as code wraps a long call), and whether there was such a newline."""
    for i, ch, balanced, in_string in balance_points(text):
        if ch == "\n" and (balanced or in_string):  # a one-line string cannot go on to the next line either
            return text[:i], True
    return text, False


def closes_what_it_opens(text: str) -> bool:
    """Whether every bracket and string `text` opens is closed again by its end."""
    state = (True, False)
    for _, _, balanced, in_string in balance_points(text):
        state = (balanced, in_string)
    return state[0] and not state[1]


def one_logical_line(text: str) -> bool:
    """One line of code, or one call (list, ...) it wraps over several: every newline is inside brackets the text
    opens, and it closes them all."""
    return not first_line_end(text)[1] and closes_what_it_opens(text)


# -- Python's own parser ----------------------------------------------------------------------------------------

# CPython 3.11's ast.parse is not safe to run in several threads at once ("AST constructor recursion depth
# mismatch"): the watchdog judges fills on several threads, the pilot parses on its worker threads. Every parse
# in the package goes through this lock.
AST_LOCK = threading.Lock()


def _parse_python(code: str) -> tuple[ast.Module | None, str | None]:
    try:
        with AST_LOCK, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escape sequences in old files are not a syntax error
            return ast.parse(code), None
    except SyntaxError as exc:
        return None, exc.msg
    except (ValueError, RecursionError, MemoryError) as exc:
        return None, str(exc) or type(exc).__name__


def python_error(code: str) -> str | None:
    """Why CPython would not parse `code`, or None when it parses."""
    return _parse_python(code)[1]


def python_tree(code: str) -> ast.Module | None:
    """The module's AST, or None when it does not parse."""
    return _parse_python(code)[0]
