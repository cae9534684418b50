"""The gap's shape read from the text after it (infill/context/shape.py) over real tree-sitter, and what acts on it:
the offline default's stop rules (stops.py), the watchdog's stand-in for brackets the lines below close, and the
other fills the pipeline tries where the first is refused (the real Gemma 3 270M, and a test double for routing)."""

from __future__ import annotations

import time

import pytest

from infill.backends.offline.stops import HEADER_WORDS, cut_fill, leaves_open, line_held_open, trim_unfinished
from infill.checks.watchdog import Watchdog
from infill.context.builder import ContextBuilder
from infill.context.gap_facts import read_gap
from infill.pipeline import CompletionRequest, Pipeline, PipelineSettings
from infill.types import (
    UNSTEERED,
    BackendInfo,
    FillControl,
    GapFacts,
    GapShape,
    InfillError,
    InfillRequest,
    InfillResult,
)


def context(source: str, mode: str = "inline"):
    """The context of the gap at "|" in the Python `source`."""
    start = source.index("|")
    text = source.replace("|", "", 1)
    builder = ContextBuilder()
    return builder.build(builder.document(text, "python", None), [(start, start)], mode)


def shape(source: str) -> GapShape:
    return context(source).shape


def test_brackets_the_lines_below_close_are_the_fills_to_open():
    arguments = "        a,\n        b,\n    )\n    y = 1\n"
    at_line_start = shape("def f(x):\n    |\n" + arguments)
    assert at_line_start == GapShape(must_open="(", one_line=True)  # deeper below: its arguments, not a body
    assert shape("def f(x):\n    return|\n" + arguments) == GapShape(must_open="(")  # a cursor inside the line
    assert shape("x = |\n    'a': [\n        1,\n    ],\n}\n").must_open == "{"
    assert shape("x = |\n    a,\n])\n").must_open == "(["  # outermost first, as the fill writes them


def test_brackets_opened_before_the_gap_or_inside_strings_and_comments_are_not_the_fills():
    assert shape("def f(x):\n    foo(\n        a,\n        |\n    )\n").must_open == ""  # the call is open already
    assert shape('|\n    \')\',  # a )\n    """(""",\n)\n').must_open == "("
    assert shape("x = 1\n|\ny = (2)\n").must_open == ""  # the next statement's own brackets
    assert shape("def f(x):\n    y = g(1)\n    |\n    return y\n").must_open == ""


def test_a_line_with_code_right_below_is_one_line_and_the_depth_below_says_which():
    between = context("def f(x):\n    y = 1\n    |\n    return y\n")
    assert between.shape == GapShape(one_line=True) and between.single_line
    above_body = shape("def f(items):\n    total = 0\n    |\n        total += item\n    return total\n")
    assert above_body == GapShape(one_line=True, header=True)
    above_def = shape("class A:\n    x = 1\n    |\n    def f(self):\n        pass\n")
    assert above_def == GapShape(one_line=True, before_definition=True)
    assert shape("class A:\n    |\n    @property\n    def f(self):\n        pass\n").before_definition
    # a blank line or the block's end below: the fill may be a block of its own
    blank_below = context("def f(x):\n    y = 1\n    |\n\n    return y\n")
    assert blank_below.shape == GapShape() and not blank_below.single_line
    assert shape("def f(x):\n    y = 1\n    |\nz = 2\n") == GapShape()
    # inside brackets a deeper line below is an element, not a block
    assert not shape("x = {\n    'a': [1,\n|\n        2],\n}\n").header


def test_a_gap_in_a_string_that_goes_on_below_stays_in_it():
    docstring = context('def f(x):\n    """Return x.\n\n    |\n    Args:\n        x: a value\n    """\n    return x\n')
    assert docstring.shape == GapShape(string_end='"""') and docstring.single_line
    assert shape("x = '''one\n|\ntwo'''\n").string_end == "'''"
    assert shape('x = f("ab|c")\n').string_end == ""  # a string that ends on the gap's line: the line says so


def test_stop_rules_read_the_shape():
    def facts(**shape_fields) -> GapFacts:
        return GapFacts(
            line_before="    ",
            line_after="",
            next_line="a,",
            body_indent=4,
            is_prose=False,
            shape=GapShape(**shape_fields),
        )

    in_string = facts(string_end='"""')
    assert cut_fill('Args:"""\n', in_string, True) == ("Args:", True)
    opens = facts(must_open="(", one_line=True)
    assert cut_fill("return (\n        a,", opens, True) == ("return (", True)
    assert cut_fill("return f(\n", opens, True) == ("return f(", True)
    # a fill that closes what it opened for the lines below ends right after opening it: `= {"a": 1}` or a
    # merged token (`{"`) wrote on past the point where the lines below take over
    assert cut_fill("return f(a)\n", opens, True) == ("return f(", True)
    assert cut_fill('x = {"a": 1}', facts(must_open="{", one_line=True), True) == ("x = {", True)
    assert cut_fill('x = {"a"', facts(must_open="{", one_line=True), False) == ('x = {"a"', False)  # not yet
    assert cut_fill("def g() -> int:", opens, True) == ("def g(", True)
    assert cut_fill("return [f(a)]", opens, True) == ("return [f(a)]", False)  # never left just `(` open: goes on
    assert cut_fill("return f(", opens, True) == ("return f(", True)  # right after opening what is closed below
    header = facts(header=True, one_line=True)
    assert line_held_open("if x", header) and not line_held_open("if x:", header)
    assert not line_held_open("if x:\n", header)
    assert trim_unfinished("return (", opens, True) == "return ("
    assert line_held_open("return", opens) and line_held_open("return f(a)", opens)  # no line break taken yet
    assert not line_held_open("return f(", opens) and not line_held_open("return\n", opens)
    assert not line_held_open("return", facts())
    assert trim_unfinished("return (", facts(), True) == "return"
    assert leaves_open("f(a, [b") == "([" and leaves_open("f(a)") == "" and leaves_open("a)") == ""
    assert leaves_open("x = ')('") == ""  # brackets in a string are text
    assert read_gap("x = 1\n", "y = 2\n", "python").shape == GapShape()  # a bare request says nothing


def verdict(source: str, fill: str):
    """The watchdog's verdict on `fill` at "|" in the Python `source`."""
    start = source.index("|")
    text = source.replace("|", "", 1)
    builder = ContextBuilder()
    doc = builder.document(text, "python", None)
    return Watchdog().check([fill], [(start, start)], doc, builder.build(doc, [(start, start)], "inline"))


def test_the_watchdog_refuses_a_fill_that_closes_what_the_lines_below_close():
    arguments = "def f(x):\n    |\n        a,\n        b,\n    )\n    return 1\n"
    assert verdict(arguments, "return max(").ok and verdict(arguments, "return (").ok
    assert verdict(arguments, "return max(a, b)").reason == "syntax"  # the arguments below would dangle
    keywords = "def f(x):\n    |\n        a,\n        key=b,\n    )\n    return 1\n"  # a call's, then
    assert verdict(keywords, "return g(").ok and verdict(keywords, "y = 1").reason == "syntax"
    parameters = "|\n    a: int,\n    b: str = '',\n) -> None:\n    pass\n"  # a definition's
    assert verdict(parameters, "def f(").ok and verdict(parameters, "x = 1").reason == "syntax"


def test_the_watchdog_refuses_a_statement_where_the_lines_below_want_a_header_or_a_decorator():
    body = "def f(x):\n    |\n        y = g(x)\n    except ValueError:\n        y = 0\n    return y\n"
    assert verdict(body, "try:").ok
    assert verdict(body, "return g(x)").reason == "syntax"  # (no `if 1:` finishes it: the `except` below)
    decorated = "x = 1\n|\ndef f():\n    pass\n"
    assert verdict(decorated, "@functools.cache").ok  # a decorator at column 0 goes on to the definition
    assert verdict(decorated, "y = 2").ok and verdict(decorated, "y = (").reason == "syntax"


class Refused:
    """Test double for model outputs: a first fill and the other fills the backend would write, fixed."""

    def __init__(self, first: str, others: list[str]) -> None:
        self.first, self.others = first, others
        self.asked: list[int] = []

    @property
    def info(self) -> BackendInfo:
        return BackendInfo(name="fixed", kind="remote", model="fixed-output")

    def infill(self, request, control=UNSTEERED) -> InfillResult:
        return InfillResult(middles=(self.first,), outcome="ok" if self.first else "empty", backend="fixed")

    def alternatives(self, request, count, control=UNSTEERED) -> list[str]:
        self.asked.append(count)
        return self.others[:count]

    def close(self) -> None:
        pass


BETWEEN = "def f(x):\n    y = 1\n    |\n    return y\n"


def ask(backend, source: str = BETWEEN, **settings):
    start = source.index("|")
    pipeline = Pipeline(backend, settings=PipelineSettings(**settings))
    return pipeline.complete(CompletionRequest(source.replace("|", "", 1), start, language="python"))


def test_a_refused_fill_gives_way_to_the_first_other_fill_the_checks_accept():
    backend = Refused("if y:", ["# a note", "y = (", "y += x"])
    out = ask(backend)
    assert [f.text for f in out.fills] == ["y += x"] and out.alternative == 3 and out.route == "primary"
    assert out.rejections == [("fixed", "syntax")] and backend.asked == [PipelineSettings().alternatives]
    assert out.to_log()["alternative"] == 3
    empty = ask(Refused("", ["y += x"]))
    assert [f.text for f in empty.fills] == ["y += x"] and empty.rejections == [("fixed", "empty")]


def test_other_fills_are_not_asked_for_when_the_first_stands_or_nothing_may_be_tried():
    standing = Refused("y += x", ["z = 1"])
    assert [f.text for f in ask(standing).fills] == ["y += x"] and standing.asked == []
    off = Refused("if y:", ["y += x"])
    assert ask(off, alternatives=0).fills == [] and off.asked == []
    block = Refused("if y:", ["y += x"])  # a blank line below: a multi-line gap, not one line
    assert ask(block, "def f(x):\n    y = 1\n    |\n\n    return y\n").fills == [] and block.asked == []
    nothing = Refused("", ["y += x"])  # ... where the first fill is empty, the others are tried all the same
    out = ask(nothing, "def f(x):\n    y = 1\n    |\n\n    return y\n")
    assert [f.text for f in out.fills] == ["y += x"] and nothing.asked == [PipelineSettings().alternatives]
    with pytest.raises(InfillError, match="alternatives"):
        PipelineSettings(alternatives=-1)


def test_the_offline_default_writes_other_first_tokens_and_keeps_the_prompt(ar_backend):
    prefix, suffix = "def mean(values):\n    total = ", "\n    return total / len(values)\n"
    request = InfillRequest(prefix=prefix, suffix=suffix, language="python", single_line=True, document_id="others-doc")
    greedy = ar_backend.infill(request)
    others = ar_backend.alternatives(request, 4)
    assert 1 <= len(others) <= 4 and len(set(others)) == len(others) and all(o.strip() for o in others)
    assert greedy.middle not in others
    again = ar_backend.infill(request)
    control = InfillRequest(prefix=prefix, suffix=suffix, language="python", single_line=True, document_id="control")
    ar_backend.infill(control)
    repeated = ar_backend.infill(control)
    # the sequence holds the prompt again, not a branch: as much is reused as on a repeated greedy fill
    assert again.middles == greedy.middles and again.reused_tokens == repeated.reused_tokens > 0
    t0 = time.monotonic()
    assert ar_backend.alternatives(request, 4, FillControl(deadline=time.monotonic())) == []
    assert time.monotonic() - t0 < 5  # nothing decoded past the deadline (a bound on a stuck loop, not a speed)
    assert ar_backend.alternatives(InfillRequest(prefix="a", between=("b",), suffix="c"), 4) == []


def test_the_offline_default_writes_a_header_above_a_body_and_opens_what_the_lines_below_close(ar_backend):
    def fill(source: str) -> str:
        start = source.index("|")
        out = Pipeline(ar_backend).complete(CompletionRequest(source.replace("|", "", 1), start, language="python"))
        assert out.fills, out.rejections
        return out.fills[0].text

    header = fill("def f(items):\n    total = 0\n    |\n        total += item\n    return total\n")
    assert header.split()[0].rstrip(":") in HEADER_WORDS and header.endswith(":") and "\n" not in header
    opening = fill("def f(x):\n    y = x * 2\n    |\n        x,\n        y,\n    )\n")
    assert leaves_open(opening) == "(" and opening.endswith("(") and "\n" not in opening


def test_a_bracket_in_a_hash_comment_is_text_in_every_hash_commented_language():
    # shape.py kept its own list of `#` languages (no shellscript): a `(` in a shell comment opened a bracket and hid
    # the `)` below that the fill must open for. The comment markers now come from infill/languages.py alone.
    source = "x=|\n  ls # note (\n)\n"
    start = source.index("|")
    text = source.replace("|", "", 1)
    builder = ContextBuilder()
    for language in ("shellscript", "sh", "perl", "python"):
        gap = builder.build(builder.document(text, language, None), [(start, start)], "inline")
        assert gap.shape.must_open == "(", language
