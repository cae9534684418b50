#!/usr/bin/env bash
# Prepares what benchmarks/gpu.sh needs on the device machine, which reaches no package registry and gets no git
# history: .baseline/ (infill/ as it was before the static forward, the "before" of the pipeline figures) and .whl/
# (the transformers wheel this project pins). Both are git-ignored here (.git/info/exclude) and carried by the
# device call: carry=[".baseline", ".whl"].
set -euo pipefail
cd "$(dirname "$0")/.."
BASE="${INFILL_BASELINE_COMMIT:-1185155}"
grep -qx '/.baseline/' .git/info/exclude 2>/dev/null || echo '/.baseline/' >> .git/info/exclude
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
rm -rf .baseline && mkdir -p .baseline
git archive "$BASE" infill | tar -x -C .baseline
mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .whl "transformers==5.24.0"
du -sh .baseline .whl
