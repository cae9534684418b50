"""The gap rules every stage shares (infill/languages.py): the places that once disagreed now give one answer.

Each test pairs two stages that used their own copy of a rule: Gemma's stop rules and the watchdog, the
post-processing and Gemma's bracket scanner, the watchdog's locked `ast.parse` and the pilot's unlocked one, the
context builder's prose languages and Gemma's.
"""

from __future__ import annotations

import threading

import pytest

from infill import languages
from infill.backends.offline.stops import cut_fill
from infill.checks.postprocess import postprocess, trim_dedent, trim_unbalanced_closer
from infill.checks.watchdog import Watchdog
from infill.context.builder import ContextBuilder
from infill.context.gap_facts import read_gap
from infill.pilot.syntax import syntax_valid
from infill.pipeline import CompletionRequest, Pipeline
from infill.types import UNSTEERED, BackendInfo, InfillRequest, InfillResult


def watchdog_verdict(source: str, language: str, middle: str):
    """The watchdog's verdict on filling the gap at "§" of `source` with `middle`."""
    start = source.index("§")
    text = source.replace("§", "", 1)
    builder = ContextBuilder()
    doc = builder.document(text, language, None)
    return Watchdog().check([middle], [(start, start)], doc, builder.build(doc, [(start, start)], "inline"))


@pytest.mark.parametrize(
    "language,source,middle,dropped",
    [
        ("lua", "function f(x)\n  §\nend\n", "-- not yet", True),  # the watchdog let this through: it knew no `--`
        ("sql", "SELECT *\nFROM t\n§\n", "-- filter later", True),
        ("ruby", "def f(x)\n  §\nend\n", "# TODO", True),
        ("python", "def f(x):\n    §\n", "# step one\n    # step two", True),
        ("go", "package main\n\nfunc f() {\n\t§\n}\n", "// later", True),
        ("python", "x = 1  §\n", "# one", False),  # a note after code on its line: Gemma kept it, the watchdog did not
        ("javascript", "const a = 1;  §\n", "// the first", False),
        ("python", "def f(x):\n    §\n", "return x  # done", False),
    ],
)
def test_the_watchdog_alone_judges_comment_only_fills(language, source, middle, dropped):
    # Gemma's backend dropped these itself once, with its own copy of the rule; now it returns what it wrote.
    assert (watchdog_verdict(source, language, middle).reason == "comment_only") == dropped


def test_a_line_repeated_across_a_blank_line_is_a_stutter_for_both():
    source = "def f(items):\n    §\n"
    middle = "    total = sum(items)\n\n    total = sum(items)\n    return total"
    before, _, after = source.partition("§")
    fill, stopped = cut_fill(middle, read_gap(before, after, language="python"), single_line=False)
    assert stopped and fill == "    total = sum(items)\n"
    # The watchdog compared only adjacent lines, so the blank line between let the same stutter through.
    assert watchdog_verdict(source, "python", middle.strip()).reason == "repetition"


def test_an_apostrophe_in_a_comment_does_not_hide_a_doubled_closer():
    # Gemma's scanner knew `don't` opens no string; the post-processing's did, and missed the `)` after it.
    middle = "a,  # don't care\n    b)"
    assert trim_unbalanced_closer(middle, ")\n") == "a,  # don't care\n    b"
    assert languages.first_unopened(middle, ")") == len(middle) - 1


def test_the_pilot_parses_python_under_the_same_lock_as_the_watchdog():
    # CPython 3.11's ast.parse is not thread-safe; the pilot's worker threads once parsed without the lock.
    done = threading.Event()
    original, filled = "def f():\n    return 1\n", "def f():\n    return 2  # rules-lock-probe\n"

    def check() -> None:
        syntax_valid("python", original, filled)
        done.set()

    with languages.AST_LOCK:
        worker = threading.Thread(target=check, daemon=True)
        worker.start()
        assert not done.wait(0.5)  # waits for the lock the watchdog holds
    assert done.wait(10)


def test_prose_languages_are_one_table():
    # Gemma's stop rules treated reStructuredText as prose, the context builder as code.
    builder = ContextBuilder()
    text = "Title\n=====\n\nThe parser reads the whole file before it \n"
    ctx = builder.build(builder.document(text, "restructuredtext", None), [(len(text) - 1, len(text) - 1)], "inline")
    assert ctx.is_prose
    assert read_gap(text, "", language="restructuredtext").is_prose


class _Echo:
    """A backend that records the request it got (the pipeline's request is what is under test)."""

    info = BackendInfo(name="echo", kind="remote", model="echo")

    def __init__(self) -> None:
        self.requests = []

    def infill(self, request, control=UNSTEERED):
        self.requests.append(request)
        return InfillResult(middles=("",) * request.gap_count, outcome="empty", backend="echo")

    def close(self) -> None:
        pass


def test_a_comment_line_inside_a_docstring_is_not_a_comment_only_fill():
    # In a docstring a `# Example` line is prose; Gemma's backend, reading only the prompt, once dropped it.
    source = 'def f():\n    """Sum the rows.\n\n    §\n    """\n'
    assert watchdog_verdict(source, "python", "# Example").reason != "comment_only"
    assert watchdog_verdict("def f():\n    total = 0\n    §\n", "python", "# Example").reason == "comment_only"


def test_gemma_ends_a_block_where_the_pipeline_says_the_block_is():
    # The cursor dedented to the `if`'s level: the pipeline's indentation for later lines is the cursor's. Gemma's
    # own reading of the text once took the deeper line above and cut the fill after its first line; both now
    # follow one rule (context/gap_facts.py).
    text = "def f(x):\n    if x:\n        return 1\n    \n"
    at = len(text) - 1
    backend = _Echo()
    Pipeline(backend).complete(CompletionRequest(text=text, start=at, end=at, mode="inline", language="python"))
    request = backend.requests[0]
    assert request.gap.body_indent == 4 and not request.single_line
    fill = "y = 2\n    return y\n\ndef g():\n"
    assert cut_fill(fill, request.gap, False) == ("y = 2\n    return y\n", True)  # ends where the function ends
    assert read_gap(request.prefix, request.suffix, "python").body_indent == request.gap.body_indent


@pytest.mark.parametrize("language", [None, "json", "markdown"])
def test_no_comment_rule_where_there_is_no_code_language(language):
    # The watchdog judges comments in code only (Gemma's own copy of the rule once dropped these too).
    source = "notes\n§\n"
    assert watchdog_verdict(source, language, "# later").reason != "comment_only"


@pytest.mark.parametrize(
    "source, language",
    [
        ("def f(x):\n§", "python"),  # below a header, at column 0: one unit deeper
        ("def f(x):\n    if x:\n        return 1\n    §\n", "python"),  # a blank line's indentation is the cursor's
        ("class A:\n  def f(self):\n    §\n", "python"),  # a two-space file
        ("d = {\n    'a': 1,\n    'b': §\n}\n", "python"),  # a dict key's colon opens no block
        ("function f() {\n\t§\n}\n", "javascript"),  # tabs
        ("const g = (x) =>\n§", "typescript"),
        ("server:\n  port: 80\n§", "yaml"),  # a YAML key's colon: no block rule outside Python
        ("# Title\n\nSome prose §\n", "markdown"),
    ],
)
def test_the_backend_reads_the_depth_of_a_gap_as_the_pipeline_does(source, language):
    # Gemma's own reading of a bare request or a later gap once kept its own rule (any line ending in `:`, `{`, `(`
    # or `[` opened a block one column deeper); both producers now keep one (context/gap_facts.py).
    at = source.index("§")
    text = source.replace("§", "", 1)
    builder = ContextBuilder()
    ctx = builder.build(builder.document(text, language, None), [(at, at)], "inline")
    from_context = ctx.facts(text[at : ctx.suffix_end])
    from_text = read_gap(text[ctx.prefix_start : at], text[at : ctx.suffix_end], language)
    assert from_text.body_indent == from_context.body_indent
    assert (from_text.line_before, from_text.line_after, from_text.next_line, from_text.is_prose) == (
        from_context.line_before,
        from_context.line_after,
        from_context.next_line,
        from_context.is_prose,
    )


# -- one rule, one home: inputs on which copies of a rule once gave different answers ------------------------------


def gap_at(source: str, language: str):
    """The context of the gap at "§" of `source`, and the text before and after it."""
    start = source.index("§")
    text = source.replace("§", "", 1)
    builder = ContextBuilder()
    return builder.build(builder.document(text, language, None), [(start, start)], "inline"), text[:start], text[start:]


WRAPPED_CALL = "f(a,\n    b)\nx = 1"


def test_a_one_line_code_fill_keeps_the_call_it_wraps_in_every_stage():
    # The DiffusionGemma engine and the remote routes cut at the first newline (`f(a,`, which the watchdog rejects);
    # the offline default and the post-processing kept the wrapped call. All now ask languages.one_line_fill.
    ctx, before, after = gap_at("def f(a, b):\n    y = §\n    return y\n", "python")
    assert ctx.single_line
    assert languages.one_line_fill(WRAPPED_CALL, wraps=True) == "f(a,\n    b)"
    assert postprocess(WRAPPED_CALL, ctx, before, after) == "f(a,\n    b)"
    assert cut_fill(WRAPPED_CALL, ctx.facts(after), single_line=True) == ("f(a,\n    b)", True)
    assert InfillRequest(prefix=before, suffix=after, single_line=True, gap=ctx.facts(after)).wraps_lines


def test_a_one_line_fill_in_prose_or_a_comment_ends_at_the_newline_while_it_is_written():
    # The offline default wrote on over a newline inside brackets in prose and comments too (its copy of the rule
    # did not know them), and the post-processing then cut back to the first line: tokens spent for nothing.
    prose, before, after = gap_at("# Title\n\nSome text §\nMore text.\n", "markdown")
    raw = "see (the\nnext) page\nmore"
    assert cut_fill(raw, prose.facts(after), single_line=True) == ("see (the", True)
    assert postprocess(raw, prose, before, after) == "see (the"
    comment, before, after = gap_at("x = 1\n# call §\ny = 2\n", "python")
    assert comment.in_comment and comment.facts(after).in_comment
    assert cut_fill(WRAPPED_CALL, comment.facts(after), single_line=True) == ("f(a,", True)
    assert postprocess(WRAPPED_CALL, comment, before, after) == "f(a,"
    assert not InfillRequest(prefix=before, single_line=True, gap=comment.facts(after)).wraps_lines
    assert not InfillRequest(prefix="Some text ", single_line=True, language="markdown").wraps_lines


def test_a_call_closed_by_the_wrong_bracket_is_not_a_wrapped_call():
    # The depth counter read `(]` as closed, the bracket stack as a mismatch: the stages now share the stack's answer.
    assert not languages.closes_what_it_opens("f(a]") and languages.closes_what_it_opens("a)")
    assert languages.one_line_fill("f(a,\n    b]\nx = 1", wraps=True) == "f(a,"


def test_a_tab_is_as_wide_in_every_stage():
    # `"\t  "` was 3 wide to the offline stop rules (characters) and 6 to the post-processing (a tab to column 4):
    # a line indented by 4 spaces left the block for one and stayed in it for the other.
    assert languages.indent_width("\t  x = 1") == 6 and languages.indent_width("    x") == 4
    ctx, before, after = gap_at("if x:\n\t  y = 1\n\t  §\n", "python")
    assert ctx.facts(after).body_indent == 6 == read_gap(before, after, "python").body_indent
    fill = "z = 2\n    w = 3"
    assert cut_fill(fill, ctx.facts(after), single_line=False) == ("z = 2", True)
    assert trim_dedent(fill, ctx) == "z = 2"


def test_a_short_repeated_line_is_structure_for_both_the_stop_rules_and_the_watchdog():
    # Nested shell loops end `done` / `done`: the offline stop rules (4 characters) cut the second, the watchdog
    # (6) let it through. One length now (languages.STUTTER_MIN_CHARS).
    loops = "for a in x; do\n  for b in y; do\n    echo\n  done\ndone\n"
    before, after = "#!/bin/sh\n", "\necho end\n"
    assert cut_fill(loops, read_gap(before, after, "shellscript"), single_line=False) == (loops, False)
    assert Watchdog().settings.consecutive_line_chars == languages.STUTTER_MIN_CHARS
    assert watchdog_verdict(before + "§" + after, "shellscript", loops.rstrip()).reason != "repetition"
    repeated = "  echo one two\n  echo one two\n"
    assert cut_fill(repeated, read_gap(before, after, "shellscript"), single_line=False) == ("  echo one two", True)
