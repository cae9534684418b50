"""Fixtures of the gateway's tests: the one way a test starts and stops a real gateway."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import pytest

from infill.gateway.server import GatewayServer, make_server
from infill.pipeline import Pipeline


@contextmanager
def running_gateway(pipeline: Pipeline | None, **options: Any) -> Iterator[GatewayServer]:
    """A real gateway over `pipeline` (None: still loading) on 127.0.0.1, any free port, serving until the block
    ends; `options` are make_server's (token, limits, GatewaySettings fields)."""
    server = make_server(pipeline, "127.0.0.1", 0, **options)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="test-gateway", daemon=True
    )
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture(scope="session")
def gateway_running() -> Callable[..., AbstractContextManager[GatewayServer]]:
    """`running_gateway`, for tests and fixtures of any scope: `with gateway_running(pipeline, token=...) as s:`."""
    return running_gateway


@pytest.fixture(scope="module")
def pipeline(tiny_engine: Any) -> Pipeline:
    """The pipeline over the tiny random DiffusionGemma, as an editor's requests would meet it."""
    return Pipeline(tiny_engine)
