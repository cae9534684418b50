#!/usr/bin/env bash
# Prepares what benchmarks/gpu.sh needs on the device machine, which reaches no package registry and gets no git
# history: .baseline/ (infill/ as it was before the static forward, the "before" of the pipeline figures) and .whl/
# (every wheel the device image lacks: the transformers this project pins, and the test plugins tests/conftest.py
# imports, so the CUDA tests can run there too). Both are git-ignored here (the repository's info/exclude, shared
# by its worktrees) and carried by the device call: carry=[".baseline", ".whl"].
set -euo pipefail
cd "$(dirname "$0")/.."
BASE="${INFILL_BASELINE_COMMIT:-1185155}"
EXCLUDE="$(git rev-parse --git-path info/exclude)"
mkdir -p "$(dirname "$EXCLUDE")"
grep -qx '/.baseline/' "$EXCLUDE" 2>/dev/null || echo '/.baseline/' >> "$EXCLUDE"
grep -qx '/.whl/' "$EXCLUDE" 2>/dev/null || echo '/.whl/' >> "$EXCLUDE"
rm -rf .baseline && mkdir -p .baseline
git archive "$BASE" infill | tar -x -C .baseline
rm -rf .whl && mkdir -p .whl
PY=python3
[ -x .venv/bin/python ] && PY=.venv/bin/python
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .whl "transformers==5.24.0" "pytest-asyncio>=0.24" "pytest-timeout>=2.3"
ls .whl
du -sh .baseline .whl
