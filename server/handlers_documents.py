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
from typing import TYPE_CHECKING

from lsprotocol import types

from infill import timing

from .documents import DocumentDistrusted
from .scheduling import after_edit
from .warming import opened

if TYPE_CHECKING:
    from .server import InfillServer

log = logging.getLogger(__name__)


def register(server: InfillServer) -> None:
    @server.feature(types.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: InfillServer, params: types.DidOpenTextDocumentParams) -> None:
        document = ls.documents.open(params.text_document, ls.settings.max_document_chars)
        if document.oversized:
            ls.log(
                f"{document.uri} has {document.length} characters, more than maxDocumentChars="
                f"{document.max_chars}: it will get no completions (reopen it when smaller)",
                types.MessageType.Warning,
            )
        opened(ls, document)  # its prompt warmed in the background (server/warming.py)

    @server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: InfillServer, params: types.DidChangeTextDocumentParams) -> None:
        timed = timing.enabled()  # measured only when a benchmark asks (infill/timing.py): off the request path
        started, cpu_started = (time.perf_counter(), time.thread_time()) if timed else (0.0, 0.0)
        uri = params.text_document.uri
        ls.warming.cancel()  # any keystroke: the model thread is the typing's
        if ls.claims.document_changed(uri):
            log.debug("edit to %s cancelled running requests", uri)
        pipeline, version = ls.host.current_pipeline, params.text_document.version
        # Each change is noted (O(1)) so the next context re-parses incrementally from it; nothing is parsed here.
        edited_to: list[int] = []  # where the last change ended: the cursor after a jump (scheduling.after_edit)

        def on_edit(start: int, old_end: int, new_text: str) -> None:
            edited_to.append(start + len(new_text))
            if pipeline is not None:
                pipeline.note_edit(uri, start, old_end, new_text, version)

        try:
            document = ls.documents.change(params, on_edit)
        except DocumentDistrusted as exc:
            document = ls.documents.get(uri)
            if pipeline is not None:
                pipeline.forget(uri)  # its syntax tree saw part of the failed change
            ls.log(
                f"{uri}: {exc}; no completions for it until the editor sends its full text or reopens it",
                types.MessageType.Error,
            )
        if document is None:
            ls.log(f"didChange for a document that is not open: {uri}; ignored", types.MessageType.Warning)
            return
        if timed:
            document.last_change_ms = (time.perf_counter() - started) * 1000
            document.last_change_cpu_ms = (time.thread_time() - cpu_started) * 1000
            timing.record("did_change", document.last_change_ms)
        if edited_to:
            after_edit(ls, document, edited_to[-1])
        if not document.oversized:
            ls.acceptance.changed(document)

    @server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: InfillServer, params: types.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        ls.claims.document_changed(uri)
        ls.next_line.cancel(uri)
        ls.documents.close(uri)
        if (pipeline := ls.host.current_pipeline) is not None:
            ls.host.forget(pipeline, uri)
        ls.acceptance.closed(uri)
