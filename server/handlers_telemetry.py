"""What the client reports about suggestions, in Copilot's shape: `textDocument/didShowCompletion` ({item}),
`textDocument/didPartiallyAcceptCompletion` ({item, acceptedLength} in UTF-16 units from the start of the item's
text) and the accept command every inline item carries, and the timer that measures retained characters. What a
client does not report the server infers from didChange and didClose (acceptance.py), which handlers_documents.py
passes on to the tracker."""

from __future__ import annotations

import asyncio
from typing import Any

from lsprotocol import types

from .acceptance import ACCEPT_COMMAND, RETAIN_DELAY_S, Suggestion
from .settings import plain_json

DID_SHOW = "textDocument/didShowCompletion"
DID_PARTIALLY_ACCEPT = "textDocument/didPartiallyAcceptCompletion"


def register(server) -> None:
    tracker = server.telemetry.acceptance

    def schedule_retained(suggestion: Suggestion) -> None:
        def check() -> None:
            tracker.check_retained(suggestion.id, server.documents.get(suggestion.uri))

        asyncio.get_running_loop().call_later(RETAIN_DELAY_S, check)

    tracker.on_first_accept = schedule_retained

    @server.feature(DID_SHOW)
    def did_show(ls, params: Any) -> None:
        if (item := _item(ls, DID_SHOW, params)) is not None:
            tracker.shown(item)

    @server.feature(DID_PARTIALLY_ACCEPT)
    def did_partially_accept(ls, params: Any) -> None:
        item = _item(ls, DID_PARTIALLY_ACCEPT, params)
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
    def did_accept(ls, *arguments: Any) -> None:
        if not arguments or not isinstance(arguments[0], str) or not tracker.accepted(arguments[0]):
            ls.log(f"{ACCEPT_COMMAND}: unknown suggestion {list(arguments)!r}; not counted", types.MessageType.Log)


def offer(ls, document, items: list[types.InlineCompletionItem], spans: list[tuple[int, int]]) -> None:
    """Give each item of an inline reply the accept command, and remember the reply to infer what became of it
    (`spans`: each item's str range in the document, as the fills gave it)."""
    ids = ls.telemetry.acceptance.offer(
        document, [(item.insert_text, start, end) for item, (start, end) in zip(items, spans)]
    )
    ls.telemetry.counts["offered"] += 1
    for item, suggestion_id in zip(items, ids):
        item.command = types.Command(title="infill: accepted", command=ACCEPT_COMMAND, arguments=[suggestion_id])


def _item(ls, method: str, params: Any) -> dict | None:
    params = plain_json(params)
    item = params.get("item") if isinstance(params, dict) else None
    if not isinstance(item, dict) or not isinstance(item.get("insertText"), (str, dict)):
        ls.log(
            f"{method}: params must be {{item: InlineCompletionItem, ...}}, got {params!r}; ignored",
            types.MessageType.Warning,
        )
        return None
    return item
