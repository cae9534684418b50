"""Every request the client sends with an id gets exactly one reply carrying that id, by construction, from every
state of the server (loading, busy, cancelling, shutting down). pygls 2.1.1 alone lost replies in these ways, each
closed here (server/jsonrpc.py keeps the rules about what a message may contain):

- The ledger: `owed` holds the id of every client request handed to a handler and not yet answered. A reply
  consumes its id; a second reply to the same id is dropped with a log line. A request whose id is still owed is
  refused (-32600) on its own: pygls filed both under one key, so the first one's future was lost (a cancel then
  reached the wrong request, and one of the two was never answered).
- After pygls dispatches a request, the request is answered already (a handler that returned at once) or its
  future waits in `_request_futures` with the callback that answers it; a request left with neither is answered
  here with an internal error instead of never.
- The server's own requests to the client (workspace/applyEdit, progress creation) fail after CLIENT_REPLY_S with
  `ClientSilent` (workspace/configuration after CONFIGURATION_REPLY_S), so a client that never answers holds no
  handler (a Fill command) forever.
  (At `shutdown` pygls cancels them, and the requests waiting on them are answered "cancelled".)
- A notification's handler future (pygls files it under a fresh uuid and never removes it: every didChange kept
  its params alive) is removed when it is done; `shutdown` cancels what is pending from a copy of the table, since
  a cancelled future's callbacks may remove entries while it iterates.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Generator
from concurrent.futures import Future
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcInternalError, JsonRpcInvalidRequest
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.json_rpc import RPCRequest

log = logging.getLogger(__name__)

CLIENT_REPLY_S = 10.0  # how long the server waits for the client to answer one of its own requests
# except the settings: a late answer still carries them (start-up waits for it only START_WAIT_S, then loads with
# what it has and applies the answer when it comes: server/handlers_lifecycle.py)
CONFIGURATION_REPLY_S = 300.0


class ClientSilent(TimeoutError):
    """The client did not answer one of the server's requests within CLIENT_REPLY_S."""


class AnsweringProtocol(LanguageServerProtocol):
    """pygls' protocol with the reply rules of the module docstring."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.owed: set[Any] = set()  # ids of the client's requests dispatched and not yet answered

    # -- the client's requests -------------------------------------------------------------------------------------
    def handle_message(self, message: Any) -> None:
        if isinstance(message, RPCRequest):
            return self._dispatch_request(message)
        super().handle_message(message)
        return None

    def _dispatch_request(self, message: Any) -> None:
        msg_id = message.id
        if msg_id in self.owed:
            error = JsonRpcInvalidRequest(f"id {msg_id!r} names a request still in progress; use a new id")
            log.warning("refused request %.100r: %s", message.method, error.message)
            self.send_unowed_error(msg_id, error.to_response_error())
            return
        self.owed.add(msg_id)
        super().handle_message(message)
        if msg_id in self.owed and msg_id not in self._request_futures:  # nothing left would answer it
            log.error("request %r (%.100s) was left without a reply; answering it", msg_id, message.method)
            self._send_response(msg_id, error=JsonRpcInternalError("the request was dropped").to_response_error())

    def _send_response(self, msg_id: Any, result: Any = None, error: types.ResponseError | None = None) -> None:
        """The one reply to `msg_id`: sent when the id is owed, dropped (a second reply) when it is not."""
        if msg_id not in self.owed:
            log.warning("dropped a second reply to request %r", msg_id)
            return
        self.owed.discard(msg_id)
        super()._send_response(msg_id, result, error)

    def send_unowed_error(self, msg_id: Any, error: types.ResponseError) -> None:
        """Answer a request that was never dispatched (refused as it arrived), outside the ledger: its id may be
        owed to another request still in progress."""
        if msg_id is None:  # JSON-RPC's reply to an unreadable id; pygls would leave the id out
            self._send_data(
                {"jsonrpc": self.VERSION, "id": None, "error": {"code": error.code, "message": error.message}}
            )
            return
        self._send_data(types.ResponseErrorMessage(id=msg_id, error=error))

    def reply_counts(self) -> dict[str, int]:
        """For infill.status: replies owed to the client, and futures pygls keeps (requests in progress both ways)."""
        return {"owed": len(self.owed), "pendingFutures": len(self._request_futures)}

    # -- notifications' futures ------------------------------------------------------------------------------------
    def _execute_handler(
        self,
        msg_id: Any,
        handler: Callable[..., Any],
        callback: Callable[[Future[Any]], None],
        args: tuple[Any, ...] | None = None,
        kwargs: dict[str, Any] | None = None,
    ) -> None:
        super()._execute_handler(msg_id, handler, callback, args, kwargs)
        if msg_id in self.owed:
            return  # a client request: its reply removes it
        future = self._request_futures.get(msg_id)
        if future is not None:
            future.add_done_callback(lambda _done: self._request_futures.pop(msg_id, None))

    def lsp_shutdown(self, *args: Any) -> Generator[Any, Any, None]:
        """pygls' shutdown, cancelling from a copy of the pending table (see the module docstring)."""
        if (user_handler := self.fm.features.get(types.SHUTDOWN)) is not None:
            yield user_handler, args, None
        current = self.msg_id  # this request's own future is not cancelled
        for msg_id, future in list(self._request_futures.items()):
            if msg_id != current and not future.done():
                future.cancel()
        self._shutdown = True

    lsp_shutdown.method_name = types.SHUTDOWN  # type: ignore[attr-defined]

    # -- the server's own requests ---------------------------------------------------------------------------------
    def send_request(
        self,
        method: str,
        params: Any | None = None,
        callback: Callable[[Any], None] | None = None,
        msg_id: Any = None,
    ) -> Future[Any]:
        """pygls' send_request, failing with ClientSilent when the client has not answered in CLIENT_REPLY_S."""
        msg_id = msg_id if msg_id is not None else str(uuid.uuid4())
        future: Future[Any] = super().send_request(method, params, callback, msg_id)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not on the event loop: every request of this server is sent from it
            return future
        bound = CONFIGURATION_REPLY_S if method == types.WORKSPACE_CONFIGURATION else CLIENT_REPLY_S
        loop.call_later(bound, self._client_silent, msg_id, method, bound)
        return future

    def _client_silent(self, msg_id: Any, method: str, bound: float) -> None:
        future = self._request_futures.get(msg_id)
        if future is None or future.done():
            return  # answered (or cancelled at shutdown)
        self._request_futures.pop(msg_id, None)
        self._result_types.pop(msg_id, None)
        log.warning("the client did not answer %s (id %r) within %g s; going on without it", method, msg_id, bound)
        future.set_exception(ClientSilent(f"the client did not answer {method} within {bound:g} s"))
