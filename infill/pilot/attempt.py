"""One attempt: a hole sent through a backend's pipeline exactly as an editor would send it, then scored."""

from __future__ import annotations

import time
from typing import Any

from infill.completion import Completer
from infill.context.syntax import apply_fills
from infill.metrics import AcceptRule, edit_similarity, exact_match, retained_chars
from infill.pilot.holes import Hole
from infill.pilot.syntax import syntax_valid
from infill.pipeline import CompletionRequest, PipelineResult
from infill.types import CancelToken, FillControl


def completion_request(hole: Hole, document_id: str) -> CompletionRequest:
    """The document with the middle removed and the cursor (an empty span) where it was: the middle never leaks."""
    at = len(hole.prefix)
    return CompletionRequest(
        text=hole.text_without_middle,
        start=at,
        end=at,
        mode=hole.mode,  # type: ignore[arg-type]
        language=hole.language,
        document_id=document_id,
        version=1,
    )


def predicted_middle(hole: Hole, filled: str, outcome: PipelineResult) -> tuple[str, bool]:
    """What now stands between the prefix and the suffix, and whether a fill changed the fixed text around the
    gap (then the fills' own texts are scored)."""
    fixed = len(hole.prefix) + len(hole.suffix)
    if len(filled) >= fixed and filled.startswith(hole.prefix) and filled.endswith(hole.suffix):
        return filled[len(hole.prefix) : len(filled) - len(hole.suffix)], False
    return "".join(f.text for f in outcome.fills), True


def score(hole: Hole, outcome: PipelineResult, rule: AcceptRule) -> dict[str, Any]:
    shown = bool(outcome.fills) and any(f.text for f in outcome.fills)
    fills = sorted(outcome.fills, key=lambda f: f.start)
    filled = (
        apply_fills(hole.text_without_middle, [(f.start, f.end) for f in fills], [f.text for f in fills])
        if shown
        else hole.text_without_middle
    )
    predicted, touched_fixed = predicted_middle(hole, filled, outcome) if shown else ("", False)
    similarity = edit_similarity(predicted, hole.middle)
    syntax_ok = syntax_valid(hole.language, hole.prefix + hole.middle + hole.suffix, filled) if shown else None
    result = outcome.result
    accepted = rule.accepts(shown, similarity, syntax_ok)
    return {
        "shown": shown,
        "predicted": predicted,
        "touched_fixed_text": touched_fixed,
        "exact_match": shown and exact_match(predicted, hole.middle),
        "edit_similarity": round(similarity, 4),
        "syntax_valid": syntax_ok,
        "accepted": accepted,
        # As the server's telemetry counts them: an accepted fill's characters, and those of them the author wrote
        # too (what an editor user would have kept).
        "accepted_chars": len(predicted) if accepted else 0,
        "retained_chars": retained_chars(predicted, hole.middle) if accepted else 0,
        "route": outcome.route,
        "rejections": [list(r) for r in outcome.rejections],
        "context_ms": round(outcome.context_ms, 2),
        "pipeline_ms": round(outcome.total_ms, 2),
        "outcome": result.outcome if result else "none",
        "backend_name": result.backend if result else None,
        "backend_ms": round(result.timings.total_ms, 2) if result else None,
        "steps": result.steps if result else 0,
        "tokens_per_forward": result.tokens_per_forward if result else 0.0,
        "prompt_tokens": result.prompt_tokens if result else 0,
        "error": result.error if result and result.outcome == "error" else None,
    }


def run_attempt(
    pipeline: Completer, hole: Hole, document_id: str, rule: AcceptRule, cancel: CancelToken, deadline_s: float | None
) -> dict[str, Any]:
    """Send, time and score one hole. Latency is wall time around `Pipeline.complete` (context building, the
    backend, post-processing and any fallback). Exceptions become an error record: the run goes on."""
    request = completion_request(hole, document_id)
    started = time.perf_counter()
    deadline = None if deadline_s is None else time.monotonic() + deadline_s
    try:
        outcome = pipeline.complete(request, FillControl(cancel=cancel, deadline=deadline))
    except Exception as exc:  # a backend failing midway is data for the pilot, not a crash
        latency_ms = (time.perf_counter() - started) * 1000
        return {
            "latency_ms": round(latency_ms, 2),
            "shown": False,
            "predicted": "",
            "exact_match": False,
            "edit_similarity": edit_similarity("", hole.middle),
            "syntax_valid": None,
            "accepted": False,
            "route": "none",
            "rejections": [],
            "outcome": "exception",
            "error": f"{type(exc).__name__}: {exc}",
        }
    latency_ms = (time.perf_counter() - started) * 1000
    return {"latency_ms": round(latency_ms, 2), **score(hole, outcome, rule)}
