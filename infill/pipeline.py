"""The one path every completion takes: document → context → backend → post-processing/watchdog → fallback.

The LSP server, the gateway and the pilot all call `Pipeline.complete`, so what the gateway returns is what an
editor would show. Offsets are Python string indices into the document text (the server converts LSP UTF-16
positions before calling).

Routing: the primary backend answers first. A one-line fill it wrote that the watchdog rejects, or an empty one,
gives way to the backend's other fills when it can write them (`alternatives`), best first, within the primary's
budget: the first one accepted is shown. If none is, or it ran out of budget (cut_short) or failed (error), the
fallback backend (if any) gets the remaining budget; if that fails too, nothing is shown. With a fallback and a
deadline, the primary gets `primary_share` (0.6) of the budget so a fallback still has time left; without a fallback the
primary gets the whole budget (an effective share of 1.0).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from infill.checks.postprocess import postprocess
from infill.checks.watchdog import Verdict, Watchdog, WatchdogSettings, check_length, check_repetition
from infill.completion import CompletionRequest, Fill, PipelineResult
from infill.context.builder import ContextBuilder, ContextSettings, find_placeholders
from infill.context.related import OpenDocument, RelatedFiles
from infill.context.syntax import resolve_language
from infill.prepared import MAX_GAPS, Prepared, has_text, prepare
from infill.types import (
    MAX_CANDIDATES,
    UNSTEERED,
    CancelToken,
    Draft,
    DraftCallback,
    FillControl,
    ForgetsDocuments,
    InfillBackend,
    InfillError,
    InfillRequest,
    InfillResult,
    WarmsPrompts,
    WritesAlternatives,
    require_integers,
)

log = logging.getLogger(__name__)

__all__ = [
    "MAX_GAPS",
    "CompletionRequest",
    "Fill",
    "MAX_MIDDLE_TOKENS",
    "OpenDocument",
    "Pipeline",
    "PipelineResult",
    "PipelineSettings",
    "Prepared",
    "find_placeholders",
    "has_text",
    "resolve_language",
]


MAX_MIDDLE_TOKENS = 4096  # the most a multi-line fill may be given (the LSP setting, the gateway's max_tokens)


@dataclass(frozen=True)
class PipelineSettings:
    max_middle_tokens: int = 64  # middle budget of a multi-line fill, up to MAX_MIDDLE_TOKENS
    prefix_chars: int = 8000  # hard cap on the window before the gap (the token budget usually binds first)
    suffix_chars: int = 2000
    prefix_tokens: int = 2048  # approximate token budgets of the windows (chars / chars_per_token)
    suffix_tokens: int = 512
    chars_per_token: float = 3.5
    single_line_tokens: int = 32  # middle budget of a single-line fill
    max_gap_tokens: int = 256  # middle budget ceiling for a "Fill gap" over a large selection
    primary_share: float = 0.6  # share of a deadline the primary gets when a fallback is configured (else 1.0)
    min_fallback_ms: float = 30.0  # a fallback is not started with less time than this left
    accept_cut_short: bool = False  # show a primary's best draft at its deadline (else: try the fallback)
    # Other fills a backend that can branch (`alternatives`) writes for a one-line gap whose fill was refused, or
    # any one gap whose fill was empty, within the request's budget; the first its checks accept is shown (0: none).
    alternatives: int = 4
    # An explicit request's candidates other than the greedy fill stop this long after it starts (the greedy fill
    # always stands): p95 within ~3 s on 2 cores where `best_of` 4 took 3.8 s unbounded (docs/offline-default.md).
    explicit_budget_ms: int = 2000
    watchdog: WatchdogSettings = field(default_factory=WatchdogSettings)

    def __post_init__(self) -> None:
        if not isinstance(self.alternatives, int) or not 0 <= self.alternatives <= MAX_CANDIDATES:
            raise InfillError(f"alternatives must be an integer from 0 to {MAX_CANDIDATES}, got {self.alternatives!r}")
        sizes = ("max_middle_tokens", "prefix_chars", "suffix_chars", "prefix_tokens", "suffix_tokens")
        require_integers(
            self,
            dict.fromkeys((*sizes, "single_line_tokens", "max_gap_tokens", "explicit_budget_ms"), 1),
            "pipeline setting ",
        )
        if self.max_middle_tokens > MAX_MIDDLE_TOKENS:
            raise InfillError(f"max_middle_tokens must be at most {MAX_MIDDLE_TOKENS}, got {self.max_middle_tokens}")
        if not 0 < self.primary_share <= 1:
            raise InfillError(f"primary_share must be in (0, 1], got {self.primary_share}")
        if self.min_fallback_ms < 0 or not self.chars_per_token > 0:
            raise InfillError("min_fallback_ms must be >= 0 and chars_per_token > 0")

    def context_settings(self) -> ContextSettings:
        def cap(chars: int) -> int:
            return max(1, math.floor(chars / self.chars_per_token))

        return ContextSettings(
            prefix_tokens=min(self.prefix_tokens, cap(self.prefix_chars)),
            suffix_tokens=min(self.suffix_tokens, cap(self.suffix_chars)),
            chars_per_token=self.chars_per_token,
            single_line_tokens=self.single_line_tokens,
            multi_line_tokens=self.max_middle_tokens,
            max_gap_tokens=max(self.max_gap_tokens, self.max_middle_tokens),
        )


class Pipeline:
    def __init__(
        self, backend: InfillBackend, *, fallback: InfillBackend | None = None, settings: PipelineSettings | None = None
    ) -> None:
        self.backend = backend
        self.fallback = fallback
        # What the backends can do beyond `infill`, decided once here (infill/types.py's optional protocols).
        self._warms = backend if isinstance(backend, WarmsPrompts) else None
        self._forgets: list[ForgetsDocuments] = []
        self._branches: dict[str, WritesAlternatives] = {}  # by route
        for route, able in (("primary", backend), ("fallback", fallback)):
            if isinstance(able, WritesAlternatives):
                self._branches[route] = able
            if isinstance(able, ForgetsDocuments):
                self._forgets.append(able)
        self._settings = settings or PipelineSettings()
        self.contexts = ContextBuilder(self._settings.context_settings())
        self.related = RelatedFiles()  # code from other open files (its settings: `related.settings`)
        self.watchdog = Watchdog(self._settings.watchdog)
        self.routes: Counter[str] = Counter()
        self._routes_lock = threading.Lock()

    @property
    def settings(self) -> PipelineSettings:
        return self._settings

    @settings.setter
    def settings(self, value: PipelineSettings) -> None:
        """New settings apply to the next request; cached trees and counters are kept."""
        self._settings = value
        self.contexts.settings = value.context_settings()
        self.watchdog.settings = value.watchdog

    def stats(self) -> dict[str, Any]:
        """Routes taken and watchdog rejections so far (for infill.status and benchmarks)."""
        with self._routes_lock:
            routes = dict(self.routes)
        return {"routes": routes, **self.watchdog.stats()}

    def carry_counters_from(self, older: Pipeline) -> None:
        """Continue the counters of the pipeline this one replaces (a backend reload), so infill.status keeps
        counting across reloads. Called before this pipeline serves anything."""
        with older._routes_lock:
            routes = Counter(older.routes)
        stats = older.watchdog.stats()
        with self._routes_lock:
            self.routes.update(routes)
        self.watchdog.counts.update(stats["rejected"])
        self.watchdog.checked += stats["checked"]

    def note_edit(
        self, document_id: str, start_offset: int, old_end_offset: int, new_text: str, version: int | None = None
    ) -> None:
        """The editor replaced text[start_offset:old_end_offset] (str offsets, before the change) with `new_text`,
        making `version`. Cheap (nothing is parsed now): the next request for this document re-parses
        incrementally from these edits instead of comparing whole texts. Callers that note edits must note every
        edit of that document, in order."""
        self.contexts.note_edit(document_id, start_offset, old_end_offset, new_text, version)

    def forget(self, document_id: str) -> None:
        """Drop the cached syntax tree of a closed document."""
        self.contexts.forget(document_id)

    def forget_in_backends(self, document_id: str) -> None:
        """Drop what the backends keep for a closed document (its encoded prompt). Model work: run it on the model
        worker, behind the jobs queued before it."""
        for able in self._forgets:
            able.forget(document_id)

    def prepare(self, req: CompletionRequest) -> Prepared:
        """Context for a request: the backend request, the gap spans, the parsed document, the gap context(s).
        Thread-safe: the server builds it on its own thread while the debounce runs, then passes it to
        `complete`."""
        return prepare(req, self.contexts, self.related)

    def warm(self, prep: Prepared, cancel: CancelToken | None = None) -> int:
        """Let the primary backend encode this request's prompt ahead of `complete` (a backend that cannot warm,
        e.g. a remote endpoint, does nothing). Returns the prompt tokens it holds, 0 when it cannot warm."""
        return self._warms.warm(prep.request, cancel=cancel) if self._warms is not None else 0

    def complete(
        self, req: CompletionRequest, control: FillControl = UNSTEERED, prepared: Prepared | None = None
    ) -> PipelineResult:
        """Complete `req`. `prepared` is its context built ahead (by `prepare`, for this very request); without it
        the context is built here, and its time counts in total_ms."""
        t0 = time.perf_counter()
        if prepared is not None and prepared.source is not req:
            raise InfillError("the prepared context belongs to another request")
        if req.explicit and req.candidates > 1:
            rank_end = time.monotonic() + self.settings.explicit_budget_ms / 1000
            control = replace(control, rank_deadline=min(rank_end, control.rank_deadline or rank_end))
        prep = prepared or self.prepare(req)
        ctx = prep.ctx
        out = PipelineResult(
            fills=[],
            result=None,
            route="none",
            context_ms=prep.context_ms,
            context_ahead=prepared is not None,
            version=req.version,
            single_line=ctx.single_line,
            max_middle_tokens=ctx.max_middle_tokens,
            language=ctx.language,
            context_unit=ctx.unit,
            syntax_region=prep.doc.region,
            trace=prep.trace,
            related_chars=len(prep.request.extra_context),
        )
        out.trace.start("checks")
        if self._nothing_to_go_on(req, prep.spans):
            self.watchdog.record(Verdict("empty_prefix", "no text before the gap"), "pipeline")
            out.rejections.append(("pipeline", "empty_prefix"))
        else:
            self._route(out, prep, control)
        with self._routes_lock:
            self.routes[out.route] += 1
        out.trace.stop("checks")
        out.total_ms = (time.perf_counter() - t0) * 1000
        return out

    @staticmethod
    def _nothing_to_go_on(req: CompletionRequest, spans: list[tuple[int, int]]) -> bool:
        """Inline completion needs text before the cursor; a gap fill needs text on at least one side."""
        has_before = has_text(req.text, 0, spans[0][0])
        return not has_before and (req.mode == "inline" or not has_text(req.text, spans[-1][1], len(req.text)))

    def _route(self, out: PipelineResult, prep: Prepared, control: FillControl) -> None:
        s, deadline = self.settings, control.deadline
        primary_deadline = deadline
        if self.fallback is not None and deadline is not None:
            primary_deadline = time.monotonic() + max(0.0, deadline - time.monotonic()) * s.primary_share
        attempts = [("primary", self.backend, primary_deadline)]
        if self.fallback is not None:
            attempts.append(("fallback", self.fallback, deadline))
        guarded = self._guard_drafts(control.on_draft, prep) if control.on_draft else None
        for route, backend, budget_end in attempts:
            if control.cancelled:
                return
            if (
                route == "fallback"
                and deadline is not None
                and (deadline - time.monotonic()) * 1000 < s.min_fallback_ms
            ):
                out.rejections.append((_name(backend), "no_budget"))
                return
            attempt = replace(control, deadline=budget_end, on_draft=guarded)
            result = self._call(backend, prep.request, attempt, out)
            out.result = result
            if result.outcome == "cancelled":
                return
            verdict, middles = self._judge(result, prep, deadline)
            if verdict.ok:
                out.fills = [Fill(a, b, m) for (a, b), m in zip(prep.spans, middles)]
                out.route = route
                return
            out.rejections.append((result.backend, verdict.reason or "rejected"))
            if result.outcome in ("ok", "empty") and self._try_alternatives(out, prep, route, attempt, deadline):
                out.route = route
                return

    def _try_alternatives(
        self,
        out: PipelineResult,
        prep: Prepared,
        route: str,
        attempt: FillControl,
        deadline: float | None,
    ) -> bool:
        """The backend's other fills for a one-line gap whose fill it refused, or a gap it left empty, best first (a
        backend that can branch: `alternatives`); the first the checks accept is shown. Whether one was. (A refused
        fill of several lines is not retried: as many more lines would cost about as much again.) `attempt` bounds the
        backend, `deadline` the checks."""
        count = self.settings.alternatives if prep.source.alternatives is None else prep.source.alternatives
        brancher, greedy = self._branches.get(route), out.result
        if (
            greedy is None
            or not count
            or brancher is None
            or not (prep.ctx.single_line or greedy.outcome == "empty")
            or len(prep.spans) != 1
            or attempt.cancelled
        ):
            return False
        name, t0 = greedy.backend, time.perf_counter()
        out.trace.stop("checks")
        try:
            texts = brancher.alternatives(prep.request, count, attempt)
        except Exception as exc:  # noqa: BLE001 - the greedy fill's verdict stands
            log.warning("backend %s failed writing other fills: %s", name, exc)
            texts = []
        out.costs[name] = out.costs.get(name, 0.0) + (time.perf_counter() - t0) * 1000
        out.trace.start("checks")
        for rank, text in enumerate(texts, 1):
            result = replace(greedy, middles=(text,), outcome="ok")
            verdict, middles = self._judge(result, prep, deadline)
            if verdict.ok:
                out.fills, out.result, out.alternative = [Fill(*prep.spans[0], middles[0])], result, rank
                return True
        return False

    def _call(
        self, backend: InfillBackend, request: InfillRequest, control: FillControl, out: PipelineResult
    ) -> InfillResult:
        name = _name(backend)
        out.trace.stop("checks")  # (the backend's time is its own)
        t0 = time.perf_counter()
        try:
            result = backend.infill(request, control)
        except Exception as exc:  # a failing backend must leave the fallback (and the editor) usable
            log.warning("backend %s failed: %s", name, exc)
            result = InfillResult(middles=(), outcome="error", backend=name, error=str(exc), version=request.version)
        out.costs[name] = out.costs.get(name, 0.0) + (time.perf_counter() - t0) * 1000
        out.trace.start("checks")
        return result

    def _judge(self, result: InfillResult, prep: Prepared, deadline: float | None) -> tuple[Verdict, list[str]]:
        """The cleaned middles and the verdict on them. Backend outcomes that are not candidates count as
        rejections too, under their own reasons."""

        def record(reason: str, detail: str) -> tuple[Verdict, list[str]]:
            return self.watchdog.record(Verdict(reason, detail), result.backend), []

        if result.outcome == "error":
            return record("backend_error", result.error or "")
        if result.outcome == "empty" or not result.middles:
            return record("empty", "the backend returned nothing")
        if result.outcome == "cut_short" and not self.settings.accept_cut_short:
            return record("cut_short", "the backend ran out of budget")
        if len(result.middles) != len(prep.spans):
            return record("structure", f"{len(result.middles)} middles for {len(prep.spans)} gaps")
        middles = clean_middles(result.middles, prep)
        verdict = self.watchdog.check(
            middles, prep.spans, prep.doc, prep.gaps, deadline=deadline, backend=result.backend
        )
        return verdict, middles

    def _guard_drafts(self, on_draft: DraftCallback, prep: Prepared) -> DraftCallback:
        """Drafts are cleaned like finals and dropped when a cheap check fails (no parse per step)."""

        def forward(draft: Draft) -> None:
            if len(draft.middles) != len(prep.spans):
                return
            middles = clean_middles(draft.middles, prep)
            s = self.settings.watchdog
            if any(check_length(m, c, s) or check_repetition(m, s) for m, c in zip(middles, prep.gaps)):
                return
            on_draft(Draft(step=draft.step, middles=tuple(middles), confidence=draft.confidence))

        return forward


def clean_middles(middles: Sequence[str], prep: Prepared) -> list[str]:
    """Post-process each middle against the document text around its own gap."""
    text, ctx = prep.source.text, prep.ctx
    cleaned = []
    for (a, b), middle, gap in zip(prep.spans, middles, prep.gaps):
        middle = postprocess(middle, gap, text[ctx.prefix_start : a], text[b : max(b, ctx.suffix_end)])
        if prep.source.mode != "inline" and text[a:b].endswith("\n") and middle and not middle.endswith("\n"):
            middle += "\n"  # a selection of whole lines is replaced by whole lines
        cleaned.append(middle)
    return cleaned


def _name(backend: InfillBackend) -> str:
    try:
        return backend.info.name
    except Exception:
        return type(backend).__name__
