"""Post-processing of raw middles, with gap contexts built by the real context builder over real grammars."""

from __future__ import annotations

import pytest

from infill.checks.postprocess import postprocess, trim_suffix_overlap
from infill.context.builder import ContextBuilder


def clean(source: str, language: str, middle: str) -> str:
    index = source.index("§")
    text = source[:index] + source[index + 1 :]
    builder = ContextBuilder()
    ctx = builder.build(builder.document(text, language, None), [(index, index)], "inline")
    return postprocess(middle, ctx, text[:index], text[index:])


@pytest.mark.parametrize(
    "source,language,middle,expected",
    [
        # a closing bracket the suffix already has
        ("print(foo(§))\n", "python", "a, b))", "a, b"),
        # balanced brackets that merely look like the suffix stay
        ("print(§)\n", "python", "f()", "f()"),
        # a middle that runs into the suffix's next line
        ("def f(x):\n    y = 1\n    §\n    return y\n", "python", "y += 2\n    return y\n", "y += 2"),
        # exact character overlap with the suffix
        ("const a = §;\nconst b = 2;\n", "javascript", "1;\nconst b = 2;", "1"),
    ],
)
def test_suffix_overlap_is_trimmed(source, language, middle, expected):
    assert clean(source, language, middle) == expected


def test_short_non_bracket_overlap_is_kept():
    # "b" repeats the suffix's first char, but a one-letter overlap is content, not a stutter.
    assert trim_suffix_overlap("a + b", "b\n") == "a + b"


def test_python_fill_stops_where_the_block_ends():
    source = "def f(x):\n    y = x\n    §\n\n\ndef g():\n    pass\n"
    assert clean(source, "python", "return y\n\n\ndef other():\n    return 2\n") == "return y"


def test_brace_fill_stops_at_the_closer_the_suffix_already_has():
    source = "function f() {\n  const a = 1;\n  §\n}\n"
    assert clean(source, "javascript", "return a;\n}\n\nfunction g() {}\n") == "return a;"


def test_brace_fill_keeps_its_closer_when_the_suffix_lacks_one():
    source = "function f() {\n  §"
    assert clean(source, "javascript", "return 1;\n}") == "return 1;\n}"


def test_indentation_from_column_zero_is_fitted_to_the_block():
    source = "def f(x):\n    y = x * 2\n§\n"
    assert clean(source, "python", "z = y + 1\nreturn z") == "    z = y + 1\n    return z"


def test_indentation_after_opener_at_end_of_line():
    source = "def f(x):§\n"
    assert clean(source, "python", "\nif x:\n    return 1\nreturn 0") == "\n    if x:\n        return 1\n    return 0"


def test_spaces_become_tabs_in_a_tab_indented_file():
    source = "package main\n\nfunc f() int {\n\tx := 1\n\t§\n}\n"
    assert clean(source, "go", "y := x\n    return y") == "y := x\n\treturn y"


def test_tabs_become_spaces_in_a_space_indented_file():
    source = "def f(x):\n    if x:\n        y = 1\n        §\n"
    assert clean(source, "python", "z = 2\n\t\tw = 3") == "z = 2\n        w = 3"


def test_extra_indentation_on_the_first_line_is_removed():
    source = "def f(x):\n    y = 1\n    §\n"
    assert clean(source, "python", "    return y") == "return y"


@pytest.mark.parametrize(
    "source,middle,expected",
    [
        ("x = §\n", "\n42   ", "42"),  # stray leading newline and trailing spaces of a single-line fill
        ("x = §\n", "compute()\ny = 2\n", "compute()"),  # single-line fills stop at the newline
        ("x = §\n", "compute(\n    1, 2\n)\ny = 2\n", "compute(\n    1, 2\n)"),  # ... after a call they wrap
        ("x = §\n", "compute(\n    1, 2\ny = 2\n", "compute("),  # ... and at the first one if it never closes
        ("def f():\n    §\n", "a = 1   \nreturn a\n\n\n", "a = 1\n    return a"),  # trailing ws; fitted
        ("def f():\n    §\n", "\n\nreturn 1", "return 1"),  # leading blank lines on an empty line
    ],
)
def test_whitespace_artefacts(source, middle, expected):
    assert clean(source, "python", middle) == expected


def test_comment_text_is_not_trimmed_as_code():
    source = "# see the docs for f(§\nx = 1\n"
    assert clean(source, "python", "a) and g(b)") == "a) and g(b)"


def test_markdown_table_row_keeps_its_cells():
    source = "| name | size |\n|------|------|\n| foo |§"
    assert clean(source, "markdown", " 12 | extra | more |") == " 12 |"
    assert clean(source, "markdown", " 12 |") == " 12 |"


def test_markdown_table_cell_fill_adds_no_pipe():
    source = "| name | size |\n|------|------|\n| foo | §|\n"
    assert clean(source, "markdown", "7 | 8") == "7"
    assert clean(source, "markdown", "7") == "7"


def test_markdown_bullets_follow_the_list():
    source = "Things:\n\n- one\n- two\n§\n"
    assert clean(source, "markdown", "* three\n* four") == "- three\n- four"


def test_markdown_numbers_continue_the_list():
    source = "Steps:\n\n1. one\n2. two\n§\n"
    assert clean(source, "markdown", "1. three\n1. four") == "3. three\n4. four"


def test_markdown_sentence_ends_cleanly():
    source = "# Notes\n\nThe cat sat on the mat§\n"
    assert clean(source, "markdown", ". It was happy. Then it") == ". It was happy."
    # no sentence end at all: the fill is left as it is
    assert clean(source, "markdown", " all day long") == " all day long"
    # only markup after the last sentence end: nothing dangles, the markup stays closed
    assert clean("# Notes\n\n§\n", "markdown", "<!-- Say why. -->") == "<!-- Say why. -->"


def test_markdown_fill_stays_in_its_section():
    source = "# Notes\n\nFirst point.\n\n§\n"
    assert clean(source, "markdown", "Second point.\n\n# Other\n\nMore text.") == "Second point."
    assert clean(source, "markdown", "## Details\n\nThe details.") == "## Details\n\nThe details."


def test_code_in_a_markdown_fence_follows_code_rules():
    source = "# Example\n\n```python\ndef f(x):\n§\n```\n"
    # indentation fitted like code, and no sentence trimming of code
    assert clean(source, "markdown", "y = x. z\nreturn y") == "    y = x. z\n    return y"


def test_control_characters_and_replacement_chars_never_reach_a_fill():
    assert clean("The Tenant shall pay § on the first day.\n", "markdown", "the\x06 Rent\ufffd\x1b") == "the Rent"
    assert clean("x = §\n", "python", "\tvalue\x00") == "\tvalue"


@pytest.mark.parametrize(
    "source,language,middle,expected",
    [
        # a model that only continues the prefix writes on into the rest of the line: cut where the gap ends
        ("x = max(§)\nprint(x)\n", "python", "a, b)", "a, b"),
        ("if ready§:\n    go()\n", "python", " and steady:", " and steady"),
        # a one-line gap at the end of its line loses trailing spaces; one before fixed text keeps them
        ("total = §\n", "python", "price * count  \n", "price * count"),
    ],
)
def test_an_echo_of_the_rest_of_the_line_is_trimmed_for_every_backend(source, language, middle, expected):
    assert clean(source, language, middle) == expected


def test_the_line_echo_trim_is_the_offline_defaults_old_one():
    """The offline default trimmed this echo itself before the pipeline cleaned (stops.finish_fill); the same
    raw text must now come out of the pipeline's cleaning as it came out of both."""
    from infill.checks.postprocess import trim_line_echo

    source = "value = compute(§)\n"
    index = source.index("§")
    text = source.replace("§", "")
    builder = ContextBuilder()
    ctx = builder.build(builder.document(text, "python", None), [(index, index)], "inline")
    assert trim_line_echo("1, 2)\n", ctx) == "1, 2"
    assert trim_line_echo("1, 2", ctx) == "1, 2"
