"""Figures per backend, per concurrency level and per hole kind, computed from the attempt and cell records alone
(so a report can be rebuilt from the JSONL files of a partial run)."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from infill.metrics import cost_per_accepted, mean, share, throughput_per_hour
from infill.stats import percentile

FAILED_OUTCOMES = ("exception", "error")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Records of a JSONL file; a torn last line (a run killed mid-write) is dropped."""
    if not path.exists():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return records


def _r(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def latencies(attempts: list[dict[str, Any]]) -> list[float]:
    """Latencies of attempts a backend actually answered (failures return early and would flatter p50)."""
    return [
        a["latency_ms"] for a in attempts if a.get("latency_ms") is not None and a.get("outcome") not in FAILED_OUTCOMES
    ]


def quality(attempts: list[dict[str, Any]]) -> dict[str, Any]:
    shown = [a for a in attempts if a.get("shown")]
    syntax_judged = [a["syntax_valid"] for a in shown if a.get("syntax_valid") is not None]
    lat = latencies(attempts)
    return {
        "attempts": len(attempts),
        "shown_rate": _r(share([bool(a.get("shown")) for a in attempts])),
        "exact_match": _r(share([bool(a.get("exact_match")) for a in attempts])),
        "edit_similarity": _r(mean([float(a.get("edit_similarity") or 0.0) for a in attempts])),
        "syntax_valid_share": _r(share(syntax_judged)),
        "syntax_judged": len(syntax_judged),
        "accept_rate": _r(share([bool(a.get("accepted")) for a in attempts])),
        "accepted": sum(1 for a in attempts if a.get("accepted")),
        "accepted_chars": sum(int(a.get("accepted_chars") or 0) for a in attempts),
        "retained_chars": sum(int(a.get("retained_chars") or 0) for a in attempts),
        "p50_ms": _r(percentile(lat, 50), 1),
        "p95_ms": _r(percentile(lat, 95), 1),
    }


def _by_concurrency(attempts: list[dict[str, Any]], cells: list[dict[str, Any]], price: float | None) -> dict[str, Any]:
    out = {}
    for cell in sorted(cells, key=lambda c: c["concurrency"]):
        mine = [a for a in attempts if a.get("cell") == cell["cell"]]
        answered = [a for a in mine if not a.get("stopped")]
        completed = len([a for a in answered if a.get("outcome") not in FAILED_OUTCOMES])
        accepted = sum(1 for a in answered if a.get("accepted"))
        lat = latencies(answered)
        out[str(cell["concurrency"])] = {
            "attempts": len(answered),
            "completed": completed,
            "accepted": accepted,
            "wall_seconds": cell["wall_seconds"],
            "stopped_by": cell["stopped_by"],
            "p50_ms": _r(percentile(lat, 50), 1),
            "p95_ms": _r(percentile(lat, 95), 1),
            "throughput_per_hour": _r(throughput_per_hour(completed, cell["wall_seconds"]), 1),
            "cost_per_accepted": _r(cost_per_accepted(price, cell["wall_seconds"], accepted), 6),
        }
    return out


def _reason(text: str) -> str:
    return " ".join(str(text).split())[:100]


def summarise_backend(
    label: str, attempts: list[dict[str, Any]], cells: list[dict[str, Any]], price: float | None
) -> dict[str, Any]:
    answered = [a for a in attempts if not a.get("stopped")]
    rejections: Counter[str] = Counter()
    for a in answered:
        for _backend, reason in a.get("rejections") or []:
            rejections[_reason(reason)] += 1
    errors = Counter(_reason(a["error"]) for a in answered if a.get("error"))
    tpf = [a["tokens_per_forward"] for a in answered if (a.get("tokens_per_forward") or 0) > 0]
    kinds: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for a in answered:
        kinds[a["kind"]].append(a)
    return {
        **quality(answered),
        "stopped_attempts": len(attempts) - len(answered),
        "fallback_rate": _r(share([a.get("route") == "fallback" for a in answered])),
        "error_rate": _r(share([a.get("error") is not None for a in answered])),
        "errors": dict(errors.most_common(8)),
        "rejections": dict(rejections.most_common()),
        "attempts_with_rejection": sum(1 for a in answered if a.get("rejections")),
        "tokens_per_forward": _r(mean(tpf), 3),
        "by_concurrency": _by_concurrency(attempts, [c for c in cells if c["backend"] == label], price),
        "by_kind": {kind: quality(items) for kind, items in sorted(kinds.items())},
    }


def summarise(out_dir: Path, targets: list[dict[str, Any]], price: float | None) -> dict[str, Any]:
    attempts = read_jsonl(out_dir / "attempts.jsonl")
    cells = read_jsonl(out_dir / "cells.jsonl")
    labels = [t["label"] for t in targets] or sorted({a["backend"] for a in attempts})
    return {
        label: summarise_backend(label, [a for a in attempts if a["backend"] == label], cells, price)
        for label in labels
    }
