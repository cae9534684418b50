"""Context windows and single/multi-line decisions over the real tree-sitter grammars."""

from __future__ import annotations

import logging
import random
import re

import pytest

from infill.cache.tokens import choose_start
from infill.context import syntax
from infill.context.builder import ContextBuilder, ContextSettings, find_placeholders
from infill.context.syntax import ParsedDocument, error_nodes, resolve_language
from infill.languages import encodable
from infill.types import InfillError

PY = """import os


def first(a, b):
    total = a + b
    return total


class Shape:
    def area(self):
        width = 3
        height = 4
        §
        return width * height

    def name(self):
        return "shape"


def last():
    return 1
"""


def cut(source: str) -> tuple[str, int]:
    index = source.index("§")
    return source[:index] + source[index + 1 :], index


def build(
    source: str,
    language: str | None,
    mode: str = "inline",
    settings: ContextSettings | None = None,
    document_id: str | None = None,
):
    text, cursor = cut(source)
    builder = ContextBuilder(settings)
    doc = builder.document(text, language, document_id)
    return text, cursor, builder.build(doc, [(cursor, cursor)], mode)


def test_window_prefers_the_enclosing_class_when_it_fits():
    # Budget 25 tokens * 3.5 = 87 chars: the class (78 chars before the cursor) fits, the file does not.
    text, cursor, ctx = build(PY, "python", settings=ContextSettings(prefix_tokens=25, suffix_tokens=23))
    prefix = text[ctx.prefix_start : cursor]
    assert prefix.startswith("class Shape:\n")
    suffix = text[cursor : ctx.suffix_end]
    assert suffix.rstrip().endswith('return "shape"')  # the class ends; `def last` is not cut in half
    assert "def last" not in suffix


@pytest.mark.parametrize(
    "language,source,head,tail",
    [
        (
            "javascript",
            "const a = 1;\nconst b = 2;\n\nfunction add(x, y) {\n  const s = x + y;\n  §\n}\n\n"
            "function mul(x, y) {\n  return x * y;\n}\n",
            "function add(x, y) {\n",
            "}\n",
        ),
        (
            "go",
            'package main\n\nimport "fmt"\n\nfunc add(x, y int) int {\n\ts := x + y\n\t§\n}\n\n'
            "func mul(x, y int) int {\n\treturn x * y\n}\n",
            "func add(x, y int) int {\n",
            "}\n",
        ),
        (
            "rust",
            "use std::fmt;\n\nfn add(x: i32, y: i32) -> i32 {\n    let s = x + y;\n    §\n}\n\n"
            "fn mul(x: i32, y: i32) -> i32 {\n    x * y\n}\n",
            "fn add(x: i32, y: i32) -> i32 {\n",
            "}\n",
        ),
    ],
)
def test_window_is_the_enclosing_function_when_only_it_fits(language, source, head, tail):
    text, cursor = cut(source)
    before = cursor - text.index(head)
    after = text.index(tail, cursor) + len(tail) - cursor
    settings = ContextSettings(prefix_tokens=int(before / 3.5) + 2, suffix_tokens=int(after / 3.5) + 2)
    _, _, ctx = build(source, language, settings=settings)
    assert text[ctx.prefix_start : cursor].startswith(head)
    assert text[cursor : ctx.suffix_end].endswith(tail) and "mul" not in text[cursor : ctx.suffix_end]


def test_window_takes_whole_statements_when_the_function_is_too_big():
    text, cursor, ctx = build(PY, "python", settings=ContextSettings(prefix_tokens=8, suffix_tokens=4))
    prefix = text[ctx.prefix_start : cursor]
    assert prefix.startswith(("        height = 4\n", "        width = 3\n"))
    assert cursor - ctx.prefix_start <= 8 * 3.5


def test_large_budget_takes_the_whole_file():
    text, cursor, ctx = build(PY, "python")
    assert ctx.prefix_start == 0 and ctx.suffix_end == len(text)


@pytest.mark.parametrize(
    "language,source,single",
    [
        ("python", "def f(x):\n    y = x +§\n", True),  # after text on the line
        ("python", "def f(x):§\n", False),  # after a colon
        ("python", "def f(x):\n    y = 1\n    §\n", False),  # empty line in a block
        ("python", "print(foo(§), 2)\n", True),  # text after the cursor
        ("python", "x = [\n    1,\n    §\n]\n", True),  # one element per line
        ("python", "# a comment about §\n", True),
        ("python", 'd = {\n    "key":§\n}\n', True),  # a dict key's colon opens no block
        ("python", "f = lambda x:§\n", True),
        ("python", "if x:\n    y = 1\nelse:§\n", False),
        ("javascript", "function f(x) {§\n", False),
        ("javascript", "function f(x) {\n  const y = x;\n  §\n}\n", False),
        ("javascript", "const y = compute(§\n", False),
        ("javascript", "const y = x +§\n", True),
        ("typescript", "interface A {\n  x: number;\n}\nfunction g(a: A): number {\n  §\n}\n", False),
        ("typescriptreact", "const C = () => <div>{§}</div>;\n", True),
        ("go", "package main\n\nfunc f() int {\n\t§\n}\n", False),
        ("go", "package main\n\nfunc f() int {\n\tx := 1 +§\n}\n", True),
        ("rust", "fn f() -> i32 {\n    §\n}\n", False),
        ("rust", "fn f() -> i32 {\n    let x = 1 +§\n}\n", True),
        ("json", '{\n  "a": 1,\n  §\n}\n', True),
        ("markdown", "# Title\n\nThe quick brown§\n", True),
        ("markdown", "# Title\n\nSome text.\n\n§\n", False),
        ("markdown", "| a | b |\n|---|---|\n| 1 §\n", True),
        ("markdown", "| a | b |\n|---|---|\n§\n", True),
    ],
)
def test_single_or_multi_line_from_the_syntax(language, source, single):
    _, _, ctx = build(source, language)
    assert ctx.single_line is single
    assert ctx.max_middle_tokens == (ctx_settings().single_line_tokens if single else ctx_settings().multi_line_tokens)


def ctx_settings() -> ContextSettings:
    return ContextSettings()


@pytest.mark.parametrize(
    "language,source,inside",
    [
        ("python", "# a comment about §\n", True),
        ("python", "x = 'some §text'\n", True),
        ("python", "x = 'text'§\n", False),
        ("javascript", "const a = 1; // note §\n", True),
        ("rust", 'let s = "abc";§\n', False),
    ],
)
def test_comment_and_string_positions(language, source, inside):
    assert build(source, language)[2].in_comment is inside


def test_block_indentation_after_opener_and_inside_blocks():
    _, _, ctx = build("def f(x):§\n", "python")
    assert ctx.indent == "    "
    _, _, ctx = build("package main\n\nfunc f() {\n\tx := 1\n§\n}\n", "go")
    assert ctx.indent == "\t" and ctx.indent_unit == "\t"
    _, _, ctx = build("function f() {\n  let a = 1;\n  if (a) {\n    a++;\n  }\n  §\n}\n", "javascript")
    assert ctx.indent == "  " and ctx.indent_unit == "  "


def test_markdown_window_snaps_to_the_section():
    doc = "# One\n\n" + "Filler sentence here. " * 20 + "\n\n## Two\n\nAlpha beta gamma.\n\n§\n\n## Three\n\nEnd.\n"
    text, cursor, ctx = build(doc, "markdown", settings=ContextSettings(prefix_tokens=20, suffix_tokens=20))
    assert text[ctx.prefix_start : cursor].startswith("## Two\n")
    assert ctx.unit == "section" and ctx.is_prose and not ctx.single_line


def test_unknown_language_falls_back_to_lines():
    source = "".join(f"line {i} of some config\n" for i in range(200)) + "key = §\n" + "tail\n" * 50
    text, cursor, ctx = build(source, "cobol", settings=ContextSettings(prefix_tokens=30, suffix_tokens=10))
    assert ctx.unit == "lines" and ctx.single_line
    prefix = text[ctx.prefix_start : cursor]
    assert prefix.startswith("line ") and len(prefix) <= 30 * 3.5 + len("key = ")
    assert text[ctx.prefix_start - 1] == "\n"  # whole lines only
    assert text[ctx.suffix_end - 1] == "\n" and ctx.suffix_end - cursor <= 10 * 3.5


def test_language_from_extension_and_aliases():
    assert resolve_language(None, "file:///a/b/c.tsx") == "typescriptreact"
    assert resolve_language("javascriptreact") == "javascript"
    assert resolve_language("plaintext", "notes.md") == "markdown"
    assert resolve_language("cobol", "x.cob") == "cobol"
    assert resolve_language(None, "x.unknown") is None


def test_grammar_that_fails_to_load_falls_back_with_one_log_line(monkeypatch, caplog):
    monkeypatch.setitem(syntax._GRAMMARS, "brokenlang", ("tree_sitter_does_not_exist", "language"))
    syntax.load_language.cache_clear()
    try:
        with caplog.at_level(logging.WARNING, logger="infill.context.syntax"):
            _, _, ctx = build("a = 1\nb = §\n", "brokenlang")
            _, _, ctx2 = build("a = 1\nb = §\n", "brokenlang")
        assert ctx.unit == "lines" and ctx2.unit == "lines"
        assert len([r for r in caplog.records if "brokenlang" in r.getMessage()]) == 1
    finally:
        syntax.load_language.cache_clear()


def test_incremental_reparse_matches_a_fresh_parse():
    builder = ContextBuilder()
    text, _ = cut(PY)
    doc = builder.document(text, "python", "file:///shape.py")
    tree_before = doc.tree
    edited = text.replace("height = 4", "height = (4 +")
    doc2 = builder.document(edited, "python", "file:///shape.py")
    assert len(builder._documents) == 1 and doc2.tree is not tree_before  # one cached document, new tree
    assert error_nodes(tree_before) == 0  # the earlier snapshot's tree was not edited in place
    fresh = ParsedDocument("python")
    fresh.update(edited)
    assert str(doc2.tree.root_node) == str(fresh.tree.root_node)
    assert error_nodes(doc2.tree) == error_nodes(fresh.tree) > 0
    doc3 = builder.document(edited.replace("(4 +", "4 + 1"), "python", "file:///shape.py")
    assert error_nodes(doc3.tree) == 0


def test_non_ascii_text_keeps_str_offsets():
    source = 'def grüße(name):\n    """Grüße — ünïcödé."""\n    §\n'
    text, cursor, ctx = build(source, "python", document_id="u.py")
    assert text[ctx.prefix_start : cursor].startswith("def grüße")
    assert not ctx.single_line


def test_find_placeholders():
    text = "Name: [[name]], date {{date}}, sign ____ and _ or __ here. [[a\nb]]"
    spans = find_placeholders(text)
    assert [text[a:b] for a, b in spans] == ["[[name]]", "{{date}}", "____"]
    assert find_placeholders(text, start=10) == spans[1:]
    assert find_placeholders(text, end=20) == spans[:1]
    assert find_placeholders("Intro\n\n___\n\nSigned: ____\n") == [(20, 24)]  # a rule line is no blank


def test_bad_settings_are_refused():
    with pytest.raises(InfillError):
        ContextSettings(prefix_tokens=0)
    with pytest.raises(InfillError):
        ContextSettings(chars_per_token=0)


def _shape(tree) -> list[tuple]:
    """Every node with its type and byte/point extent: equal shapes mean equal trees, positions included."""
    out, stack = [], [tree.root_node]
    while stack:
        node = stack.pop()
        out.append((node.type, node.start_byte, node.end_byte, node.start_point, node.end_point, node.is_missing))
        stack.extend(node.children)
    return out


@pytest.mark.parametrize("seed,ascii_only", [(3, True), (17, False)])
def test_reparse_from_noted_edits_matches_a_fresh_parse(monkeypatch, seed, ascii_only):
    def no_text_comparison(*args):
        raise AssertionError("the changed range must come from the noted edits, not from comparing texts")

    monkeypatch.setattr(syntax, "diff_edit", no_text_comparison)
    rng = random.Random(seed)
    pieces = ["x", "a1", " ", "\n", "\n    ", "(", ")", ":", "def g(", "return ", '"', "#", "\t", "\r\n"]
    pieces += [] if ascii_only else ["é", "😀"]
    text, _ = cut(PY)
    text = text * 3
    uri, version = "file:///random.py", 1
    builder = ContextBuilder()
    builder.document(text, "python", uri, version)
    checked = 0
    for _ in range(400):
        version += 1
        for _ in range(rng.choice([1, 1, 1, 2, 3])):  # one didChange may carry several changes
            a = rng.randrange(len(text) + 1)
            b = min(len(text), a + rng.choice([0, 0, 1, 2, 7, 40]))
            new = "".join(rng.choice(pieces) for _ in range(rng.randrange(3)))
            builder.note_edit(uri, a, b, new, version)
            text = text[:a] + new + text[b:]
        if rng.random() < 0.3:  # a context is asked for now and then: several versions fold into one edit
            doc = builder.document(text, "python", uri, version)
            fresh = ParsedDocument("python").update(text)
            assert str(doc.tree.root_node) == str(fresh.tree.root_node)
            assert _shape(doc.tree) == _shape(fresh.tree)
            checked += 1
    assert checked > 80


def test_edits_noted_for_a_later_version_wait_for_it():
    builder = ContextBuilder()
    uri = "file:///later.py"
    v1 = "def f():\n    return 1\n"
    builder.document(v1, "python", uri, 1)
    v2 = v1.replace("1", "(1 +")
    builder.note_edit(uri, v1.index("1"), v1.index("1") + 1, "(1 +", version=2)
    old = builder.document(v1, "python", uri, 1)  # a request still for version 1: the edit is not applied yet
    assert error_nodes(old.tree) == 0
    new = builder.document(v2, "python", uri, 2)
    assert error_nodes(new.tree) > 0 and str(new.tree.root_node) == str(
        ParsedDocument("python").update(v2).tree.root_node
    )


def test_a_missed_edit_falls_back_to_comparing_texts():
    builder = ContextBuilder()
    uri = "file:///missed.py"
    v1 = "x = 1\ny = 2\n"
    builder.document(v1, "python", uri, 1)
    builder.note_edit(uri, 0, 1, "xx", version=2)  # the caller then forgot to note a second change
    v2 = "xx = 1\ny = (2\n"
    doc = builder.document(v2, "python", uri, 2)
    assert str(doc.tree.root_node) == str(ParsedDocument("python").update(v2).tree.root_node)
    with pytest.raises(InfillError):
        builder.note_edit(uri, 5, 2, "")


def test_window_over_thousands_of_top_level_definitions_matches_a_full_scan(monkeypatch):
    from infill.context import windows

    text = "".join(f"def f{i}(a):\n    return a + {i}\n\n" for i in range(1500))
    cursor = text.index("def f700") + len("def f700(a):\n    ")
    builder = ContextBuilder()
    doc = builder.document(text, "python", "file:///many.py")

    def both(span):  # windowed scan, then every child (each without a kept start: fresh windows compared)
        monkeypatch.undo()
        near = builder.build(doc, span, "inline", keep_window=False)
        monkeypatch.setattr(windows, "_children_near", lambda node, low, high: node.children)
        return near, builder.build(doc, span, "inline", keep_window=False)

    near, full = both([(cursor, cursor)])
    assert near == full and near.prefix_start < cursor - 5000 and near.suffix_end > cursor + 1000
    for start in range(0, len(text), 997):  # and for the gap anywhere, budgets reaching the file's ends
        near, full = both([(start, start)])
        assert near == full


def test_indent_unit_fast_path_counts_like_the_line_loop(monkeypatch):
    from infill.context import indentation as context

    class AlwaysUnusual:  # forces the general line-by-line loop, the reference
        def search(self, window):
            return True

    rng = random.Random(5)
    pieces = [" ", "  ", "    ", "\t", "\xa0", "\r", "\x0c", "\u2028", "x", "é", "\n", "\n", "if a:", "        "]
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(30)))
        for language in (None, "go", "javascript"):
            fast = context.indent_unit(text, 0, len(text), language)
            with monkeypatch.context() as patch:
                patch.setattr(context, "_UNUSUAL_SPACE", AlwaysUnusual())
                assert context.indent_unit(text, 0, len(text), language) == fast, repr(text)


def test_notes_for_a_document_nobody_asks_about_stay_bounded(monkeypatch):
    monkeypatch.setattr(syntax, "MAX_PENDING_NOTES", 5)
    builder = ContextBuilder()
    uri, text = "file:///idle.py", "x = 1\n"
    builder.document(text, "python", uri, 1)
    for version in range(2, 12):  # typed while completions were refused: no context asked for
        builder.note_edit(uri, len(text), len(text), "y", version)
        text += "y"
    (doc,) = builder._documents.values()
    assert len(doc._notes) == 0 and doc._notes_dropped
    snapshot = builder.document(text + "(", "python", uri, 12)  # one more change, never noted
    assert str(snapshot.tree.root_node) == str(ParsedDocument("python").update(text + "(").tree.root_node)
    assert not doc._notes_dropped


def test_parse_filled_equals_a_fresh_parse_of_the_filled_text(monkeypatch):
    def no_text_comparison(*args):
        raise AssertionError("the fill spans give the changed range")

    monkeypatch.setattr(syntax, "diff_edit", no_text_comparison)
    text, cursor = cut(PY)
    doc = ParsedDocument("python").update(text)
    later = text.index("return 1")
    for spans, middles in (
        [[(cursor, cursor)], ["x = (1 +"]],
        [[(cursor, cursor + 1)], ["é = 2\n"]],
        [[(cursor, cursor), (later, later + 6)], ["total = 9", "yield"]],
    ):
        filled = doc.parse_filled(spans, middles)
        expected = text
        for (a, b), middle in reversed(list(zip(spans, middles))):
            expected = expected[:a] + middle + expected[b:]
        assert _shape(filled) == _shape(ParsedDocument("python").update(expected).tree)


@pytest.mark.parametrize("language", ["python", "plaintext"])  # with a grammar, and line windows without one
def test_window_start_stays_put_while_typing_so_the_prompt_start_is_stable(language):
    settings = ContextSettings(prefix_tokens=100, suffix_tokens=20)  # 350 chars before the gap
    text = "".join(f"x{i} = {i}\n" for i in range(120))
    cursor = text.index("x90 = 90") + len("x90 = 90")
    builder = ContextBuilder(settings)
    uri = "file:///typing.txt"
    sticky_starts, fresh_starts = [], []
    for version in range(1, 80):
        doc = builder.document(text, language, uri, version)
        ctx = builder.build(doc, [(cursor, cursor)], "inline")
        assert cursor - ctx.prefix_start <= 350 and (ctx.prefix_start == 0 or text[ctx.prefix_start - 1] == "\n")
        sticky_starts.append(ctx.prefix_start)
        fresh = ContextBuilder(settings)  # what a window without memory would do
        fresh_starts.append(
            fresh.build(fresh.document(text, language, None), [(cursor, cursor)], "inline").prefix_start
        )
        builder.note_edit(uri, cursor, cursor, "1", version + 1)  # the next key
        text, cursor = text[:cursor] + "1" + text[cursor:], cursor + 1
    assert len(set(fresh_starts)) >= 8  # a window snapped afresh moves every line or so
    # This one moves only when its start falls out of budget, and then leaves 10% (35 chars) of headroom.
    moves = [i for i in range(1, len(sticky_starts)) if sticky_starts[i] != sticky_starts[i - 1]]
    assert len(moves) <= 3 and all(b - a >= 30 for a, b in zip(moves, moves[1:]))
    assert sticky_starts[0] == fresh_starts[0]  # the first window is the full one
    # A jump elsewhere gets a window there.
    doc = builder.document(text, language, uri, 80)
    assert builder.build(doc, [(200, 200)], "inline").prefix_start == 0


def test_the_window_starts_where_a_whole_unit_starts_by_the_one_rule_for_prompt_starts():
    """The context's window start follows cache/tokens.py's `choose_start` in characters, at the starts of whole
    units (never a call's argument line), kept while the user types."""
    call = "".join(f"    total += scale(\n        values[{i}],\n        {i},\n    )\n" for i in range(6))
    text = "".join(f"def f{n}(values):\n    total = 0\n{call}    return total\n\n\n" for n in range(30))
    statement_starts = {m.start() for m in re.finditer(r"(?m)^(def |    total|    return)", text)}
    for budget_tokens in (40, 60, 100, 300):
        builder = ContextBuilder(ContextSettings(prefix_tokens=budget_tokens))
        cursor = text.rindex("return total")
        ctx = builder.build(builder.document(text, "python", None), [(cursor, cursor)], "inline")
        assert ctx.prefix_start in statement_starts, budget_tokens
        assert cursor - ctx.prefix_start <= budget_tokens * 3.5
    texts = ["a\n", "b\n", "c\n", "d\n"]
    assert choose_start(texts, [2, 2, 2, 2], 5, 5) == 2  # as many whole chunks as fit
    assert choose_start(texts, [2, 2, 2, 2], 5, 5, cuts=(6,)) == 3  # ... from a proposed cut where one fits
    assert choose_start(texts, [2, 2, 2, 2], 5, 5, cuts=(0,)) == 2  # ... else from any chunk
    assert choose_start(texts, [2, 2, 2, 2], 5, 5, anchor="c\nd\n", cuts=(6,)) == 2  # the last cut, while it fits
    assert choose_start(texts, [2, 2, 2, 2], 5, 3, anchor="b\nc\nd\n") == 3  # no longer fits: anew, with headroom
    assert choose_start(texts, [2, 2, 2, 2], 9, 9) == 0 and choose_start(texts, [2, 2, 2, 2], 9, 9, truncated=True) == 0


def test_window_budgets_count_characters_not_bytes():
    """The same file with comments in Japanese instead of English (as many characters, three times the bytes) gets
    the same window."""

    def module(comment: str) -> str:
        return "".join(f"def f{i}(a):\n    # {comment}\n    return a + {i}\n\n" for i in range(40))

    settings = ContextSettings(prefix_tokens=100, suffix_tokens=30)
    windows = []
    for comment in ("abcdefghij", "日本語のコメントです"):
        text = module(comment)
        cursor = text.index("return a + 30") + len("return a + 30")
        builder = ContextBuilder(settings)
        ctx = builder.build(builder.document(text, "python", None), [(cursor, cursor)], "inline")
        windows.append((cursor - ctx.prefix_start, ctx.suffix_end - cursor))
    assert windows[0] == windows[1] and windows[0][0] > 250


class _CountingBytes(bytes):
    """A document's UTF-8 bytes that count how many bytes are sliced out of them."""

    sliced = 0

    def __getitem__(self, key):
        part = super().__getitem__(key)
        if isinstance(key, slice):
            _CountingBytes.sliced += len(part)
        return part


@pytest.mark.parametrize(
    "text",
    [
        "x = [" + "'é', " * 330_000 + "]\r",  # one line of thousands of small nodes (a fuzzer's hang, issue 14)
        "y = 'é'\r" * 200_000,  # CR-only line endings
    ],
)
def test_a_window_costs_the_window_not_the_document(text):
    """Each candidate boundary used to cost the whole document (a decode from its start, a search back for a
    newline): 2.6 s for this one-line list, over 60 s in the fuzzer. Now the bytes decoded stay near the window."""
    from infill.context.surroundings import node_at
    from infill.context.windows import syntactic_window

    builder = ContextBuilder()
    doc = builder.document(text, "python", "file:///huge.py")
    doc.__dict__["data"] = _CountingBytes(text.encode("utf-8"))  # DocumentSnapshot.data is a cached_property
    cursor = len(text) * 3 // 4
    _CountingBytes.sliced = 0
    starts, end, _ = syntactic_window(doc, node_at(doc, cursor), cursor, cursor, 7000, 2000)
    assert all(s <= cursor for s in starts) and cursor <= end
    assert _CountingBytes.sliced < 4 * (7000 + 2000) * 2, _CountingBytes.sliced  # 'é' is 2 bytes


def test_a_lone_surrogate_is_parsed_as_one_replacement_character():
    # JSON may carry "\ud800"; tree-sitter takes UTF-8, so the text is made encodable first, one character for one
    # (str offsets keep their meaning).
    text = "s = '\udcff'\nx = 1\n"
    assert encodable(text) == "s = '\ufffd'\nx = 1\n" and encodable("plain") == "plain"
    builder = ContextBuilder()
    doc = builder.document(text, "python", "file:///surrogate.py")
    ctx = builder.build(doc, [(len(text), len(text))], "inline")
    assert doc.text[4:7] == "'\ufffd'" and doc.tree is not None and ctx.language == "python"
