"""Text sync: didOpen, didChange and didClose, each handled here and only here. The server's own line-based
DocumentStore keeps the text (server/server.py routes these notifications here instead of to pygls' workspace);
each handler then tells everyone else that keeps state about the document, in this order: the worker's claims
(an edit or a close supersedes the document's running requests), the pipeline (each edit noted so the next
context re-parses incrementally; a closed document's tree dropped), the scheduler (warming the prompt after a
jump) and the acceptance tracker (what became of a suggestion shown in it). didOpen warms the document's prompt
and every didChange cancels a warm in progress (server/warming.py). A close cancels the next line's speculation
right after the claims, before the document and what the pipeline keeps for it go."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from lsprotocol import types

from infill import timing

from .acceptance import AcceptanceTracker
from .backend_host import BackendHost
from .background_warm import BackgroundWarm
from .documents import DocumentDistrusted, DocumentStore
from .gate import ClientLog
from .next_line import NextLine
from .scheduling import InlineScheduler
from .settings import Settings
from .warming import opened

if TYPE_CHECKING:
    from .server import InfillServer

log = logging.getLogger(__name__)


def register(server: InfillServer) -> None:
    events = DocumentEvents(
        server.documents,
        server.host,
        server.inline,
        server.next_line,
        server.warming,
        server.acceptance,
        lambda: server.settings,
        server.log,
    )

    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: InfillServer, params: types.DidOpenTextDocumentParams) -> None:
        events.opened(params)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: InfillServer, params: types.DidChangeTextDocumentParams) -> None:
        events.changed(params)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: InfillServer, params: types.DidCloseTextDocumentParams) -> None:
        events.closed(params)


class DocumentEvents:
    """Text sync told to everyone that keeps state about a document, in the order of the module docstring, with the
    pieces it is given (`settings_of` reads the server's current settings). Event loop only."""

    def __init__(
        self,
        documents: DocumentStore,
        host: BackendHost,
        inline: InlineScheduler,
        next_line: NextLine,
        warming: BackgroundWarm,
        acceptance: AcceptanceTracker,
        settings_of: Callable[[], Settings],
        client_log: ClientLog,
    ) -> None:
        self._documents = documents
        self._host = host  # the pipeline that notes each edit, the claims an edit supersedes
        self._inline = inline  # the warm after a jump, and at open
        self._next_line = next_line
        self._warming = warming
        self._acceptance = acceptance
        self._settings = settings_of
        self._log = client_log

    def opened(self, params: types.DidOpenTextDocumentParams) -> None:
        document = self._documents.open(params.text_document, self._settings().max_document_chars)
        if document.oversized:
            self._log(
                f"{document.uri} has {document.length} characters, more than maxDocumentChars="
                f"{document.max_chars}: it will get no completions (reopen it when smaller)",
                types.MessageType.Warning,
            )
        opened(self._inline, self._warming, document)  # its prompt warmed in the background (server/warming.py)

    def changed(self, params: types.DidChangeTextDocumentParams) -> None:
        timed = timing.enabled()  # measured only when a benchmark asks (infill/timing.py): off the request path
        started, cpu_started = (time.perf_counter(), time.thread_time()) if timed else (0.0, 0.0)
        uri = params.text_document.uri
        self._warming.cancel()  # any keystroke: the model thread is the typing's
        if self._host.claims.document_changed(uri):
            log.debug("edit to %s cancelled running requests", uri)
        pipeline, version = self._host.current_pipeline, params.text_document.version
        # Each change is noted (O(1)) so the next context re-parses incrementally from it; nothing is parsed here.
        edited_to: list[int] = []  # where the last change ended: the cursor after a jump (InlineScheduler.after_edit)

        def on_edit(start: int, old_end: int, new_text: str) -> None:
            edited_to.append(start + len(new_text))
            if pipeline is not None:
                pipeline.note_edit(uri, start, old_end, new_text, version)

        try:
            document = self._documents.change(params, on_edit)
        except DocumentDistrusted as exc:
            document = self._documents.get(uri)
            if pipeline is not None:
                pipeline.forget(uri)  # its syntax tree saw part of the failed change
            self._log(
                f"{uri}: {exc}; no completions for it until the editor sends its full text or reopens it",
                types.MessageType.Error,
            )
        if document is None:
            self._log(f"didChange for a document that is not open: {uri}; ignored", types.MessageType.Warning)
            return
        if timed:
            document.last_change_ms = (time.perf_counter() - started) * 1000
            document.last_change_cpu_ms = (time.thread_time() - cpu_started) * 1000
            timing.record("did_change", document.last_change_ms)
        if edited_to:
            self._inline.after_edit(document, edited_to[-1])
        if not document.oversized:
            self._acceptance.changed(document)

    def closed(self, params: types.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        self._host.claims.document_changed(uri)
        self._next_line.cancel(uri)
        self._documents.close(uri)
        if (pipeline := self._host.current_pipeline) is not None:
            self._host.forget(pipeline, uri)
        self._acceptance.closed(uri)
