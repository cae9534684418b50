"""The real infill-ls (server/main.py), but its fallback waits at a gate: the backend for the endpoint named by
INFILL_TEST_GATED_ENDPOINT opens only once the file `open` exists in the folder INFILL_TEST_GATE_DIR, so a test
holds the fallback "loading" as long as it needs (the offline default took minutes beside a CPU-heavy process,
issue 51). The gate writes `waiting` when that open begins and `closed` when the backend it opened is closed. Only
the timing is the test's: the opener behind the gate is the server's own."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from infill.backends.choose import BackendSpec, open_backend
from infill.types import InfillBackend
from server.backend_host import BackendHost, LoadListener
from server.main import main

GATE = Path(os.environ["INFILL_TEST_GATE_DIR"])
GATED_ENDPOINT = os.environ["INFILL_TEST_GATED_ENDPOINT"]


def gated(opener: Callable[..., InfillBackend]) -> Callable[..., InfillBackend]:
    def open_behind_the_gate(spec: BackendSpec, **options: Any) -> InfillBackend:
        if spec.endpoint != GATED_ENDPOINT:
            return opener(spec, **options)
        (GATE / "waiting").touch()
        while not (GATE / "open").exists():
            time.sleep(0.05)
        backend = opener(spec, **options)
        close = backend.close

        def close_and_say_so() -> None:
            close()
            (GATE / "closed").touch()

        backend.close = close_and_say_so  # type: ignore[method-assign]
        return backend

    return open_behind_the_gate


_host_init = BackendHost.__init__


def _gated_host(self: BackendHost, listener: LoadListener, opener: Callable[..., InfillBackend] = open_backend) -> None:
    _host_init(self, listener, gated(opener))


BackendHost.__init__ = _gated_host  # type: ignore[method-assign]

if __name__ == "__main__":
    sys.exit(main())
