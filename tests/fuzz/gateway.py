"""Fuzz the real gateway (`infill-ls serve`'s GatewayServer over a real pipeline) with slow connections beside
normal traffic (issue 24), checking as replies arrive:

- slow-loris connections (a header byte at a time, a body that trickles, a socket that never sends), from
  another client address, are kept `slow` open; meanwhile `/health` answers (its latency is recorded, with how many
  slow connections were open then) and well-formed completions are served (`completions_ok`);
- every request gets an HTTP answer within HANG_S (`hangs`), no connection is reset (`resets`), nothing is 5xx
  (`server_errors`), and `/v1` without the token is always 401 (`auth_bypassed`);
- bursts of `burst` connections opened at once, each one normal request: all answered, none reset, none 5xx.
"""

from __future__ import annotations

import json
import random
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

HANG_S = 60.0
SLOW_SOURCE = "127.0.0.2"  # the slow clients are another client address (all of 127/8 is this machine's loopback)
TOKEN = "fuzz-token"
GOOD_BODY = {"prompt": "Dear team,\nthe plan for", "suffix": "\n\nRegards", "max_tokens": 8, "language": "plaintext"}


def _request(method: str, path: str, body: bytes = b"", token: str | None = TOKEN, extra: str = "") -> bytes:
    auth = f"Authorization: Bearer {token}\r\n" if token else ""
    length = f"Content-Length: {len(body)}\r\n" if method == "POST" else ""
    return (f"{method} {path} HTTP/1.1\r\nHost: fuzz\r\n{auth}{length}{extra}Connection: close\r\n\r\n").encode() + body


def _exchange(port: int, data: bytes) -> tuple[str, int | None, float]:
    """Send one request on a new connection: (outcome, status, seconds); outcome is ok, reset, hang or closed."""
    started = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=HANG_S) as sock:
            sock.sendall(data)
            reply = b""
            while chunk := sock.recv(65536):
                reply += chunk
    except ConnectionResetError:
        return "reset", None, time.monotonic() - started
    except TimeoutError:
        return "hang", None, time.monotonic() - started
    except OSError:
        return "reset", None, time.monotonic() - started
    if not reply.startswith(b"HTTP/1."):
        return "closed", None, time.monotonic() - started
    return "ok", int(reply.split(None, 2)[1]), time.monotonic() - started


class _Slow:
    """Keeps `count` slow connections open, reopening those the gateway closes (its deadlines)."""

    def __init__(self, port: int, count: int, rng: random.Random) -> None:
        self.port, self.count, self.rng = port, count, rng
        self.socks: list[tuple[socket.socket, bytes]] = []  # with what each has left to send, a byte a tick
        self.opened = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _open(self) -> None:
        try:
            sock = socket.create_connection(("127.0.0.1", self.port), timeout=5, source_address=(SLOW_SOURCE, 0))
        except OSError:
            return
        body = json.dumps(GOOD_BODY).encode()
        head, _, _ = _request("POST", "/v1/completions", body).partition(b"\r\n\r\n")
        first, plan = self.rng.choice(
            [
                (b"G", _request("GET", "/health", extra="X-Slow: " + "a" * 4000 + "\r\n")[1:]),  # a header byte a tick
                (head + b"\r\n\r\n" + body[: len(body) // 2], body[len(body) // 2 :]),  # a body that trickles
                (b"", b""),  # a socket that never sends
            ]
        )
        try:
            sock.sendall(first)
        except OSError:
            sock.close()
            return
        self.socks.append((sock, plan))
        self.opened += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            while len(self.socks) < self.count and not self._stop.is_set():
                self._open()
            alive = []
            for sock, plan in self.socks:
                try:
                    if not _still_open(sock):
                        raise ConnectionError  # the gateway answered (408) or closed it (idle)
                    if plan:
                        sock.send(plan[:1])
                        plan = plan[1:]
                    alive.append((sock, plan))
                except OSError:  # closed by the gateway's deadline: a new one replaces it
                    sock.close()
            self.socks = alive
            self._stop.wait(self.rng.uniform(0.2, 0.6))

    def start(self) -> _Slow:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for sock, _ in self.socks:
            sock.close()


def _still_open(sock: socket.socket) -> bool:
    """Nothing came back yet: a slow client is owed nothing until its request is complete."""
    try:
        sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        return False  # a reply (408) or end of file
    except BlockingIOError:
        return True


def _normal(rng: random.Random) -> tuple[str, bytes]:
    """(what, request): a normal request of some kind, well-formed or plainly wrong."""
    body = json.dumps(GOOD_BODY).encode()
    return rng.choice(
        [
            ("health", _request("GET", "/health")),
            ("completion", _request("POST", "/v1/completions", body)),
            ("completion", _request("POST", "/v1/completions", body)),
            ("models", _request("GET", "/v1/models")),
            ("no_token", _request("POST", "/v1/completions", body, token=None)),
            ("bad_token", _request("GET", "/v1/models", token="wrong")),
            ("bad_json", _request("POST", "/v1/completions", b"{not json")),
            ("not_found", _request("GET", "/v2/nothing")),
            ("junk", b"X" + bytes(rng.randrange(256) for _ in range(rng.randint(0, 200))) + b"\r\n\r\n"),
        ]
    )


def _record(stats: dict, what: str, outcome: str, status: int | None, seconds: float) -> None:
    stats["requests"] += 1
    if outcome != "ok":
        stats[{"reset": "resets", "hang": "hangs", "closed": "closed_without_answer"}[outcome]] += 1
        stats["problems"].append(f"{what}: {outcome}") if len(stats["problems"]) < 20 else None
        return
    if status >= 500:
        stats["server_errors"] += 1
        stats["problems"].append(f"{what}: {status}") if len(stats["problems"]) < 20 else None
    if what in ("no_token", "bad_token") and status != 401:
        stats["auth_bypassed"] += 1
    if what == "completion" and status == 200:
        stats["completions_ok"] += 1
    if what == "health":
        stats["health_s"].append(seconds)
        stats["slow_open"].append(stats["slow_now"]())


def run_gateway_fuzz(
    pipeline,
    seconds: float,
    seed: int = 0,
    slow: int = 200,
    burst: int = 200,
    burst_every_s: float = 30.0,
    requests: int | None = None,
) -> dict:
    """Fuzz a fresh gateway over `pipeline` for `seconds`, or, with `requests`, until that many one-at-a-time
    requests were answered, with one burst in their middle (a count bound finds the same bugs on any machine);
    returns the counts and /health's latency. Traffic starts once the slow connections are open."""
    from infill.gateway.server import make_server

    rng = random.Random(seed)
    server = make_server(pipeline, token=TOKEN)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    stats = {
        "requests": 0,
        "resets": 0,
        "hangs": 0,
        "closed_without_answer": 0,
        "server_errors": 0,
        "auth_bypassed": 0,
        "completions_ok": 0,
        "bursts": 0,
        "health_s": [],
        "slow_open": [],
        "problems": [],
    }
    slow_clients = _Slow(server.server_port, slow, random.Random(seed + 1)).start()
    stats["slow_now"] = lambda: len(slow_clients.socks)
    try:
        opening_until = time.monotonic() + HANG_S
        while slow_clients.opened < slow and time.monotonic() < opening_until:
            time.sleep(0.05)
        end, next_burst = time.monotonic() + seconds, time.monotonic() + min(burst_every_s, seconds / 2)
        singles = 0

        def going() -> bool:
            return singles < requests if requests is not None else time.monotonic() < end

        def burst_due() -> bool:
            if requests is not None:
                return stats["bursts"] == 0 and singles >= requests // 2
            return time.monotonic() >= next_burst

        with ThreadPoolExecutor(burst) as pool:
            while going():
                if burst_due():  # `burst` connections at once, each one normal request
                    picks = [_normal(rng) for _ in range(burst)]
                    for (what, _), future in zip(
                        picks, [pool.submit(_exchange, server.server_port, data) for _, data in picks]
                    ):
                        _record(stats, what, *future.result())
                    stats["bursts"] += 1
                    next_burst = time.monotonic() + burst_every_s
                    continue
                what, data = _normal(rng)
                _record(stats, what, *_exchange(server.server_port, data))
                singles += 1
    finally:
        slow_clients.stop()
        server.shutdown()
        server.server_close()
    health = sorted(stats.pop("health_s"))
    stats["health_p50_ms"] = round(health[len(health) // 2] * 1000, 1) if health else None
    stats["health_p95_ms"] = round(health[int(len(health) * 0.95)] * 1000, 1) if health else None
    stats["health_max_ms"] = round(health[-1] * 1000, 1) if health else None
    stats["health_count"] = len(health)
    held = sorted(stats.pop("slow_open"))
    stats.pop("slow_now")
    stats["slow_open_median"] = held[len(held) // 2] if held else 0  # slow connections open at a /health
    stats["slow_opened"] = slow_clients.opened
    return stats
