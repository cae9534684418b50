"""A document's prompt encoded before anyone types in it: when the editor opens it, and when its cursor moves to
another line (the client's `infill/didMoveCursor` notification), so that the first pause there pays only the tokens
typed since (the offline default keeps an encoded prompt per recently used document, reused up to where the next
prompt differs: infill/backends/offline/sequences.py).

The warm runs in the background on the model thread, as a warm after a jump does (server/scheduling.py
`InlineScheduler.warm_at`), one at a time (server/background_warm.py holds it): a newer warm, any keystroke in any
document (didChange) and any inline request cancel it between two chunks, and what it encoded by then stays. Its
ticket is not an inline one, so it never supersedes a request in flight. At open the cursor is not known yet: the
prompt at the document's end is warmed (a document within the prompt window shares it, up to the cursor's line, with
the prompt at any cursor); a client that sends the cursor moves the warm there at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lsprotocol import types

from .background_warm import BackgroundWarm
from .documents import Document
from .json_values import json_integer, plain_json
from .scheduling import InlineScheduler

if TYPE_CHECKING:
    from .server import InfillServer

CURSOR_MOVED = "infill/didMoveCursor"  # client -> server: {textDocument: {uri}, position}
WARM_KIND = "warm"  # the claim kind of a warm: cancelled by an edit of its document, superseding nothing


def warm_at_cursor(inline: InlineScheduler, warming: BackgroundWarm, document: Document, offset: int) -> bool:
    """Warm the prompt at `offset` in `document` (after cancelling the warm before); whether one started. Not on the
    line of the document's last edit or warm: that prompt is held already (or its request runs)."""
    warming.cancel()
    pipeline = inline.warmable(document)  # (none while the backend is not ready: the checks refuse then)
    if pipeline is None:
        return False
    line = document.position_at(offset).line
    if line == document.last_edit_line:
        return False
    document.last_edit_line = line  # a keystroke on this line next is no jump: its prompt is warming now
    warming.hold(inline.warm_at(pipeline, document, offset, WARM_KIND))
    return True


def opened(inline: InlineScheduler, warming: BackgroundWarm, document: Document) -> None:
    """didOpen: warm the prompt at the document's end."""
    warm_at_cursor(inline, warming, document, len(document.text))


def register(server: InfillServer) -> None:
    @server.feature(CURSOR_MOVED)
    def cursor_moved(ls: InfillServer, params: Any) -> None:
        body = plain_json(params)
        document_field = body.get("textDocument") if isinstance(body, dict) else None
        position = body.get("position") if isinstance(body, dict) else None
        uri = document_field.get("uri") if isinstance(document_field, dict) else None
        line = json_integer(position.get("line"), 0) if isinstance(position, dict) else None
        character = json_integer(position.get("character"), 0) if isinstance(position, dict) else None
        document = ls.documents.get(uri) if isinstance(uri, str) else None
        if document is None or line is None or character is None:
            return  # a notification that cannot be read, or for a document not open: nothing to warm
        warm_at_cursor(
            ls.inline, ls.warming, document, document.offset_at(types.Position(line=line, character=character))
        )
