"""Pilot outputs name the source as the user gave it, never this machine's absolute path; accepted and retained
characters follow the server's telemetry definitions (infill.metrics.retained_chars)."""

from __future__ import annotations

import json

from infill.metrics import retained_chars
from infill.pilot.cli import main as pilot_main

CODE = '''def mean(values):
    """The arithmetic mean of a non-empty list."""
    total = 0
    for value in values:
        total += value
    return total / len(values)


def spread(values):
    return max(values) - min(values)
'''


def test_reports_and_logs_name_the_source_relative_to_what_was_given(tmp_path, monkeypatch, tiny_checkpoint):
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "stats.py").write_text(CODE)
    monkeypatch.chdir(tmp_path)
    rc = pilot_main(
        [
            "proj",
            "--out",
            "out",
            "--n",
            "2",
            "--seed",
            "1",
            "--backend",
            f"diffusion:{tiny_checkpoint}",
            "--concurrency",
            "1",
            "--diffusion-steps",
            "4",
            "--max-seconds",
            "120",
            "--quiet",
        ]
    )
    assert rc == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["meta"]["src"] == "proj"
    report = (tmp_path / "out" / "report.md").read_text()
    assert "- source: `proj`" in report
    for name in ("report.md", "summary.json", "holes.jsonl", "attempts.jsonl", "cells.jsonl"):
        assert str(tmp_path) not in (tmp_path / "out" / name).read_text(), name
    attempts = [json.loads(line) for line in (tmp_path / "out" / "attempts.jsonl").read_text().splitlines()]
    assert {a["path"] for a in attempts} == {"stats.py"}
    for a in attempts:
        assert a["accepted_chars"] == (len(a["predicted"]) if a["accepted"] else 0)
        assert 0 <= a["retained_chars"] <= a["accepted_chars"]


def test_retained_chars_counts_runs_still_present():
    accepted = "total += value"
    assert retained_chars(accepted, "x = 1\n        total += value\n") == len(accepted)
    assert retained_chars(accepted, "x = 1\n        total -= value\n") == len("total ") + len("= value")
    assert retained_chars(accepted, "nothing like it at all") == 0  # single letters and spaces are chance
    assert retained_chars("+=", "a += b") == 2 and retained_chars("+=", "a -= b") == 0
    assert retained_chars("", "anything") == 0
