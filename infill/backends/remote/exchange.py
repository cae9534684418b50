"""RemoteBackend's HTTP exchanges: each bounded by a deadline and abandoned at once when its cancel token fires,
on a small pool of reused threads ("infill-remote-http"). Why threads at all: a blocked socket read cannot be
interrupted, and the caller must return at once on a cancel. Why several: the native route sends one request per
candidate canvas together, and an abandoned exchange holds its thread until its answer or its timeout (or until
`shut_down_sockets` wakes it)."""

from __future__ import annotations

import logging
import socket
import ssl
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit

import httpx

from infill.backends.remote.http import RemoteFailure, _decode, _describe_http_error, _is_loopback
from infill.types import Cancelled, CancelToken, wait_polling

log = logging.getLogger("infill.backends.remote")

POLL_S = 0.01  # how often the waiting caller looks at its cancel token and deadline
HTTP_THREADS = 16  # the pool's bound (threads start only when none is idle)
Call = tuple[str, str, "dict[str, Any] | None"]  # (method, path, JSON body)


class Exchanges:
    """HTTP requests to one endpoint, over one shared client (or one client per call that must hang up)."""

    def __init__(self, endpoint: str, token: str | None, connect_timeout_s: float) -> None:
        self.endpoint = endpoint
        self.connect_timeout_s = connect_timeout_s
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        # A proxy from the environment (HTTP_PROXY, ALL_PROXY) is used for remote hosts only: code for an endpoint
        # on this machine must not travel through a proxy, with the token, unless NO_PROXY happens to say so.
        self.options: dict[str, Any] = {
            "headers": headers,
            "follow_redirects": False,
            "trust_env": not _is_loopback(urlsplit(endpoint).hostname),
            "verify": ssl.create_default_context(),
        }  # made once, shared by every client
        self.client = httpx.Client(**self.options)
        self._pool = ThreadPoolExecutor(max_workers=HTTP_THREADS, thread_name_prefix="infill-remote-http")

    def close(self) -> None:
        shut_down_sockets(self.client)  # an abandoned exchange still blocked on its socket ends now, freeing its thread
        self.client.close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def one(
        self, method: str, path: str, body: dict[str, Any] | None, cancel: CancelToken | None, end: float
    ) -> dict[str, Any]:
        """One request, bounded by `end` (time.monotonic()) and abandoned at once when `cancel` fires."""
        return self.many([(method, path, body)], cancel, end)[0]

    def many(
        self, calls: list[Call], cancel: CancelToken | None, end: float, *, hang_up: bool = False
    ) -> list[dict[str, Any]]:
        """Requests sent together (a batching server serves them in one step), each on a thread of the HTTP pool,
        bounded by `end` and abandoned at once when `cancel` fires. The first failure (in call order) is raised.
        `hang_up`: the calls get their own connections, closed when abandoned, so a server that aborts on
        disconnect (vLLM) stops computing an answer nobody waits for."""
        remaining = end - time.monotonic()
        if remaining <= 0:
            raise RemoteFailure(f"deadline passed before the request to {self.endpoint + calls[0][1]} was sent")
        timeout = httpx.Timeout(remaining, connect=min(self.connect_timeout_s, remaining))
        client = httpx.Client(**self.options) if hang_up else self.client

        def send(method: str, path: str, body: dict[str, Any] | None) -> httpx.Response | BaseException:
            try:
                return client.request(method, self.endpoint + path, json=body, timeout=timeout)
            except BaseException as exc:  # reported to the waiting caller, in call order
                return exc

        try:
            futures = [self._pool.submit(send, *call) for call in calls]
        except RuntimeError:  # the pool is shut down: the backend was closed meanwhile
            raise RemoteFailure("remote backend is closed") from None
        try:
            answers = [
                wait_polling(f, POLL_S, self._stop_waiting(path, cancel, end, remaining))
                for f, (_, path, _) in zip(futures, calls)
            ]
        except (Cancelled, RemoteFailure):
            if hang_up and not all(f.done() for f in futures):
                shut_down_sockets(client)
            raise
        finally:
            if hang_up and all(f.done() for f in futures):
                client.close()
        results = []
        for answer, (_, path, _) in zip(answers, calls):
            if isinstance(answer, BaseException):
                raise RemoteFailure(_describe_http_error(self.endpoint + path, answer, remaining))
            results.append(_decode(self.endpoint + path, answer))
        return results

    def _stop_waiting(self, path: str, cancel: CancelToken | None, end: float, remaining: float) -> Callable[[], None]:
        """What a caller waiting for an exchange asks between polls: stop at a cancel or at the deadline."""

        def check() -> None:
            if cancel is not None and cancel.cancelled:
                raise Cancelled(cancel.reason)
            if time.monotonic() >= end:
                raise RemoteFailure(f"no answer from {self.endpoint + path} within {remaining:.2f} s")

        return check


def shut_down_sockets(client: httpx.Client) -> None:
    """Close an abandoned client's connections now. `close()` alone does not wake a thread blocked reading the
    socket (so no FIN is sent until the answer comes); shutting the sockets down does. Reaches into httpcore's
    pool: any failure only means the connection ends by itself within its timeout, as before."""
    try:
        for connection in list(client._transport._pool.connections):  # type: ignore[attr-defined]
            stream = getattr(getattr(connection, "_connection", None), "_network_stream", None)
            sock = getattr(stream, "_sock", None)
            if sock is not None:
                sock.shutdown(socket.SHUT_RDWR)
    except Exception:  # noqa: BLE001 - best effort, see above
        log.debug("could not shut down an abandoned connection", exc_info=True)
