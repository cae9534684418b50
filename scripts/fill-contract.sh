#!/usr/bin/env bash
# Fill every [[...]] placeholder of examples/contract.md with the default model (Gemma 3 270M, offline on the CPU,
# until a DiffusionGemma checkpoint is configured with --model or INFILL_MODEL) and print the filled contract.
# The placeholders are filled jointly, as "Fill all gaps" does in an editor. Extra arguments go to `infill-ls fill`.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/infill-ls ] || bash scripts/setup.sh
.venv/bin/infill-ls fill examples/contract.md --all-gaps "$@"
