"""JSON-RPC and LSP lifecycle rules pygls 2 (2.1.1) does not keep, kept here: every request gets an answer, no reply
carries a traceback or a machine path, nothing is written after the stream closes, and `exit` ends the process.

pygls 2.1.1 structures each message inside `json.loads(object_hook=...)`; a request whose params fail validation
raises there, the read loop logs it and the client never hears back (JSON-RPC requires -32602). After `shutdown`
it drops every request silently (LSP requires InvalidRequest). Its internal errors put the traceback in
`error.data`. Its `exit` raises SystemExit inside a callback, which its own `start_io` swallows (exit code 0 even
without shutdown) and then waits for the stdin reader thread, while pending replies are written to the closed
stdout and every failed write is reported by writing again. Its converter (cattrs, via lsprotocol) reads any
number or numeric string as an LSP integer (`int(1.5)`, `int("3")`), so a didChange with version 1.5 was applied as
version 1: `strict_converter` refuses what is not a JSON integer, and likewise a string, array or id field that
is not one (it read `{"a": 1}` as the string "{'a': 1}", a string as an array of its characters, and passed any
value as a request id or progress token, which then failed as a dict key deep inside pygls).

Beyond pygls, every message the client sends is checked at the edge (`GuardedProtocol.structure_message`): params
that are present must be a JSON object (JSON-RPC allows an array too, but every LSP method takes an object), a
notification method sent with an id is refused (pygls structured it as a notification and never answered), and
`initialize` / `initialized` count once. A handler that refuses its request (JsonRpcException) is answered with one
log line; pygls logged a traceback for each. That each request is answered exactly once, and that the server's own
requests to the client cannot wait forever, is server/replies.py's (GuardedProtocol builds on it).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import math
import re
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Optional, Union, get_args, get_origin

import attrs
from cattrs import Converter, transform_error
from cattrs.errors import ClassValidationError
from lsprotocol import types
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams, JsonRpcInvalidRequest, JsonRpcMethodNotFound
from pygls.protocol import default_converter
from pygls.protocol.json_rpc import RPCRequest

from .json_values import json_integer
from .replies import AnsweringProtocol

log = logging.getLogger(__name__)

# An absolute path of two or more parts (POSIX or Windows), not inside a URI: error messages sent to a client
# name no place on this machine.
_PATH = re.compile(r"(?<![\w:/\\])(?:[A-Za-z]:)?(?:[/\\][^\s'\"/\\:]+){2,}")
MAX_ERROR_CHARS = 300


def public_message(message: str) -> str:
    """What a client may see of an error message: its first line, machine paths replaced, bounded."""
    first = (message or "internal error").strip().splitlines()[0] if (message or "").strip() else "internal error"
    return _PATH.sub("<path>", first)[:MAX_ERROR_CHARS]


def strict_converter() -> Converter:
    """pygls' converter, except that an LSP integer (line, character, version, kind) must be a JSON integer: 1.5,
    "3", true or null make the message invalid params (a request gets -32602, a notification is logged and ignored)."""
    converter: Converter = default_converter()  # type: ignore[no-untyped-call]

    def structure_int(value: Any, to: type[int]) -> int:
        number = json_integer(value)
        if number is None:
            raise TypeError(f"expected an integer, got {value!r:.40}")
        return to(number)  # int subclasses come here too: an IntEnum (a kind) still refuses unknown members

    converter.register_structure_hook(int, structure_int)
    # cattrs dispatches bool (an int subclass) to the int hook: booleans keep pygls' own reading
    converter.register_structure_hook(bool, lambda value, _type: bool(value))
    converter.register_structure_hook(str, _structure_str)
    # lsprotocol spells ids and tokens with typing.Union, and cattrs finds hooks by the annotation object: the
    # `int | str` spelling is another object, which would not match
    converter.register_structure_hook(Union[int, str], _structure_id)  # noqa: UP007
    converter.register_structure_hook(Optional[Union[int, str]], _structure_id)  # noqa: UP007, UP045
    converter.register_structure_hook_factory(_is_sequence, lambda to: _sequence_hook(converter, to))
    # What the server reports as applied must be what the client said: `"applied": "false"` read as true before.
    structure_apply_result = converter.get_structure_hook(types.ApplyWorkspaceEditResult)

    def structure_applied(value: Any, to: type) -> types.ApplyWorkspaceEditResult:
        if not isinstance(value, dict) or not isinstance(value.get("applied"), bool):
            raise TypeError(f"expected {{applied: true or false}}, got {value!r:.60}")
        result: types.ApplyWorkspaceEditResult = structure_apply_result(value, to)
        return result

    converter.register_structure_hook(types.ApplyWorkspaceEditResult, structure_applied)
    return converter


def _structure_str(value: Any, to: type) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {value!r:.40}")
    return str(to(value))  # str subclasses come here too (a string enum keeps refusing unknown members)


def _structure_id(value: Any, _to: type) -> int | str | None:
    """An id or token (int | str): lsprotocol passes any value through."""
    if value is None or isinstance(value, str) or (type(value) is int):
        return value
    raise TypeError(f"expected an integer or a string, got {value!r:.40}")


def _is_sequence(to: Any) -> bool:
    return get_origin(to) in (Sequence, list, tuple) and to is not tuple and len(get_args(to)) == 1


def _sequence_hook(converter: Converter, to: Any) -> Callable[[Any, Any], Sequence[Any]]:
    """An LSP array must be a JSON array (cattrs iterates any iterable: a string became its characters, an object
    its keys)."""
    (item_type,) = get_args(to)
    build = list if get_origin(to) is list else tuple

    def structure(value: Any, _to: Any) -> Sequence[Any]:
        if not isinstance(value, list):
            raise TypeError(f"expected an array, got {value!r:.40}")
        return build(converter.structure(item, item_type) for item in value)

    return structure


def _what_is_wrong(exc: JsonRpcException) -> str:
    """Where the params fail ("invalid value for type, expected int @ $.params.position.line"), not cattrs'
    "While structuring HoverRequest (1 sub-exception)"."""
    cause = exc.__cause__
    if isinstance(cause, ClassValidationError):
        return "; ".join(transform_error(cause)[:3])
    return str(cause).splitlines()[0] if cause is not None else exc.message


class _QuietUnstructurable(logging.Filter):
    """pygls logs every message it cannot structure as an ERROR with a traceback (GuardedProtocol logs one line
    saying which field is wrong), and warns of every cancel that crossed its request's reply (the normal fate of a
    cancel while typing): both are dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not message.startswith(("Unable to deserialize message", "Cancel notification for unknown message"))


logging.getLogger("pygls.protocol.json_rpc").addFilter(_QuietUnstructurable())


class _QuietUnparsable(logging.Filter):
    """pygls logs a body that is not JSON (or not UTF-8) with a traceback; the server's report_server_error logs
    the same error in one line, so the traceback is dropped. Any other failure keeps its traceback (a bug)."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not (
            record.getMessage() == "Unable to handle message"
            and isinstance(error, (json.JSONDecodeError, UnicodeDecodeError))
        )


logging.getLogger("pygls.server").addFilter(_QuietUnparsable())


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "a value of another kind"


def _is_lsp_id(value: Any) -> bool:
    """An id LSP allows: an integer or a string (JSON-RPC's null id, which its replies to unreadable ids carry, is
    refused: no reply to it could be told from another)."""
    return isinstance(value, str) or type(value) is int


def _echoable(value: Any) -> bool:
    """An id a reply can carry back: a string or a finite number (JSON-RPC allows fractions; LSP refuses them, but
    the client still waits for the reply that names its id)."""
    if isinstance(value, str) or type(value) is int:
        return True
    return type(value) is float and math.isfinite(value)


def _is_lsp_notification(method: str) -> bool:
    """An LSP method that is a notification (its message type has no id)."""
    message_type = types.METHOD_TO_TYPES.get(method, (None,))[0]
    return message_type is not None and attrs.has(message_type) and "id" not in attrs.fields_dict(message_type)


@dataclass
class Unreadable:
    """A message pygls could not structure: answered (a request) or logged (a notification) by handle_message."""

    id: Any
    method: Any
    error: JsonRpcException
    request: bool  # the message had an id member (null included): it is owed a reply


@dataclass
class UnreadableReply:
    """A client reply to one of the server's requests that pygls could not structure (the request has failed)."""

    error: JsonRpcException


ONCE = (types.INITIALIZE, types.INITIALIZED)  # each counts the first time only


class GuardedProtocol(AnsweringProtocol):
    closed = False  # the client's stream is gone (or `exit` came): nothing more is written
    _seen_once: frozenset[str] = frozenset()  # which of ONCE have been handled

    def structure_message(self, data: dict[str, Any]) -> Any:
        if isinstance(data, dict) and "jsonrpc" in data and "method" in data:
            if (refused := self._refusal_at_edge(data)) is not None:
                return Unreadable(data.get("id"), data.get("method"), refused, "id" in data)
        try:
            return super().structure_message(data)
        except JsonRpcException as exc:
            if isinstance(data, dict) and "method" not in data and self._fail_request(data.get("id"), exc):
                return UnreadableReply(exc)
            if not isinstance(data, dict) or "method" not in data:
                raise  # a malformed response to no request of ours: pygls logs it
            method = data.get("method")
            if not self._known(method):  # no such method: its params were never the problem
                return Unreadable(data.get("id"), method, JsonRpcMethodNotFound.of(str(method)[:100]), "id" in data)
            why = JsonRpcInvalidParams(f"invalid params for {method!r}: {_what_is_wrong(exc)}")
            return Unreadable(data.get("id"), method, why, "id" in data)

    def _fail_request(self, msg_id: Any, exc: JsonRpcException) -> bool:
        """A client reply to one of the server's own requests (workspace/applyEdit, workspace/configuration) that
        cannot be read fails that request, so the handler awaiting it answers its own request instead of waiting
        forever. False when `msg_id` names no request of ours."""
        future = self._request_futures.pop(msg_id, None) if isinstance(msg_id, (int, str)) else None
        if future is None:
            return False
        if not future.done():
            future.set_exception(JsonRpcInvalidParams(f"the client's reply could not be read: {_what_is_wrong(exc)}"))
        return True

    def _refusal_at_edge(self, data: dict[str, Any]) -> JsonRpcException | None:
        """What is wrong with a client message before any converter or handler sees it (None: nothing)."""
        method = data["method"]
        if "id" in data and not _is_lsp_id(data["id"]):
            return JsonRpcInvalidRequest(f"the id must be an integer or a string, got {_json_type(data['id'])}")
        if not self._known(method) or method == types.EXIT:
            return None  # unknown: MethodNotFound (a request) or ignored (a notification); exit always ends
        params = data.get("params")
        if params is not None and not isinstance(params, dict):
            return JsonRpcInvalidParams(
                f"invalid params for {method!r}: params must be a JSON object, got {_json_type(params)}"
            )
        if "id" in data and _is_lsp_notification(method):
            return JsonRpcInvalidRequest(f"{method!r} is a notification: send it without an id")
        return None

    def _known(self, method: Any) -> bool:
        """An LSP method (whose params have a shape) or one this server registered."""
        if not isinstance(method, str):
            return False
        try:
            self._get_handler(method)
            return True
        except JsonRpcMethodNotFound:
            return self.get_message_type(method) is not None

    def handle_message(self, message: Any) -> None:
        if isinstance(message, UnreadableReply):
            log.warning("a reply from the client could not be read: %s", _what_is_wrong(message.error))
            return None
        if isinstance(message, Unreadable):
            return self._refuse(message.id, message.method, message.error, request=message.request)
        if isinstance(message, list):
            return self._refuse_batch(message)
        if isinstance(message, dict) or getattr(message, "jsonrpc", None) != self.VERSION:
            if isinstance(message, dict) and "method" in message:  # no "jsonrpc" member: pygls passes it raw
                return self._refuse(
                    message.get("id"),
                    message.get("method"),
                    JsonRpcInvalidRequest('not a JSON-RPC 2.0 message (jsonrpc must be "2.0")'),
                    request="id" in message,
                )
            if not isinstance(message, dict) and isinstance(message, RPCRequest):
                return self._refuse(
                    message.id,
                    message.method,
                    JsonRpcInvalidRequest('not a JSON-RPC 2.0 message (jsonrpc must be "2.0")'),
                )
            log.warning("ignored a message that is not JSON-RPC 2.0: %.200r", message)
            return None
        if self._shutdown and isinstance(message, RPCRequest) and message.method != types.EXIT:
            return self._refuse(
                message.id,
                message.method,
                JsonRpcInvalidRequest("the server is shutting down: only 'exit' is accepted"),
            )
        method = getattr(message, "method", None)
        if method in ONCE:
            if method in self._seen_once:  # a second initialize would re-run setup and reload the backend
                return self._refuse(
                    getattr(message, "id", None),
                    method,
                    JsonRpcInvalidRequest(f"{method!r} was already received; it counts once"),
                    request=isinstance(message, RPCRequest),
                )
            self._seen_once = self._seen_once | {method}
        super().handle_message(message)
        return None

    def _handle_response(self, msg_id: Any, result: Any = None, error: Any = None) -> None:
        """pygls keeps the futures of the client's requests and of the server's own in one table, so a "response"
        that names one already done (a request the client cancelled, a reply sent twice) raised InvalidStateError
        with a traceback: it is ignored with one log line."""
        future = self._request_futures.get(msg_id)
        if future is not None and future.done():
            self._request_futures.pop(msg_id, None)
            log.warning("ignored a response to %r, which is already answered or cancelled", msg_id)
            return
        super()._handle_response(msg_id, result, error)

    def _send_handler_result(self, future: Future[Any], *, msg_id: Any) -> None:
        """A handler that refused its request (a JsonRpcException: unknown command, bad arguments) is answered
        with its error and one log line; pygls logs a traceback for each. Anything else stays pygls' (an
        internal error, with the traceback in the local log: a bug)."""
        exc = None if future.cancelled() else future.exception()
        if isinstance(exc, JsonRpcException):
            self._request_futures.pop(msg_id, None)
            log.warning("refused request %r: %s", msg_id, public_message(exc.message))
            self._send_response(msg_id, error=exc.to_response_error())
            return
        super()._send_handler_result(future, msg_id=msg_id)

    def _refuse(self, msg_id: Any, method: Any, error: JsonRpcException, request: bool = True) -> None:
        """Answer a request (a message with an id member, null included) with `error` at once, outside the reply
        ledger (server/replies.py: it was never dispatched); a notification can only be logged."""
        if not request:
            log.warning("ignored notification %.100r: %s", method, error.message)
            return
        if not _echoable(msg_id):
            msg_id = None  # JSON-RPC: an id that is no string or number is answered with null
        log.warning("refused request %.100r: %s", method, error.message)
        self.send_unowed_error(msg_id, types.ResponseError(code=error.code, message=public_message(error.message)))

    def _refuse_batch(self, batch: list[Any]) -> None:
        """A JSON-RPC batch (an array of messages): LSP has none, and pygls dropped it whole, so none of its
        requests was ever answered. Each request in it is refused on its own (-32600); the rest is logged."""
        why = JsonRpcInvalidRequest("batches (arrays of messages) are not part of LSP: send each message alone")
        for item in batch:
            if isinstance(item, Unreadable):
                self._refuse(item.id, item.method, why, request=item.request)
            elif isinstance(item, dict) and "method" in item:
                self._refuse(item.get("id"), item.get("method"), why, request="id" in item)
            elif isinstance(item, RPCRequest):
                self._refuse(item.id, item.method, why)
            else:
                log.warning("ignored a message inside a batch: %.200r", item)

    def _send_response(self, msg_id: Any, result: Any = None, error: types.ResponseError | None = None) -> None:
        if error is not None:  # a message only: pygls puts tracebacks in data
            error = types.ResponseError(code=error.code, message=public_message(error.message))
        super()._send_response(msg_id, result, error)

    def _send_data(self, data: Any) -> None:
        """pygls' _send_data, except that a closed stream stops all writing quietly (pygls reports the failure
        to the client, which writes again), and a reply that cannot be encoded becomes an error reply."""
        if self.closed or not data or self.writer is None:
            return
        try:
            body = json.dumps(data, default=self._serialize_message)
        except Exception as exc:  # noqa: BLE001 - an unencodable result must still answer its request
            log.exception("a message could not be encoded")
            msg_id = getattr(data, "id", None)
            if msg_id is None or getattr(data, "error", None) is not None:
                return
            error = types.ResponseError(code=-32603, message=f"the reply could not be encoded: {type(exc).__name__}")
            body = json.dumps(types.ResponseErrorMessage(id=msg_id, error=error), default=self._serialize_message)
        if self._include_headers:
            # json.dumps escapes every non-ASCII character, so len(body) is its length in bytes
            body = (
                f"Content-Length: {len(body)}\r\nContent-Type: {self.CONTENT_TYPE}; charset={self.CHARSET}\r\n\r\n"
                + body
            )
        try:
            written = self.writer.write(body.encode(self.CHARSET))
            if inspect.isawaitable(written):
                asyncio.ensure_future(written)
        except (OSError, ValueError) as exc:  # broken pipe, or stdout closed
            self.closed = True
            log.warning("the client's stream is closed (%s); nothing more will be written", exc)

    def lsp_exit(self, *args: Any) -> None:  # type: ignore[override]
        """End the process now, with LSP's code: 0 after shutdown, 1 without."""
        stop: Callable[[int], None] = getattr(self._server, "stop")  # noqa: B009 - InfillServer.stop (server.py)
        stop(0 if self._shutdown else 1)

    lsp_exit.method_name = types.EXIT  # type: ignore[attr-defined]
