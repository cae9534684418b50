"""Metrics against hand-computed cases, and the per-backend summary over hand-made attempt records."""

from __future__ import annotations

import json

import pytest

from infill.metrics import (
    AcceptRule,
    cost_per_accepted,
    edit_similarity,
    exact_match,
    levenshtein,
    normalise,
    throughput_per_hour,
)
from infill.pilot.summary import summarise_backend
from infill.pilot.syntax import syntax_valid
from infill.stats import percentile
from infill.types import InfillError


def test_levenshtein_by_hand():
    assert levenshtein("kitten", "sitting") == 3  # k→s, e→i, +g
    assert levenshtein("flaw", "lawn") == 2  # -f, +n
    assert levenshtein("", "abc") == 3
    assert levenshtein("abc", "abc") == 0
    assert levenshtein("return a + b", "return a - b") == 1


def test_edit_similarity_by_hand():
    assert edit_similarity("kitten", "sitting") == pytest.approx(1 - 3 / 7)
    assert edit_similarity("", "") == 1.0
    assert edit_similarity("abc", "") == 0.0
    assert edit_similarity("abcd", "abcd") == 1.0
    assert edit_similarity("ab", "abcd") == pytest.approx(0.5)
    # Normalisation: line endings, trailing spaces and blank lines at the ends are not edits.
    assert edit_similarity("x = 1  \r\ny = 2\n\n", "x = 1\ny = 2") == 1.0


def test_exact_match_after_normalising_only():
    assert exact_match("foo  \r\nbar\n", "foo\nbar")
    assert not exact_match("foo bar", "foo  bar")  # inner spaces are an edit
    assert not exact_match("    x", "x")  # so is indentation
    assert normalise("\n\na\n  b  \n\n") == "a\n  b"


def test_percentiles_interpolate_linearly():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([10, 20, 30, 40, 50], 95) == pytest.approx(48.0)  # rank 3.8: 40 + 0.8 × 10
    assert percentile([50, 10, 40, 20, 30], 50) == 30  # unsorted input
    assert percentile([7.0], 95) == 7.0
    assert percentile([], 50) is None
    with pytest.raises(InfillError):
        percentile([1], 101)


def test_accept_rule():
    rule = AcceptRule(threshold=0.7)
    assert rule.accepts(shown=True, similarity=0.7, syntax_ok=True)
    assert not rule.accepts(shown=True, similarity=0.69, syntax_ok=True)
    assert not rule.accepts(shown=True, similarity=0.95, syntax_ok=False)
    assert rule.accepts(shown=True, similarity=0.95, syntax_ok=None)  # cannot be judged: not held against it
    assert not rule.accepts(shown=False, similarity=1.0, syntax_ok=True)
    assert AcceptRule(0.7, require_syntax=False).accepts(True, 0.8, False)
    with pytest.raises(InfillError):
        AcceptRule(1.5)


def test_cost_and_throughput():
    assert cost_per_accepted(2.0, 1800.0, 4) == pytest.approx(0.25)  # 2 $/h × 0.5 h / 4
    assert cost_per_accepted(2.0, 1800.0, 0) is None
    assert cost_per_accepted(None, 1800.0, 4) is None
    assert throughput_per_hour(30, 60.0) == pytest.approx(1800.0)
    assert throughput_per_hour(3, 0.0) is None


def test_syntax_validity_per_language():
    original = "def f(x):\n    return x\n"
    assert syntax_valid("python", original, "def f(x):\n    return x + 1\n") is True
    assert syntax_valid("python", original, "def f(x):\n    return (x\n") is False
    assert syntax_valid("python", "def f(:\n", "def f(x):\n") is None  # no baseline to compare with
    js = "function f(a) {\n  return a;\n}\n"
    assert syntax_valid("javascript", js, "function f(a) {\n  return a * 2;\n}\n") is True
    assert syntax_valid("javascript", js, "function f(a) {\n  return a *;\n}\n") is False
    # An original with an error of its own: only new errors count.
    broken = '{"a": 1,, "b": 2}'
    assert syntax_valid("json", broken, '{"a": 3,, "b": 2}') is True
    assert syntax_valid("json", broken, '{"a": [,, "b": 2}') is False
    assert syntax_valid("cobol", "x", "y") is None


def approx4(value: float):
    """Summaries round shares to 4 decimals and milliseconds to 0.1."""
    return pytest.approx(value, abs=1e-4, rel=1e-3)


def _attempt(**fields) -> dict:
    base = {
        "backend": "b",
        "kind": "single-line",
        "cell": 0,
        "concurrency": 1,
        "latency_ms": 100.0,
        "outcome": "ok",
        "shown": True,
        "exact_match": False,
        "edit_similarity": 0.5,
        "syntax_valid": True,
        "accepted": False,
        "route": "primary",
        "rejections": [],
        "error": None,
        "stopped": False,
        "tokens_per_forward": 0.0,
    }
    return {**base, **fields}


def test_backend_summary_by_hand():
    attempts = [
        _attempt(latency_ms=100.0, accepted=True, exact_match=True, edit_similarity=1.0, tokens_per_forward=2.0),
        _attempt(latency_ms=200.0, route="fallback", accepted=True, edit_similarity=0.8, tokens_per_forward=4.0),
        _attempt(
            latency_ms=300.0,
            shown=False,
            edit_similarity=0.0,
            syntax_valid=None,
            route="none",
            rejections=[["b", "syntax"], ["ar", "repetition"]],
            kind="multi-line",
        ),
        _attempt(
            latency_ms=5.0,
            shown=False,
            edit_similarity=0.0,
            syntax_valid=None,
            route="none",
            outcome="exception",
            error="ConnectError: refused",
            kind="multi-line",
        ),
        _attempt(latency_ms=900.0, stopped=True, accepted=True),  # cut by the time cap: left out
        _attempt(cell=1, concurrency=4, latency_ms=400.0, syntax_valid=False),
    ]
    cells = [
        {"cell": 0, "backend": "b", "concurrency": 1, "wall_seconds": 36.0, "stopped_by": "time cap"},
        {"cell": 1, "backend": "b", "concurrency": 4, "wall_seconds": 3.6, "stopped_by": "done"},
    ]
    s = summarise_backend("b", attempts, cells, price=3.0)
    json.dumps(s)  # summary.json must be able to hold it
    assert s["attempts"] == 5 and s["stopped_attempts"] == 1
    assert s["accept_rate"] == approx4(2 / 5)
    assert s["exact_match"] == approx4(1 / 5)
    assert s["edit_similarity"] == approx4((1.0 + 0.8 + 0 + 0 + 0.5) / 5)
    assert s["shown_rate"] == approx4(3 / 5)
    assert s["syntax_valid_share"] == approx4(2 / 3)  # among shown fills that could be judged
    assert s["fallback_rate"] == approx4(1 / 5)
    assert s["error_rate"] == approx4(1 / 5)
    assert s["errors"] == {"ConnectError: refused": 1}
    assert s["rejections"] == {"syntax": 1, "repetition": 1}
    assert s["tokens_per_forward"] == approx4(3.0)
    # Latency leaves out the failed attempt (5 ms) and the stopped one: [100, 200, 300, 400].
    assert s["p50_ms"] == approx4(250.0)
    assert s["p95_ms"] == approx4(385.0)
    one = s["by_concurrency"]["1"]
    assert one["attempts"] == 4 and one["completed"] == 3 and one["accepted"] == 2
    assert one["throughput_per_hour"] == approx4(3 * 3600 / 36.0)
    assert one["cost_per_accepted"] == approx4(3.0 * 0.01 / 2)  # 36 s = 0.01 h
    assert one["p95_ms"] == approx4(290.0)  # [100, 200, 300]: rank 1.9
    assert s["by_concurrency"]["4"]["cost_per_accepted"] is None  # nothing accepted
    assert s["by_kind"]["multi-line"]["attempts"] == 2
    assert s["by_kind"]["multi-line"]["accept_rate"] == 0.0
