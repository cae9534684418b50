"""The DiffusionGemma engine warms up at load (infill/loader.py), before the server reports it ready, never inside
a request. On this CPU the engine's warm_up() compiles nothing (only CUDA compiles its sampling step), so what is
checked is where and when it runs: once, on the loading thread, before "ready", and not again in the first fill."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

from infill.backends.choose import BackendSpec
from infill.engine.diffusion import DiffusionEngine
from infill.loader import NO_FALLBACK, open_pipeline
from infill.pipeline import CompletionRequest
from infill.types import UNSTEERED, CancelToken, FillControl
from server.backend_host import BackendHost
from server.settings import Settings


class WarmUpLog:
    """What happened, in order, across threads: ("warm_up", thread), ("ready", thread), ("infill", thread)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def note(self, what: str) -> None:
        with self.lock:
            self.events.append((what, threading.current_thread().name))

    def names(self) -> list[str]:
        with self.lock:
            return [name for name, _ in self.events]


def engine_noting_to(log: WarmUpLog, loaded):
    """The real engine over the tiny checkpoint, noting its warm-ups and fills."""

    class NotingEngine(DiffusionEngine):
        def warm_up(self) -> float:
            log.note("warm_up")
            return super().warm_up()

        def infill(self, request, control=UNSTEERED):
            log.note("infill")
            return super().infill(request, control)

    return NotingEngine(loaded, {"max_denoising_steps": 2})


PROMPT = "def add(a, b):\n    return "


def wait_for(predicate, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


def test_the_server_warms_the_engine_up_before_it_reports_ready(tiny_engine):
    log = WarmUpLog()
    host = BackendHost(
        lambda state, message, fraction: log.note(state) if state != "loading" else None,
        opener=lambda spec, progress: engine_noting_to(log, tiny_engine.loaded),
    )
    try:
        host.load(Settings(model="tiny", fallback=False))  # (a fallback would be one more engine to warm)
        wait_for(lambda: "ready" in log.names())
        assert log.names() == ["warm_up", "ready"]
        assert log.events[0][1] == "infill-load"  # the loading thread, not a request's
        future = host.worker.complete(
            host.pipeline, CompletionRequest(PROMPT, len(PROMPT)), FillControl(cancel=CancelToken())
        )
        result = future.result(timeout=60)
        assert result.result.outcome in ("ok", "empty"), result.result.error
        assert log.names() == ["warm_up", "ready", "infill"]  # the first fill warmed nothing up
    finally:
        host.close()


def test_only_diffusion_backends_are_warmed_and_a_failed_warm_up_still_serves(tiny_engine, caplog):
    log = WarmUpLog()

    class FailingWarmUp(DiffusionEngine):
        def warm_up(self) -> float:
            log.note("warm_up")
            raise RuntimeError("no CUDA graph today")

    pipeline = open_pipeline(
        BackendSpec(), fallback=NO_FALLBACK, opener=lambda spec, progress: FailingWarmUp(tiny_engine.loaded)
    ).pipeline
    assert log.names() == ["warm_up"] and "warming up" in caplog.text and "no CUDA graph today" in caplog.text
    assert pipeline.complete(CompletionRequest("x = ", 4)).result.outcome in ("ok", "empty")

    class NotDiffusion(DiffusionEngine):
        @property
        def info(self):
            return replace(super().info, kind="autoregressive")

        def warm_up(self) -> float:
            log.note("warm_up")
            return 0.0

    open_pipeline(BackendSpec(), fallback=NO_FALLBACK, opener=lambda spec, progress: NotDiffusion(tiny_engine.loaded))
    assert log.names() == ["warm_up"]  # not asked: the offline default warms itself as it loads


def test_infill_ls_fill_warms_up_at_load_and_fills_on_the_model_worker(tmp_path, tiny_checkpoint, monkeypatch, capsys):
    from infill.fill_cli import main as fill_main

    log = WarmUpLog()
    warm_up, infill = DiffusionEngine.warm_up, DiffusionEngine.infill
    monkeypatch.setattr(DiffusionEngine, "warm_up", lambda self: log.note("warm_up") or warm_up(self))
    monkeypatch.setattr(DiffusionEngine, "infill", lambda self, *a, **k: log.note("infill") or infill(self, *a, **k))
    doc = tmp_path / "add.py"
    doc.write_text(PROMPT + "\n")
    argv = [str(doc), "--at", f"2:{len('    return ') + 1}", "--model", str(tiny_checkpoint)]  # after "return "
    assert fill_main([*argv, "--steps", "2", "--no-fallback"]) == 0
    assert log.names() == ["warm_up", "infill"]
    assert log.events[0][1] == "MainThread" and log.events[1][1] == "infill-fill-model"


def test_the_pilot_warms_each_engine_up_once_before_its_attempts(tiny_engine):
    from infill.pilot.targets import TargetPool, parse_target
    from infill.pipeline import PipelineSettings

    log = WarmUpLog()
    pool = TargetPool(PipelineSettings(), open_fn=lambda spec: engine_noting_to(log, tiny_engine.loaded))
    try:
        first = pool.open(parse_target("diffusion-dummy:tiny"))
        pool.open(parse_target("diffusion-dummy:tiny+raw"))  # the same engine, shared: not warmed again
        assert log.names() == ["warm_up"]
        first.pipeline.complete(CompletionRequest(PROMPT, len(PROMPT)))
        assert log.names() == ["warm_up", "infill"]
    finally:
        pool.close()
