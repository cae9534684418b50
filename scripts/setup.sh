#!/usr/bin/env bash
# Create .venv and install infill-ls into it (idempotent). Usage: scripts/setup.sh [extra], e.g. "test".
set -euo pipefail
cd "$(dirname "$0")/.."
extra="${1:-}"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
# What was installed, and from which recipe: when nothing in it changed since the last successful run (and llama.cpp
# is still there), pip has nothing to do and is skipped (its own check of every requirement takes ~15 s).
stamp=".venv/.infill-setup${extra:+-$extra}"
recipe="$(cat pyproject.toml scripts/setup.sh scripts/llama-cpp-runtime.cmake; .venv/bin/python --version)"
recipe_hash="$(printf '%s\n%s' "$extra" "$recipe" | cksum)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$recipe_hash" ] &&
  .venv/bin/python -c "import importlib.util as u, sys; sys.exit(u.find_spec('llama_cpp') is None)" 2>/dev/null; then
  exit 0
fi
rm -f "$stamp"
# torch first, pinned: this resolves to the CPU wheel on local disk; an unpinned torch pulls a multi-GB CUDA build.
.venv/bin/python -m pip install --quiet --disable-pip-version-check "torch==2.13.0"
# The offline default runs on llama.cpp, which pip compiles from llama-cpp-python's source once (a few minutes;
# pip caches the wheel). Only what the runtime loads is built: llama.cpp's core and CPU backend, without the
# multimodal library (LLAVA_BUILD) or llama.cpp's common library and programs (scripts/llama-cpp-runtime.cmake). It
# is built for this CPU, without AMX: llama.cpp's AMX matmul crashes on Gemma 3.
install=(.venv/bin/python -m pip install --disable-pip-version-check -e ".${extra:+[$extra]}")
if ! .venv/bin/python -c "import llama_cpp" 2>/dev/null; then
  missing=""
  command -v cc >/dev/null 2>&1 || command -v gcc >/dev/null 2>&1 || command -v clang >/dev/null 2>&1 || missing="a C compiler"
  command -v c++ >/dev/null 2>&1 || command -v g++ >/dev/null 2>&1 || command -v clang++ >/dev/null 2>&1 || missing="${missing:+$missing, }a C++ compiler"
  if [ -n "$missing" ]; then
    echo "infill-ls: building llama.cpp (the offline default's runtime) needs $missing; install one" >&2
    echo "  (Debian/Ubuntu: sudo apt-get install build-essential cmake; macOS: xcode-select --install)" >&2
    exit 1
  fi
  command -v cmake >/dev/null 2>&1 || echo "infill-ls: no cmake on PATH; pip will fetch CMake from PyPI" >&2
  if [ -z "${CMAKE_ARGS:-}" ] && [ "$(uname -m)" = "x86_64" ]; then
    # (spaces inside a value escaped: this is the form whose build was checked to have no AMX)
    no_amx='-mno-amx-tile\ -mno-amx-int8\ -mno-amx-bf16'
    CMAKE_ARGS="-DGGML_NATIVE=ON -DCMAKE_C_FLAGS=$no_amx -DCMAKE_CXX_FLAGS=$no_amx"
  fi
  runtime_only="$PWD/scripts/llama-cpp-runtime.cmake"
  export CMAKE_ARGS="${CMAKE_ARGS:-} -DLLAVA_BUILD=OFF -DCMAKE_PROJECT_INCLUDE=${runtime_only// /\\ }"
  # pip -v passes the compiler's lines through; build-progress.sh keeps them in a log and shows how far it is
  scripts/build-progress.sh "llama.cpp (the offline default's runtime)" .venv/llama-cpp-build.log -- "${install[@]}" -v
else
  "${install[@]}" --quiet
fi
printf '%s\n' "$recipe_hash" >"$stamp"
