"""The gateway's front: one thread reads every request in full, under deadlines, before a worker takes it.

A worker of the gateway's pool only ever sees a request whose head and body have arrived, so a client that sends
a byte at a time (slow-loris), stalls mid-body or keeps an idle keep-alive connection holds a socket here, never a
worker. It bounds connections, in total and per client address, and answers what it refuses itself (503 with
Retry-After over a bound, 408 past a deadline, 431 for a head too large, 400 for a malformed request line).
Standard library only (`selectors`, non-blocking sockets, as event-loop HTTP servers do it): no framework for the
one job the rest of the gateway does not need one for.

A worker's handler reads the request from memory (`Arrival.data`), answers on the socket, then hands the
connection back with `resume`: kept alive it returns here to wait for the next request, otherwise it is closed.
"""

from __future__ import annotations

import logging
import queue
import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from infill.gateway.wire import close_socket, parse_head, reply_error, send_quietly
from infill.types import require_integers

log = logging.getLogger(__name__)

SCAN_S = 0.1  # how often deadlines are checked (their precision)
RECV_BYTES = 1 << 16


@dataclass(frozen=True)
class ConnectionLimits:
    """What one connection and all of them together may hold (docs/gateway.md, "Limits")."""

    max_connections: int = 1024  # open at once: being read, served or idle between requests
    max_per_client: int = 256  # open at once from one client address
    header_timeout_s: float = 10.0  # from a request's first byte to the end of its head
    body_timeout_s: float = 30.0  # from the end of the head to the end of the body
    idle_timeout_s: float = 60.0  # a connection with no request in progress is closed after this
    max_head_bytes: int = 64 << 10  # request line and headers
    max_body_bytes: int = 1 << 20  # larger bodies are read and dropped (up to drain_limit_bytes), then 413
    drain_limit_bytes: int = 16 << 20  # larger still: refused without reading, and the connection closes

    def __post_init__(self) -> None:
        sizes = ("max_connections", "max_per_client", "max_head_bytes", "max_body_bytes", "drain_limit_bytes")
        require_integers(self, dict.fromkeys(sizes, 1))
        for name in ("header_timeout_s", "body_timeout_s", "idle_timeout_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
                raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")


@dataclass(eq=False)
class Arrival:
    """One request read in full: its bytes (head, and body unless it was refused unread) and where it came from.
    `connection` is the front's record of the socket, handed back with `Front.resume`."""

    sock: socket.socket
    client_address: tuple[Any, ...]
    data: bytes
    path: str
    connection: _Connection = field(repr=False)


@dataclass(eq=False)
class _Connection:
    sock: socket.socket
    address: tuple[Any, ...]
    buffer: bytearray = field(default_factory=bytearray)
    phase: str = "idle"  # idle (between requests) | head | body | discard (an oversized body being dropped)
    deadline: float = 0.0
    head_length: int = 0  # bytes of the head, once it is complete
    body_length: int = 0
    discard_left: int = 0
    path: str = "/"


class Front:
    """Owns every gateway connection from accept to close; `dispatch(arrival)` runs on the front's thread and must
    not block (it submits the arrival to a pool)."""

    def __init__(self, limits: ConnectionLimits, dispatch: Callable[[Arrival], None]) -> None:
        self.limits = limits
        self._dispatch = dispatch
        self._selector = selectors.DefaultSelector()
        self._wake_read, self._wake_write = socket.socketpair()
        self._wake_read.setblocking(False)
        self._wake_write.setblocking(False)
        self._selector.register(self._wake_read, selectors.EVENT_READ)
        self._incoming: queue.SimpleQueue[Any] = queue.SimpleQueue()  # connections admitted or resumed
        self._held: set[_Connection] = set()  # waiting here (in the selector)
        self._count_lock = threading.Lock()
        self._open = 0
        self._per_client: dict[str, int] = {}
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="infill-gateway-front", daemon=True)
        self._thread.start()

    @property
    def open_connections(self) -> int:
        with self._count_lock:
            return self._open

    # -- from other threads ----------------------------------------------------------------------------------------
    def admit(self, sock: socket.socket, address: tuple[Any, ...]) -> None:
        """A connection just accepted: counted and read here, or answered 503 at once when over a bound."""
        client = str(address[0]) if address else ""
        with self._count_lock:
            if self._stopping:
                reason = "the server is stopping"
            elif self._open >= self.limits.max_connections:
                reason = "too many connections"
            elif self._per_client.get(client, 0) >= self.limits.max_per_client:
                reason = "too many connections from this client"
            else:
                reason = None
                self._open += 1
                self._per_client[client] = self._per_client.get(client, 0) + 1
        if reason is not None:
            log.info("refused a connection from %s: %s", client, reason)
            sock.settimeout(1.0)
            reply_error(sock, 503, f"server busy: {reason}; retry shortly", "service_unavailable", {"Retry-After": "1"})
            close_socket(sock)
            return
        self._incoming.put(_Connection(sock, address))
        self._wake()

    def resume(self, arrival: Arrival, keep_alive: bool) -> None:
        """A worker answered `arrival`: wait here for the connection's next request, or close it."""
        connection = arrival.connection
        if keep_alive and not self._stopping:
            self._incoming.put(connection)
            self._wake()
        else:
            self._release(connection)

    def stop(self) -> None:
        """Close every connection waiting here; those being served close when their worker is done."""
        with self._count_lock:
            self._stopping = True
        self._wake()
        self._thread.join(timeout=5)

    def _wake(self) -> None:
        try:
            self._wake_write.send(b"\0")
        except (BlockingIOError, OSError):
            pass  # already woken (buffer full), or stopped

    # -- the front's thread ----------------------------------------------------------------------------------------
    def _run(self) -> None:
        next_scan = time.monotonic() + SCAN_S
        try:
            while not self._stopping:
                for key, _ in self._selector.select(timeout=SCAN_S):
                    if key.fileobj is self._wake_read:
                        self._take_incoming()
                        continue
                    try:
                        self._read(key.data)
                    except Exception:  # noqa: BLE001 - a bug with one connection must not stop the others
                        log.exception("the gateway's front failed on a connection from %s", key.data.address[0])
                        self._drop(key.data)
                now = time.monotonic()
                if now >= next_scan:
                    self._expire(now)
                    next_scan = now + SCAN_S
        except Exception:  # noqa: BLE001 - logged; the connections it held are closed below
            log.exception("the gateway's front stopped")
        finally:
            self._take_incoming()
            for connection in list(self._held):
                self._drop(connection)
            self._selector.close()
            self._wake_read.close()
            self._wake_write.close()

    def _take_incoming(self) -> None:
        try:
            while self._wake_read.recv(4096):
                pass
        except (BlockingIOError, OSError):
            pass
        while True:
            try:
                connection = self._incoming.get_nowait()
            except queue.Empty:
                return
            self._hold(connection)

    def _hold(self, connection: _Connection) -> None:
        """Wait for (the rest of) a request on `connection`: a resumed one may already hold the next."""
        try:
            connection.sock.setblocking(False)
        except OSError:
            return self._release(connection)
        connection.phase, connection.deadline = "idle", time.monotonic() + self.limits.idle_timeout_s
        try:
            self._selector.register(connection.sock, selectors.EVENT_READ, connection)
        except (ValueError, OSError):  # closed meanwhile
            return self._release(connection)
        self._held.add(connection)
        self._advance(connection)

    def _read(self, connection: _Connection) -> None:
        try:
            chunk = connection.sock.recv(RECV_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            return self._drop(connection)
        if not chunk:  # the client closed its side
            return self._drop(connection)
        if connection.phase == "discard":
            dropped = min(len(chunk), connection.discard_left)
            connection.discard_left -= dropped
            connection.buffer += chunk[dropped:]
        else:
            connection.buffer += chunk
        self._advance(connection)

    def _advance(self, connection: _Connection) -> None:
        """Move `connection` through idle -> head -> body (or discard) -> dispatched, as far as its bytes allow."""
        now = time.monotonic()
        if connection.phase == "idle":
            while connection.buffer[:2] == b"\r\n" or connection.buffer[:1] == b"\n":  # RFC 9112: ignore them
                del connection.buffer[: 2 if connection.buffer[:2] == b"\r\n" else 1]
            if not connection.buffer:
                return
            connection.phase, connection.deadline = "head", now + self.limits.header_timeout_s
        if connection.phase == "head" and not self._read_head(connection, now):
            return
        if connection.phase == "discard":
            if connection.discard_left == 0:
                self._hand_over(connection, connection.head_length)
            return
        if connection.phase == "body" and len(connection.buffer) >= connection.head_length + connection.body_length:
            self._hand_over(connection, connection.head_length + connection.body_length)

    def _read_head(self, connection: _Connection, now: float) -> bool:
        """Whether the head is complete (and the body's phase chosen); answers 431 for a head over the limit."""
        buffer = connection.buffer
        ends = [i for i in (buffer.find(b"\r\n\r\n"), buffer.find(b"\n\n")) if i >= 0]
        if not ends:
            if len(buffer) > self.limits.max_head_bytes:
                self._refuse(connection, 431, "request head too large", "invalid_request_error")
            return False
        end = min(ends)
        head_length = end + (4 if buffer[end : end + 4] == b"\r\n\r\n" else 2)
        if head_length > self.limits.max_head_bytes:
            self._refuse(connection, 431, "request head too large", "invalid_request_error")
            return False
        head = parse_head(bytes(buffer[:head_length]))
        if head.path is None:  # HTTP/0.9 or noise: http.server would answer it without a status line, or not at all
            self._refuse(
                connection, 400, "malformed request line: expected METHOD TARGET HTTP/1.x", "invalid_request_error"
            )
            return False
        connection.head_length, connection.path = head_length, head.path
        length = head.content_length
        connection.body_length = 0
        connection.deadline = now + self.limits.body_timeout_s
        if length is None or length > self.limits.drain_limit_bytes:
            connection.phase = "body"  # no body to wait for: the handler refuses it (411, 400, 413) and closes
        elif length > self.limits.max_body_bytes:
            connection.phase = "discard"  # read and dropped, so the 413 reaches the client instead of a reset
            dropped = min(len(buffer) - head_length, length)
            del buffer[head_length : head_length + dropped]
            connection.discard_left = length - dropped
        else:
            connection.phase, connection.body_length = "body", length
            if head.expects_continue and len(buffer) < head_length + length:  # the client waits for it
                send_quietly(connection.sock, b"HTTP/1.1 100 Continue\r\n\r\n")
        return True

    def _hand_over(self, connection: _Connection, length: int) -> None:
        data = bytes(connection.buffer[:length])
        del connection.buffer[:length]
        self._unhold(connection)
        connection.phase = "idle"
        try:
            connection.sock.setblocking(True)
            self._dispatch(Arrival(connection.sock, connection.address, data, connection.path, connection))
        except Exception:  # noqa: BLE001 - a pool that refuses (shut down): the connection closes
            log.exception("a request could not be dispatched")
            self._release(connection)

    def _expire(self, now: float) -> None:
        for connection in [c for c in self._held if c.deadline <= now]:
            if connection.phase == "idle":
                self._drop(connection)  # nothing was asked: close quietly
            else:
                what, limit = (
                    ("header", self.limits.header_timeout_s)
                    if connection.phase == "head"
                    else ("body", self.limits.body_timeout_s)
                )
                log.info("%s: request not received within its %s deadline", connection.address[0], what)
                self._refuse(
                    connection, 408, f"request not received in time (the {what} limit is {limit:g} s)", "timeout"
                )

    def _refuse(self, connection: _Connection, status: int, message: str, kind: str) -> None:
        reply_error(connection.sock, status, message, kind)
        self._drop(connection)

    def _unhold(self, connection: _Connection) -> None:
        if connection in self._held:
            self._held.discard(connection)
            try:
                self._selector.unregister(connection.sock)
            except (KeyError, ValueError, OSError):
                pass

    def _drop(self, connection: _Connection) -> None:
        self._unhold(connection)
        self._release(connection)

    def _release(self, connection: _Connection) -> None:
        """Close and uncount (any thread)."""
        close_socket(connection.sock)
        client = str(connection.address[0]) if connection.address else ""
        with self._count_lock:
            self._open -= 1
            left = self._per_client.get(client, 1) - 1
            if left > 0:
                self._per_client[client] = left
            else:
                self._per_client.pop(client, None)
