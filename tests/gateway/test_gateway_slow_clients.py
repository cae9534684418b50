"""Issue 24: no client can wedge the gateway. The real GatewayServer on a real socket over the real pipeline and
the tiny DiffusionGemma engine: slow connections (a header byte at a time) hold a socket in the front, never a
worker, so /health and a completion are answered while 200 of them are open; requests not in by their deadline
get 408; connections are bounded per client; keep-alive, pipelining and Expect: 100-continue still work."""

from __future__ import annotations

import json
import socket
import time

import pytest

from infill.gateway.front import ConnectionLimits

SLOW = 200
BODY = json.dumps({"prompt": "Dear team,\nthe plan", "suffix": "", "max_tokens": 8, "language": "plaintext"}).encode()
COMPLETION = (
    b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY
)
HEALTH = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
ANSWER_S = 60  # a hang guard, not a speed bound


class Replies:
    """HTTP replies read off one socket in order, by Content-Length (1xx replies are returned too)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.buffer = sock, b""

    def _more(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed after {self.buffer!r:.200}")
        self.buffer += chunk

    def next(self) -> tuple[int, dict, bytes]:
        while b"\r\n\r\n" not in self.buffer:
            self._more()
        head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        length = int(headers.get("content-length", "0"))
        while len(self.buffer) < length:
            self._more()
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return int(lines[0].split()[1]), headers, body


def one_request(port: int, request: bytes) -> tuple[int, dict, bytes]:
    with socket.create_connection(("127.0.0.1", port), timeout=ANSWER_S) as sock:
        sock.sendall(request)
        return Replies(sock).next()


def open_slow(port: int, count: int) -> list[socket.socket]:
    """`count` connections that each sent the first bytes of a request head and then dawdle."""
    socks = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=ANSWER_S)
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: a")
        socks.append(sock)
    return socks


def test_health_and_a_completion_are_served_while_200_slow_connections_are_open(pipeline, gateway_running):
    with gateway_running(pipeline) as server:
        _, _, alone = one_request(server.server_port, COMPLETION)
        slow = open_slow(server.server_port, SLOW)
        deadline = time.monotonic() + ANSWER_S
        while server.front.open_connections < SLOW and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.front.open_connections >= SLOW
        for sock in slow[::7]:
            sock.sendall(b"a")  # still trickling
        status, _, body = one_request(server.server_port, HEALTH.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"))
        assert status == 200 and json.loads(body)["status"] == "ready"
        status, _, body = one_request(server.server_port, COMPLETION)
        assert status == 200 and json.loads(body)["choices"][0]["text"] == json.loads(alone)["choices"][0]["text"]
        assert server.front.open_connections >= SLOW  # the slow ones were still open meanwhile
        for sock in slow:
            sock.close()


def test_a_request_not_in_by_its_deadline_gets_408(pipeline, gateway_running):
    with gateway_running(pipeline, limits=ConnectionLimits(header_timeout_s=0.3, body_timeout_s=0.3)) as server:
        for partial, what in ((b"GET /health HTTP/1.1\r\nHost: x\r\n", "header"), (COMPLETION[:-10], "body")):
            with socket.create_connection(("127.0.0.1", server.server_port), timeout=ANSWER_S) as sock:
                sock.sendall(partial)
                status, headers, body = Replies(sock).next()
                assert status == 408 and headers["connection"] == "close", body
                assert f"the {what} limit is 0.3 s" in json.loads(body)["error"]["message"]
                assert sock.recv(1) == b""  # and the connection is closed
        assert one_request(server.server_port, COMPLETION)[0] == 200


def test_an_idle_connection_is_closed_quietly(pipeline, gateway_running):
    with gateway_running(pipeline, limits=ConnectionLimits(idle_timeout_s=0.3)) as server:
        with socket.create_connection(("127.0.0.1", server.server_port), timeout=ANSWER_S) as sock:
            sock.sendall(HEALTH)
            assert Replies(sock).next()[0] == 200  # kept alive, then idle
            assert sock.recv(1) == b""  # closed without a reply


def test_connections_are_bounded_per_client(pipeline, gateway_running):
    with gateway_running(pipeline, limits=ConnectionLimits(max_per_client=3)) as server:
        held = open_slow(server.server_port, 3)
        status, headers, body = one_request(server.server_port, HEALTH)
        assert status == 503 and headers["retry-after"] == "1" and b"from this client" in body
        held.pop().close()
        deadline = time.monotonic() + ANSWER_S
        while server.front.open_connections > 2 and time.monotonic() < deadline:
            time.sleep(0.01)  # the front saw the close
        assert one_request(server.server_port, HEALTH)[0] == 200
        for sock in held:
            sock.close()


def test_keep_alive_pipelining_and_expect_continue(pipeline, gateway_running):
    with gateway_running(pipeline) as server:
        with socket.create_connection(("127.0.0.1", server.server_port), timeout=ANSWER_S) as sock:
            replies = Replies(sock)
            sock.sendall(HEALTH + COMPLETION)  # two requests in one write: answered in order on one connection
            assert replies.next()[0] == 200
            status, _, body = replies.next()
            assert status == 200 and json.loads(body)["object"] == "text_completion"
            head, _, body = COMPLETION.partition(b"\r\n\r\n")
            sock.sendall(head + b"\r\nExpect: 100-continue\r\n\r\n")
            assert replies.next()[0] == 100  # the front asks for the body
            sock.sendall(body)
            assert replies.next()[0] == 200


def test_limits_are_validated():
    with pytest.raises(ValueError, match="header_timeout_s"):
        ConnectionLimits(header_timeout_s=0)
    with pytest.raises(ValueError, match="max_per_client"):
        ConnectionLimits(max_per_client=True)
