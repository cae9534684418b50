"""The verdict on a computed reply, one rule for an inline suggestion and a gap fill (Fill gap, Fill all gaps):

- "discarded": the request was superseded or edited while computing, or the document is no longer the text the
  fill was computed for (`still_current`); nothing is offered for another text.
- "empty": no fill has text. A blank fill (whitespace only) counts as none: inline it would show nothing, and in a
  gap fill it would replace its placeholder with nothing, deleting it; the other gaps' fills still stand.
- "ok": the fills that have text.

The completion log records the verdict (server/telemetry.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from infill.pipeline import Fill

from .documents import Document, DocumentStore, text_fingerprint

Verdict = Literal["ok", "empty", "discarded"]


def usable_fills(fills: Sequence[Fill]) -> list[Fill]:
    """The fills worth offering: those with text other than whitespace."""
    return [fill for fill in fills if fill.text.strip()]


def still_current(documents: DocumentStore, document: Document, version: int | None, text: str) -> bool:
    """`document` is still open as the same document, at `version`, holding `text` (a client may send a change
    without a new version; the fingerprint check is O(1) once the text is hashed, and skipped when the text is the
    same object)."""
    return (
        documents.get(document.uri) is document
        and document.version == version
        and (document.text is text or document.fingerprint == text_fingerprint(text))
    )


def reply_verdict(stopped: bool, current: bool, fills: Sequence[Fill]) -> tuple[Verdict, list[Fill]]:
    """The verdict on a run's `fills` (`stopped`: superseded or edited while computing; `current`: still_current
    held when it ended) and the fills to offer."""
    usable = usable_fills(fills)
    if stopped or not current:
        return "discarded", usable
    return ("ok" if usable else "empty"), usable
