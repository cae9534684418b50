"""Open what serves: the backend a spec names, an optional fallback, and the pipeline over them. The one loader
of the LSP server (server/backend_host.py, which runs it on its loading thread and swaps pipelines) and the
gateway (infill/gateway/server.py)."""

from __future__ import annotations

import logging
from typing import Callable

from infill.backends.choose import BackendSpec, open_backend
from infill.pipeline import Pipeline, PipelineSettings
from infill.types import InfillBackend, ProgressCallback

log = logging.getLogger(__name__)


def open_pipeline(spec: BackendSpec, *, fallback: BackendSpec | None = None,
                  settings: PipelineSettings | None = None, progress: ProgressCallback | None = None,
                  opener: Callable[..., InfillBackend] = open_backend) -> tuple[Pipeline, tuple[InfillBackend, ...]]:
    """The pipeline and the backends it opened (the caller closes them when it replaces the pipeline). Raises
    what opening raised; a primary already open is closed when the fallback fails to open."""
    primary = opener(spec, progress=progress)
    warm_up(primary, progress)
    if fallback is None:
        return Pipeline(primary, settings=settings), (primary,)
    try:
        second = opener(fallback, progress=progress)
    except BaseException:
        close_quietly(primary)
        raise
    warm_up(second, progress)
    return Pipeline(primary, fallback=second, settings=settings), (primary, second)


def warm_up(backend: InfillBackend, progress: ProgressCallback | None = None) -> None:
    """Pay a DiffusionGemma engine's one-time costs (on CUDA, compiling its sampling step) here, while the caller
    is still loading, so that no request pays them and a cancel never waits on a compile. Only diffusion backends
    that have a warm_up(): the offline default warms itself inside its own loader, and remote ones have nothing to
    warm. A failed warm-up is logged; the backend still serves (its first fill then compiles)."""
    hook = getattr(backend, "warm_up", None)
    if backend.info.kind != "diffusion" or not callable(hook):
        return
    if progress:
        progress(f"warming up {backend.info.label or backend.info.name}", None)
    try:
        seconds = hook()
    except Exception:  # noqa: BLE001 - warming is an optimisation; the load itself succeeded
        log.exception("warming up %s failed", backend.info.name)
        return
    log.info("warmed up %s in %.1f s", backend.info.name, seconds or 0.0)


def close_quietly(backend: InfillBackend) -> None:
    try:
        backend.close()
    except Exception:  # noqa: BLE001 - closing must not take a server down
        log.exception("closing backend %s failed", getattr(backend, "info", backend))
