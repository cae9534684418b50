#!/usr/bin/env bash
# Create .venv and install infill-ls into it (idempotent). Usage: scripts/setup.sh [extra], e.g. "test".
set -euo pipefail
cd "$(dirname "$0")/.."
extra="${1:-}"
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
# torch first, pinned: this resolves to the CPU wheel on local disk; an unpinned torch pulls a multi-GB CUDA build.
.venv/bin/python -m pip install --quiet --disable-pip-version-check "torch==2.13.0"
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".${extra:+[$extra]}"
