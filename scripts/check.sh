#!/usr/bin/env bash
# Format, lint and types (configured in pyproject.toml): what scripts/test.sh runs before the suite.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin
"$PY/ruff" format --check infill server tests benchmarks vllm-plugin
"$PY/ruff" check infill server tests benchmarks vllm-plugin
"$PY/mypy"
