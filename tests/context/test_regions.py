"""Region parsing of large documents (infill/regions.py) gives the same contexts and verdicts as parsing them whole,
over the real tree-sitter Python grammar."""

from __future__ import annotations

import random

from infill.checks.watchdog import check_syntax
from infill.context import regions
from infill.context.builder import ContextBuilder
from infill.context.edits import ChangedSpan, Edit
from infill.context.regions import Cuts
from infill.context.syntax import ParsedDocument

URI = "file:///big.py"


def big_source(blocks: int = 800) -> str:
    """A varied module of ~85k chars: classes, decorators, nested blocks, and strings holding column-0 lines
    that look like statements (no region may start inside them)."""
    parts = ['"""Module docstring.\n\ndef not_code():\n    pass\n"""\nimport os\n\n']
    for i in range(blocks):
        kind = i % 4
        if kind == 0:
            parts.append(
                f"def func_{i}(a, b=({i}, 2)):\n    total = a + b[0]\n    if total > {i}:\n"
                f"        return [x * 2 for x in range(total)]\n    return total\n\n\n"
            )
        elif kind == 1:
            parts.append(
                f"class Shape{i}:\n    size = {i}\n\n    @property\n    def area(self):\n"
                f"        return self.size ** 2\n\n\n"
            )
        elif kind == 2:
            parts.append(f"SQL_{i} = '''\nselect *\nfrom t{i}\ndef fake_{i}():\n'''\n\n")
        else:
            parts.append(
                f"@decorator({i})\nasync def handler_{i}(request):\n    # comment {i}\n"
                f"    data = {{'k': {i}, 'v': [1, 2]}}\n    return await request.send(data)\n\n\n"
            )
    return "".join(parts)


def whole(text: str):
    return ParsedDocument("python").update(text)  # no focus: always the whole document


def test_contexts_match_a_whole_parse_while_typing_and_jumping():
    """Typing that keeps the module valid (a broken line far outside the region changes a whole parse's error
    recovery, which a region cannot see), with deletions and jumps across the file."""
    rng = random.Random(3)
    text = big_source()
    assert len(text) > 2 * regions.REGION_MIN_CHARS
    builder = ContextBuilder()
    spots = [i + len("return total") for i in range(len(text)) if text.startswith("return total\n", i)]
    version, regional, typed_here = 1, 0, []
    cursor = spots[len(spots) // 2]
    for step in range(150):
        if step % 15 == 0:  # jump somewhere else (the spots after this one moved by what was typed here)
            spots = [s + sum(len(t) for t in typed_here) if s > cursor else s for s in spots]
            cursor, typed_here = rng.choice(spots), []
        if typed_here and rng.random() < 0.3:  # backspace over what was typed here
            last = typed_here.pop()
            builder.note_edit(URI, cursor - len(last), cursor, "", version + 1)
            text, cursor = text[: cursor - len(last)] + text[cursor:], cursor - len(last)
        else:
            typed = rng.choice([" + y", "\n    z = 2", " * (a)", " - 1"])
            typed_here.append(typed)
            builder.note_edit(URI, cursor, cursor, typed, version + 1)
            text, cursor = text[:cursor] + typed + text[cursor:], cursor + len(typed)
        version += 1
        snap = builder.document(text, "python", URI, version, focus=(cursor, cursor))
        reference = whole(text)
        assert not reference.tree.root_node.has_error
        regional += snap.region is not None
        # Fresh windows on both sides (a kept start would make the two agree whatever the trees say).
        got = builder.build(snap, [(cursor, cursor)], "inline", keep_window=False)
        assert got == builder.build(reference, [(cursor, cursor)], "inline", keep_window=False), step
    assert regional > 130  # the region was what got parsed, not the whole document


def test_watchdog_verdicts_match_a_whole_parse():
    """On clean code (where a verdict means something: the random typing above leaves unclosed brackets whose error
    recovery depends on how much text follows), good and bad fills get the same verdict from a region."""
    rng = random.Random(4)
    text = big_source()
    builder = ContextBuilder()
    builder.document(text, "python", URI, 1, focus=(0, 0))
    line_ends = [i for i in range(len(text)) if text[i] == "\n" and text[i - 1] not in "\n:"]
    regional = 0
    for version, at in enumerate(sorted(rng.sample(line_ends, 40), reverse=True), start=2):
        builder.note_edit(URI, at, at, " ", version)  # a trailing space typed, then the fill after it
        text, at = text[:at] + " " + text[at:], at + 1
        snap, reference = builder.document(text, "python", URI, version, focus=(at, at)), whole(text)
        regional += snap.region is not None
        for middle in (" + value", "(", " if x else", "; y = 2", "'"):
            assert _reason(check_syntax([middle], [(at, at)], snap)) == _reason(
                check_syntax([middle], [(at, at)], reference)
            ), (at, middle)
    assert regional >= 35


def _reason(verdict) -> str | None:
    return None if verdict is None else verdict.reason


def test_a_region_is_parsed_instead_of_the_whole_document_and_moves_with_the_gap():
    text = big_source()
    doc = ParsedDocument("python")
    middle = len(text) // 2
    reach = (7000, 1800)
    doc.update(text, focus=(middle, middle), reach=reach)
    assert doc.region is None  # the first parse is whole: it finds where top-level statements start
    doc.update(text[:middle] + "z" + text[middle:], focus=(middle + 1, middle + 1), reach=reach)
    start, end = doc.region
    assert start <= middle + 1 - reach[0] and middle + 1 + reach[1] <= end and end - start < len(text) / 3
    assert doc.tree.root_node.start_byte == start and not doc.tree.root_node.has_error
    assert text[start - 1] == "\n" and text[start] not in " \t)"  # a statement start
    # A gap far away: a new region there, still not the whole document.
    text = text[:middle] + "z" + text[middle:]
    far = len(text) - 100
    doc.update(text, focus=(far, far), reach=reach)
    assert doc.region is not None and doc.region[1] == len(text) and doc.region[0] > middle


def test_small_and_non_ascii_documents_are_parsed_whole():
    small = "def f():\n    return 1\n" * 100
    assert ParsedDocument("python").update(small, focus=(5, 5), reach=(100, 100)).region is None
    text = big_source() + "# café\n"
    doc = ParsedDocument("python")
    for _ in range(2):
        doc.update(text, focus=(1000, 1000), reach=(500, 500))
        assert doc.region is None


def test_cuts_follow_edits_and_drop_what_an_edit_touched():
    cuts = Cuts([0, 10, 20, 30], 40)
    cuts.note(Edit(12, 15, 12))  # 3 chars deleted inside the second statement
    assert cuts.current() == [0, 10, 17, 27]
    cuts.note(Edit(17, 17, 22))  # 5 chars typed right at a start: that start is no longer known to be one
    assert cuts.current() == [0, 10, 32]
    assert cuts.bounds(11, 20, 45) == (10, 32) and cuts.bounds(40, 44, 45) == (32, 45)


def test_changed_span_folds_edits_like_applying_them():
    rng = random.Random(5)
    for _ in range(200):
        old = "".join(rng.choice("ab\n") for _ in range(rng.randrange(1, 30)))
        text, span = old, ChangedSpan(len(old))
        for _ in range(rng.randrange(1, 5)):
            a = rng.randrange(len(text) + 1)
            b = rng.randrange(a, len(text) + 1)
            new = "".join(rng.choice("xy") for _ in range(rng.randrange(3)))
            span.add(Edit.replacing(a, b, new))
            text = text[:a] + new + text[b:]
        if span.changed:
            assert old[: span.start] + text[span.start : span.new_end] + old[span.old_end :] == text
