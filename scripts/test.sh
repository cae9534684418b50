#!/usr/bin/env bash
# Install infill-ls with its test extra and run the whole test suite (what CI runs).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh test
exec .venv/bin/python -m pytest -q --durations=25 "$@"
