#!/usr/bin/env bash
# The DiffusionGemma engine on one GPU against the floor the card allows, and against the engine before the static
# forward, in one run: the full-size 26B-A4B architecture with random bf16 weights (--load-format dummy). About 7
# minutes on an H200; each part has its own time limit and writes its JSON as it finishes; the last stdout line is
# one JSON object: {"before": pipeline figures of the old engine, "after": every section of engine_gpu.py}.
#
# Before calling the device (on this machine): bash benchmarks/gpu-prepare.sh
#   -> .baseline/ (the engine before the static forward, for the "before" pipeline figures) and .whl/ (the
#      transformers this project pins; the device image has an older one), both git-ignored.
# Then: run(command="bash benchmarks/gpu.sh", carry=[".baseline", ".whl"], timeout_s=540), and copy
# $OUT/gpu-run.json into benchmarks/results/.
# Usage: benchmarks/gpu.sh [--layers N] [--device cpu] [engine_gpu.py options...]
#   On a CPU the same run at the real dimensions with 2 layers catches shape, dtype and memory errors:
#   INFILL_BENCH_TIMEOUT=1800 benchmarks/gpu.sh --layers 2 --device cpu --contexts 512 --keystrokes 5
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${INFILL_PYTHON:-python3}"
[ -x .venv/bin/python ] && [ -z "${INFILL_PYTHON:-}" ] && ! python3 -c "import torch" 2>/dev/null && PY=.venv/bin/python
OUT_DIR="${OUT:-$(mktemp -d)}"
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
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
WORK="$(mktemp -d "${TMPDIR:-/tmp}/infill-full-size-XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
"$PY" -c "import sys; sys.path.insert(0, '.'); from infill.testing.full_size import write_full_size_config as w; \
w(sys.argv[1], int(sys.argv[2]) if sys.argv[2] else None)" "$WORK/config" "$LAYERS" || exit 1
COMMON=(--model "$WORK/config" --load-format dummy --device "$DEVICE" --dtype "$DTYPE")
SCALE="${INFILL_BENCH_TIMEOUT:-}"
# 1. Before: the engine before the static forward, keystroke to fill through the pipeline, in its own process (it
#    needs the GPU's memory to itself).
if [ -d .baseline/infill ]; then
  INFILL_TREE="$PWD/.baseline" timeout "${SCALE:-130}" "$PY" benchmarks/engine_pipeline.py "${COMMON[@]}" \
    --keystrokes 30 --steps 12 > "$OUT_DIR/before.json" 2> "$OUT_DIR/before.log" \
    || echo '{"error": "the baseline run failed or ran out of time; see before.log"}' > "$OUT_DIR/before.json"
else
  echo '{"error": "no .baseline: run benchmarks/gpu-prepare.sh and carry .baseline"}' > "$OUT_DIR/before.json"
fi
tail -n 1 "$OUT_DIR/before.json" >&2
# 2. After: every section of engine_gpu.py (each with its own limit), lines appended to sections.jsonl as they end.
timeout "${SCALE:-340}" "$PY" benchmarks/engine_gpu.py "${COMMON[@]}" --out "$OUT_DIR/sections.jsonl" \
  ${ARGS[@]+"${ARGS[@]}"} > "$OUT_DIR/after.json" 2> "$OUT_DIR/after.log"
echo "engine_gpu.py exited with $?" >&2
"$PY" - "$OUT_DIR" <<'PYEOF'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
def last_json(path):
    try:
        return json.loads(path.read_text().strip().splitlines()[-1])
    except Exception as exc:  # noqa: BLE001 - a missing or cut file is reported, not fatal
        return {"error": f"{path.name}: {exc}"}
after = {}
if (out / "sections.jsonl").exists():
    for line in (out / "sections.jsonl").read_text().splitlines():
        section = json.loads(line)
        after[section.pop("section")] = section
result = {"before": last_json(out / "before.json"), "after": after}
(out / "gpu-run.json").write_text(json.dumps(result, indent=1))
print(json.dumps(result))
PYEOF
