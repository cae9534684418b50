"""HTTP/1.1 as the gateway's front sees it on a socket: the little it reads from a request head before a worker
parses it fully (path, body length, Expect: 100-continue), and the replies it writes itself (errors, best effort)."""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from http import HTTPStatus
from urllib.parse import urlsplit


@dataclass(frozen=True)
class RequestHead:
    path: str | None  # None: the request line is not METHOD SP TARGET SP HTTP/1.x
    content_length: int | None  # None: chunked, invalid, or repeated differently (the handler refuses those)
    expects_continue: bool


def parse_head(head: bytes) -> RequestHead:
    """What the front needs from a head: the path (to route), the body's length, Expect: 100-continue. The
    handler parses the head again, fully; where they could disagree (chunked, an unreadable length) the front
    waits for no body and the handler refuses the request and closes the connection."""
    lines = head.decode("latin-1").split("\n")
    parts = lines[0].rstrip("\r").split(" ")
    good = (
        len(parts) == 3
        and parts[0].isalpha()
        and parts[0].isupper()
        and parts[1]
        and parts[2] in ("HTTP/1.0", "HTTP/1.1")
    )
    path = (urlsplit(parts[1]).path.rstrip("/") or "/") if good else None
    lengths, chunked, expects = [], False, False
    for line in lines[1:]:
        name, _, value = line.rstrip("\r").partition(":")
        name, value = name.strip().lower(), value.strip()
        if name == "content-length":
            lengths.append(value)
        elif name == "transfer-encoding":
            chunked = chunked or "chunked" in value.lower()
        elif name == "expect":
            expects = value.lower() == "100-continue"
    if chunked or len(set(lengths)) > 1:
        return RequestHead(path, None, expects)
    if not lengths:
        return RequestHead(path, 0, expects)
    try:
        length = int(lengths[0])
    except ValueError:
        return RequestHead(path, None, expects)
    return RequestHead(path, length if length >= 0 else None, expects)


def reply_error(
    sock: socket.socket, status: int, message: str, kind: str, headers: dict[str, str] | None = None
) -> None:
    """An error reply (OpenAI's shape, as the handler sends) written by the front itself, best effort."""
    body = json.dumps({"error": {"message": message, "type": kind, "param": None, "code": status}}).encode()
    extra = "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
    head = (
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n{extra}Connection: close\r\n\r\n"
    ).encode()
    send_quietly(sock, head + body)


def send_quietly(sock: socket.socket, data: bytes) -> None:
    try:
        sock.sendall(data)
    except OSError:  # gone, or its buffer full: it was refused either way
        pass


def close_socket(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass
