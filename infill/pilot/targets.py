"""The backends a pilot compares, from `--backend` specs, each wrapped in the same `Pipeline`.

Specs: `ar` (the offline Gemma 3 270M default), `diffusion:DIR_OR_HUB_ID` (a DiffusionGemma checkpoint),
`diffusion-dummy:DIR_OR_HUB_ID` (its architecture with random weights), `http(s)://HOST[:PORT][/v1]` (an
OpenAI-compatible endpoint; `#model=NAME&token=T` in the fragment, which is never sent). The pilot is explicit
about fallbacks, unlike an editor's default: a spec alone has none, so each backend is measured on its own; a
`+fallback` suffix puts behind it what an editor gets by default (infill/loader.py `fallback_spec`: the offline
default behind a checkpoint or an endpoint, nothing behind `ar`); `+raw` takes the pipeline's request (same
context) but shows the backend's middle as it comes: no post-processing, no watchdog, no fallback. Engines are
opened once and shared between specs.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

from infill.backends.choose import BackendSpec, open_backend
from infill.loader import NO_FALLBACK, FallbackChoice, fallback_spec, offline_default, warm_up
from infill.pipeline import CompletionRequest, Fill, Pipeline, PipelineResult, PipelineSettings, Prepared
from infill.types import UNSTEERED, FillControl, InfillBackend, InfillError, InfillResult

ENGINES = ("ar", "diffusion", "diffusion-dummy", "remote")
TINY_HIDDEN_SIZE = 512  # a DiffusionGemma below this width is a test checkpoint, not a model


@dataclass(frozen=True)
class TargetSpec:
    label: str  # the spec as given: the name of this backend in every table and plot
    engine: str  # one of ENGINES
    location: str | None = None  # checkpoint dir / hub id, or endpoint URL (fragment removed)
    endpoint_model: str | None = None
    endpoint_token: str | None = None
    fallback: bool = False
    raw: bool = False


def parse_target(text: str) -> TargetSpec:
    spec = text.strip()
    if not spec:
        raise InfillError("empty --backend spec")
    core, flags = spec, set[str]()
    while core.endswith(("+fallback", "+raw")):
        flag = "+fallback" if core.endswith("+fallback") else "+raw"
        core, flags = core.removesuffix(flag), flags | {flag}
    fallback, raw = "+fallback" in flags, "+raw" in flags
    if fallback and raw:
        raise InfillError(f"{text!r}: +raw has no watchdog and so no fallback; use one of +raw, +fallback")
    suffix = "+fallback" if fallback else "+raw" if raw else ""
    if core.startswith(("http://", "https://")):
        parts = urlsplit(core)
        options = {k: v[-1] for k, v in parse_qs(parts.fragment).items()}
        unknown = set(options) - {"model", "token"}
        if unknown:
            raise InfillError(f"unknown endpoint option(s) {sorted(unknown)} in {text!r}; use #model=NAME&token=T")
        url = urlunsplit((parts.scheme, parts.netloc, parts.path, parts.query, ""))
        # The label never carries the token: it ends up in reports.
        label = url + (f"#model={options['model']}" if "model" in options else "") + suffix
        return TargetSpec(label, "remote", url, options.get("model"), options.get("token"), fallback, raw)
    if core == "ar":
        return TargetSpec(spec, "ar", None, fallback=fallback, raw=raw)
    engine, sep, location = core.partition(":")
    if engine in ("diffusion", "diffusion-dummy") and sep and location:
        return TargetSpec(spec, engine, location, fallback=fallback, raw=raw)
    raise InfillError(
        f"unknown --backend {text!r}; use ar, diffusion:DIR, diffusion-dummy:DIR_OR_CONFIG or "
        "http://HOST:PORT/v1, optionally with a +fallback or +raw suffix"
    )


def quality_caveat(spec: TargetSpec) -> str | None:
    """Why this backend's text quality means nothing, if it doesn't (dummy weights, tiny random checkpoint)."""
    if spec.engine == "diffusion-dummy":
        return "dummy (random) weights: text quality is meaningless, only latency and mechanics are measured"
    if spec.engine == "diffusion" and spec.location and Path(spec.location, "config.json").is_file():
        try:
            config = json.loads(Path(spec.location, "config.json").read_text())
        except (OSError, ValueError):
            return None
        hidden = (config.get("text_config") or config).get("hidden_size", TINY_HIDDEN_SIZE)
        if hidden < TINY_HIDDEN_SIZE:
            return (
                f"tiny random DiffusionGemma (hidden size {hidden}): text quality is meaningless, only latency "
                "and mechanics are measured"
            )
    return None


def _backend_spec(spec: TargetSpec, base: BackendSpec) -> BackendSpec:
    """`base` (the command's model options) with the model this target names."""
    if spec.engine == "remote":
        return replace(
            base,
            model=None,
            endpoint=spec.location,
            endpoint_model=spec.endpoint_model,
            endpoint_token=spec.endpoint_token,
        )
    if spec.engine == "ar":
        return offline_default(base)  # (the same spec, and so the same instance, as every +fallback's)
    return replace(
        base, model=spec.location, endpoint=None, load_format="dummy" if spec.engine == "diffusion-dummy" else "auto"
    )


class RawPipeline:
    """The pipeline's request (identical context for every backend), the backend's middle shown as it comes."""

    def __init__(self, pipeline: Pipeline) -> None:
        self.inner = pipeline
        self.backend = pipeline.backend
        self.fallback = None

    def forget(self, document_id: str) -> None:
        self.inner.forget(document_id)

    def complete(
        self, req: CompletionRequest, control: FillControl = UNSTEERED, prepared: Prepared | None = None
    ) -> PipelineResult:
        started = time.perf_counter()
        prepared = prepared or self.inner.prepare(req)
        request, spans = prepared.request, prepared.spans
        context_ms = (time.perf_counter() - started) * 1000
        try:
            result = self.backend.infill(request, control)
        except Exception as exc:  # recorded like the pipeline records a failing backend
            result = InfillResult(middles=(), outcome="error", backend=self.backend.info.name, error=str(exc))
        fills = []
        if result.outcome in ("ok", "cut_short") and any(result.middles) and len(result.middles) == len(spans):
            fills = [Fill(a, b, m) for (a, b), m in zip(spans, result.middles)]
        return PipelineResult(
            fills=fills,
            result=result,
            route="primary" if fills else "none",
            context_ms=context_ms,
            total_ms=(time.perf_counter() - started) * 1000,
            version=req.version,
        )


@dataclass
class OpenedTarget:
    spec: TargetSpec
    pipeline: Pipeline | RawPipeline | None  # None when opening failed
    open_error: str | None
    load_seconds: float
    caveat: str | None
    shared: bool = False  # the primary engine was already open for an earlier backend

    def describe(self) -> dict[str, Any]:
        """Backend identity for the report: name, kind, model, device, dtype of the primary (and fallback)."""
        if self.pipeline is None:
            return {"label": self.spec.label, "engine": self.spec.engine, "open_error": self.open_error}
        info = self.pipeline.backend.info
        out = {
            "label": self.spec.label,
            "engine": self.spec.engine,
            "name": info.name,
            "kind": info.kind,
            "model": info.model,
            "device": info.device,
            "dtype": info.dtype,
            "is_fallback": info.is_fallback,
            "load_seconds": round(self.load_seconds, 2),
            "shared_engine": self.shared,
            "caveat": self.caveat,
        }
        behind = self.pipeline.fallback
        out["fallback"] = behind.info.name if behind is not None else None
        return out


class TargetPool:
    """Opens engines on demand, once each per spec (the offline default is shared by `ar` and every `+fallback`)."""

    def __init__(
        self,
        settings: PipelineSettings,
        open_fn: Callable[[BackendSpec], InfillBackend] = open_backend,
        base: BackendSpec | None = None,
    ) -> None:
        self.settings = settings
        self.base = base or BackendSpec()  # model options shared by every engine opened
        self._open_fn = open_fn
        self._engines: dict[BackendSpec, InfillBackend] = {}
        self._lock = threading.Lock()

    def _engine(self, spec: BackendSpec) -> InfillBackend:
        with self._lock:
            if spec not in self._engines:
                engine = self._open_fn(spec)
                warm_up(engine)  # the loader's warm-up: no attempt pays a DiffusionGemma engine's one-time costs
                self._engines[spec] = engine
            return self._engines[spec]

    def open(self, spec: TargetSpec) -> OpenedTarget:
        started = time.perf_counter()
        primary_spec = _backend_spec(spec, self.base)
        shared = primary_spec in self._engines
        behind = fallback_spec(primary_spec, FallbackChoice() if spec.fallback else NO_FALLBACK)
        try:
            primary = self._engine(primary_spec)
            fallback = self._engine(behind) if behind is not None else None
        except Exception as exc:  # a backend that cannot open is reported, and the pilot moves on
            return OpenedTarget(
                spec, None, f"{type(exc).__name__}: {exc}", time.perf_counter() - started, quality_caveat(spec)
            )
        pipeline = Pipeline(primary, fallback=fallback, settings=self.settings)
        return OpenedTarget(
            spec,
            RawPipeline(pipeline) if spec.raw else pipeline,
            None,
            time.perf_counter() - started,
            quality_caveat(spec),
            shared,
        )

    def close(self) -> None:
        with self._lock:
            engines, self._engines = list(self._engines.values()), {}
        for engine in engines:
            try:
                engine.close()
            except Exception:  # closing is best effort at the end of a run
                pass
