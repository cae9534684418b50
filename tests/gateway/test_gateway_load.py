"""The gateway under a burst: 200 connections opened at once each get an HTTP answer (served, or refused with 503
and Retry-After when over capacity), none is reset. The real GatewayServer on a real socket; it is still loading
(no pipeline), so every answer is its fast 503 from /health and the burst measures the HTTP server alone."""

from __future__ import annotations

import socket
import threading

CONNECTIONS = 200


def _one(port: int, start: threading.Barrier, outcomes: list, index: int) -> None:
    try:
        start.wait(30)
        with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        outcomes[index] = data.split(b"\r\n", 1)[0].decode() if data else "empty"
    except OSError as exc:
        outcomes[index] = type(exc).__name__


def test_200_simultaneous_connections_all_get_an_answer(gateway_running):
    with gateway_running(None) as server:
        outcomes: list = [None] * CONNECTIONS
        start = threading.Barrier(CONNECTIONS)
        clients = [
            threading.Thread(target=_one, args=(server.server_port, start, outcomes, i)) for i in range(CONNECTIONS)
        ]
        for client in clients:
            client.start()
        for client in clients:
            client.join(120)
    unanswered = [o for o in outcomes if not (o or "").startswith("HTTP/1.")]
    assert not unanswered, f"{len(unanswered)} of {CONNECTIONS} got no HTTP answer: {sorted(set(unanswered))}"
    assert all(o.split()[1] == "503" for o in outcomes)  # loading: /health says 503 (or busy: 503 Retry-After)


def test_over_capacity_is_refused_with_retry_after(gateway_running):
    """Past max_connections, a connection is answered 503 with Retry-After at once instead of waiting or a reset."""
    from infill.gateway.server import ConnectionLimits

    with gateway_running(None, limits=ConnectionLimits(max_connections=1)) as server:
        hold = socket.create_connection(("127.0.0.1", server.server_port), timeout=10)  # occupies the one slot
        hold.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")  # headers not finished: its worker waits on it
        with socket.create_connection(("127.0.0.1", server.server_port), timeout=10) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        hold.close()
    assert data.startswith(b"HTTP/1.1 503") and b"Retry-After: 1" in data and b"server busy" in data
