"""The one path every completion takes: document → context → backend → post-processing/watchdog → fallback.

The LSP server, the gateway and the pilot all call `Pipeline.complete`, so what the gateway returns is what an
editor would show. Offsets are Python string indices into the document text (the server converts LSP UTF-16
positions before calling).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal

from .types import CancelToken, DraftCallback, InfillBackend, InfillRequest, InfillResult

Mode = Literal["inline", "gap", "gaps"]


@dataclass(frozen=True)
class PipelineSettings:
    max_middle_tokens: int = 64
    prefix_chars: int = 8000  # window before the gap when no syntax-aware context is available
    suffix_chars: int = 2000


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
    context_ms: float = 0.0
    total_ms: float = 0.0
    version: int | None = None


class Pipeline:
    def __init__(self, backend: InfillBackend, *, fallback: InfillBackend | None = None,
                 settings: PipelineSettings | None = None) -> None:
        self.backend = backend
        self.fallback = fallback
        self.settings = settings or PipelineSettings()

    def build_request(self, req: CompletionRequest) -> tuple[InfillRequest, list[tuple[int, int]]]:
        spans = list(req.spans) if req.mode == "gaps" else [(req.start, req.start if req.end is None else req.end)]
        first, last = spans[0][0], spans[-1][1]
        prefix = req.text[max(0, first - self.settings.prefix_chars):first]
        suffix = req.text[last:last + self.settings.suffix_chars]
        between = tuple(req.text[a_end:b_start] for (_, a_end), (b_start, _) in zip(spans, spans[1:]))
        # Without syntax: a cursor after text on its line completes that line only.
        line_start = req.text.rfind("\n", 0, first) + 1
        single_line = req.mode == "inline" and req.text[line_start:first].strip() != ""
        request = InfillRequest(prefix=prefix, suffix=suffix, between=between,
                                max_middle_tokens=self.settings.max_middle_tokens, single_line=single_line,
                                language=req.language, document_id=req.document_id, version=req.version)
        return request, spans

    def complete(self, req: CompletionRequest, *, cancel: CancelToken | None = None, deadline: float | None = None,
                 on_draft: DraftCallback | None = None) -> PipelineResult:
        t0 = time.perf_counter()
        request, spans = self.build_request(req)
        context_ms = (time.perf_counter() - t0) * 1000
        result = self.backend.infill(request, cancel=cancel, deadline=deadline, on_draft=on_draft)
        fills = []
        if result.outcome in ("ok", "cut_short") and any(m for m in result.middles):
            fills = [Fill(a, b, m) for (a, b), m in zip(spans, result.middles)]
        return PipelineResult(fills=fills, result=result, route="primary" if fills else "none",
                              context_ms=context_ms, total_ms=(time.perf_counter() - t0) * 1000, version=req.version)
