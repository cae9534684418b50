"""Owns the backend's life: loads it in a background thread (infill/loader.py), reports progress and state, and
holds the threads model and context work run on: the model worker (infill/worker.py), so the event loop never
blocks and the backend never runs two requests at once, and the context thread (server/scheduling.py uses both).

State is "loading" | "ready" | "error". A load error keeps the server serving (requests return empty) with the
message in `infill.status`. The server is ready as soon as the primary is up and warmed: its pipeline serves alone
while the fallback (infill/loader.py chooses it) loads on the same loading thread (`fallback_state` "loading"),
then a pipeline over the same primary with the fallback behind it is swapped in, continuing the counters; a
fallback that fails to load leaves the primary serving alone, with its error in `infill.status`. Reloads (model,
endpoint or fallback changed) swap the pipeline only when the new primary is up, and close the old backends; a
primary or fallback that finishes loading after a newer load (or a shutdown) was asked for is closed, never
served.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import TypeVar

from infill.backends.choose import BackendSpec, open_backend
from infill.loader import (
    FallbackChoice,
    Opened,
    close_quietly,
    describe_spec,
    fallback_spec,
    open_fallback,
    open_primary,
)
from infill.pipeline import CompletionRequest, Pipeline, PipelineResult, PipelineSettings, Prepared
from infill.types import BackendInfo, CancelToken, FillControl, InfillBackend
from infill.worker import Claims, ModelWorker

from .settings import SPEC_FIELDS, Settings

log = logging.getLogger(__name__)
T = TypeVar("T")

# (state, message, fraction or None) -> called on the loader thread; the server hops to the event loop. State is
# "loading" | "ready" | "error" for the primary, then "fallback-loading" (progress) and "fallback" (it is in, or
# failed) for the fallback that loads while the primary serves.
LoadListener = Callable[[str, str, "float | None"], None]


def spec_for(settings: Settings) -> BackendSpec:
    chosen = {field: getattr(settings, name) for name, field in SPEC_FIELDS.items()}
    return BackendSpec.from_env(denoising_steps=settings.denoising_steps, kv_store_mib=settings.kv_store_mib, **chosen)


def with_server_settings(pipeline: PipelineSettings, settings: Settings) -> PipelineSettings:
    """`pipeline` with the server settings that are the pipeline's own, applied without a reload."""
    return replace(
        pipeline, max_middle_tokens=settings.max_middle_tokens, explicit_budget_ms=settings.explicit_budget_ms
    )


def fallback_for(settings: Settings) -> FallbackChoice:
    return FallbackChoice(
        enabled=settings.fallback, endpoint=settings.fallback_endpoint, endpoint_model=settings.fallback_model
    )


class BackendHost:
    def __init__(self, listener: LoadListener, opener: Callable[..., InfillBackend] = open_backend) -> None:
        self._listener = listener
        self._opener = opener
        self._lock = threading.Lock()
        self._loaded: Opened | None = None
        self._fallback_loading = False  # the loaded primary serves alone while its fallback loads
        self._generation = 0
        self.state = "loading"
        self.error: str | None = None
        self.loaded_key: tuple[object, ...] | None = None
        self.worker = ModelWorker("infill-model")  # its `claims` are the server's per-document tickets
        # Contexts built ahead (during an automatic request's debounce) get their own thread: the model thread
        # may still be finishing a cancelled run, and parsing must not wait for it. (No model work runs there.)
        self.context_worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="infill-context")
        self._settings = Settings()  # the server settings the pipeline reads (with_server_settings)

    # -- the threads model and context work run on -----------------------------------------------------------------
    @property
    def claims(self) -> Claims:
        """The model worker's per-document tickets: supersession, joining (infill/worker.py)."""
        return self.worker.claims

    def complete(
        self,
        pipeline: Pipeline,
        request: CompletionRequest,
        control: FillControl,
        context: Future[Prepared] | None = None,
        queue_deadline: bool = False,
    ) -> Future[PipelineResult]:
        """`request` run on the model thread. The deadline bounds the backend; with `queue_deadline` (a fill) also
        the wait in the queue, answered at the deadline even while another job holds the thread; an inline
        request waits behind its own prompt encoding instead (docs/concurrency.md)."""
        return self.worker.complete(pipeline, request, control, queue_deadline=queue_deadline, context=context)

    def submit(self, run: Callable[[], T], cancel: CancelToken) -> Future[T]:
        """Other model work (encoding a prompt ahead) on the model thread."""
        return self.worker.submit(run, cancel=cancel)

    def forget(self, pipeline: Pipeline, uri: str) -> None:
        """A closed document: its syntax tree dropped now, and what the backends keep for it (its encoded prompt)
        on the model thread, after the jobs queued before."""
        pipeline.forget(uri)

        def forget_in_backends() -> None:
            try:
                pipeline.forget_in_backends(uri)
            except Exception:  # noqa: BLE001 - only a cache: the next fill of that document starts over anyway
                log.exception("dropping what the backends keep for %s failed", uri)

        try:
            self.worker.submit(forget_in_backends)
        except RuntimeError:  # the worker is shut down, and the backends with it
            pass

    def prepare(self, pipeline: Pipeline, request: CompletionRequest, cancel: CancelToken) -> Future[Prepared]:
        """`request`'s context built on the context thread (no model work there, so parsing never waits behind a
        cancelled run still finishing its step)."""

        def build() -> Prepared:
            cancel.raise_if_cancelled()
            return pipeline.prepare(request)

        return self.context_worker.submit(build)

    # -- state -----------------------------------------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        return self.state == "ready" and self._loaded is not None

    @property
    def busy(self) -> bool:
        """The model thread is running a job (status "modelBusy")."""
        return self.worker.busy

    @property
    def info(self) -> BackendInfo | None:
        loaded = self._loaded
        return loaded.pipeline.backend.info if loaded else None

    @property
    def fallback_info(self) -> BackendInfo | None:
        """The backend behind the primary (None: none chosen, or it failed to load: `fallback_error`)."""
        loaded = self._loaded
        fallback = loaded.pipeline.fallback if loaded else None
        return fallback.info if fallback is not None else None

    @property
    def fallback_state(self) -> str | None:
        """ "loading" (the primary serves alone meanwhile), "ready", "error" (`fallback_error`), or None (no
        fallback chosen, or nothing loaded)."""
        loaded = self._loaded
        if loaded is None:
            return None
        if self._fallback_loading:
            return "loading"
        if loaded.fallback_error:
            return "error"
        return "ready" if loaded.pipeline.fallback is not None else None

    @property
    def fallback_error(self) -> str | None:
        loaded = self._loaded
        return loaded.fallback_error if loaded else None

    @property
    def pipeline(self) -> Pipeline | None:
        return self._loaded.pipeline if self.ready and self._loaded else None

    @property
    def current_pipeline(self) -> Pipeline | None:
        """The pipeline that will serve next, also while a reload is in progress (for document bookkeeping:
        edits and closes must reach its syntax trees even when it serves nothing right now)."""
        loaded = self._loaded
        return loaded.pipeline if loaded else None

    # -- loading ---------------------------------------------------------------------------------------------------
    def load(self, settings: Settings) -> None:
        """Start loading the backend `settings` select, in a background thread."""
        with self._lock:
            self._generation += 1
            generation = self._generation
            self.state, self.error = "loading", None
            self._settings = settings
        self.loaded_key = settings.backend_key()
        thread = threading.Thread(target=self._load, args=(settings, generation), name="infill-load", daemon=True)
        thread.start()

    def _load(self, settings: Settings, generation: int) -> None:
        """The primary, published as soon as it is up (the server is ready then); then its fallback, swapped in
        once it is up too. Either is discarded (closed) when a newer load or a shutdown came meanwhile."""
        spec = spec_for(settings)
        what = describe_spec(spec)
        self._listener("loading", f"loading {what}", 0.0)

        def progress(message: str, fraction: float | None) -> None:
            self._listener("loading", message, fraction)

        started = time.perf_counter()
        try:
            alone = open_primary(spec, progress=progress, opener=self._opener)
        except BaseException as exc:  # noqa: BLE001 - any load failure (incl. MemoryError) is a state, not a crash
            message = f"cannot load the backend ({what}): {type(exc).__name__}: {exc}"
            log.exception(message)
            with self._lock:
                if generation != self._generation:
                    return
                self.state, self.error = "error", message
            self._listener("error", message, None)
            return
        behind = fallback_spec(spec, fallback_for(settings))
        if not self._publish(alone, generation, fallback_loading=behind is not None):
            return
        seconds = time.perf_counter() - started
        self._listener(
            "ready",
            f"{_names(alone.pipeline)} ready in {seconds:.1f} s"
            + (f"; {alone.model_error}" if alone.model_error else "")
            + (f"; loading the fallback: {describe_spec(behind)}" if behind is not None else ""),
            1.0,
        )
        if behind is not None:
            self._load_fallback(alone, behind, generation)

    def _publish(self, opened: Opened, generation: int, fallback_loading: bool) -> bool:
        """Serve `opened` in place of what served (closed on the model thread, after what runs there now), its
        counters continued; False (and `opened` closed) when a newer load or a shutdown came meanwhile."""
        with self._lock:
            current = generation == self._generation
            if current:
                # (a maxMiddleTokens change made while this was loading is in self._settings)
                opened.pipeline.settings = with_server_settings(opened.pipeline.settings, self._settings)
                replaced = self._loaded.backends if self._loaded else ()
                if self._loaded is not None:
                    opened.pipeline.carry_counters_from(self._loaded.pipeline)
                self._loaded = opened
                self._fallback_loading = fallback_loading
                # (the user's GGUF that could not serve: Gemma 3 270M serves, and the status says why)
                self.state, self.error = "ready", opened.model_error
        if not current:  # these never served anything
            for backend in opened.backends:
                close_quietly(backend)
            return False
        for backend in replaced:
            self.worker.submit(_closer(backend))
        return True

    def _load_fallback(self, alone: Opened, behind: BackendSpec, generation: int) -> None:
        """The fallback `behind` loaded while `alone` (its primary) serves, then swapped in under the lock: a new
        pipeline over the same primary continuing `alone`'s counters. A fallback that fails leaves `alone` serving
        (its error in the status); one that ends after a newer load or a shutdown is closed, never swapped in."""

        def progress(message: str, fraction: float | None) -> None:
            if generation == self._generation:  # (a superseded load's messages would mislead)
                self._listener("fallback-loading", message, fraction)

        if generation != self._generation:  # superseded already: a newer load or a shutdown owns the primary
            return
        started = time.perf_counter()
        try:
            both = open_fallback(alone, behind, progress=progress, opener=self._opener)
        except BaseException as exc:  # noqa: BLE001 - the primary serves on; the failure is the fallback's state
            log.exception("the fallback (%s) did not load", describe_spec(behind))
            both = replace(alone, fallback_error=f"{type(exc).__name__}: {exc}")
        added = both.backends[len(alone.backends) :]  # the fallback's backend, where it opened
        with self._lock:
            current = generation == self._generation and self._loaded is alone
            if current:
                both.pipeline.settings = with_server_settings(both.pipeline.settings, self._settings)
                if both.pipeline is not alone.pipeline:
                    both.pipeline.carry_counters_from(alone.pipeline)
                self._loaded = both
                self._fallback_loading = False
        if not current:
            for backend in added:
                close_quietly(backend)
            log.info("the fallback (%s) was superseded while it loaded; closed", describe_spec(behind))
            return
        seconds = time.perf_counter() - started
        if both.fallback_error:
            message = f"no fallback: {both.fallback_error}; {_names(both.pipeline)} serves alone"
        else:
            message = f"fallback ready in {seconds:.1f} s: {_names(both.pipeline)}"
        self._listener("fallback", message, None)

    def set_pipeline_settings(self, settings: Settings) -> None:
        """The server settings the pipeline reads (with_server_settings); applies to the loaded pipeline and to one
        still loading."""
        with self._lock:
            self._settings = settings
            loaded = self._loaded
        if loaded is not None:
            loaded.pipeline.settings = with_server_settings(loaded.pipeline.settings, settings)

    def close(self) -> None:
        """Shut down: the backends are closed on the model thread after what it is running (requests were
        cancelled first, so queued ones return at once); a load still running closes its own when it ends."""
        with self._lock:
            self._generation += 1
            loaded, self._loaded = self._loaded, None
        for backend in loaded.backends if loaded else ():
            self.worker.submit(_closer(backend))
        self.worker.shutdown(wait=False)
        self.context_worker.shutdown(wait=False, cancel_futures=True)


def _closer(backend: InfillBackend) -> Callable[[], None]:
    return lambda: close_quietly(backend)


def _names(pipeline: Pipeline) -> str:
    """The primary, and the fallback behind it, as the ready message names them."""

    def name(info: BackendInfo) -> str:
        return info.label or info.name

    behind = f" (fallback: {name(pipeline.fallback.info)})" if pipeline.fallback is not None else ""
    return name(pipeline.backend.info) + behind
