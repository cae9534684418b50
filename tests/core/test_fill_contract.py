"""`infill-ls fill PATH --all-gaps` (what scripts/fill-contract.sh runs on examples/contract.md): every placeholder
filled jointly and the whole document printed, the text between placeholders untouched."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from infill.fill_cli import main as fill_main

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = ROOT / "examples" / "contract.md"
PLACEHOLDER = re.compile(r"\[\[[^\]]*\]\]")


def assert_between_kept(original: str, filled: str) -> int:
    """The text between placeholders appears in order in `filled`; returns how many placeholders are left."""
    at = 0
    for piece in PLACEHOLDER.split(original):
        found = filled.find(piece, at)
        assert found >= 0, f"text between placeholders changed: {piece!r}"
        at = found + len(piece)
    return len(PLACEHOLDER.findall(filled))


def test_the_example_contract_has_several_placeholders():
    assert len(PLACEHOLDER.findall(CONTRACT.read_text())) >= 5


def test_all_gaps_with_the_tiny_engine_keeps_the_text_between(tmp_path, tiny_checkpoint, capsys):
    doc = tmp_path / "short.md"
    doc.write_text("# Lease\n\nThe tenant pays [[amount]] each month, due on the [[day]] of the month.\n")
    assert (
        fill_main([str(doc), "--all-gaps", "--model", str(tiny_checkpoint), "--steps", "4", "--max-middle-tokens", "6"])
        == 0
    )
    printed = capsys.readouterr().out
    assert printed.startswith("# Lease\n\nThe tenant pays ")
    assert_between_kept(doc.read_text(), printed)


def test_all_gaps_without_placeholders_is_a_clear_error(tmp_path, capsys):
    doc = tmp_path / "plain.md"
    doc.write_text("# Nothing to fill\n")
    assert fill_main([str(doc), "--all-gaps"]) == 2
    assert "has no placeholders ([[...]], {{...}} or ___) to fill" in capsys.readouterr().err


@pytest.mark.slow
def test_the_example_contract_fills_with_the_default_model(capsys):
    assert fill_main([str(CONTRACT), "--all-gaps"]) == 0
    printed = capsys.readouterr().out
    left = assert_between_kept(CONTRACT.read_text(), printed)
    assert left < len(PLACEHOLDER.findall(CONTRACT.read_text()))
