"""Code from other open files: outlines, the choice for a gap, and how it reaches the prompt of the real default."""

from __future__ import annotations

import pytest

from infill.context.related import OpenDocument, RelatedFiles, RelatedSettings, imports_of, outline
from infill.pipeline import CompletionRequest, Pipeline
from infill.types import InfillError, InfillRequest

STATE = '''"""Connection states."""
import enum

MAX_RETRIES = 5


class ConnectionState:
    """Tracks both peers."""

    timeout: float = 2.5

    def __init__(self, role):
        self.role = role
        self.pending_events = []

        def helper(x):
            inner = x + 1
            return inner

    def process_event(self, role, event_type,
                      server_switch_event=None):
        if event_type:
            local = 3
        return local


def start_next_cycle(state):
    return state
'''

UNRELATED = """def render_table(rows, widths):
    return "\\n".join(str(r) for r in rows)


class Palette:
    def darken(self, color):
        return color
"""

CONNECTION = """from ._state import ConnectionState, start_next_cycle

import os


class Connection:
    def __init__(self, role):
        self._cstate = ConnectionState(role)

    def send(self, event):
        old = self._cstate.role
        self._cstate."""


def test_an_outline_holds_definitions_signatures_and_attributes_not_bodies():
    lines = {(line.member_of, line.text) for line in outline(STATE)}
    assert ("", "MAX_RETRIES = 5") in lines
    assert ("", "class ConnectionState: ...") in lines
    assert ("ConnectionState", "timeout: float = 2.5") in lines
    assert ("ConnectionState", "self.pending_events = []") in lines
    # a signature over two lines is shown on one, as a stub
    assert ("ConnectionState", "def process_event(self, role, event_type, server_switch_event=None): ...") in lines
    assert ("", "def start_next_cycle(state): ...") in lines
    shown = " ".join(text for _, text in lines)
    assert "helper" not in shown and "inner" not in shown and "local" not in shown  # function bodies stay out


def test_imports_name_their_modules_and_names_over_several_lines():
    modules, names = imports_of(
        "from ._state import (\n    ConnectionState,\n    start_next_cycle,\n)\n"
        "import os.path\nimport { Palette } from './palette'\n"
    )
    assert {"_state", "path", "palette"} <= modules
    assert {"ConnectionState", "start_next_cycle", "Palette"} <= names


def _docs():
    return (
        OpenDocument("file:///pkg/table.py", "pkg/table.py", UNRELATED),
        OpenDocument("file:///pkg/_state.py", "pkg/_state.py", STATE),
    )


def test_the_choice_holds_the_imported_class_members_under_a_comment_naming_the_file():
    extra = RelatedFiles().select(
        _docs(),
        CONNECTION,
        len(CONNECTION),
        len(CONNECTION),
        "python",
        name="pkg/_connection.py",
        document_id="file:///pkg/_connection.py",
    )
    assert extra.startswith("# pkg/_state.py\n")
    assert "    def process_event(self, role, event_type, server_switch_event=None): ..." in extra
    assert "class ConnectionState: ..." in extra
    assert "render_table" not in extra and "Palette" not in extra  # nothing in it is asked for
    assert extra.endswith("\n# pkg/_connection.py\n")


def test_typing_on_one_line_keeps_the_choice_so_the_prompt_start_stays_cached():
    related = RelatedFiles()
    choices = set()
    for typed in ("", "p", "pro", "process_ev", "process_event(role, "):
        text = CONNECTION + typed
        choices.add(related.select(_docs(), text, len(text), len(text), "python", name="pkg/_connection.py"))
    assert len(choices) == 1 and next(iter(choices))


def test_nothing_is_chosen_without_other_files_or_with_a_zero_budget():
    related = RelatedFiles()
    assert related.select((), CONNECTION, len(CONNECTION), len(CONNECTION), "python") == ""
    own = (OpenDocument("file:///pkg/_connection.py", "pkg/_connection.py", CONNECTION),)
    assert related.select(own, CONNECTION, 10, 10, "python", document_id="file:///pkg/_connection.py") == ""
    off = RelatedFiles(RelatedSettings(max_chars=0))
    assert off.select(_docs(), CONNECTION, len(CONNECTION), len(CONNECTION), "python") == ""
    with pytest.raises(InfillError):
        RelatedSettings(max_lines=-1)


def test_the_budget_bounds_the_choice():
    extra = RelatedFiles(RelatedSettings(max_chars=120)).select(
        _docs(), CONNECTION, len(CONNECTION), len(CONNECTION), "python"
    )
    assert 0 < len(extra) <= 120 + len("# \n")


def test_the_pipeline_hands_the_choice_to_the_backend_for_code_and_never_for_prose(ar_backend):
    pipeline = Pipeline(ar_backend)
    code = pipeline.prepare(
        CompletionRequest(
            text=CONNECTION,
            start=len(CONNECTION),
            language="python",
            document_id="file:///pkg/_connection.py",
            name="pkg/_connection.py",
            related=_docs(),
        )
    )
    assert "def process_event(" in code.request.extra_context
    prose = "# Notes\n\nThe ConnectionState keeps the role and the "
    note = pipeline.prepare(
        CompletionRequest(
            text=prose, start=len(prose), language="markdown", document_id="file:///notes.md", related=_docs()
        )
    )
    assert note.request.extra_context == ""


def test_the_default_backend_puts_the_extra_context_ahead_and_keeps_it_encoded_while_typing(ar_backend):
    extra = RelatedFiles().select(
        _docs(), CONNECTION, len(CONNECTION), len(CONNECTION), "python", name="pkg/_connection.py"
    )
    plain = ar_backend.infill(
        InfillRequest(prefix=CONNECTION, single_line=True, language="python", document_id="related-plain")
    )
    first = ar_backend.infill(
        InfillRequest(
            prefix=CONNECTION, single_line=True, language="python", document_id="related-extra", extra_context=extra
        )
    )
    extra_tokens = len(ar_backend.tokens.encode(extra))
    assert first.outcome in ("ok", "empty") and plain.outcome in ("ok", "empty")
    assert first.prompt_tokens == plain.prompt_tokens + extra_tokens
    typed = ar_backend.infill(
        InfillRequest(
            prefix=CONNECTION + "pro",
            single_line=True,
            language="python",
            document_id="related-extra",
            extra_context=extra,
        )
    )
    assert typed.reused_tokens >= extra_tokens + plain.prompt_tokens - 4  # only the typed tail is encoded


def test_extra_context_must_be_text():
    with pytest.raises(InfillError):
        InfillRequest(prefix="x = ", extra_context=None)  # type: ignore[arg-type]


def test_the_diffusion_engine_puts_the_extra_context_after_bos_and_keeps_the_prefix(tiny_engine):
    extra = "# pkg/_state.py\nclass ConnectionState: ...\n\n# pkg/_connection.py\n"
    plain = tiny_engine.prompt_ids("x = compute(", "")
    with_extra = tiny_engine.prompt_ids("x = compute(", "", extra)
    extra_ids = tiny_engine.tokens.encode(extra)
    assert with_extra[:1] == plain[:1] and with_extra[1 : 1 + len(extra_ids)] == extra_ids
    assert with_extra[1 + len(extra_ids) :] == plain[1:]
