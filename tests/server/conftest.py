"""Shared fixtures of the server tests: the real infill-ls over raw JSON-RPC (tests/fuzz/rpc.py) with the tiny
random-weight DiffusionGemma, one for the whole run, and a factory for tests that need a server of their own."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fuzz.rpc import RawServer

RawServerFactory = Callable[..., RawServer]

# Plain text and Markdown, which the tiny engine's random text passes the watchdog in; the fallback off: these
# servers are about the protocol and the tiny engine's own fills, and loading the offline default behind it was
# most of each start (tests/server/test_server_fallback.py tests the fallback itself).
TINY_ONLY = {"enabledLanguages": ["plaintext", "markdown"], "fallback": False}


def start_raw_server(
    checkpoint: Path,
    stderr_path: Path,
    *args: str,
    configuration: dict[str, Any] | None = None,
    capabilities: dict | None = None,
) -> RawServer:
    """A server on the tiny checkpoint, initialized and its backend ready (the caller kills it)."""
    server = RawServer(
        ["--model", str(checkpoint), "--denoising-steps", "2", *args],
        configuration=configuration or {**TINY_ONLY, "codeActionBudgetMs": 60000},
        stderr_path=str(stderr_path),
    )
    try:
        assert "result" in (server.initialize(capabilities=capabilities) or {})
        assert (server.wait_ready(240) or {}).get("state") == "ready"
    except BaseException:
        server.kill()
        raise
    return server


@pytest.fixture
def raw_server(tiny_checkpoint: Path, tmp_path: Path) -> Iterator[RawServerFactory]:
    """Start servers (initialized, backend ready) that this test alone uses; each is killed at its end."""
    started: list[RawServer] = []

    def start(*args: str, configuration: dict[str, Any] | None = None, capabilities: dict | None = None) -> RawServer:
        log = tmp_path / f"server-{len(started)}.log"
        started.append(
            start_raw_server(tiny_checkpoint, log, *args, configuration=configuration, capabilities=capabilities)
        )
        return started[-1]

    yield start
    for server in started:
        server.kill()


@pytest.fixture(scope="session")
def edge_server(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RawServer]:
    """One server for the tests of every module that asks for it (its stderr at `server.stderr_path`): none of them
    needs a fresh one, each uses documents and ids of its own, leaves nothing in flight and leaves it serving (a test
    that changes how it answers puts that back). A server's start is most of what such a test would cost."""
    stderr = tmp_path_factory.mktemp("edge") / "server.log"
    server = start_raw_server(tiny_checkpoint, stderr, configuration={**TINY_ONLY, "codeActionBudgetMs": 30000})
    server.stderr_path = stderr  # type: ignore[attr-defined]
    yield server
    server.kill()
