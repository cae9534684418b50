"""Screen capture of infill.nvim for the README and docs/clients.md: the real headless Neovim and the real infill-ls
with the real default model (Gemma 3 270M, offline on the CPU) and default settings, ghost text drawn in a Python
file, exported with Neovim's own :TOhtml (which renders extmark virtual text) and, when Chromium is installed,
rendered to PNG. A setting it had to change to get a suggestion (a budget missed on a loaded machine) is printed and
written into the .txt transcript.

    .venv/bin/python tests/nvim/screenshot.py [OUT_DIR]     # default docs/img
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "nvim"))
sys.path.insert(0, str(REPO))

from nvim_harness import NVIM, Nvim, open_file, setup_plugin  # noqa: E402

LINES = [
    '"""Small statistics helpers."""',
    "",
    "import math",
    "",
    "",
    "def circle_area(radius: float) -> float:",
    '    """Area of a circle of the given radius."""',
    "    return ",
    "",
    "",
    "def mean(values: list[float]) -> float:",
    '    """The arithmetic mean of a non-empty list."""',
    "    return sum(values) / len(values)",
]
ROW = 8  # 1-based: "    return " in circle_area
GHOST = "return T.ghost()"


def server_cmd() -> list[str]:
    """The real server with no --model: the default model."""
    script = Path(sys.executable).parent / "infill-ls"
    return [str(script)] if script.exists() else [sys.executable, "-m", "server.cli"]


def wait_for_ghost(nvim: Nvim, timeout_ms: int):
    try:
        return nvim.wait(GHOST, timeout_ms=timeout_ms)
    except Exception:  # noqa: BLE001 - the harness raises on timeout
        return None


def capture(out: Path) -> None:
    work = Path(tempfile.mkdtemp(prefix="infill-shot-"))
    nvim = Nvim(NVIM)
    changed = []
    try:
        setup_plugin(nvim, server_cmd())
        open_file(nvim, work / "stats.py", LINES)
        nvim.wait("local s = require('infill.lsp').state.status; return s and s.ready", timeout_ms=300000)
        label = nvim.lua("return require('infill.lsp').state.status.label")
        nvim.lua(
            f"vim.o.termguicolors = true; vim.cmd.colorscheme('default'); vim.api.nvim_win_set_cursor(0, {{{ROW}, 0}})"
        )
        nvim.input("A" + "math.")
        ghost = wait_for_ghost(nvim, 30000)
        if ghost is None:  # missed while typing: ask explicitly (the invoked budget), then with larger budgets
            nvim.lua("require('infill').suggest()")
            ghost = wait_for_ghost(nvim, 30000)
        if ghost is None:
            changed = ["inlineBudgetMs=120000", "invokedBudgetMs=120000"]
            print(f"no suggestion with default settings; changed {', '.join(changed)}", file=sys.stderr)
            nvim.lua(
                "require('infill').update_settings({inlineBudgetMs = 120000, invokedBudgetMs = 120000});"
                "vim.wait(1000); require('infill').suggest()"
            )
            ghost = wait_for_ghost(nvim, 240000)
        if ghost is None:
            raise SystemExit("no suggestion appeared")
        transcript = nvim.lua(
            "local l = vim.api.nvim_buf_get_lines(0, 0, -1, false); local g = ...;"
            f"l[{ROW}] = l[{ROW}] .. '⟨' .. g .. '⟩'; return table.concat(l, '\\n')",
            ghost[0],
        )
        html = nvim.lua(
            "return table.concat(require('tohtml').tohtml(0, {title = 'infill.nvim', number_lines = true}), '\\n')"
        )
    finally:
        nvim.close()
    out.mkdir(parents=True, exist_ok=True)
    note = f" (settings changed to get it: {', '.join(changed)})" if changed else ""
    (out / "neovim-ghost-text.txt").write_text(
        f"infill.nvim in Neovim 0.11, ghost text shown between ⟨ ⟩; model: {label}{note}\n\n" + transcript + "\n"
    )
    (out / "neovim-ghost-text.html").write_text(html)
    chromium = shutil.which("chromium")
    if chromium:
        subprocess.run(
            [
                chromium,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                f"--screenshot={out / 'neovim-ghost-text.png'}",
                "--window-size=720,300",
                (out / "neovim-ghost-text.html").as_uri(),
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
    print(f"model: {label}{note}")
    print(transcript)


if __name__ == "__main__":
    capture(Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "docs" / "img")
