#!/usr/bin/env bash
# The engine at the full-size 26B-A4B architecture with random bf16 weights (--load-format dummy), on the GPU:
# load, prefill 512/2k/8k, keystroke encode, decoder forwards against the weight-bytes floor, compiled vs eager
# sample_step, full fills, KV after 200 keystrokes (benchmarks/engine_gpu.py). Under 8 minutes on one H200; the
# last stdout line is one JSON object.
# Usage: benchmarks/gpu.sh [--layers N] [--device cpu] [engine_gpu.py options...]
#   On a CPU, the same run at the real dimensions and vocabulary with 2 layers catches shape, dtype and memory
#   errors: INFILL_BENCH_TIMEOUT=1800 benchmarks/gpu.sh --layers 2 --device cpu --steps 2 --repeat 1
#   --keystrokes 20 --context 512 --text-lines 15 --prefills 512,8192
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${INFILL_PYTHON:-.venv/bin/python}"
LAYERS=""
DEVICE="cuda"
ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --layers) LAYERS="$2"; shift 2 ;;
    --device) DEVICE="$2"; shift 2 ;;
    *) ARGS+=("$1"); shift ;;
  esac
done
WORK="$(mktemp -d "${TMPDIR:-/tmp}/infill-full-size-XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
"$PY" -c "import sys; from infill.testing.full_size import write_full_size_config as w; \
w(sys.argv[1], int(sys.argv[2]) if sys.argv[2] else None)" "$WORK/config" "$LAYERS"
# 470 s by default: the whole run stays under 8 minutes even when a section is slower than planned (a CPU run
# sets INFILL_BENCH_TIMEOUT higher).
timeout "${INFILL_BENCH_TIMEOUT:-470}" "$PY" benchmarks/engine_gpu.py --model "$WORK/config" --load-format dummy --device "$DEVICE" \
  --dtype bfloat16 ${ARGS[@]+"${ARGS[@]}"}
