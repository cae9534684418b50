"""A raw JSON-RPC client for the real `infill-ls` over stdio: it writes whatever bytes it is told to (malformed
messages, lone surrogates, infinite numbers, invalid params) where pytest-lsp would refuse, and records every
response, notification and server-to-client request with its arrival time."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def server_command(*args: str) -> list[str]:
    exe = shutil.which("infill-ls", path=str(Path(sys.executable).parent))
    return [exe, *args] if exe else [sys.executable, "-m", "server.cli", *args]


def frame(body: bytes) -> bytes:
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


class RawServer:
    """One server process. `configuration` answers workspace/configuration; workspace/applyEdit is recorded and
    accepted; window/workDoneProgress/create is accepted; a method in `silent_to` is recorded in `held` instead,
    unanswered (a client that never answers it, or answers it later with `answer`)."""

    def __init__(self, args: list[str], configuration: dict | None = None, stderr_path: str | None = None) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        env.pop("INFILL_MODEL", None)
        self._stderr = open(stderr_path, "ab") if stderr_path else subprocess.DEVNULL
        self.proc = subprocess.Popen(
            server_command(*args), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, env=env
        )
        self.configuration = configuration or {}
        self.responses: dict[Any, dict] = {}
        self.notifications: list[dict] = []
        self.applied_edits: list[dict] = []  # every workspace/applyEdit the server sent
        self.apply_reply: Any = {"applied": True}  # what this client answers to each
        self.accepted_edits = 0  # applyEdits answered {"applied": true}
        self.silent_to: set[str] = set()  # server-request methods this client records but never answers itself
        self.held: list[dict] = []  # those requests, in arrival order (`answer` replies to one later)
        self.replies: list[dict] = []  # every reply to this client's requests, in arrival order (ids may repeat)
        self.unparsable = 0  # frames from the server that were not JSON (must stay 0)
        self._next_id = 0
        self._cond = threading.Condition()
        self._write_lock = threading.Lock()
        self._reader = threading.Thread(target=self._read_loop, daemon=True)
        self._reader.start()

    def dump_stacks(self) -> None:
        """Ask the server to write every thread's stack to its log (server/main.py, SIGUSR1)."""
        if self.proc.poll() is None and hasattr(signal, "SIGUSR1"):
            self.proc.send_signal(signal.SIGUSR1)

    # -- writing ---------------------------------------------------------------------------------------------------
    def send_bytes(self, body: bytes) -> bool:
        """Write one framed body; False when the server's stdin is closed."""
        try:
            with self._write_lock:
                self.proc.stdin.write(frame(body))
                self.proc.stdin.flush()
            return True
        except (BrokenPipeError, ValueError, OSError):
            return False

    def send(self, message: dict | str) -> bool:
        body = message if isinstance(message, str) else json.dumps(message)  # json escapes lone surrogates
        return self.send_bytes(body.encode("utf-8"))

    def new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def request(
        self, method: str, params: Any = None, raw_params: str | None = None, string_id: bool = False
    ) -> int | str:
        """Send a request (params as JSON, or `raw_params` as literal JSON text such as '{"x": 1e400}'); its id is
        an integer, or a string when `string_id` (JSON-RPC and LSP allow both)."""
        msg_id: int | str = self.new_id()
        if string_id:
            msg_id = f"s-{msg_id}"
        if raw_params is not None:
            self.send(
                f'{{"jsonrpc": "2.0", "id": {json.dumps(msg_id)}, "method": {json.dumps(method)}, '
                f'"params": {raw_params}}}'
            )
        else:
            self.send({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
        return msg_id

    def notify(self, method: str, params: Any = None, raw_params: str | None = None) -> bool:
        if raw_params is not None:
            return self.send(f'{{"jsonrpc": "2.0", "method": {json.dumps(method)}, "params": {raw_params}}}')
        return self.send({"jsonrpc": "2.0", "method": method, "params": params})

    # -- reading ---------------------------------------------------------------------------------------------------
    def wait(self, msg_id: Any, timeout: float) -> dict | None:
        """The response to `msg_id`, or None if none came within `timeout` seconds."""
        end = time.monotonic() + timeout
        with self._cond:
            while msg_id not in self.responses:
                left = end - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    return self.responses.get(msg_id)
                self._cond.wait(min(left, 0.2))
            return self.responses[msg_id]

    def call(self, method: str, params: Any = None, timeout: float = 60.0, string_id: bool = False) -> dict | None:
        return self.wait(self.request(method, params, string_id=string_id), timeout)

    def _read_loop(self) -> None:
        stream = self.proc.stdout
        while True:
            length = None
            while True:
                line = stream.readline()
                if not line:
                    with self._cond:
                        self._cond.notify_all()
                    return
                if line in (b"\r\n", b"\n"):
                    break
                name, _, value = line.decode("ascii", "replace").partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip())
            body = stream.read(length or 0)
            try:
                message = json.loads(body)
            except ValueError:
                self.unparsable += 1
                continue
            self._dispatch(message)

    def _dispatch(self, message: dict) -> None:
        if "method" in message and "id" in message:  # a request from the server
            if message["method"] in self.silent_to:
                with self._cond:
                    self.held.append(message)
                    self._cond.notify_all()
                return
            self.send({"jsonrpc": "2.0", "id": message["id"], "result": self._answer(message)})
            return
        with self._cond:
            message["_at"] = time.monotonic()
            if "id" in message:
                self.responses[message["id"]] = message
                self.replies.append(message)
            else:
                self.notifications.append(message)
            self._cond.notify_all()

    def wait_held(self, method: str, timeout: float) -> dict | None:
        """The first held server request of `method`, waiting up to `timeout` seconds for it."""
        end = time.monotonic() + timeout
        with self._cond:
            while True:
                found = next((m for m in self.held if m["method"] == method), None)
                if found is not None or time.monotonic() >= end:
                    return found
                self._cond.wait(min(0.2, max(0.0, end - time.monotonic())))

    def answer(self, request: dict, result: Any) -> None:
        """Reply now to a held server request."""
        self.send({"jsonrpc": "2.0", "id": request["id"], "result": result})

    def _answer(self, request: dict) -> Any:
        method = request["method"]
        if method == "workspace/configuration":
            return [self.configuration for _ in request.get("params", {}).get("items", [])]
        if method == "workspace/applyEdit":
            self.applied_edits.append(request["params"]["edit"])
            if isinstance(self.apply_reply, dict) and self.apply_reply.get("applied") is True:
                self.accepted_edits += 1
            return self.apply_reply
        return None

    def logs(self) -> str:
        return "\n".join(
            m.get("params", {}).get("message", "") for m in self.notifications if m.get("method") == "window/logMessage"
        )

    # -- lifecycle -------------------------------------------------------------------------------------------------
    def initialize(
        self,
        init_options: Any = None,
        raw_init_options: str | None = None,
        timeout: float = 120.0,
        capabilities: dict | None = None,
    ) -> dict | None:
        capabilities = capabilities or {
            "window": {"workDoneProgress": True},
            "workspace": {"configuration": True, "applyEdit": True, "workspaceEdit": {"documentChanges": True}},
            "textDocument": {
                "codeAction": {"dataSupport": True, "resolveSupport": {"properties": ["edit"]}},
                "inlineCompletion": {},
            },
        }
        params = {
            "processId": os.getpid(),
            "rootUri": ROOT.as_uri(),
            "capabilities": capabilities,
            "initializationOptions": init_options,
        }
        if raw_init_options is not None:
            body = json.dumps(params).replace(
                '"initializationOptions": null', f'"initializationOptions": {raw_init_options}'
            )
            msg_id = self.new_id()
            self.send(f'{{"jsonrpc": "2.0", "id": {msg_id}, "method": "initialize", "params": {body}}}')
            reply = self.wait(msg_id, timeout)
        else:
            reply = self.call("initialize", params, timeout)
        self.notify("initialized", {})
        return reply

    def status(self, timeout: float = 30.0) -> dict | None:
        reply = self.call("workspace/executeCommand", {"command": "infill.status"}, timeout)
        return reply.get("result") if reply else None

    def wait_ready(self, timeout: float = 180.0) -> dict | None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            current = self.status()
            if current and current.get("state") in ("ready", "error"):
                return current
            time.sleep(0.2)
        return self.status()

    def exit_code(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        if self._stderr is not subprocess.DEVNULL:
            self._stderr.close()
