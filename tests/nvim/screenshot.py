"""Screen capture of infill.nvim for docs/clients.md: the real headless Neovim and the real infill-ls (tiny random
DiffusionGemma, so the suggested text is gibberish), ghost text drawn, exported with Neovim's own :TOhtml (which
renders extmark virtual text) and, when Chromium is installed, rendered to PNG.

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

from nvim_harness import NVIM, SETTINGS, Nvim, open_file, server_cmd, setup_plugin  # noqa: E402

from infill.testing.tiny_checkpoint import write_tiny_checkpoint  # noqa: E402

LINES = [
    "# Release notes",
    "",
    "The new parser is faster, and",
    "",
    "Upgrading is a one-line change.",
]


def capture(out: Path) -> None:
    work = Path(tempfile.mkdtemp(prefix="infill-shot-"))
    checkpoint = write_tiny_checkpoint(work / "tiny")
    nvim = Nvim(NVIM)
    try:
        setup_plugin(nvim, server_cmd(checkpoint), settings=SETTINGS)
        open_file(nvim, work / "notes.md", LINES)
        nvim.wait("local s = require('infill.lsp').state.status; return s and s.ready", timeout_ms=120000)
        nvim.lua("vim.o.termguicolors = true; vim.cmd.colorscheme('default'); vim.api.nvim_win_set_cursor(0, {3, 0})")
        nvim.input("A it")
        ghost = nvim.wait("return T.ghost()", timeout_ms=60000)[0]
        transcript = nvim.lua(
            "local l = vim.api.nvim_buf_get_lines(0, 0, -1, false); local g = ...;"
            "l[3] = l[3] .. '⟨' .. g .. '⟩'; return table.concat(l, '\\n')", ghost)
        html = nvim.lua("return table.concat(require('tohtml').tohtml(0, {title = 'infill.nvim', number_lines = true}), '\\n')")
    finally:
        nvim.close()
    out.mkdir(parents=True, exist_ok=True)
    (out / "neovim-ghost-text.txt").write_text(
        "infill.nvim in Neovim 0.11, ghost text shown between ⟨ ⟩ (tiny random test model: gibberish text)\n\n"
        + transcript + "\n")
    (out / "neovim-ghost-text.html").write_text(html)
    chromium = shutil.which("chromium")
    if chromium:
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--screenshot={out / 'neovim-ghost-text.png'}", "--window-size=640,120",
                        (out / "neovim-ghost-text.html").as_uri()], check=True, capture_output=True, timeout=120)
    print(transcript)


if __name__ == "__main__":
    capture(Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "docs" / "img")
