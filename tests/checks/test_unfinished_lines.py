"""Cursor fills that leave their statement unfinished are rejected even while the line is still being typed (the
file does not compile before the fill either, so the relative syntax checks stand aside): a block opened with
nothing under it, a string or bracket opened, a line half written. Real tree-sitter and CPython's parser."""

from __future__ import annotations

import pytest
from test_watchdog import judge

FUNCTION = "import os\n\n\ndef f(override):\n    §\n\n\nprint(f(1))\n"
TYPING = "class A:\n    def f(self, override):\n        x = comp§\n        return x\n"


@pytest.mark.parametrize(
    "source, middle",
    [
        (FUNCTION, "x = 1\n    if override:"),  # a block opened and left empty (seen from Gemma 3 270M)
        (FUNCTION, "x = 1\n    for item in os.listdir():"),
        (TYPING, "ute(1) and"),  # half a line
        ("def f(a):\n    if a§\n        return 1\n", " and"),
        # inside brackets, where the line is an element (a fill seen on the client-cut dev mirror): `andtype(x)`
        # parses for tree-sitter no worse than the line without it
        ("if (\n    isinstance(x, int) and§\n):\n    pass\n", "type(x)"),
    ],
)
def test_a_fill_that_leaves_its_statement_unfinished_is_rejected(source, middle):
    verdict = judge(source, "python", middle)
    assert verdict.reason == "syntax", verdict


@pytest.mark.parametrize(
    "source, middle",
    [
        (FUNCTION, "x = 1\n    if override:\n        x = 2\n    return x"),
        (FUNCTION, "return os.getcwd()"),
        (TYPING, "ute(1)"),
        ("def f(a):\n    if a§\n        return 1\n", " > 1:"),  # a block header whose body follows
        ("x = [\n    1,\n    2§\n]\n", ", 3"),  # inside a statement spanning lines
        ('D = {\n    "a": 1,\n    "b": §,\n}\n', "2"),
        ("call(\n    1,\n    key=§,\n)\n", "os.path"),
        ("if (\n    isinstance(x, int) and§\n):\n    pass\n", " type(x)"),
    ],
)
def test_a_fill_that_finishes_its_statement_passes(source, middle):
    assert judge(source, "python", middle).ok
