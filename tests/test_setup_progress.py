"""scripts/build-progress.sh, which scripts/setup.sh wraps around the one pip install that compiles llama.cpp: it
must say what is being built, how far along and for how long, keep the whole output in its log, and pass the
build's exit status through (showing the log's last lines when it fails). The build here is a shell command
printing lines in the forms CMake's two generators print while pip compiles llama-cpp-python."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WRAPPER = ROOT / "scripts" / "build-progress.sh"

# ninja's lines as pip -v shows them (indented): a compile, a link, the install step
NINJA = [
    "Building wheel for llama-cpp-python (pyproject.toml): started",
    "  [1/3] /usr/bin/cc -O3 -o vendor/llama.cpp/ggml/src/CMakeFiles/ggml-base.dir/ggml.c.o"
    " -c /tmp/pip-install-x/llama-cpp-python_y/vendor/llama.cpp/ggml/src/ggml.c",
    "  [2/3] : && /usr/bin/c++ -fPIC -O3 -shared -o vendor/llama.cpp/bin/libllama.so src/llama.cpp.o && :",
    "  [3/3] cd /tmp/build && /usr/bin/cmake -P cmake_install.cmake",
]
# make's lines (CMake's Unix Makefiles generator)
MAKE = ["  [ 40%] Building CXX object vendor/llama.cpp/src/CMakeFiles/llama.dir/llama-model.cpp.o"]


def run_wrapper(tmp_path: Path, lines: list[str], exit_status: int = 0) -> tuple[subprocess.CompletedProcess, Path]:
    log = tmp_path / "build.log"
    script = "".join(f"printf '%s\\n' {line!r}; " for line in lines) + f"exit {exit_status}"
    env = {**os.environ, "BUILD_PROGRESS_EVERY_S": "0"}  # every step shown (the default shows one each 10 s)
    done = subprocess.run(
        ["bash", str(WRAPPER), "llama.cpp", str(log), "--", "bash", "-c", script],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    return done, log


def test_shows_what_is_compiled_how_far_and_how_long(tmp_path):
    done, log = run_wrapper(tmp_path, NINJA + MAKE)
    assert done.returncode == 0, done.stderr
    shown = done.stderr.splitlines()
    assert "the first install compiles it" in shown[0] and "once" in shown[0] and str(log) in shown[0]
    assert any("[1/3] llama.cpp/ggml/src/ggml.c" in line and "so far" in line for line in shown), shown
    assert any("[2/3] linking libllama.so" in line for line in shown), shown
    assert any("[40%] Building CXX object" in line for line in shown), shown
    assert shown[-1].startswith("infill-ls: llama.cpp done in 0m0"), shown
    assert "Building wheel" not in done.stderr  # pip's own lines stay in the log only
    assert log.read_text().splitlines() == NINJA + MAKE


def test_a_failed_build_passes_its_status_through_and_shows_the_log_tail(tmp_path):
    done, log = run_wrapper(tmp_path, [*NINJA[:2], "error: no such instruction: vpdpbusd"], exit_status=3)
    assert done.returncode == 3
    assert "building llama.cpp failed (exit 3)" in done.stderr
    assert done.stderr.rstrip().endswith("error: no such instruction: vpdpbusd")
    assert "error: no such instruction" in log.read_text()


def test_progress_lines_are_spaced_in_time_but_the_last_step_always_shows(tmp_path):
    log = tmp_path / "build.log"
    lines = [f"[{i}/40] /usr/bin/cc -o x{i}.o -c /src/vendor/llama.cpp/ggml/src/f{i}.c" for i in range(1, 41)]
    script = "".join(f"printf '%s\\n' {line!r}; " for line in lines)
    done = subprocess.run(
        ["bash", str(WRAPPER), "llama.cpp", str(log), "--", "bash", "-c", script],
        capture_output=True,
        text=True,
        env={**os.environ, "BUILD_PROGRESS_EVERY_S": "3600"},
        timeout=60,
    )
    steps = [line for line in done.stderr.splitlines() if "/40]" in line]
    assert [s.split("]")[0].split("[")[1] for s in steps] == ["1/40", "40/40"], steps
