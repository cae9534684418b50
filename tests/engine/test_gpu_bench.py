"""benchmarks/engine_gpu.py and benchmarks/gpu.sh, checked on the CPU before a GPU run counts on them (issue 48):
- a section's time limit escapes the engine's own `except Exception` blocks, and is recorded as that section's;
- each bucketed program is reported captured or eager, and an eager one where capture was expected fails the
  section, not the run;
- profiler device time counts device-side events only;
- floors divide by the bytes of the weights that ran (FP8's after the fp8 section) at the card's own bandwidth;
- before and after time the same keystrokes, each labelled with the tokens it encodes, reused tokens reported;
- each section's JSON is written the moment it ends; gpu.sh stops at once (exit 3) without its carried files.
The benchmark modules are imported by file path: benchmarks/server.py must not shadow the `server` package.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from infill.engine.config import EngineConfig
from infill.engine.diffusion import DiffusionEngine
from infill.types import InfillRequest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
REQUEST = InfillRequest(prefix="def add(a, b):\n    return ", suffix="\n", single_line=True, seed=1)


def bench_module(name: str):
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def sections():
    return bench_module("gpu_sections")


def test_importing_the_gpu_benchmark_leaves_the_server_package_unshadowed():
    bench_module("engine_gpu")
    assert str(BENCHMARKS) not in sys.path
    import server

    assert Path(server.__file__).parent.name == "server"


# ---- time limits ------------------------------------------------------------------------------------------------


def test_a_section_timeout_escapes_the_engines_except_blocks(tiny_engine, sections):
    def times_out(*args, **kwargs):
        raise sections.SectionTimeout

    engine = DiffusionEngine(tiny_engine.loaded, EngineConfig(max_denoising_steps=2), denoiser=times_out)
    with pytest.raises(sections.SectionTimeout):
        engine.infill(REQUEST)  # its `except Exception` turns any failure into an error result


def test_a_section_that_swallows_exceptions_still_times_out_and_the_next_runs(sections, tmp_path):
    def swallowing() -> dict:
        try:
            time.sleep(30)
        except Exception:  # noqa: BLE001 - what the engine's own blocks do
            return {"swallowed": True}
        return {"slept": True}

    figures = sections.run_sections(
        {"slow": swallowing, "next": lambda: {"ran": True}}, limit_s=lambda name: 1, out=tmp_path / "s.jsonl"
    )
    assert figures["slow"]["error"].startswith("timed out") and "swallowed" not in figures["slow"]
    assert figures["next"]["ran"] is True


def test_each_section_is_written_the_moment_it_ends(sections, tmp_path):
    out = tmp_path / "sections.jsonl"

    def second() -> dict:
        return {"lines_before_me": [json.loads(line)["section"] for line in out.read_text().splitlines()]}

    sections.run_sections({"first": lambda: {"x": 1}, "second": second}, limit_s=lambda name: 60, out=out)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["section"] for line in lines] == ["first", "second"]
    assert lines[1]["lines_before_me"] == ["first"]


# ---- captured or eager --------------------------------------------------------------------------------------------


def test_programs_are_reported_and_an_eager_one_fails_its_section_not_the_run(tiny_engine, sections):
    engine = DiffusionEngine(tiny_engine.loaded, EngineConfig(max_denoising_steps=2, static_programs=True))
    assert engine.infill(REQUEST).outcome == "ok"  # builds an encode and a step program (eager: no CUDA here)
    buckets = sections.bucket_report(engine.runner, expect_captured=False)
    assert buckets and set(buckets.values()) == {"eager"} and any(name.startswith("step ") for name in buckets)

    def expecting_capture() -> dict:
        return {"buckets": sections.bucket_report(engine.runner, expect_captured=True)}

    figures = sections.run_sections(
        {"load": expecting_capture, "after": lambda: {"ran": True}}, limit_s=lambda name: 60
    )
    assert "should be captured ran eagerly" in figures["load"]["error"]
    assert figures["load"]["buckets"] == buckets and figures["after"]["ran"] is True


# ---- figures ------------------------------------------------------------------------------------------------------


def test_profiler_device_time_counts_device_events_only():
    """A host op carries the device time of the kernel it launched; the kernel's own event carries it too
    (what torch.profiler's key_averages gives on CUDA). Mocked: no GPU here."""
    floor = bench_module("gpu_floor")
    events = [
        SimpleNamespace(key="aten::mm", device_type=torch.autograd.DeviceType.CPU, self_device_time_total=700, count=1),
        SimpleNamespace(key="gemm", device_type=torch.autograd.DeviceType.CUDA, self_device_time_total=700, count=1),
        SimpleNamespace(key="copy", device_type=torch.autograd.DeviceType.CUDA, self_device_time_total=300, count=2),
    ]
    assert floor.device_time_us(events) == 1000 and floor.device_kernels(events) == 3


def test_the_floor_bandwidth_is_the_cards_own():
    floor = bench_module("gpu_floor")
    assert floor.card_bandwidth_gbs("NVIDIA H100 80GB HBM3") == 3350.0
    assert floor.card_bandwidth_gbs("NVIDIA H100 PCIe") == 2000.0
    assert floor.card_bandwidth_gbs("NVIDIA H200") == 4800.0
    assert floor.card_bandwidth_gbs("a card not listed") is None


def test_a_cpu_run_of_the_sections_times_the_same_work_before_and_after(tiny_checkpoint, tmp_path):
    """The sections end to end on the tiny model (the baseline tree: this one): before and after fill the same
    keystrokes; every keystroke encodes the tokens its label names; FP8 steps are compared with FP8 floors."""
    engine_gpu = bench_module("engine_gpu")
    out = tmp_path / "sections.jsonl"
    argv = ["--model", str(tiny_checkpoint), "--device", "cpu", "--dtype", "float32", "--contexts", "256"]
    argv += ["--context", "512", "--keystrokes", "3", "--encodes", "5", "--steps", "2", "--repeat", "1"]
    argv += ["--time-scale", "20", "--out", str(out), "--baseline", str(BENCHMARKS.parent)]
    names = ["before", "bandwidth", "load", "floors", "steps", "keystroke", "pipeline", "fp8"]
    assert engine_gpu.main([*argv, "--sections", ",".join(names)]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    figures = {line.pop("section"): line for line in lines}
    assert list(figures) == names
    assert not any("error" in f for f in figures.values()), {k: f.get("error") for k, f in figures.items()}
    before, after = figures["before"], figures["pipeline"]
    assert before["keystrokes"] == after["keystrokes"] == 3 and before["steps"] == after["steps"] == 2
    assert len(after["reused_tokens"]) == len(after["encoded_tokens"]) == 3
    assert all(r > 0 for r in after["reused_tokens"])  # the file's prompt is kept between keystrokes
    for new in (1, 2, 8):
        assert figures["keystroke"][f"{new} tokens"]["encoded_tokens"] == [new]
    assert figures["load"]["buckets"] == {} and figures["load"]["expect_captured"] is False
    fp8 = figures["fp8"]
    assert fp8["weights"].startswith("fp8") and figures["floors"]["weights"] == "float32"
    case = "3x32@256"
    assert fp8["floors"][case]["bytes"] < figures["floors"][case]["bytes"]  # the FP8 weights' own bytes
    ms, floor = fp8["steps"][case]["ms_per_step"], fp8["floors"][case]["floor_ms"]
    # over its own floor (the JSON rounds both figures: within a percent; the bf16 floor would be ~2x off)
    assert fp8["steps"][case]["over_floor"] == pytest.approx(ms / floor, rel=0.01)


# ---- gpu.sh -------------------------------------------------------------------------------------------------------


def test_gpu_sh_stops_at_once_without_its_carried_files(tmp_path):
    copy = tmp_path / "benchmarks"
    copy.mkdir()
    shutil.copy(BENCHMARKS / "gpu.sh", copy / "gpu.sh")
    done = subprocess.run(["bash", str(copy / "gpu.sh")], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 3
    assert "gpu-prepare.sh" in done.stderr and ".baseline" in done.stderr and ".whl" in done.stderr


def test_gpu_sh_header_states_the_device_call():
    header = (BENCHMARKS / "gpu.sh").read_text().split("set -uo pipefail")[0]
    assert 'run(command="bash benchmarks/gpu.sh", carry=[".baseline", ".whl"], timeout_s=330)' in header
    assert "bash benchmarks/gpu-prepare.sh" in header and "H100" in header and "second" in header
    assert sum(bench_module("engine_gpu").LIMIT_S[name] for name in bench_module("engine_gpu").SECTIONS) <= 300
