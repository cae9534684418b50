#!/usr/bin/env bash
# Format, lint and types (configured in pyproject.toml): what scripts/test.sh runs before the suite.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin
"$PY/ruff" format --check .
"$PY/ruff" check .
"$PY/mypy"
