"""The language server object: pygls' LanguageServer plus infill's state (settings, documents, backend, claims,
telemetry), logging to the client, status notifications and start-up progress."""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer

from infill import __version__, timing
from infill.types import BackendInfo
from infill.worker import Claims

from .acceptance import AcceptanceTracker
from .backend_host import BackendHost
from .background_warm import BackgroundWarm
from .budget import BudgetPolicy
from .documents import DocumentStore
from .jsonrpc import GuardedProtocol, public_message, strict_converter
from .next_line import NextLine
from .scheduling import InlineScheduler
from .settings import Settings, clean_layer, parse_settings
from .telemetry import LogThrottle, RefusalLog, Telemetry
from .typed_through import TypedThrough

log = logging.getLogger(__name__)

COMMANDS = ("infill.status", "infill.fillGap", "infill.fillAllGaps", "infill.toggle", "infill.didAcceptCompletion")
STATUS_CHANGED = "infill/statusChanged"


class InfillProtocol(GuardedProtocol):
    """Routes text sync to its one handler (server/handlers_documents.py) and the server's own line-based
    DocumentStore instead of pygls' workspace, whose incremental change re-joins the whole document on every
    keystroke."""

    def _text_sync(self, method: str, params: object) -> Iterator[tuple[Callable[..., object], tuple[object], None]]:
        if (handler := self.fm.features.get(method)) is not None:
            yield handler, (params,), None

    def lsp_text_document__did_open(self, params: types.DidOpenTextDocumentParams) -> Iterator[Any]:
        yield from self._text_sync(types.TEXT_DOCUMENT_DID_OPEN, params)

    def lsp_text_document__did_change(self, params: types.DidChangeTextDocumentParams) -> Iterator[Any]:
        yield from self._text_sync(types.TEXT_DOCUMENT_DID_CHANGE, params)

    def lsp_text_document__did_close(self, params: types.DidCloseTextDocumentParams) -> Iterator[Any]:
        yield from self._text_sync(types.TEXT_DOCUMENT_DID_CLOSE, params)

    async def lsp_workspace__execute_command(self, params: types.ExecuteCommandParams) -> Any:  # type: ignore[override]
        """Commands run as the request's own task (pygls runs them as a detached inner task), so $/cancelRequest
        reaches a running infill.fillGap: its fill stops and no workspace/applyEdit follows."""
        handler = self.fm.commands.get(params.command)
        if handler is None:
            raise JsonRpcInvalidParams.of(
                ValueError(f"unknown command {params.command!r}; this server has {', '.join(COMMANDS)}")
            )
        result = handler(*(params.arguments or ()))
        return await result if inspect.isawaitable(result) else result

    # Keep pygls' decorator marks (method_name) on the overrides so they replace the builtins.
    lsp_workspace__execute_command.method_name = types.WORKSPACE_EXECUTE_COMMAND  # type: ignore[attr-defined]
    lsp_text_document__did_open.method_name = types.TEXT_DOCUMENT_DID_OPEN  # type: ignore[attr-defined]
    lsp_text_document__did_change.method_name = types.TEXT_DOCUMENT_DID_CHANGE  # type: ignore[attr-defined]
    lsp_text_document__did_close.method_name = types.TEXT_DOCUMENT_DID_CLOSE  # type: ignore[attr-defined]


class InfillServer(LanguageServer):
    """The server: pygls' LanguageServer with infill's state. It builds the collaborators and wires them to each
    other: `documents`, `host` (the backend and the threads it runs on; `claims` are its worker's), `telemetry` /
    `acceptance`, `budget`, `typed_through`, `next_line`, `warming`, `inline` (the inline scheduler), `refusals`,
    `discard_log`. A handler pygls calls (server/handlers_*.py, warming.py) receives the server typed and unpacks the
    pieces its request uses at its top; the functions and objects below it receive those pieces, never the server.
    `settings` is replaced on each configuration change: what holds on to it reads it through a getter."""

    protocol: InfillProtocol

    def __init__(self, base: Settings) -> None:
        super().__init__(
            "infill-ls",
            __version__,
            protocol_cls=InfillProtocol,
            converter_factory=strict_converter,
            text_document_sync_kind=types.TextDocumentSyncKind.Incremental,
        )
        self.base_settings: Settings = base  # command-line options; client settings overlay them
        self.settings: Settings = base
        self.documents: DocumentStore = DocumentStore()
        self.telemetry: Telemetry = Telemetry(base.completion_log)
        self.acceptance: AcceptanceTracker = self.telemetry.acceptance  # what became of each suggestion
        self.host: BackendHost = BackendHost(self._on_load_event)
        self.claims: Claims = self.host.claims  # per-document tickets: supersession, joining (infill/worker.py)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.refusals: RefusalLog = RefusalLog()  # why no model work is done, logged once per document version
        self.discard_log: LogThrottle = LogThrottle()  # completions superseded or outdated while computing
        self.budget: BudgetPolicy = BudgetPolicy()  # inline deadlines: a runaway guard measured on this machine
        self.typed_through: TypedThrough = TypedThrough()  # the rest of a suggestion the person types through
        # the next line's suggestion, computed ahead (server/next_line.py)
        self.next_line: NextLine = NextLine(self.host, self.typed_through, self.budget)
        # the background warm of a document's prompt at open and where the cursor moves (server/warming.py)
        self.warming: BackgroundWarm = BackgroundWarm()
        # inline requests: debounce, supersession, joining, budget; the warm after a jump (server/scheduling.py)
        self.inline: InlineScheduler = InlineScheduler(
            self.host,
            self.documents,
            self.budget,
            self.next_line,
            self.warming,
            lambda: self.settings,
            self.log,
            self.notify_status,
        )
        self._progress_token: str | None = None
        self._progress_ready: asyncio.Future[bool] | None = None
        self._raw_layers: dict[str, dict[str, Any]] = {}  # "init" (initializationOptions), "config", "toggle"

    # -- lifecycle -------------------------------------------------------------------------------------------------
    def stop(self, exit_code: int) -> None:
        """End the process: stop running work, write nothing more, keep what the logs hold, exit with `exit_code`.
        os._exit, because a normal exit would wait for the thread blocked reading stdin and for the model thread."""
        self.protocol.closed = True
        try:
            self.claims.cancel_all("server exiting")
            self.host.close()
            self.telemetry.flush(timeout=1.0)
        finally:
            log.info("exit (code %d)", exit_code)
            for handler in logging.getLogger().handlers:
                handler.flush()
            os._exit(exit_code)

    def report_server_error(self, error: Exception, source: object) -> None:
        """Errors outside a request (a malformed message, a failing notification handler): the local log has the
        traceback; the client gets one log line (pygls' default pops up a message box each time)."""
        log.error("server error (%s): %s", getattr(source, "__name__", source), error)
        if not self.protocol.closed:
            self.log(f"error: {public_message(str(error))}", types.MessageType.Error)

    # -- client-facing messages ------------------------------------------------------------------------------------
    def log(self, message: str, kind: types.MessageType = types.MessageType.Info) -> None:
        getattr(log, {1: "error", 2: "warning"}.get(kind.value, "info"))(message)
        try:
            self.window_log_message(types.LogMessageParams(type=kind, message=f"infill: {message}"))
        except Exception:  # noqa: BLE001 - no transport yet (tests, shutdown): the local log has it
            pass

    def status(self) -> dict[str, Any]:
        info = self.host.info
        return {
            "ready": self.host.ready,
            "state": self.host.state,
            "model": info.model if info else self.settings.model,
            "backend": info.name if info else None,
            "kind": info.kind if info else None,
            "device": info.device if info else self.settings.device,
            "dtype": info.dtype if info else self.settings.dtype,
            "isFallback": info.is_fallback if info else None,
            "label": info.label if info else None,
            "enabled": self.settings.enabled,
            "error": self.host.error,
            "fallback": _describe(self.host.fallback_info),
            "fallbackError": self.host.fallback_error,
            "fallbackState": self.host.fallback_state,  # "loading" while the primary serves alone, "ready", "error"
            "latencies": self.telemetry.latency_summary(),
            "telemetry": self.telemetry.summary(),
            "documents": len(self.documents),
            "running": self.claims.running,
            "modelBusy": self.host.busy,
            "replies": self.protocol.reply_counts(),  # server/replies.py
            "version": __version__,
            "pipeline": self._pipeline_stats(),
            "overhead": timing.summary(),  # benchmark phases (infill/timing.py), empty unless timing is on
            "budget": self.budget.status(self.settings.inline_budget_ms, self.settings.invoked_budget_ms),
            "cheapAnswers": {
                "typedThrough": self.typed_through.answered,
                "joined": self.inline.joined,
                "nextLine": self.next_line.answered,
                "nextLineStarted": self.next_line.started,
                "warmsStarted": self.warming.started,
            },
        }

    def _pipeline_stats(self) -> dict[str, Any]:
        """Routes taken and watchdog verdicts (checked, rejected per reason); kept across backend reloads."""
        pipeline = self.host.current_pipeline
        if pipeline is None:
            return {"routes": {}, "checked": 0, "rejected": {}}
        return pipeline.stats()

    def notify_status(self) -> None:
        if self.loop is None:
            return  # not initialized yet (nothing may precede the InitializeResult); start_loading will send it
        self.protocol.notify(STATUS_CHANGED, self.status())

    # -- settings --------------------------------------------------------------------------------------------------
    def apply_settings(self, raw: Any, source: str, layer: str = "config") -> None:
        """Overlay client settings (from `source`, for the log) and react: reload the backend if what selects it
        changed, retarget the completion log, refresh status. Workspace configuration overlays initializationOptions;
        a newer configuration replaces the older one."""
        before = self.settings
        layer_values, problems = clean_layer(raw, before)
        for problem in problems:
            self.log(f"{problem} (from {source})", types.MessageType.Warning)
        if isinstance(raw, dict):
            self._raw_layers[layer] = layer_values
            if "enabled" in layer_values:
                self._raw_layers.pop("toggle", None)  # an explicit setting overrides an earlier infill.toggle
        merged = {
            **self._raw_layers.get("init", {}),
            **self._raw_layers.get("config", {}),
            **self._raw_layers.get("toggle", {}),
        }
        settings, _ = parse_settings(merged, self.base_settings)  # clean layers: nothing left to report
        for name in ("model", "device", "dtype", "remote_endpoint", "remote_model", "denoising_steps"):
            if getattr(settings, name) is None and getattr(self.base_settings, name) is not None:
                settings = _with(settings, name, getattr(self.base_settings, name))
        self.settings = settings
        self.telemetry.log_path = settings.completion_log
        if (settings.max_middle_tokens, settings.explicit_budget_ms) != (
            before.max_middle_tokens,
            before.explicit_budget_ms,
        ):
            self.host.set_pipeline_settings(settings)
        if self.host.loaded_key is not None and settings.backend_key() != self.host.loaded_key:
            self.log(f"backend settings changed (from {source}); reloading in the background")
            self.start_loading()
        elif settings.enabled != before.enabled:
            self.notify_status()

    def set_enabled(self, enabled: bool) -> None:
        """infill.toggle: kept across later configuration changes that do not set `enabled` themselves."""
        self._raw_layers["toggle"] = {"enabled": enabled}
        self.settings = _with(self.settings, "enabled", enabled)
        self.log(f"completions {'enabled' if enabled else 'disabled'} (infill.toggle)")
        self.notify_status()

    # -- loading and progress --------------------------------------------------------------------------------------
    def start_loading(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._begin_progress()
        self.host.load(self.settings)
        self.notify_status()

    def _begin_progress(self) -> None:
        window = self.client_capabilities.window
        if not (window and window.work_done_progress):
            self._progress_token = None
            return
        if self._progress_token is not None:  # a reload while the previous load still reports
            asyncio.ensure_future(self._end_progress(self._progress_token, self._progress_ready, "superseded"))
        token = f"infill-load-{uuid.uuid4().hex[:8]}"
        self._progress_token = token
        ready: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._progress_ready = ready

        async def create_then_begin() -> None:
            begun = False
            try:
                await self.work_done_progress.create_async(token)
                self.work_done_progress.begin(
                    token,
                    types.WorkDoneProgressBegin(
                        title="infill: loading model", message="starting", percentage=0, cancellable=False
                    ),
                )
                begun = True
            except Exception as exc:  # noqa: BLE001 - a client refusing progress is not an error for us
                log.info("work-done progress not available: %s", exc)
                if self._progress_token == token:  # (a newer load's token stays)
                    self._progress_token = None
            finally:
                ready.set_result(begun)

        asyncio.ensure_future(create_then_begin())

    async def _end_progress(self, token: str, ready: asyncio.Future[bool] | None, message: str) -> None:
        """End a progress once its begin went out (a reload can supersede it before that)."""
        if ready is None or await ready:
            self.work_done_progress.end(token, types.WorkDoneProgressEnd(message=message))

    def _on_load_event(self, state: str, message: str, fraction: float | None) -> None:
        """Called on the loader thread: hop to the event loop."""
        if self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(lambda: asyncio.ensure_future(self._load_event(state, message, fraction)))

    async def _load_event(self, state: str, message: str, fraction: float | None) -> None:
        if state.startswith("fallback"):  # the primary serves already: its progress has ended
            self.log(message)
            if state == "fallback":  # the fallback is in (or failed to load)
                self.notify_status()
            return
        token, ready = self._progress_token, self._progress_ready
        if token is not None and ready is not None:
            await ready  # begin must precede report/end
            token = self._progress_token
        percentage = None if fraction is None else max(0, min(100, int(fraction * 100)))
        if state == "loading":
            self.log(message)
            if token is not None:
                self.work_done_progress.report(
                    token, types.WorkDoneProgressReport(message=message, percentage=percentage)
                )
            return
        if state == "ready":
            self.budget.reset()  # a new backend: the old one's fill times say nothing about it
        if token is not None:
            self.work_done_progress.end(token, types.WorkDoneProgressEnd(message=message))
            self._progress_token = None
        self.log(message, types.MessageType.Error if state == "error" else types.MessageType.Info)
        self.notify_status()


def _describe(info: BackendInfo | None) -> dict[str, Any] | None:
    """The fallback backend as `infill.status` names it (None: no fallback serves)."""
    if info is None:
        return None
    return {"backend": info.name, "kind": info.kind, "model": info.model, "device": info.device, "label": info.label}


def _with(settings: Settings, name: str, value: Any) -> Settings:
    from dataclasses import replace

    return replace(settings, **{name: value})
