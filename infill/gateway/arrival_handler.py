"""How the gateway reads and answers one request the front read in full (front.py `Arrival`): the body from
memory, replies written whole to the socket, the body of a refused request drained so the client sees the reply,
and whether the client has hung up while its completion runs. What the gateway answers (its routes) is
server.py's; this is the HTTP plumbing under it, `BaseHTTPRequestHandler` fed from memory instead of a socket."""

from __future__ import annotations

import io
import json
import logging
import select
import socket
from http.server import BaseHTTPRequestHandler
from typing import Any, Protocol

from infill.gateway.front import Arrival
from infill.gateway.openai_api import GatewaySettings, HttpError


class Serving(Protocol):
    """What a handler reads from the server that made it (infill/gateway/server.py GatewayServer)."""

    settings: GatewaySettings


log = logging.getLogger(__name__)

DRAIN_LIMIT_BYTES = 16 << 20  # unread bodies up to this are read and dropped so the client sees the error reply


class ArrivalHandler(BaseHTTPRequestHandler):
    """Answers one request the front read in full (`Arrival`): it reads from memory and writes to the socket, so a
    worker never waits on a client's bytes; the front keeps the connection between requests. Subclasses route
    (`do_GET` and the rest) and keep `_body_read` (False until `_read_json` read the body)."""

    server: Serving  # type: ignore[assignment]  # (socketserver types it as any BaseServer)

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as two writes: Nagle + delayed ACK would add ~40 ms
    timeout = 10  # bounds writing the reply: a client that stops reading cannot hold a worker for longer
    _body_read = False

    def setup(self) -> None:
        arrival: Arrival = self.request
        self.connection = arrival.sock
        self.connection.settimeout(self.timeout)
        if self.disable_nagle_algorithm:
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)
        self.rfile = io.BytesIO(arrival.data)
        self.wfile = SocketWriter(self.connection)  # type: ignore[assignment]  # (a raw writer that sends whole)

    def handle(self) -> None:
        self.close_connection = True  # unless the request keeps it alive (parse_request decides)
        self.handle_one_request()

    def handle_expect_100(self) -> bool:
        return True  # the front sent 100 Continue before it read the body

    def _client_gone(self) -> bool:
        """Whether the client closed its connection while its completion runs (an editor's FIM client aborts the
        request of an older keystroke). A client sends nothing after its request, so a readable socket that reads
        end-of-file has gone; bytes waiting there (a pipelined request) mean it is still there."""
        if not hasattr(select, "poll"):  # Windows: no check (a hung-up request then runs to its end, as before)
            return False
        try:
            poller = select.poll()  # (not select.select: descriptors past 1024 are normal under load)
            poller.register(self.connection, select.POLLIN)
            if not poller.poll(0):
                return False
            return bool(self.connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b"")
        except BlockingIOError:
            return False
        except (OSError, ValueError):  # reset, or closed under us
            return True

    def _read_json(self) -> object:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            raise HttpError(411, "chunked request bodies are not supported; send Content-Length")
        length_text = self.headers.get("Content-Length")
        if length_text is None:
            raise HttpError(411, "Content-Length is required")
        try:
            length = int(length_text)
            if length < 0:
                raise ValueError
        except ValueError:
            raise HttpError(400, f"invalid Content-Length {length_text!r}") from None
        limit = self.server.settings.max_body_bytes
        if length > limit:
            raise HttpError(413, f"request body is {length} bytes; the limit is {limit}")
        raw = self.rfile.read(length)
        self._body_read = True  # checked by _send_error
        if len(raw) < length:
            raise HttpError(400, "request body ended before Content-Length bytes")
        try:
            return json.loads(raw)
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise HttpError(400, f"invalid JSON: {exc}") from None

    def _send_error(self, exc: HttpError) -> None:
        if not self._body_read:
            self._drain_body()
        self._send_json(exc.status, exc.body(), exc.headers)

    def _drain_body(self) -> None:
        """Read and drop a body we refused: closing on unread bytes resets the connection, and the client may
        lose our error reply. Bodies too large or of unknown length are not drained; the connection closes."""
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = -1
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower() or not 0 <= length <= DRAIN_LIMIT_BYTES:
            self.close_connection = True
            return
        try:
            while length > 0:
                chunk = self.rfile.read(min(length, 1 << 16))
                if not chunk:
                    break
                length -= len(chunk)
        except OSError:
            pass
        if length > 0:
            self.close_connection = True

    def _send_json(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        self._send_bytes(status, json.dumps(body, default=str).encode(), "application/json", headers)

    def _send_bytes(
        self, status: int, payload: bytes, content_type: str, headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        if self.close_connection:
            self.send_header("Connection", "close")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - BaseHTTPRequestHandler's signature
        log.debug("%s - %s", self.address_string(), format % args)


class SocketWriter(io.RawIOBase):
    """A handler's wfile: every write is sent whole (a plain socket file may send part of it)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self._sock.sendall(data)
        return len(data)
