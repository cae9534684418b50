"""Every watchdog filter: candidates that must be rejected and candidates that must pass, over real grammars."""

from __future__ import annotations

import logging
import time

import pytest

from infill.checks.watchdog import Watchdog, WatchdogSettings
from infill.context.builder import ContextBuilder
from infill.types import InfillError


def judge(
    source: str,
    language: str | None,
    middle: str,
    watchdog: Watchdog | None = None,
    deadline=None,
    end_marker: str | None = None,
):
    """Verdict on filling the gap at "§" (or the span "§...¤") of `source` with `middle`."""
    start = source.index("§")
    text = source.replace("§", "", 1)
    end = start
    if end_marker:
        end = text.index(end_marker)
        text = text.replace(end_marker, "", 1)
    builder = ContextBuilder()
    doc = builder.document(text, language, None)
    ctx = builder.build(doc, [(start, end)], "inline" if start == end else "gap")
    return (watchdog or Watchdog()).check([middle], [(start, end)], doc, ctx, deadline=deadline, backend="test")


@pytest.mark.parametrize(
    "middle",
    [
        "foo foo foo",
        "return x return x return x",
        "value = 1\nvalue = 1",  # the same line twice in a row
        "a.append(1)\nb = 2\na.append(1)\nc = 3\na.append(1)",  # the same line three times
        "total = a + b",  # a copy of the line above
        "rows = [0, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2]",  # a numeric stutter (seen from Gemma 3 270M)
    ],
)
def test_repetition_is_rejected(middle):
    source = "def f(a, b):\n    total = a + b\n    §\n"
    assert judge(source, "python", middle).reason == "repetition"


@pytest.mark.parametrize(
    "middle",
    [
        "grid = [0, 0, 0, 0, 0]",
        "a, b, c = None, None, None",
        "x = 1\ny = 2\nreturn x + y",
        "if a:\n        pass\n    if b:\n        pass",  # short repeated lines are structure, not stutter
    ],
)
def test_ordinary_code_passes_the_repetition_check(middle):
    source = "def f(a, b):\n    total = a + b\n    §\n"
    assert judge(source, "python", middle).ok


def test_prose_stutter_is_rejected_and_clean_prose_passes():
    source = "# Notes\n\nThe meeting §\n"
    assert judge(source, "markdown", "was was was moved to Friday.").reason == "repetition"
    assert judge(source, "markdown", "was moved to Friday.").ok


def test_length_limits():
    watchdog = Watchdog(WatchdogSettings(max_chars=40, max_lines=3, max_single_line_chars=20))
    block = "def f():\n    §\n"
    assert judge(block, "python", "x = 1\ny = 2\nz = 3\nw = 4", watchdog).reason == "too_many_lines"
    assert judge(block, "python", "value = " + "1 + " * 10 + "1", watchdog).reason == "too_long"
    assert judge(block, "python", "x = 1\ny = 2\nz = 3", watchdog).ok
    line = "x = §\n"
    assert judge(line, "python", "compute(1, 2, 3, 4, 5, 6)", watchdog).reason == "too_long"
    assert judge(line, "python", "1\ny = 2", watchdog).reason == "too_many_lines"  # single-line fill spans lines
    assert judge(line, "python", "compute(1)", watchdog).ok
    assert judge(line, "python", "f(\n    1, 2\n)", watchdog).ok  # a call the fill opens and wraps: one line
    assert judge(line, "python", "f(\n    1, 2\n)\ny", watchdog).reason == "too_many_lines"
    assert judge("# x = §\n", "python", "f(\n    1\n)", watchdog).reason == "too_many_lines"  # in a comment


@pytest.mark.parametrize(
    "language,source,good,bad",
    [
        ("python", "def f(x):\n    §\n", "return x + 1", "return (x + "),
        ("javascript", "function f(x) {\n  §\n}\n", "return x + 1;", "return (x + ;"),
        ("typescript", "function f(x: number): number {\n  §\n}\n", "return x * 2;", "return x: * 2;"),
        ("typescriptreact", "const C = () => <div>§</div>;\n", "{1 + 2}", "{1 + }"),
        ("go", "package main\n\nfunc f(x int) int {\n\t§\n}\n", "return x + 1", "return x +"),
        ("rust", "fn f(x: i32) -> i32 {\n    §\n}\n", "x + 1", "x + }"),
        ("json", '{\n  "a": 1,\n  §\n}\n', '"b": 2', '"b": 2,,'),
    ],
)
def test_syntax_check_per_language(language, source, good, bad):
    assert judge(source, language, good).ok
    verdict = judge(source, language, bad)
    assert verdict.reason == "syntax", verdict


def test_code_in_a_markdown_fence_is_checked_with_its_own_grammar():
    source = "# Example\n\n```python\ndef f(x):\n    §\n```\n\nMore prose.\n"
    assert judge(source, "markdown", "return x + 1").ok
    assert judge(source, "markdown", "return (x +").reason == "syntax"
    assert judge(source.replace("```python", "```"), "markdown", "return (x +").ok  # no language: no grammar


def test_fill_that_completes_broken_code_passes():
    # Before the edit the call is unclosed (errors); a fill that closes it removes them.
    source = "x = compute(1, §\nprint(x)\n"
    assert judge(source, "python", "2)").ok


def test_file_with_errors_is_judged_relative_to_them():
    broken_elsewhere = "def g(:\n    pass\n\n\ndef f(x):\n    §\n"
    assert judge(broken_elsewhere, "python", "return x").ok
    assert judge(broken_elsewhere, "python", "return x +").reason == "syntax"


@pytest.mark.parametrize(
    "language,source,middle",
    [
        ("python", "def f(x):\n    §\n", "# TODO: implement"),
        ("python", "def f(x):\n    §\n", "# step one\n    # step two"),
        ("javascript", "function f() {\n  §\n}\n", "// not yet"),
        ("go", "package main\n\nfunc f() {\n\t§\n}\n", "/* later */"),
    ],
)
def test_comment_only_code_fill_is_rejected(language, source, middle):
    assert judge(source, language, middle).reason == "comment_only"


def test_comments_pass_where_they_belong():
    assert judge("def f(x):\n    §\n", "python", "# double it\n    return 2 * x").ok
    assert judge("# Compute the §\nx = 1\n", "python", "total of all rows").ok  # inside a comment
    assert judge("# Title\n\n§\n", "markdown", "# Another heading").ok  # a heading is prose, not a comment


def test_empty_candidate_is_rejected():
    assert judge("x = §\n", "python", "   ").reason == "empty"


def test_candidate_after_the_deadline_is_rejected():
    past = time.monotonic() - 1.0
    assert judge("x = §\n", "python", "1", deadline=past).reason == "timeout"
    assert judge("x = §\n", "python", "1", deadline=time.monotonic() + 5).ok


def test_markdown_table_row_may_not_gain_cells():
    source = "| name | size |\n|------|------|\n| foo | §|\n"
    assert judge(source, "markdown", "7 | 8 ").reason == "structure"
    assert judge(source, "markdown", "7 ").ok
    # A row that already holds more pipes than the row above (one inside a code span): only the fill's own count.
    wide = "| name | note |\n|------|------|\n| `a | b` | pipe §|\n"
    assert judge(wide, "markdown", "stuff ").ok
    assert judge(wide, "markdown", "x | y ").reason == "structure"


def test_unknown_language_skips_syntax_but_keeps_other_checks():
    assert judge("key = §\n", "cobol", "value value value").reason == "repetition"
    assert judge("key = §\n", "cobol", "(((").ok  # nothing to parse it with


def test_rejections_are_counted_and_logged(caplog):
    watchdog = Watchdog()
    with caplog.at_level(logging.INFO, logger="infill.checks.watchdog"):
        judge("def f(x):\n    §\n", "python", "foo foo foo", watchdog)
        judge("def f(x):\n    §\n", "python", "return (x", watchdog)
        judge("def f(x):\n    §\n", "python", "return x", watchdog)
    assert watchdog.counts == {"repetition": 1, "syntax": 1}
    assert watchdog.stats() == {"checked": 3, "rejected": {"repetition": 1, "syntax": 1}}
    assert sum("watchdog rejected" in r.getMessage() for r in caplog.records) == 2


def test_bad_settings_are_refused():
    with pytest.raises(InfillError):
        WatchdogSettings(max_chars=0)
    with pytest.raises(InfillError):
        WatchdogSettings(ngram_repeats=1)


@pytest.mark.parametrize(
    "middle,only_cpython",
    [
        ("if ready:\n        # nothing yet\n", True),  # a block of only comments: tree-sitter accepts it, CPython not
        ("elif ready:\n        pass\n", False),  # an elif with no if
    ],
)
def test_python_fills_must_compile_when_the_document_did(middle, only_cpython):
    from infill.checks.watchdog import check_syntax
    from infill.context.syntax import ParsedDocument

    text = "def f(ready):\n    \n    return ready\n"
    gap = text.index("    \n") + 4
    doc = ParsedDocument("python").update(text)
    verdict = check_syntax([middle], [(gap, gap)], doc)
    assert verdict is not None and verdict.reason == "syntax"
    assert ("compile" in verdict.detail) == only_cpython
    assert check_syntax(["value = ready\n"], [(gap, gap)], doc) is None


def test_python_compile_check_is_relative_to_a_broken_document():
    from infill.checks.watchdog import check_python_compiles
    from infill.context.syntax import ParsedDocument, error_nodes

    broken = "def f(:\n    \n"
    gap = broken.index("    \n") + 4
    assert error_nodes(ParsedDocument("python").update(broken).tree) > 0  # broken before the fill too
    assert check_python_compiles(broken, [(gap, gap)], ["elif x:\n"]) is None


def test_python_compile_check_reads_only_the_statements_around_the_fill():
    from infill.checks.watchdog import _statement_end, _statement_start, check_python_compiles

    text = "import os\n\n@wrap\ndef f(x):\n    if x:\n        pass\n    else:\n        return 1\n\nbroken = (\n"
    inside = text.index("return 1")
    assert text[_statement_start(text, inside) :].startswith("def f(x):")
    assert text[: _statement_end(text, inside)].endswith("return 1\n\n")
    # the unterminated `broken = (` further down does not hide a fill that breaks f
    assert check_python_compiles(text, [(inside, inside + len("return 1"))], ["elif:"]) is not None
    assert check_python_compiles(text, [(inside, inside + len("return 1"))], ["return 2"]) is None
