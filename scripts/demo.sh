#!/usr/bin/env bash
# Install infill-ls and fill a gap offline with the default model (Gemma 3 270M, the small offline fallback, until
# a DiffusionGemma checkpoint is configured with --model or INFILL_MODEL). The first install compiles llama.cpp (the
# offline default's runtime: needs a C/C++ compiler; scripts/setup.sh says what is missing).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
echo "--- examples/stats.py, filling the gap at line 7, column 9:" >&2
.venv/bin/infill-ls fill examples/stats.py --at 7:9 --json "$@"
