#!/usr/bin/env bash
# Install infill-ls with its test extra, check format, lint and types (scripts/check.sh), and run the whole test
# suite (what CI runs): its files on two workers (pytest-xdist; a file's tests stay together, so a module's fixture
# is built once). Most tests wait on a server or a model one core at a time; two workers use the second core.
# Arguments go to pytest (`-n 0` runs it in one process).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh test
bash scripts/check.sh
# OpenMP threads (torch's, llama.cpp's) spin after each parallel region by default, waiting for more work; with two
# workers and the servers they start sharing the cores, the spinning took them from the work (one tree on a 2-core
# AVX2 EPYC Zen 3: pytest 7:17 -> 5:46, CPU time 808 s -> 626 s with passive waits). Results are the same either way.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
exec .venv/bin/python -m pytest -q -n 2 --dist loadfile --durations=25 "$@"
