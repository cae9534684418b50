"""The language tables and text scanners every stage uses to reason about a gap, in one place.

The context builder (is this prose, does this line open a block, how wide is this indentation), the backends (where
a one-line fill ends: `one_line_fill`, the engine's, the remote routes' and the offline default's stop rules), the
post-processing (which closer the fill doubles, what overlap repeats the suffix), the watchdog (comment-only,
stutter, does Python compile), the gap's shape (the bracket pairs, which languages comment with `#`) and the pilot
(does the filled file parse) all ask the same questions; they ask them here so they get the same answers.
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
# Languages whose line comments start with `#` and only so (a `(` after it is text); the document scanners
# (infill/context/shape.py) read the others' `//` and `/* */` comments.
HASH_COMMENT_LANGUAGES = frozenset(lang for lang, markers in _COMMENT_MARKERS.items() if markers == _HASH)
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
# The words a Python compound statement's header starts with (`async` before `def`, `for`, `with`).
PYTHON_HEADER_WORDS = (
    "if",
    "elif",
    "else",
    "for",
    "while",
    "try",
    "except",
    "finally",
    "with",
    "def",
    "class",
    "async",
    "match",
    "case",
)
_PY_BLOCK = re.compile(r"(async\s+)?(" + "|".join(w for w in PYTHON_HEADER_WORDS if w != "async") + r")\b")


def opens_block(line: str, language: str | None) -> bool:
    """The line ends by opening a block whose body goes on the next lines: a bracket, or in Python a colon after
    a compound-statement keyword (not a dict key, a lambda or a slice)."""
    stripped = line.rstrip()
    if stripped.endswith(_BLOCK_OPENERS):
        return True
    return language in INDENT_LANGUAGES and stripped.endswith(":") and bool(_PY_BLOCK.match(stripped.lstrip()))


TAB_WIDTH = 4  # a tab in indentation advances to the next multiple of this column (the editors' default)


def indent_width(line: str) -> int:
    """The column `line`'s leading spaces and tabs reach, a tab moving to the next multiple of TAB_WIDTH: `"\\t  "`
    is 6, as wide as six spaces (never its 3 characters: a tab-indented block must compare with a space-indented
    line by where the text stands)."""
    return len(line[: len(line) - len(line.lstrip(" \t"))].expandtabs(TAB_WIDTH))


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
# A repeated line this long ends a fill (offline stop rules) and rejects one (watchdog). Shorter repeats are
# structure: nested shell loops end `done` / `done`, Ruby and Lua `end` / `end`.
STUTTER_MIN_CHARS = 6


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

PAIRS = {"(": ")", "[": "]", "{": "}"}  # every bracket walker's pairs: opener -> closer
CLOSERS = "".join(PAIRS.values())
OPENER_OF = {closer: opener for opener, closer in PAIRS.items()}


def opens_quote(text: str, i: int) -> bool:
    """A string starts here; an apostrophe after a letter (`don't`, `It's`) does not start one."""
    ch = text[i]
    return ch in '"`' or (ch == "'" and (i == 0 or not text[i - 1].isalnum()))


def _closes_quote(text: str, i: int, quote: str) -> bool:
    return text[i] == quote and (i == 0 or text[i - 1] != "\\")


def code_characters(text: str) -> Iterator[tuple[int, str, bool, bool]]:
    """Yields (index, char, code, in_string) per character: `code` is False for a string's quotes and contents,
    `in_string` says whether a string is still open after this character. (A fill's text: comments are not
    skipped here; the document's own text is scanned comment-aware by infill/context/shape.py.)"""
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
        if ch in PAIRS:
            stack.append(PAIRS[ch])
        elif stack and ch == stack[-1]:
            stack.pop()
        elif not stack and ch in closers:
            return i
    return None


def _balance(text: str) -> Iterator[tuple[int, str, bool, bool, bool]]:
    """`balance_points`, and after each character whether every closer so far closed the fill's innermost open
    bracket (`f(a]` did not: its `]` still ends the bracket, so the line's end is found, but the fill is broken)."""
    expected: list[str] = []  # the closers the fill's own open brackets wait for, innermost last
    matched = True
    for i, ch, code, in_string in code_characters(text):
        if code and ch in PAIRS:
            expected.append(PAIRS[ch])
        elif code and ch in OPENER_OF and expected and expected.pop() != ch:  # (none open: the prefix's bracket)
            matched = False
        yield i, ch, not expected, in_string, matched


def balance_points(text: str) -> Iterator[tuple[int, str, bool, bool]]:
    """Walk `text` tracking the brackets and strings the fill itself opens. Yields, after each character,
    (index, char, balanced, in_string); `balanced` means no bracket opened within `text` is still open (closing
    brackets of the prefix is fine)."""
    for i, ch, balanced, in_string, _ in _balance(text):
        yield i, ch, balanced, in_string


def bracket_stack(line: str) -> Iterator[tuple[int, str | None]]:
    """For each bracket in `line`'s code, its index and the brackets open after it, outermost first; None (and
    nothing more) for a closer that does not close the innermost open bracket."""
    stack: list[str] = []
    for i, ch, code, _ in code_characters(line):
        if not code:
            continue
        if ch in PAIRS:
            stack.append(ch)
        elif ch in OPENER_OF:
            if not stack or PAIRS[stack[-1]] != ch:
                yield i, None
                return
            stack.pop()
        else:
            continue
        yield i, "".join(stack)


def leaves_open(line: str) -> str:
    """The brackets `line` opens and does not close, outermost first ("" when it closes what it opens, or closes
    one it never opened)."""
    brackets = list(bracket_stack(line))
    return (brackets[-1][1] or "") if brackets else ""


def closed_past(line: str, must_open: str) -> int | None:
    """Where `line` left open just `must_open` (the index after its last opener) when it then went on to close
    one of them: the fill wrote on past where the lines below take over. None when it never did both."""
    held: int | None = None
    for i, opened in bracket_stack(line):
        if opened is None or (held is not None and len(opened) < len(must_open)):
            return held
        if held is None and opened == must_open:
            held = i + 1
    return None


# -- where a one-line fill ends ---------------------------------------------------------------------------------


def first_line_end(text: str) -> tuple[str, bool]:
    """A one-line fill's text: up to the first newline outside brackets the fill opened (`f(a,` ends its line only
    once the call closes, as code wraps a long call), and whether there was such a newline."""
    for i, ch, balanced, in_string in balance_points(text):
        if ch == "\n" and (balanced or in_string):  # a one-line string cannot go on to the next line either
            return text[:i], True
    return text, False


def closes_what_it_opens(text: str) -> bool:
    """Whether every bracket and string `text` opens is closed again by its end, each by its own closer (`f(a]`
    is not: the pair table's walkers agree)."""
    state = (True, False, True)
    for _, _, balanced, in_string, matched in _balance(text):
        state = (balanced, in_string, matched)
    return state[0] and not state[1] and state[2]


def one_logical_line(text: str) -> bool:
    """One line of code, or one call (list, ...) it wraps over several: every newline is inside brackets the text
    opens, and it closes them all."""
    return not first_line_end(text)[1] and closes_what_it_opens(text)


def line_so_far(text: str, *, wraps: bool) -> tuple[str, bool]:
    """A one-line fill being written: its text up to where its line ended, and whether it has ended. Code (`wraps`:
    not prose, not a comment) goes on over the newlines inside a call it opened (`first_line_end`); prose and
    comments end at the first newline."""
    if wraps:
        return first_line_end(text)
    head, newline, _ = text.partition("\n")
    return head, bool(newline)


def one_line_fill(text: str, *, wraps: bool) -> str:
    """The one rule for where a finished one-line fill ends, whichever backend wrote it: at its line's end
    (`line_so_far`), so code keeps the continuation lines of a call it wraps and closes (`f(a,\\n    b)`); a call
    never closed ends at the first newline, as prose and comments do."""
    head, _ = line_so_far(text, wraps=wraps)
    return head if closes_what_it_opens(head) else head.split("\n", 1)[0]


def ends_on_its_line(single_line: bool, line_after: str) -> bool:
    """A fill that must end on the gap's line: a single-line request, or text after the gap on its line (a model
    that only continues the prefix would otherwise write on past it)."""
    return single_line or bool(line_after.strip())


MIN_OVERLAP_CHARS = 3  # a repeat of the text after the gap this long is the model writing on past the gap


def overlap_repeats(written: str, piece: str) -> bool:
    """Whether `written` ending with `piece` (the start of the text after the gap) means the model wrote the
    fixed text again: `piece` is at least MIN_OVERLAP_CHARS long, or punctuation the fixed text already has (a
    closing bracket `written` closes without opening, a quote left unpaired, a doubled `;`, `,` or `:`). A short
    word (`x`, `if`) may be the fill's own end."""
    piece = piece.strip()
    if len(piece) >= MIN_OVERLAP_CHARS:
        return True
    if not piece or re.search(r"\w", piece):
        return False
    if all(c in OPENER_OF for c in piece):
        return sum(written.count(c) for c in OPENER_OF) > sum(written.count(c) for c in PAIRS)
    if all(c in "\"'`" for c in piece):
        return written.count(piece[0]) % 2 == 1
    return all(c in ";,:" for c in piece)


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
