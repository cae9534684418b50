"""`infill-ls [--stdio]`: build the server and run it on stdio."""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import signal
import sys
from typing import TYPE_CHECKING, TextIO, cast

from infill.backends.choose import add_model_options, spec_from_args
from infill.types import InfillError

from .settings import SPEC_FIELDS, Settings

if TYPE_CHECKING:
    from .server import InfillServer


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="infill-ls", description="infill-ls language server (stdio)")
    parser.add_argument("--stdio", action="store_true", help="talk LSP over stdin/stdout (the default)")
    parser.add_argument("--log-file", help="write the server's own log here (stderr otherwise)")
    parser.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    add_model_options(parser)
    return parser


def create_server(base: Settings) -> InfillServer:
    from . import (
        handlers_actions,
        handlers_documents,
        handlers_inline,
        handlers_lifecycle,
        handlers_telemetry,
        warming,
    )
    from .server import InfillServer

    server = InfillServer(base)
    # Text sync is the server's own, not an optional feature: InfillProtocol hands it to these handlers only.
    handlers_documents.register(server)
    handlers_lifecycle.register(server)
    handlers_inline.register(server)
    handlers_actions.register(server)
    handlers_telemetry.register(server)
    warming.register(server)
    return server


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler = logging.FileHandler(args.log_file) if args.log_file else logging.StreamHandler(sys.stderr)
    logging.basicConfig(
        level=args.log_level, handlers=[handler], format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("pygls").setLevel(logging.WARNING)  # pygls logs every message at INFO
    try:
        spec = spec_from_args(args)
        # The options as given (the model as named, not as the environment fills it: the spec is made again, from
        # these settings, at each load).
        given = {name: getattr(spec, field) for name, field in SPEC_FIELDS.items()} | {"model": args.model}
        base = Settings(denoising_steps=args.denoising_steps, **given)
    except InfillError as exc:
        print(f"infill-ls: {exc}", file=sys.stderr)
        return 2
    if args.threads:
        os.environ["INFILL_THREADS"] = str(args.threads)  # every (re)load reads it, as BackendSpec.from_env does
    # The model thread runs Python between torch ops; with the default 5 ms GIL switch interval the event loop
    # (didChange, request building) can wait that long per keystroke. 0.5 ms keeps the editor side responsive.
    sys.setswitchinterval(0.0005)
    if hasattr(signal, "SIGUSR1"):  # `kill -USR1 <pid>`: every thread's stack into the log, to see what waits on what
        faulthandler.register(signal.SIGUSR1, file=cast(TextIO, handler.stream), all_threads=True)
    server = create_server(base)
    server.start_io()
    # stdin closed without `exit`: end the same way (pygls would wait on its reader and model threads)
    server.stop(0 if server.protocol._shutdown else 1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
