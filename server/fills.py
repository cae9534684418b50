"""Gap fills for code actions and commands: the selection (or the Markdown placeholders in it) filled in one
pipeline request, returned as a WorkspaceEdit tied to the document version it was computed for."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from lsprotocol import types

from infill.pipeline import MAX_GAPS, CompletionRequest, PipelineResult, find_placeholders, has_text, resolve_language

from .backend_host import BackendHost
from .documents import SESSION, Clamp, Document, DocumentStore
from .gate import ClientLog, offset_logged, refusal
from .model_runs import run_on_model
from .scheduling import related
from .settings import Settings
from .telemetry import Telemetry
from .verdict import reply_verdict, still_current

T = TypeVar("T")
LOOP_SCAN_CHARS = 100_000  # texts longer than this are scanned on a worker thread, never on the event loop
LIST_LIMIT = 500  # placeholders counted for an action's title ("500+" past it): listing stays bounded


@dataclass(frozen=True)
class FillDeps:
    """What a gap fill uses, taken from the server for one request (`settings` as they are when it comes)."""

    documents: DocumentStore
    host: BackendHost  # the backend, its model thread and the per-document claims
    telemetry: Telemetry
    log: ClientLog
    settings: Settings


@dataclass
class FillOutcome:
    edit: types.WorkspaceEdit | None
    reason: str  # why there is no edit ("" when there is one)
    result: PipelineResult | None = None


def is_markdown(uri: str, language_id: str | None) -> bool:
    """As the pipeline will see it (languageId first, with its aliases; the file extension when there is none)."""
    return resolve_language(language_id, uri) == "markdown"


def gap_spans(
    text: str, start: int, end: int, mode: str, limit: int | None = None
) -> tuple[list[tuple[int, int]], str]:
    """The spans to fill (at most `limit` placeholders) and, when there are none, why."""
    if mode == "gap":
        if start >= end:
            return [], "the selection is empty: select the gap to fill"
        if not has_text(text, 0, start) and not has_text(text, end, len(text)):
            return [], "the selection covers the whole document: there is no context to fill between"
        return [(start, end)], ""
    spans = find_placeholders(text, start, end, limit) if start < end else find_placeholders(text, 0, len(text), limit)
    if not spans:
        return [], "no placeholders ([[...]], {{...}} or ___) in the selection or document"
    return spans, ""


async def off_loop(size: int, work: Callable[..., T], *args: Any) -> T:
    """Run `work(*args)` at once when `size` (characters it may scan) is small, else on a worker thread: scanning
    a multi-megabyte text must not hold the event loop (infill.status, cancels and edits wait behind it)."""
    if size <= LOOP_SCAN_CHARS:
        return work(*args)
    return await asyncio.to_thread(work, *args)


def selection_outside(document: Document, rng: types.Range) -> str:
    """Why a selection's end lies outside `document` (past its line's end or its last line), or "" when both are
    positions of it."""
    for position in (rng.start, rng.end):
        clamp = Clamp()
        document.offset_at(position, clamp)
        if clamp.note:
            return clamp.note
    return ""


def stale_reason(document: Document | None, uri: str, expected: dict[str, Any] | None) -> str | None:
    """Why `document` is not the text an action was computed for (`expected`: its generation, version and text
    fingerprint as Document.identity gave them), or None when it is."""
    if document is None or not expected:
        return None
    if expected.get("generation") not in (None, f"{SESSION}:{document.generation}"):
        return f"{uri} was closed and reopened (or the server restarted) since the action was offered"
    if "version" in expected and expected["version"] != document.version:
        return f"{uri} changed since the action was offered (version {expected['version']} -> {document.version})"
    if expected.get("text") not in (None, document.fingerprint):
        return f"{uri} holds other text than the action was offered for (same version); no edit"
    return None


async def compute_fill(
    deps: FillDeps, uri: str, rng: types.Range, mode: str, expected: dict[str, Any] | None
) -> FillOutcome:
    """The fill for `rng`, refused unless the document is exactly the text `expected` names (see stale_reason)."""
    started = time.perf_counter()
    documents, host, settings = deps.documents, deps.host, deps.settings
    document = documents.get(uri)
    if (why := refusal(document, uri, settings, host)) is not None or document is None:
        return FillOutcome(None, why or "")
    if (stale := stale_reason(document, uri, expected)) is not None:
        return FillOutcome(None, stale)
    version, text = document.version, document.text
    span = expected.get("span") if expected and "text" in expected else None  # offsets in this exact text
    if span is not None and span[0] <= span[1] <= len(text):
        start, end = span  # the listing converted the selection already: no position is converted again
    else:
        if mode == "gap" and (outside := selection_outside(document, rng)):
            # Clamped, it would fill another span than the one selected, which the client never asked for.
            return FillOutcome(None, f"the selection is not inside {uri}@{version}: {outside}; no edit")
        start, end = offset_logged(document, rng.start, deps.log), offset_logged(document, rng.end, deps.log)
        start, end = min(start, end), max(start, end)
    # The first MAX_GAPS placeholders: a file of thousands of blanks once held the model thread for minutes.
    listed = document.placeholders
    if mode == "gaps" and listed is not None and listed[0] is text and listed[1:3] == (start, end):
        spans, no_spans = list(listed[3][:MAX_GAPS]), ""  # found by the listing of this text and selection
    else:
        spans, no_spans = await off_loop(len(text), gap_spans, text, start, end, mode, MAX_GAPS)
    if documents.get(uri) is not document or document.version != version:
        return FillOutcome(None, f"{uri} changed while its placeholders were found; no edit for the old version")
    if not spans:
        return FillOutcome(None, no_spans)
    if mode == "gaps" and len(spans) == MAX_GAPS:
        deps.log(
            f"Fill all gaps in {uri}: filling the first {MAX_GAPS} placeholders; run it again for the rest",
            types.MessageType.Info,
        )
    request = CompletionRequest(
        text=text,
        start=spans[0][0],
        end=spans[0][1],
        mode="gap" if mode == "gap" else "gaps",
        language=document.language_id,
        document_id=uri,
        version=version,
        spans=tuple(spans) if mode == "gaps" else (),
        candidates=settings.fill_candidates,
        explicit=True,
        **related(documents, settings, uri),
    )
    pipeline = host.pipeline
    if pipeline is None:
        return FillOutcome(None, f"the backend is not ready (state {host.state})")
    run = await run_on_model(
        host,
        deps.log,
        host.claims.open(uri, "action"),
        pipeline,
        request,
        budget_s=settings.code_action_budget_ms / 1000,
        what=f"fill for {uri}",
        queue_deadline=True,  # a fill still queued at its budget's end is answered then, not when the thread frees
    )
    if run.failure:
        return FillOutcome(None, f"the backend failed: {run.failure}")
    if run.result is None and not run.stopped:
        return FillOutcome(None, f"no fill: {run.unrun or 'the budget ran out before the model was free'}")
    if run.result is None:
        return FillOutcome(None, f"{uri} changed before the fill started; no edit for the old version")
    result = run.result
    server_ms = (time.perf_counter() - started) * 1000
    outcome, fills = reply_verdict(run.stopped, still_current(documents, document, version, text), result.fills)
    deps.telemetry.record_completion(
        kind=mode,
        uri=uri,
        version=version,
        span=(start, end),
        outcome=outcome,
        result=result,
        server_ms=server_ms,
        fills=[f.text for f in fills],
    )
    if outcome == "discarded":
        return FillOutcome(
            None,
            f"{uri} changed while the fill was computed (was version {version}); no edit for the old version",
            result,
        )
    if not fills:
        backend = result.result
        why = "; ".join(reason for _, reason in result.rejections) or (
            "every fill was blank"
            if result.fills
            else backend.error
            if backend and backend.error
            else f"backend outcome {backend.outcome if backend else 'none'}"
        )
        return FillOutcome(None, f"no fill: {why}", result)
    deps.telemetry.record_latency(server_ms)
    edits = [types.TextEdit(range=document.range_of(f.start, f.end), new_text=f.text) for f in fills]
    edit = types.WorkspaceEdit(
        document_changes=[
            types.TextDocumentEdit(
                text_document=types.OptionalVersionedTextDocumentIdentifier(uri=uri, version=version), edits=edits
            )
        ]
    )
    return FillOutcome(edit, "", result)
