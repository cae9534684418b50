"""Helpers for the server tests: start the real `infill-ls` over stdio with pytest-lsp, wait for readiness, and
apply TextEdits the way an editor would (UTF-16 positions), independently of the server's own conversion code."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import time
from pathlib import Path

from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient

ROOT = Path(__file__).resolve().parent.parent

# The shared server of the test_server_*.py modules (the `lsp` fixture in conftest.py). Budgets are generous: the
# tiny engine runs on a shared 2-core CPU, and a fill cut short by its deadline is (rightly) not shown. Python text
# from random weights never parses, so the watchdog rejects it: fills that must produce text use plaintext/Markdown
# documents. The fallback is off: these tests are about the tiny engine's own fills
# (tests/server/test_server_fallback.py checks the default, with the offline default behind the checkpoint).
INIT_OPTIONS = {"inlineBudgetMs": 400, "debounceMs": 40, "enabled": "yes", "bogusKey": 1, "fallback": False}
CONFIG = {
    "invokedBudgetMs": 30000,
    "codeActionBudgetMs": 30000,
    "enabledLanguages": ["python", "markdown", "plaintext"],
}
SERVER_ARGS = ["--denoising-steps", "8"]


def server_command(*args: str) -> list[str]:
    exe = shutil.which("infill-ls", path=str(Path(sys.executable).parent))
    return [exe, *args] if exe else [sys.executable, "-m", "server.cli", *args]


def capabilities(*, resolve_edit: bool = True, progress: bool = True) -> types.ClientCapabilities:
    resolve = types.ClientCodeActionResolveOptions(properties=["edit"]) if resolve_edit else None
    return types.ClientCapabilities(
        window=types.WindowClientCapabilities(work_done_progress=progress),
        workspace=types.WorkspaceClientCapabilities(
            configuration=True,
            apply_edit=True,
            workspace_edit=types.WorkspaceEditClientCapabilities(document_changes=True),
        ),
        text_document=types.TextDocumentClientCapabilities(
            code_action=types.CodeActionClientCapabilities(resolve_support=resolve, data_support=True),
            inline_completion=types.InlineCompletionClientCapabilities(),
        ),
    )


async def start(
    args: list[str],
    *,
    init_options: dict | None = None,
    configuration: dict | None = None,
    resolve_edit: bool = True,
    progress: bool = True,
    launcher: list[str] | None = None,
    env: dict[str, str] | None = None,
) -> tuple[LanguageClient, types.InitializeResult]:
    """The real server started with `args` (by `launcher` in place of `infill-ls`, with `env` added where given)."""
    server_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    server_env.pop("INFILL_MODEL", None)
    command = [*launcher, *args] if launcher else server_command(*args)
    client = await ClientServerConfig(server_command=command, server_env=server_env).start()
    if configuration is not None:
        client.set_configuration(configuration, section="infill")
    result = await client.initialize_session(
        types.InitializeParams(
            capabilities=capabilities(resolve_edit=resolve_edit, progress=progress),
            initialization_options=init_options,
            root_uri=ROOT.as_uri(),
        )
    )
    return client, result


async def status(client: LanguageClient) -> dict:
    return await client.workspace_execute_command_async(types.ExecuteCommandParams(command="infill.status"))


async def wait_ready(client: LanguageClient, timeout: float = 240.0, state: str = "ready") -> dict:
    """infill.status once the server reaches `state` (a wait, not a timed check: a loaded machine loads slowly)."""
    end = time.monotonic() + timeout
    while True:
        current = await status(client)
        if current["state"] == state or time.monotonic() > end:
            return current
        await asyncio.sleep(0.1)


async def wait_status(client: LanguageClient, done, timeout: float = 60.0) -> dict:
    """infill.status once `done(status)` holds (or, past `timeout`, as it is: the caller's assertion says why)."""
    end = time.monotonic() + timeout
    while True:
        current = await status(client)
        if done(current) or time.monotonic() > end:
            return current
        await asyncio.sleep(0.05)


async def log_records(path, done, timeout: float = 10.0) -> list[dict]:
    """The JSON records of a completion log once `done(records)` holds (the server writes it on its own thread)."""
    end = time.monotonic() + timeout
    while True:
        records = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
        if done(records) or time.monotonic() > end:
            return records
        await asyncio.sleep(0.05)


def log_text(client: LanguageClient) -> str:
    """Every window/logMessage the server sent so far, one per line."""
    return "\n".join(m.message for m in client.log_messages)


def open_doc(client: LanguageClient, uri: str, text: str, language: str = "python", version: int = 1) -> None:
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(
            text_document=types.TextDocumentItem(uri=uri, language_id=language, version=version, text=text)
        )
    )


def change_doc(
    client: LanguageClient, uri: str, version: int, start: types.Position, end: types.Position, text: str
) -> None:
    """One didChange replacing start..end (LSP positions) with `text`, the document now at `version`."""
    client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[
                types.TextDocumentContentChangePartial(range=types.Range(start=start, end=end), text=text)
            ],
        )
    )


async def code_actions(client: LanguageClient, uri: str, selection: types.Range) -> list:
    """textDocument/codeAction for `selection`, with no diagnostics in the context."""
    return await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            range=selection,
            context=types.CodeActionContext(diagnostics=[]),
        )
    )


def _line_starts(text: str) -> list[int]:
    starts, i = [0], 0
    while i < len(text):
        step = 2 if text[i] == "\r" and text[i + 1 : i + 2] == "\n" else 1
        if text[i] in "\r\n":
            starts.append(i + step)
        i += step
    return starts


def utf16_offset(text: str, position: types.Position) -> int:
    """Str offset of an LSP position (lines end at \\r\\n, \\r or \\n), written independently of the server."""
    starts = _line_starts(text)
    start = starts[position.line]
    end = starts[position.line + 1] if position.line + 1 < len(starts) else len(text)
    units, offset = 0, start
    while offset < end and text[offset] not in "\r\n" and units < position.character:
        units += 2 if ord(text[offset]) > 0xFFFF else 1
        offset += 1
    return offset


def apply_edits(text: str, edits: list[types.TextEdit]) -> str:
    spans = sorted(
        ((utf16_offset(text, e.range.start), utf16_offset(text, e.range.end), e.new_text) for e in edits), reverse=True
    )
    for start, end, new_text in spans:
        text = text[:start] + new_text + text[end:]
    return text


def refused_remote():
    """A real RemoteBackend aimed at a local port nothing listens on (every request fails at once)."""
    import socket

    from infill.backends.remote import RemoteBackend

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return RemoteBackend(f"http://127.0.0.1:{port}/v1", model="none", timeout_s=2.0, connect_timeout_s=1.0)
