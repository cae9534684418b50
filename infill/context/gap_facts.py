"""The one producer of `GapFacts` (infill/types.py), the facts a backend that only continues the text needs to end
a fill where its gap ends, under one rule for the depth a fill's later lines keep: the block the cursor is in, one
indentation unit deeper after a line that opens a block (indentation.py `block_indent`, `languages.opens_block`).

The pipeline makes the first gap's facts from its parsed context (`GapContext.facts`); a backend given none (a bare
request, a later gap of several, whose text before it holds the earlier fills) reads them from the text alone
(`read_gap`), by the same rule.
"""

from __future__ import annotations

from infill.context.indentation import block_indent, unit_near
from infill.languages import indent_width, is_prose_language
from infill.types import GapFacts, GapShape


def gap_facts(
    line_before: str,
    line_after: str,
    after: str,
    indent: str,
    is_prose: bool,
    shape: GapShape | None = None,
    in_comment: bool = False,
) -> GapFacts:
    """The facts of a gap whose line reads `line_before` + GAP + `line_after`, followed by the fixed text
    `after`, whose fill's later lines keep `indent` (block_indent's)."""
    return GapFacts(
        line_before=line_before,
        line_after=line_after,
        next_line=GapFacts.first_line_below(after),
        body_indent=indent_width(indent),
        is_prose=is_prose,
        shape=shape or GapShape(),
        in_comment=in_comment,
    )


def read_gap(before: str, after: str, language: str | None) -> GapFacts:
    """The gap between `before` and `after` as the text alone says it (no tree: no shape, prose by language)."""
    line_start = before.rfind("\n") + 1
    line_before = before[line_start:]
    unit = unit_near(before + after, len(before), len(before), 0, len(before) + len(after), language)
    indent = block_indent(before, line_start, line_before, unit, language)
    return gap_facts(line_before, after.partition("\n")[0], after, indent, is_prose_language(language))
