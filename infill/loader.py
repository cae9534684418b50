"""Open what serves: the backend a spec names, the fallback behind it, and the pipeline over them. The one loader
of the LSP server (server/backend_host.py runs its two steps on its loading thread: `open_primary`, served at once,
then `open_fallback`, swapped in), the gateway (infill/gateway/server.py) and `infill-ls fill` (both load the two
steps at once, `open_pipeline`, before they serve); `fallback_spec` is the one decision of which fallback sits behind
which primary (the pilot asks it too, infill/pilot/targets.py)."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace

from infill.backends.choose import BackendSpec, open_backend
from infill.pipeline import Pipeline, PipelineSettings
from infill.types import InfillBackend, InfillError, ProgressCallback, WarmsUp

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FallbackChoice:
    """What the user chose for the fallback: the server's settings `fallback`, `fallbackEndpoint` and
    `fallbackModel`, or the options of `add_fallback_options`."""

    enabled: bool = True  # False: nothing answers when the primary's fill is rejected
    endpoint: str | None = None  # an OpenAI-compatible endpoint in place of the offline default
    endpoint_model: str | None = None


NO_FALLBACK = FallbackChoice(enabled=False)


def fallback_spec(primary: BackendSpec, choice: FallbackChoice = FallbackChoice()) -> BackendSpec | None:
    """What answers when the primary's fill is rejected by the watchdog, fails, or runs out of its share of the
    budget (infill/pipeline.py routes), or None:
    - nothing when the fallback is turned off;
    - the configured endpoint, behind any primary (it is what the user asked for);
    - else the offline default (Gemma 3 270M, in-process on the CPU) behind a DiffusionGemma checkpoint or a remote
      endpoint: a team server that is down, or whose fill is rejected, leaves the editor working offline. The
      offline default has nothing behind it: the same model would write the same fill again."""
    if not choice.enabled:
        return None
    if choice.endpoint:
        return BackendSpec(endpoint=choice.endpoint, endpoint_model=choice.endpoint_model, threads=primary.threads)
    if primary.kind == "autoregressive":
        return None
    return offline_default(primary)


def offline_default(like: BackendSpec) -> BackendSpec:
    """The offline default's spec, with the thread count of `like`: on the CPU (llama.cpp) whatever device `like`
    names for its DiffusionGemma checkpoint; the user's GGUF where `like` names one as its offline model."""
    return BackendSpec(
        threads=like.threads,
        offline_model=like.offline_model,
        offline_model_keystrokes=like.offline_model_keystrokes,
    )


def gemma_default(like: BackendSpec) -> BackendSpec:
    """Gemma 3 270M itself (what serves when the user's GGUF cannot), with the thread count of `like`."""
    return BackendSpec(threads=like.threads)


def describe_spec(spec: BackendSpec) -> str:
    return spec.endpoint or spec.gguf or spec.model or "the offline default model"


@dataclass(frozen=True)
class Opened:
    """A pipeline and the backends opened for it (the caller closes them when it replaces the pipeline)."""

    pipeline: Pipeline
    backends: tuple[InfillBackend, ...]
    fallback_error: str | None = None  # why the chosen fallback did not open (the primary then serves alone)
    model_error: str | None = None  # why the user's GGUF did not open (Gemma 3 270M then serves in its place)


def open_pipeline(
    spec: BackendSpec,
    *,
    fallback: FallbackChoice = FallbackChoice(),
    settings: PipelineSettings | None = None,
    progress: ProgressCallback | None = None,
    opener: Callable[..., InfillBackend] = open_backend,
) -> Opened:
    """The primary `spec` names, then the fallback `fallback_spec` chooses for it, and the pipeline over them, in
    one step (the gateway and `infill-ls fill` serve only then; the LSP server takes the two steps apart:
    `open_primary` serves at once, `open_fallback` joins it). Raises what opening the primary raised. A fallback
    that fails to open is logged and leaves the primary serving alone (`Opened.fallback_error` says why); an
    interrupt while it opens closes the primary and propagates."""
    alone = open_primary(spec, settings=settings, progress=progress, opener=opener)
    behind = fallback_spec(spec, fallback)
    if behind is None:
        return alone
    try:
        return open_fallback(alone, behind, progress=progress, opener=opener)
    except BaseException:
        close_quietly(alone.pipeline.backend)
        raise


def open_primary(
    spec: BackendSpec,
    *,
    settings: PipelineSettings | None = None,
    progress: ProgressCallback | None = None,
    opener: Callable[..., InfillBackend] = open_backend,
) -> Opened:
    """The primary `spec` names, warmed up, and a pipeline over it alone. Raises what opening it raised."""
    primary, model_error = _open_primary(spec, opener, progress)
    warm_up(primary, progress)
    return Opened(Pipeline(primary, settings=settings), (primary,), model_error=model_error)


def open_fallback(
    alone: Opened,
    behind: BackendSpec,
    *,
    progress: ProgressCallback | None = None,
    opener: Callable[..., InfillBackend] = open_backend,
) -> Opened:
    """The fallback `behind` (what `fallback_spec` chose) opened and warmed up, and a new pipeline over `alone`'s
    primary with it behind, with `alone`'s settings (its counters are the caller's to carry when it swaps
    pipelines: `Pipeline.carry_counters_from`). A fallback that fails to open is logged and `alone` comes back
    with `fallback_error` saying why; an interrupt propagates (the primary stays open: the caller owns it)."""
    primary = alone.pipeline.backend
    if progress:
        progress(f"loading the fallback: {describe_spec(behind)}", None)
    try:
        second = opener(behind, progress=progress)
    except Exception as exc:  # noqa: BLE001 - any failure of the fallback leaves the primary serving
        log.exception("the fallback (%s) did not load; %s serves alone", describe_spec(behind), primary.info.name)
        return replace(alone, fallback_error=f"{type(exc).__name__}: {exc}")
    warm_up(second, progress)
    pipeline = Pipeline(primary, fallback=second, settings=alone.pipeline.settings)
    return Opened(pipeline, (primary, second), model_error=alone.model_error)


def _open_primary(
    spec: BackendSpec, opener: Callable[..., InfillBackend], progress: ProgressCallback | None
) -> tuple[InfillBackend, str | None]:
    """The primary, and None; or where the user's GGUF is the primary and cannot serve (no file, not a GGUF, an
    architecture llama.cpp does not know), Gemma 3 270M and why: a bad path leaves the editor working."""
    if spec.kind != "autoregressive" or not spec.gguf:
        return opener(spec, progress=progress), None
    try:
        return opener(spec, progress=progress), None
    except InfillError as exc:
        error = f"the offline model {spec.gguf} cannot serve: {exc}"
        log.error("%s; Gemma 3 270M serves in its place", error)
    if progress:
        progress("loading the offline default in place of the offline model", None)
    return opener(gemma_default(spec), progress=progress), error


def add_fallback_options(parser: argparse.ArgumentParser) -> None:
    """The fallback options of `infill-ls serve` and `infill-ls fill` (the LSP server takes them as settings)."""
    group = parser.add_argument_group("fallback")
    group.add_argument(
        "--no-fallback",
        dest="fallback",
        action="store_false",
        help="show nothing when the primary's fill is rejected (default: the conventional model "
        "answers: --fallback-endpoint, else the offline default behind a DiffusionGemma "
        "checkpoint or an endpoint)",
    )
    group.add_argument(
        "--fallback-endpoint",
        help="OpenAI-compatible endpoint that answers in place of the "
        "offline default when the primary's fill is rejected",
    )
    group.add_argument("--fallback-model", help="model name at --fallback-endpoint")


def fallback_from_args(args: argparse.Namespace) -> FallbackChoice:
    return FallbackChoice(
        enabled=args.fallback,
        endpoint=(args.fallback_endpoint or "").strip() or None,
        endpoint_model=(args.fallback_model or "").strip() or None,
    )


def warm_up(backend: InfillBackend, progress: ProgressCallback | None = None) -> None:
    """Pay a DiffusionGemma engine's one-time costs here (on CUDA: its encode and step programs captured as CUDA
    graphs, and its layers compiled when `EngineConfig.compile` is on), while the caller is still loading, so that
    no request pays them and a cancel never waits on a capture. Only diffusion backends
    (`WarmsUp`): the offline default warms itself inside its own loader, and remote ones have nothing to warm. A
    failed warm-up is logged; the backend still serves (a program its requests meet is built then and runs its
    body eagerly)."""
    if backend.info.kind != "diffusion" or not isinstance(backend, WarmsUp):
        return
    if progress:
        progress(f"warming up {backend.info.label or backend.info.name}", None)
    try:
        seconds = backend.warm_up()
    except Exception:  # noqa: BLE001 - warming is an optimisation; the load itself succeeded
        log.exception("warming up %s failed", backend.info.name)
        return
    log.info("warmed up %s in %.1f s", backend.info.name, seconds or 0.0)


def close_quietly(backend: InfillBackend) -> None:
    try:
        backend.close()
    except Exception:  # noqa: BLE001 - closing must not take a server down
        log.exception("closing backend %s failed", getattr(backend, "info", backend))
