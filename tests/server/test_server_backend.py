"""The backend host (server/backend_host.py): reloads carry the pipeline's counters over."""

from __future__ import annotations

from lsp_helpers import refused_remote

from server.settings import Settings


def _wait(predicate, timeout: float = 10.0) -> None:
    import time

    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


def test_reload_carries_the_pipeline_counters_over():
    from infill.pipeline import CompletionRequest
    from server.backend_host import BackendHost

    host = BackendHost(lambda *event: None, opener=lambda spec, progress: refused_remote())
    try:
        host.load(Settings())
        _wait(lambda: host.ready)
        first = host.pipeline
        first.complete(CompletionRequest("Some words to go on", 19))
        stats = first.stats()
        assert stats["rejected"] == {"backend_error": 1} and stats["routes"] == {"none": 1}
        host.load(Settings(remote_endpoint="http://127.0.0.1:9/v1"))
        _wait(lambda: host.ready and host.pipeline is not first)
        assert host.pipeline.stats() == stats
    finally:
        host.close()


def test_engine_settings_reach_the_spec_as_explicit_engine_settings():
    from server.backend_host import spec_for

    spec = spec_for(Settings(denoising_steps=12, kv_store_mib=3))
    assert spec.engine.max_denoising_steps == 12 and spec.engine.kv_store_bytes == 3 * 2**20
    assert spec_for(Settings()).engine.kv_store_bytes is None  # sized by model and device
    assert Settings(kv_store_mib=3).backend_key() != Settings().backend_key()  # a change reloads the engine
