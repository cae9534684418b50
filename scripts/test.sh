#!/usr/bin/env bash
# Install infill-ls with its test extra, check format, lint and types (scripts/check.sh), and run the whole test
# suite (what CI runs).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh test
bash scripts/check.sh
exec .venv/bin/python -m pytest -q --durations=25 "$@"
