"""`infill-ls` entry point: the LSP server by default, plus `fill`, `serve` and `pilot` subcommands.

Each command's module is imported only when it runs, so `fill`, `serve` and `pilot` never load the LSP package
(`server/`), and the server is the one `infill` module's import of it (tests/test_layout.py)."""

from __future__ import annotations

import sys

USAGE = """usage: infill-ls [--stdio] [server options]     start the LSP server on stdio
       infill-ls fill PATH (--at L:C | --range L1:C1-L2:C2) [--json] [--model M]
       infill-ls serve [--host 127.0.0.1] [--port N] [--token T]   OpenAI-compatible gateway
       infill-ls pilot SRC --out DIR [--n N] [--backend ar|diffusion:DIR|http://HOST/v1[+fallback|+raw]]...
                       [--concurrency 1,4,16]                  diffusion vs autoregressive pilot
       infill-ls --version"""


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["--version"], ["-V"]):
        from infill import __version__

        print(f"infill-ls {__version__}")
        return 0
    if argv[:1] in (["-h"], ["--help"]):
        print(USAGE)
        return 0
    command = argv[0] if argv and not argv[0].startswith("-") else "lsp"
    rest = argv[1:] if command != "lsp" else argv
    if command == "fill":
        from infill.fill_cli import main as run
    elif command == "serve":
        from infill.gateway.server import main as run
    elif command == "pilot":
        from infill.pilot.cli import main as run
    elif command == "lsp":
        from server.main import main as run
    else:
        print(f"infill-ls: unknown command {command!r}\n{USAGE}", file=sys.stderr)
        return 2
    return run(rest) or 0


if __name__ == "__main__":
    sys.exit(main())
