"""What the client reports about suggestions, all of it here: in Copilot's shape `textDocument/didShowCompletion`
({item}), `textDocument/didPartiallyAcceptCompletion` ({item, acceptedLength} in UTF-16 units from the start of the
item's text) and the accept command every inline item carries; infill's own `infill/telemetry` events ({event:
shown | accepted | rejected, ...}); and the timer that measures retained characters. What a client does not report
the server infers from didChange and didClose (acceptance.py), which handlers_documents.py passes on to the
tracker."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from lsprotocol import types

from .acceptance import ACCEPT_COMMAND, RETAIN_DELAY_S, Suggestion
from .documents import Document
from .gate import ClientLog
from .json_values import plain_json
from .telemetry import Telemetry

if TYPE_CHECKING:
    from .server import InfillServer

DID_SHOW = "textDocument/didShowCompletion"
DID_PARTIALLY_ACCEPT = "textDocument/didPartiallyAcceptCompletion"
TELEMETRY = "infill/telemetry"


def register(server: InfillServer) -> None:
    tracker = server.acceptance

    def schedule_retained(suggestion: Suggestion) -> None:
        def check() -> None:
            tracker.check_retained(suggestion.id, server.documents.get(suggestion.uri))

        asyncio.get_running_loop().call_later(RETAIN_DELAY_S, check)

    tracker.on_first_accept = schedule_retained

    @server.feature(TELEMETRY)
    def telemetry(ls: InfillServer, params: Any) -> None:
        event = plain_json(params)
        problem = (
            ls.telemetry.record_event(event)
            if isinstance(event, dict)
            else f"{TELEMETRY}: params must be an object, got {event!r}; ignored"
        )
        if problem:
            ls.log(problem, types.MessageType.Warning)

    @server.feature(DID_SHOW)
    def did_show(ls: InfillServer, params: Any) -> None:
        if (item := _item(ls.log, DID_SHOW, params)) is not None:
            tracker.shown(item)

    @server.feature(DID_PARTIALLY_ACCEPT)
    def did_partially_accept(ls: InfillServer, params: Any) -> None:
        item = _item(ls.log, DID_PARTIALLY_ACCEPT, params)
        length = plain_json(params).get("acceptedLength") if item is not None else None
        if item is None:
            return
        if not isinstance(length, int) or isinstance(length, bool) or length < 0:
            ls.log(
                f"{DID_PARTIALLY_ACCEPT}: acceptedLength must be a non-negative integer, got {length!r}; ignored",
                types.MessageType.Warning,
            )
            return
        tracker.partially_accepted(item, length)

    @server.command(ACCEPT_COMMAND)
    def did_accept(ls: InfillServer, *arguments: Any) -> None:
        if not arguments or not isinstance(arguments[0], str) or not tracker.accepted(arguments[0]):
            ls.log(f"{ACCEPT_COMMAND}: unknown suggestion {list(arguments)!r}; not counted", types.MessageType.Log)


def offer(
    telemetry: Telemetry, document: Document, items: list[types.InlineCompletionItem], spans: list[tuple[int, int]]
) -> None:
    """Give each item of an inline reply the accept command, and remember the reply to infer what became of it
    (`spans`: each item's str range in the document, as the fills gave it)."""
    texts = [item.insert_text if isinstance(item.insert_text, str) else item.insert_text.value for item in items]
    ids = telemetry.offered(document, [(text, start, end) for text, (start, end) in zip(texts, spans)])
    for item, suggestion_id in zip(items, ids):
        item.command = types.Command(title="infill: accepted", command=ACCEPT_COMMAND, arguments=[suggestion_id])


def _item(log: ClientLog, method: str, params: Any) -> dict[str, Any] | None:
    params = plain_json(params)
    item = params.get("item") if isinstance(params, dict) else None
    if not isinstance(item, dict) or not isinstance(item.get("insertText"), (str, dict)):
        log(
            f"{method}: params must be {{item: InlineCompletionItem, ...}}, got {params!r}; ignored",
            types.MessageType.Warning,
        )
        return None
    return item
