"""The VS Code extension builds: strict `tsc` passes and `@vscode/vsce` packages a .vsix that holds the compiled
extension and its runtime dependency, with settings the real server accepts. Needs Node (>= 20) and npm; installs
the locked dependencies with `npm ci` when clients/vscode/node_modules is missing (about 15 s from the registry).
The end-to-end test in a real VS Code (code-server + Chromium) is heavier and runs on demand:
`bash clients/vscode/e2e/run.sh` (see docs/clients.md)."""

from __future__ import annotations

import json
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

EXTENSION = Path(__file__).resolve().parents[2] / "clients" / "vscode"
NPM = shutil.which("npm")
pytestmark = pytest.mark.skipif(NPM is None or shutil.which("node") is None, reason="needs node and npm")


def run(*cmd: str) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, cwd=EXTENSION, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{' '.join(cmd)} failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done


@pytest.fixture(scope="module")
def installed():
    lock = EXTENSION / "package-lock.json"
    marker = EXTENSION / "node_modules" / ".package-lock.json"
    if not marker.exists() or marker.stat().st_mtime < lock.stat().st_mtime:
        run(NPM, "ci", "--no-audit", "--no-fund")
    return EXTENSION


def test_typescript_compiles_under_strict_settings(installed):
    config = json.loads((EXTENSION / "tsconfig.json").read_text())["compilerOptions"]
    assert config["strict"] is True and config["module"] == "node16" and config["moduleResolution"] == "node16"
    run(NPM, "exec", "--", "tsc", "-p", ".", "--noEmit")


def test_vsix_packages_the_compiled_extension_and_its_runtime_dependency(installed, tmp_path):
    vsix = tmp_path / "infill-ls.vsix"
    run(NPM, "exec", "--", "vsce", "package", "--skip-license", "--allow-missing-repository", "-o", str(vsix))
    with zipfile.ZipFile(vsix) as archive:
        names = set(archive.namelist())
        manifest = json.loads(archive.read("extension/package.json"))
    assert "extension/out/extension.js" in names
    assert "extension/node_modules/vscode-languageclient/package.json" in names
    assert not any(name.startswith("extension/src/") or "/typescript/" in name for name in names)
    assert manifest["engines"]["vscode"] == "^1.91.0"
    commands = {c["command"] for c in manifest["contributes"]["commands"]}
    assert {"infill.fillGap", "infill.fillAllGaps", "infill.toggle", "infill.showStatus"} <= commands


def test_the_settings_the_extension_sends_are_accepted_by_the_real_server():
    """Every server-bound `infill.*` default from package.json parses without a problem in server/settings.py."""
    from server.settings import Settings, parse_settings

    props = json.loads((EXTENSION / "package.json").read_text())["contributes"]["configuration"]["properties"]
    source = (EXTENSION / "src" / "settings.ts").read_text()
    keys = source.split("SERVER_SETTING_KEYS = [", 1)[1].split("]", 1)[0]
    server_keys = [k.strip().strip("'") for k in keys.split(",") if k.strip()]
    assert len(server_keys) >= 15
    sent = {key: props[f"infill.{key}"]["default"] for key in server_keys}
    settings, problems = parse_settings(sent, Settings())
    assert problems == []
    assert settings == Settings()  # the extension's defaults are the server's defaults
