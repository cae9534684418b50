"""What a caller asks the pipeline (`CompletionRequest`) and what it gets back (`PipelineResult`, its `Fill`s):
infill/pipeline.py's front door, whose types live here so that the pipeline module holds the routing alone."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from infill import timing
from infill.context.related import OpenDocument
from infill.types import UNSTEERED, FillControl, InfillResult

Mode = Literal["inline", "gap", "gaps"]


@dataclass(frozen=True)
class CompletionRequest:
    """Fill `text[start:end]` (an empty span for a cursor). For mode "gaps", `spans` lists every gap (sorted,
    non-overlapping) and `start`/`end` are ignored."""

    text: str
    start: int
    end: int | None = None
    mode: Mode = "inline"
    language: str | None = None
    document_id: str | None = None
    version: int | None = None
    spans: tuple[tuple[int, int], ...] = ()
    max_middle_tokens: int | None = None  # caps the context's middle budget (e.g. an API's max_tokens)
    name: str | None = None  # the document's file name or path, as the model may be told it
    related: tuple[OpenDocument, ...] = ()  # other open documents, most recently used first
    candidates: int = 1  # fills the backend may write and rank by their join with the suffix (InfillRequest)
    alternatives: int | None = None  # other fills to try where the first is refused (None: PipelineSettings')
    keystroke: bool = False  # an automatic suggestion while the person types (InfillRequest.keystroke)
    # A person asked and waits for this fill (an invoked inline request, Fill gap, a gateway client's `best_of`):
    # its `candidates` are written within PipelineSettings.explicit_budget_ms (the rank deadline), and the server
    # keeps its time out of the keystroke guard (server/budget.py).
    explicit: bool = False


@dataclass(frozen=True)
class Fill:
    start: int  # replace text[start:end] with `text`
    end: int
    text: str


@dataclass
class PipelineResult:
    fills: list[Fill]  # empty: show nothing
    result: InfillResult | None  # the backend result that was used (or the last one tried)
    route: str = "primary"  # "primary", "fallback" or "none"
    rejections: list[tuple[str, str]] = field(default_factory=list)  # (backend name, reason)
    alternative: int = 0  # the backend's other fill shown after its first was refused (1: the best; 0: none)
    context_ms: float = 0.0
    context_ahead: bool = False  # the context was built before `complete` (during the debounce)
    total_ms: float = 0.0
    version: int | None = None
    costs: dict[str, float] = field(default_factory=dict)  # backend name -> ms spent in it
    single_line: bool = False
    max_middle_tokens: int = 0
    language: str | None = None
    context_unit: str = ""  # the syntactic unit the window was snapped to
    related_chars: int = 0  # characters of other open files' code ahead of the prompt (InfillRequest.extra_context)
    syntax_region: tuple[int, int] | None = None  # the part of a large document that was parsed (None: all of it)
    # Benchmark phases (infill/timing.py; a no-op trace unless timing is on): "context", and "checks" (everything
    # in `complete` outside context building and backends: cleaning, the watchdog, routing).
    trace: timing.Trace = field(default=timing.OFF, repr=False)

    def to_log(self) -> dict[str, Any]:
        """One JSON-ready record for the completion log."""
        r = self.result
        return {
            "route": self.route,
            "version": self.version,
            "language": self.language,
            "single_line": self.single_line,
            "max_middle_tokens": self.max_middle_tokens,
            "context_unit": self.context_unit,
            "related_chars": self.related_chars,
            "fills": len(self.fills),
            "syntax_region": list(self.syntax_region) if self.syntax_region else None,
            "fill_chars": sum(len(f.text) for f in self.fills),
            "backend": r.backend if r else None,
            "outcome": r.outcome if r else None,
            "steps": r.steps if r else 0,
            "prompt_tokens": r.prompt_tokens if r else 0,
            "reused_tokens": r.reused_tokens if r else 0,
            "rejections": [{"backend": b, "reason": reason} for b, reason in self.rejections],
            "alternative": self.alternative,
            "context_ms": round(self.context_ms, 3),
            "context_ahead": self.context_ahead,
            "total_ms": round(self.total_ms, 3),
            "costs_ms": {name: round(ms, 3) for name, ms in self.costs.items()},
        }


class Completer(Protocol):
    """Whatever answers a CompletionRequest: a Pipeline, one run on the model worker (infill/worker.py OnWorker),
    or the pilot's RawPipeline."""

    def complete(self, req: CompletionRequest, control: FillControl = UNSTEERED) -> PipelineResult: ...
