#!/usr/bin/env bash
# The DiffusionGemma engine on one GPU against the floor the card allows, and against the engine before the static
# forward, in one run: the full-size 26B-A4B architecture with random bf16 weights (--load-format dummy), every
# section of benchmarks/engine_gpu.py (the baseline's pipeline first, in its own process), each written to
# $OUT/sections.jsonl the moment it ends, so a run cut short keeps every section it finished.
#
# The call, exactly:
#   1. Here (a machine with the git history and a package registry):  bash benchmarks/gpu-prepare.sh
#      -> .baseline/ (the engine before the static forward) and .whl/ (transformers 5.24 and the test plugins the
#      device image lacks), both git-ignored.
#   2. The device tool, with no kind:
#        run(command="bash benchmarks/gpu.sh", carry=[".baseline", ".whl"], timeout_s=330)
#      An H100 (80 GB) must do, and does: the loader builds each weight once (load peak <= 1.10x the ~48 GiB of
#      bf16 weights; tests/engine/test_full_size.py), so the first card a plain call starts is enough; an H200
#      runs it the same. The sections stop by 300 s (RUN_LIMIT_S); 330 s with the machine's start leaves a second
#      try inside a 15-minute device budget.
#   3. Copy $OUT/gpu-run.json (and sections.jsonl) to benchmarks/results/engine-gpu-<card>.json.
# Exit 3 at once when what step 1 prepares was not carried.
#
# Usage: benchmarks/gpu.sh [--layers N] [--device cpu] [engine_gpu.py options...]
#   On a CPU the same run at the real dimensions with 2 layers catches shape, dtype and memory errors:
#   RUN_LIMIT_S=3600 benchmarks/gpu.sh --layers 2 --device cpu --contexts 512 --keystrokes 5 --time-scale 20
set -uo pipefail
cd "$(dirname "$0")/.."
if ! ls .whl/*.whl >/dev/null 2>&1 || [ ! -d .baseline/infill ]; then
  echo "gpu.sh: .whl/ or .baseline/ is missing: run 'bash benchmarks/gpu-prepare.sh' first and carry [\".baseline\", \".whl\"]" >&2
  exit 3
fi
PY="${INFILL_PYTHON:-python3}"
[ -x .venv/bin/python ] && [ -z "${INFILL_PYTHON:-}" ] && ! python3 -c "import torch" 2>/dev/null && PY=.venv/bin/python
OUT_DIR="${OUT:-$(mktemp -d)}"
RUN_LIMIT_S="${RUN_LIMIT_S:-300}"
LAYERS=""
DEVICE="cuda"
DTYPE="bfloat16"
ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --layers) LAYERS="$2"; shift 2 ;;
    --device) DEVICE="$2"; shift 2 ;;
    *) ARGS+=("$1"); shift ;;
  esac
done
[ "$DEVICE" = "cpu" ] && DTYPE="float32"
if [ "$DEVICE" != "cpu" ]; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
WORK="$(mktemp -d "${TMPDIR:-/tmp}/infill-full-size-XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
"$PY" -c "import sys; sys.path.insert(0, '.'); from infill.testing.full_size import write_full_size_config as w; \
w(sys.argv[1], int(sys.argv[2]) if sys.argv[2] else None)" "$WORK/config" "$LAYERS" || exit 1
rm -f "$OUT_DIR/sections.jsonl"
timeout "$RUN_LIMIT_S" "$PY" benchmarks/engine_gpu.py --model "$WORK/config" --load-format dummy --device "$DEVICE" \
  --dtype "$DTYPE" --baseline .baseline --out "$OUT_DIR/sections.jsonl" ${ARGS[@]+"${ARGS[@]}"} \
  > "$OUT_DIR/after.json" 2> "$OUT_DIR/after.log"
echo "engine_gpu.py exited with $?" >&2
"$PY" - "$OUT_DIR" <<'PYEOF'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
sections = {}
if (out / "sections.jsonl").exists():
    for line in (out / "sections.jsonl").read_text().splitlines():
        section = json.loads(line)
        sections[section.pop("section")] = section
result = {"before": sections.pop("before", {"error": "the before section did not run"}), "after": sections}
(out / "gpu-run.json").write_text(json.dumps(result, indent=1))
print(json.dumps(result))
PYEOF
