#!/usr/bin/env bash
# Install infill-ls with its test extra, check format, lint and types (scripts/check.sh), and run the whole test
# suite (what CI runs): its files on two workers (pytest-xdist; a file's tests stay together, so a module's fixture
# is built once). Most tests wait on a server or a model one core at a time; two workers use the second core.
# Arguments go to pytest (`-n 0` runs it in one process).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh test
bash scripts/check.sh
exec .venv/bin/python -m pytest -q -n 2 --dist loadfile --durations=25 "$@"
