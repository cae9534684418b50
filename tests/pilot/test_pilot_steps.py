"""The pilot reports the denoising-step cap each in-process DiffusionGemma engine ran with (resolved: an explicit
--diffusion-steps, else the checkpoint's generation_config.json, else the default), and where it came from."""

from __future__ import annotations

import json

import pytest

from infill.pilot.cli import main as pilot_main
from infill.testing.tiny_checkpoint import write_tiny_checkpoint

CODE = """def area(width, height):
    return width * height


def perimeter(width, height):
    total = 2 * (width + height)
    return total
"""


@pytest.fixture(scope="module")
def three_step_checkpoint(tmp_path_factory):
    """A tiny checkpoint whose generation_config.json caps denoising at 3 steps."""
    path = write_tiny_checkpoint(tmp_path_factory.mktemp("three-steps"))
    gen = path / "generation_config.json"
    gen.write_text(json.dumps({**json.loads(gen.read_text()), "max_denoising_steps": 3}))
    return path


def pilot_meta(tmp_path, checkpoint, *options: str) -> tuple[dict, str]:
    src = tmp_path / "src"
    src.mkdir()
    (src / "shapes.py").write_text(CODE)
    out = tmp_path / "out"
    rc = pilot_main(
        [
            str(src),
            "--out",
            str(out),
            "--n",
            "2",
            "--seed",
            "1",
            "--backend",
            f"diffusion:{checkpoint}",
            "--concurrency",
            "1",
            "--max-seconds",
            "60",
            "--no-warmup",
            "--quiet",
            *options,
        ]
    )
    assert rc == 0
    return json.loads((out / "summary.json").read_text())["meta"], (out / "report.md").read_text()


def test_the_checkpoints_step_cap_is_reported_when_none_is_given(tmp_path, three_step_checkpoint):
    meta, report = pilot_meta(tmp_path, three_step_checkpoint)
    assert meta["diffusion_steps"] == 3 and meta["diffusion_steps_from"] == "generation_config.json"
    assert "max denoising steps (in-process diffusion) 3" in report


def test_an_explicit_step_cap_is_reported_as_explicit(tmp_path, three_step_checkpoint):
    meta, _ = pilot_meta(tmp_path, three_step_checkpoint, "--diffusion-steps", "48")
    assert meta["diffusion_steps"] == 48 and meta["diffusion_steps_from"] == "explicit"
