"""Ghost text while typing, as a person gets it: the real `infill-ls --stdio` (or the gateway) with the real default
model (Gemma 3 270M unless --model), driven the way an editor drives it.

Source: Python files of installed third-party packages (this venv's site-packages: requests, urllib3, jinja2,
click, packaging, attr, pygls, rich, httpx, whichever are there), lines picked with a seed: one-line simple
statements (assignment, return, call, raise) of 16-100 characters. A pause is: jump to the line (one didChange
cuts the line at a random point, leaving at least 4 characters of it to predict, no request), then type
`--keys` characters of the line 120 ms apart, each with a didChange and an automatic textDocument/inlineCompletion;
each new request sends `$/cancelRequest` for the previous one (as VS Code does), then waits for the last one's
answer. Then the line is restored (didChange) and the next pause starts. `--per-file` pauses share one open file,
in line order, as a person editing down a file.

Reported (the last line printed is one JSON object):
- shown: share of pauses whose last request answered with a non-blank suggestion.
- reply_p50_ms / reply_p95_ms: from the last keystroke (its didChange sent) to that answer, over all pauses: a
  pause that showed nothing counts at the time its (empty, failed or timed-out) answer came;
  reply_shown_p50_ms / reply_shown_p95_ms: the same over shown pauses only.
- exact_rest_of_line: share of pauses whose suggestion's first line is exactly the rest of the original line
  (trailing spaces ignored); exact_of_shown: the same over shown pauses.
- valid: share of shown fills with which the whole file parses (ast.parse of the file with the cut line and the
  fill applied); parses_without_fill: the share of those pauses where the file parses without the fill (a cut
  after a complete expression) — a fill that adds nothing there still counts as valid.
- cores, cpu_flags, pauses, settings, mode, model, seconds.

Mode --gateway: `infill-ls serve` on a free local port, no `language` field, as generic FIM clients send; per pause
the same typing, each key with a POST /v1/completions (prompt: text before the cursor, suffix: text after,
`max_tokens` 64) on its own connection, closing the connection of the key before (an editor's client drops the
request it no longer needs); the reply time runs from the last request to its answer; shown = a non-empty `text`.
`--gateway-client debounced`: no request while typing, then one (a client with a debounce longer than the key
gap): every jump to a new line then starts from an empty cache.

Mode --new-lines (LSP only): pauses start new lines of every kind from their indentation, the way a line is
written after an Enter: lines cut by fill_quality's client rule (benchmarks/client_holes.py: any code line of 4-60
characters, decorators, docstring lines, block and bracket openers, ...) with at least `--keys` + 3 characters. A
pause deletes the line (the jump, no request), then presses Enter at the end of the line above (a didChange
inserting the line break and the line's indentation, and an automatic request, as VS Code asks after every edit),
then types `--keys` characters 120 ms apart, each with a request; the reply and the judgement are the last one's,
as above (exact: the rest of the line). Figures also come by the line's kind (`by_kind`).

Files: by default a file is opened once, before its first pause (and the server left idle), and its pauses follow
in it (a file already open); `--fresh-files` opens a new document for every pause just before it (a file opened
just before the line is written). `--just-opened` (LSP only) opens a new document for every pause as the person
finds it (the line already cut, or gone with --new-lines), puts the cursor on the line as the clients tell the
server (`infill/didMoveCursor`: at the cut, or at the end of the line above before the Enter), waits `--look-ms`
(1000: a person reading before typing), then types as above: the first pause in a file just opened. A server
that does not know the notification ignores it (pair with --baseline).

Each pause starts with the model idle (the benchmark waits for the server to finish what it gave up on).
`--baseline DIR` runs a second server from another source tree (e.g. `git archive main | tar -x -C DIR`) on the
same pauses, alternating with this tree's pause by pause, so machine load hits both alike: its figures come
under "baseline" in the same JSON object.

Usage: python benchmarks/ghost_typing.py [--gateway | --new-lines] [--fresh-files | --just-opened [--look-ms 1000]]
                                   [--pauses 24] [--per-file 3]
                                   [--keys 4] [--seed 12] [--settings '{"inlineBudgetMs": 8000}'] [--model DIR]
                                   [--baseline DIR]
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import http.client
import json
import os
import random
import socket
import subprocess
import sys
import sysconfig
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

from lsprotocol import types
from pygls.lsp.client import LanguageClient

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from client_holes import line_kinds  # noqa: E402

from infill.languages import python_error  # noqa: E402
from infill.stats import percentile  # noqa: E402
from infill.testing.benchmark_figures import kernel_flags  # noqa: E402

PACKAGES = ("requests", "urllib3", "jinja2", "click", "packaging", "attr", "pygls", "rich", "httpx")
KEY_GAP_S = 0.12
SERVER_TIMINGS = (
    "context_ms",
    "encode_ms",
    "denoise_ms",
    "prompt_tokens",
    "reused_tokens",
    "steps",
    "tokens_per_forward",
)
SIMPLE = (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Return, ast.Expr, ast.Raise)


@dataclass(frozen=True)
class Pause:
    path: str
    line: int  # 0-based
    keep: int  # characters of the line on screen before typing
    typed: str  # then typed one by one
    kind: str = "simple statement"  # the line's kind (client_holes.KINDS in --new-lines mode)


# -- picking lines ----------------------------------------------------------------------------------------------


def candidate_files() -> list[Path]:
    site = Path(sysconfig.get_paths()["purelib"])
    files = []
    for package in PACKAGES:
        files += sorted((site / package).rglob("*.py")) if (site / package).is_dir() else []
    return files


def candidate_lines(text: str) -> list[int]:
    """0-based lines holding a whole one-line simple statement worth predicting."""
    lines = text.split("\n")
    out = set()
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, SIMPLE) or node.lineno != node.end_lineno:
            continue
        if isinstance(node, ast.Expr) and not isinstance(node.value, ast.Call):
            continue  # docstrings and bare names
        line = lines[node.lineno - 1]
        content = line.strip()
        if 16 <= len(content) <= 100 and line.lstrip().startswith(content[:3]) and ";" not in content:
            out.add(node.lineno - 1)
    return sorted(out)


def new_line_candidates(text: str, keys: int) -> dict[int, str]:
    """0-based lines (not the first) the client rule admits with more than `keys` + 2 characters, and their kinds."""
    lines = text.split("\n")
    return {
        number: kind
        for number, kind in line_kinds(text).items()
        if number > 0 and len(lines[number].strip()) >= keys + 3
    }


def pick_pauses(count: int, per_file: int, keys: int, seed: int, new_lines: bool = False) -> list[Pause]:
    rng = random.Random(seed)
    files = candidate_files()
    if not files:
        raise SystemExit(f"none of {PACKAGES} is installed in {sysconfig.get_paths()['purelib']}")
    rng.shuffle(files)
    pauses: list[Pause] = []
    for path in files:
        if len(pauses) >= count:
            break
        try:
            text = path.read_text(encoding="utf-8")
            if not 2_000 <= len(text) <= 80_000 or "\r" in text:
                continue
            kinds = new_line_candidates(text, keys) if new_lines else {}
            lines = sorted(kinds) if new_lines else candidate_lines(text)
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        if len(lines) < per_file:
            continue
        source = text.split("\n")
        for number in sorted(rng.sample(lines, per_file))[: count - len(pauses)]:
            line = source[number]
            if new_lines:
                indent = len(line) - len(line.lstrip())
                pauses.append(Pause(str(path), number, indent, line[indent : indent + keys], kinds[number]))
                continue
            indent = len(line) - len(line.lstrip())
            content_len = len(line) - indent
            cut = rng.randint(keys + 4, content_len - 4)  # at least 4 characters typed before, 4 left after
            keep = indent + cut - keys
            pauses.append(Pause(str(path), number, keep, line[keep : indent + cut]))
    return pauses


# -- judging a fill ---------------------------------------------------------------------------------------------


def parses(text: str) -> bool:
    return python_error(text) is None


def judge(original: str, pause: Pause, before: str, after: str, fill: str) -> dict:
    """`before`/`after`: the document text around the cursor at the pause; `fill` replaces nothing."""
    rest = original.split("\n")[pause.line][pause.keep + len(pause.typed) :]
    first_line = fill.split("\n", 1)[0]
    return {
        "exact": first_line.rstrip() == rest.rstrip() and bool(rest.strip()),
        "valid": parses(before + fill + after),
        "parses_without": parses(before + after),
    }


# -- the LSP editor ---------------------------------------------------------------------------------------------


class Editor:
    """One open document; edits and automatic inline requests as VS Code sends them."""

    def __init__(self, client: LanguageClient, uri: str, text: str) -> None:
        self.client, self.uri, self.text, self.version = client, uri, text, 1
        self.pending: tuple[str, asyncio.Future] | None = None
        client.text_document_did_open(
            types.DidOpenTextDocumentParams(
                text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)
            )
        )

    def replace_line(self, line: int, new: str) -> None:
        lines = self.text.split("\n")
        old = lines[line]
        lines[line] = new
        self.text = "\n".join(lines)
        self._change(types.Range(types.Position(line, 0), types.Position(line, len(old))), new)

    def join_line(self, line: int) -> None:
        """Delete `line` and the line break before it."""
        lines = self.text.split("\n")
        above = lines[line - 1]
        self.text = "\n".join(lines[:line] + lines[line + 1 :])
        self._change(types.Range(types.Position(line - 1, len(above)), types.Position(line, len(lines[line]))), "")

    def break_line(self, line: int, column: int, indent: str) -> None:
        """Enter at (line, column), the new line indented by `indent`."""
        lines = self.text.split("\n")
        lines[line : line + 1] = [lines[line][:column], indent + lines[line][column:]]
        self.text = "\n".join(lines)
        at = types.Position(line, column)
        self._change(types.Range(at, at), "\n" + indent)

    def type_char(self, line: int, column: int, char: str) -> None:
        lines = self.text.split("\n")
        lines[line] = lines[line][:column] + char + lines[line][column:]
        self.text = "\n".join(lines)
        at = types.Position(line, column)
        self._change(types.Range(at, at), char)

    def move_cursor(self, line: int, column: int) -> None:
        """The cursor put at (line, column), as the clients tell the server (server/warming.py)."""
        self.client.protocol.notify(
            "infill/didMoveCursor",
            {"textDocument": {"uri": self.uri}, "position": {"line": line, "character": column}},
        )

    def _change(self, rng: types.Range, new: str) -> None:
        self.version += 1
        self.client.text_document_did_change(
            types.DidChangeTextDocumentParams(
                text_document=types.VersionedTextDocumentIdentifier(uri=self.uri, version=self.version),
                content_changes=[types.TextDocumentContentChangePartial(range=rng, text=new)],
            )
        )

    def ask(self, position: types.Position) -> asyncio.Future:
        """An automatic request; the previous one is cancelled with $/cancelRequest."""
        if self.pending is not None and not self.pending[1].done():
            self.client.protocol.notify(types.CANCEL_REQUEST, types.CancelParams(id=self.pending[0]))
        msg_id = str(uuid.uuid4())
        future = asyncio.wrap_future(
            self.client.protocol.send_request(
                types.TEXT_DOCUMENT_INLINE_COMPLETION,
                types.InlineCompletionParams(
                    text_document=types.TextDocumentIdentifier(uri=self.uri),
                    position=position,
                    context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic),
                ),
                msg_id=msg_id,
            )
        )
        future.add_done_callback(lambda done: done.cancelled() or done.exception())  # cancelled ones: expected
        self.pending = (msg_id, future)
        return future


def offset_of(text: str, line: int, column: int) -> int:
    """Str offset of a position (ASCII sources: UTF-16 columns are str columns)."""
    return sum(len(x) + 1 for x in text.split("\n")[:line]) + column


def server_command(tree: Path, *args: str) -> list[str]:
    """The server of the source tree `tree` (run from it, so its own packages are imported), this venv's Python."""
    return [sys.executable, "-m", "server.cli", *args]


def tree_env(tree: Path) -> dict:
    """The tree first on the path; a PYTHONPATH already set stays behind it (e.g. another llama.cpp build)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tree), os.environ.get("PYTHONPATH")]))}


async def lsp_status(client: LanguageClient) -> dict:
    return await client.workspace_execute_command_async(types.ExecuteCommandParams(command="infill.status"))


async def start_lsp(args, settings: dict, tree: Path) -> LanguageClient:
    client = LanguageClient("infill-typing-bench", "1")
    for method in (types.WINDOW_LOG_MESSAGE, "infill/statusChanged", types.PROGRESS):
        client.feature(method)(lambda *a: None)
    extra = ["--model", args.model] if args.model else []
    await client.start_io(
        *server_command(tree, "--stdio", "--log-file", os.devnull, *extra), cwd=str(tree), env=tree_env(tree)
    )
    await client.initialize_async(
        types.InitializeParams(capabilities=types.ClientCapabilities(), initialization_options=settings)
    )
    client.initialized(types.InitializedParams())
    end = time.monotonic() + 600
    while (status := await lsp_status(client))["state"] == "loading" and time.monotonic() < end:
        await asyncio.sleep(0.5)
    if status["state"] != "ready":
        raise SystemExit(f"server in {tree} not ready: {status}")
    return client


async def settle(client: LanguageClient, limit_s: float = 90.0) -> None:
    """Wait until the server runs nothing (a request the benchmark gave up on may still run): each pause starts
    from an idle model, as after a person's pause, and one server's leftovers never slow the other's pause."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        status = await lsp_status(client)
        if not status.get("modelBusy") and not status.get("running"):
            return
        await asyncio.sleep(0.2)


def as_found(original: str, pause: Pause, new_lines: bool) -> str:
    """The file as the person finds it on opening it (--just-opened): the line already cut (or gone)."""
    lines = original.split("\n")
    if new_lines:
        del lines[pause.line]
    else:
        lines[pause.line] = lines[pause.line][: pause.keep]
    return "\n".join(lines)


async def lsp_pause(args, client: LanguageClient, editors: dict, index: int, pause: Pause) -> dict:
    original = Path(pause.path).read_text(encoding="utf-8")
    line = original.split("\n")[pause.line]
    if args.just_opened:
        return await just_opened_pause(args, client, index, pause, original, line)
    if args.fresh_files or pause.path not in editors:
        editors[pause.path] = Editor(client, f"file:///bench/{index}/{Path(pause.path).name}", original)
        if not args.fresh_files:
            await settle(client)  # a file already open: the server idle before its first pause
    editor = editors[pause.path]
    column, future = pause.keep, None
    if args.new_lines:
        editor.join_line(pause.line)  # the jump: the line gone, no request
        await asyncio.sleep(0.5)
        above = original.split("\n")[pause.line - 1]
        editor.break_line(pause.line - 1, len(above), line[: pause.keep])  # Enter, indented
        future = editor.ask(types.Position(pause.line, column))
        await asyncio.sleep(KEY_GAP_S)
    else:
        editor.replace_line(pause.line, line[: pause.keep])  # the jump: no request
        await asyncio.sleep(0.5)
    return await type_and_judge(args, client, editor, pause, original, line, future)


async def just_opened_pause(args, client: LanguageClient, index: int, pause: Pause, original: str, line: str) -> dict:
    """--just-opened: a new document, opened as the person finds it, the cursor put on the line (the clients'
    infill/didMoveCursor; a server that does not know it ignores it), `--look-ms` of reading, then the typing."""
    editor = Editor(client, f"file:///bench/{index}/{Path(pause.path).name}", as_found(original, pause, args.new_lines))
    future = None
    if args.new_lines:  # the cursor at the end of the line above, then Enter
        above = original.split("\n")[pause.line - 1]
        editor.move_cursor(pause.line - 1, len(above))
        await asyncio.sleep(args.look_ms / 1000)
        editor.break_line(pause.line - 1, len(above), line[: pause.keep])
        future = editor.ask(types.Position(pause.line, pause.keep))
        await asyncio.sleep(KEY_GAP_S)
    else:
        editor.move_cursor(pause.line, pause.keep)
        await asyncio.sleep(args.look_ms / 1000)
    return await type_and_judge(args, client, editor, pause, original, line, future)


async def type_and_judge(
    args, client: LanguageClient, editor: Editor, pause: Pause, original: str, line: str, future
) -> dict:
    """Type the pause's keys, each with a request, and judge the last one's answer; then restore the line."""
    column, last_key = pause.keep, 0.0
    for char in pause.typed:
        editor.type_char(pause.line, column, char)
        column += 1
        last_key = time.perf_counter()
        future = editor.ask(types.Position(pause.line, column))
        await asyncio.sleep(KEY_GAP_S)
    try:
        reply = await asyncio.wait_for(future, args.wait_s)
    except Exception:  # noqa: BLE001 - timed out, cancelled or failed: nothing shown
        reply = None
    reply_ms = (time.perf_counter() - last_key) * 1000
    offset = offset_of(editor.text, pause.line, column)
    before, after, fill = editor.text[:offset], editor.text[offset:], ""
    if reply is not None and reply.items and reply.items[0].insert_text.strip():
        item = reply.items[0]
        start = offset_of(editor.text, item.range.start.line, item.range.start.character)
        end = offset_of(editor.text, item.range.end.line, item.range.end.character)
        filled = editor.text[:start] + item.insert_text + editor.text[end:]
        # As a fill at the cursor (an item may also rewrite typed text before it, or text after it).
        tail = len(editor.text) - max(end, offset)
        fill, after = filled[offset : len(filled) - tail], editor.text[len(editor.text) - tail :]
        before = filled[:offset]
    record = _record(original, pause, before, after, fill, reply_ms)
    editor.replace_line(pause.line, line)  # restore
    await settle(client)
    return record


async def run_lsp(args, pauses: list[Pause], settings: dict, trees: list[Path]) -> list[tuple[list[dict], dict]]:
    clients = [await start_lsp(args, settings, tree) for tree in trees]
    records: list[list[dict]] = [[] for _ in trees]
    editors: list[dict] = [{} for _ in trees]
    for index, pause in enumerate(pauses):
        order = list(range(len(trees)))
        for k in order if index % 2 == 0 else order[::-1]:  # alternating: drift hits both alike
            records[k].append(await lsp_pause(args, clients[k], editors[k], index, pause))
            if args.verbose:
                print(json.dumps({"tree": str(trees[k]), **records[k][-1]}), file=sys.stderr, flush=True)
    out = []
    for client, recs in zip(clients, records):
        final = await lsp_status(client)
        await client.shutdown_async(None)
        client.exit(None)
        await client.stop()
        out.append(
            (
                recs,
                {
                    "pipeline": final.get("pipeline"),
                    "server_latencies": final.get("latencies"),
                    **{k: final[k] for k in ("budget", "cheapAnswers") if k in final},
                },
            )
        )
    return out


def _record(original: str, pause: Pause, before: str, after: str, fill: str, reply_ms: float) -> dict:
    record = {
        "file": Path(pause.path).name,
        "line": pause.line + 1,
        "kind": pause.kind,
        "shown": bool(fill.strip()),
        "reply_ms": round(reply_ms, 1),
        "fill": fill,
    }
    if record["shown"]:
        record.update(judge(original, pause, before, after, fill))
    return record


# -- the gateway client -----------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_gateway(args, tree: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    extra = ["--model", args.model] if args.model else []
    process = subprocess.Popen(
        server_command(tree, "serve", "--port", str(port), "--log-level", "WARNING", *extra),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=str(tree),
        env=tree_env(tree),
    )
    base = f"http://127.0.0.1:{port}"
    end = time.monotonic() + 600
    while True:
        try:
            with urllib.request.urlopen(base + "/health", timeout=5) as response:
                if json.loads(response.read()).get("status") == "ready":
                    return process, base
        except OSError:
            pass
        if time.monotonic() > end or process.poll() is not None:
            process.kill()
            raise SystemExit(f"gateway in {tree} did not become ready")
        time.sleep(0.5)


class AbortableRequest:
    """One POST /v1/completions on its own connection and thread; `abort` closes the connection, as an editor's FIM
    client drops the request of an older keystroke."""

    def __init__(self, base: str, body: dict, timeout: float) -> None:
        host, port = base.removeprefix("http://").split(":")
        self.connection = http.client.HTTPConnection(host, int(port), timeout=timeout)
        self.sent = time.perf_counter()
        self.answer: dict | None = None
        self.thread = threading.Thread(target=self._run, args=(json.dumps(body),), daemon=True)
        self.thread.start()

    def _run(self, payload: str) -> None:
        try:
            self.connection.request(
                "POST", "/v1/completions", body=payload, headers={"Content-Type": "application/json"}
            )
            self.answer = json.loads(self.connection.getresponse().read())
        except (OSError, http.client.HTTPException, ValueError):
            pass  # aborted, or failed: nothing shown

    def abort(self) -> None:
        sock = self.connection.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.connection.close()

    def result(self, timeout: float) -> tuple[dict, float]:
        self.thread.join(timeout)
        return self.answer or {}, (time.perf_counter() - self.sent) * 1000


def gateway_pause(args, base: str, pause: Pause) -> dict:
    original = Path(pause.path).read_text(encoding="utf-8")
    lines = original.split("\n")
    line_start = sum(len(x) + 1 for x in lines[: pause.line])
    after = original[line_start + len(lines[pause.line]) :]
    text_at = lambda typed: original[: line_start + pause.keep + typed]  # noqa: E731 - the prompt after `typed` keys
    if args.gateway_client == "debounced":
        time.sleep(KEY_GAP_S * len(pause.typed))  # the typing, as the client sees it: nothing sent
        request = AbortableRequest(
            base, {"prompt": text_at(len(pause.typed)), "suffix": after, "max_tokens": 64}, args.wait_s
        )
    else:  # one request per key, each dropping the one before
        request = None
        for typed in range(1, len(pause.typed) + 1):
            if request is not None:
                request.abort()
            request = AbortableRequest(base, {"prompt": text_at(typed), "suffix": after, "max_tokens": 64}, args.wait_s)
            if typed < len(pause.typed):
                time.sleep(KEY_GAP_S)
    body, reply_ms = request.result(args.wait_s)
    fill = body["choices"][0]["text"] if body.get("choices") else ""
    before = text_at(len(pause.typed))
    record = _record(original, pause, before, after, fill, reply_ms)
    if args.verbose:  # where the time went, from the gateway's own account
        record["infill"] = {k: body.get("infill", {}).get(k) for k in SERVER_TIMINGS}
    return record


def run_gateway(args, pauses: list[Pause], trees: list[Path]) -> list[tuple[list[dict], dict]]:
    servers = []
    try:
        for tree in trees:
            servers.append(start_gateway(args, tree))
        records: list[list[dict]] = [[] for _ in trees]
        for index, pause in enumerate(pauses):
            order = list(range(len(trees)))
            for k in order if index % 2 == 0 else order[::-1]:
                records[k].append(gateway_pause(args, servers[k][1], pause))
                if args.verbose:
                    print(json.dumps({"tree": str(trees[k]), **records[k][-1]}), file=sys.stderr, flush=True)
        return [(recs, {}) for recs in records]
    finally:
        for process, _ in servers:
            process.terminate()
            process.wait(30)


# -- report -----------------------------------------------------------------------------------------------------


def summary(records: list[dict], extra: dict, args, settings: dict, seconds: float) -> dict:
    shown = [r for r in records if r["shown"]]
    share = lambda part, whole: round(len(part) / len(whole), 3) if whole else None  # noqa: E731
    rounded = lambda value: None if value is None else round(value)  # noqa: E731
    every_reply, shown_reply = [r["reply_ms"] for r in records], [r["reply_ms"] for r in shown]
    return {
        "mode": f"gateway ({args.gateway_client})" if args.gateway else "lsp",
        "pauses": len(records),
        "lines": "new lines from their indentation" if args.new_lines else "simple statements cut mid-line",
        "files": (
            f"just opened ({args.look_ms:g} ms before the first key)"
            if args.just_opened
            else "a new document per pause"
            if args.fresh_files
            else "already open"
        ),
        "shown": share(shown, records),
        # Over every pause: an empty answer is a miss that took this long, not a pause left out.
        "reply_p50_ms": rounded(percentile(every_reply, 50)),
        "reply_p95_ms": rounded(percentile(every_reply, 95)),
        "reply_shown_p50_ms": rounded(percentile(shown_reply, 50)),
        "reply_shown_p95_ms": rounded(percentile(shown_reply, 95)),
        "exact_rest_of_line": share([r for r in shown if r["exact"]], records),
        "exact_of_shown": share([r for r in shown if r["exact"]], shown),
        "valid": share([r for r in shown if r["valid"]], shown),
        "parses_without_fill": share([r for r in shown if r["parses_without"]], shown),
        "cores": os.cpu_count(),
        "cpu_flags": kernel_flags(),
        "load_avg": round(os.getloadavg()[0], 2),
        "settings": settings,
        "keys": args.keys,
        "key_gap_ms": int(KEY_GAP_S * 1000),
        "seed": args.seed,
        "model": args.model or "offline default (Gemma 3 270M)",
        "seconds": round(seconds),
        **extra,
        **(
            {
                "by_kind": {
                    kind: {
                        "pauses": len(group),
                        "shown": sum(r["shown"] for r in group),
                        "exact": sum(r["shown"] and r["exact"] for r in group),
                    }
                    for kind in sorted({r["kind"] for r in records})
                    for group in [[r for r in records if r["kind"] == kind]]
                }
            }
            if args.new_lines
            else {}
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gateway", action="store_true", help="drive `infill-ls serve` instead of the LSP server")
    parser.add_argument(
        "--gateway-client",
        choices=("per-key", "debounced"),
        default="per-key",
        help="per-key: a request per typed key, each dropping the one before (default); debounced: "
        "one request after the typing",
    )
    parser.add_argument(
        "--new-lines",
        action="store_true",
        help="type new lines of every kind from their indentation, after an Enter (LSP only)",
    )
    parser.add_argument(
        "--fresh-files",
        action="store_true",
        help="a new document for every pause, opened just "
        "before it (default: each file opened once, before its first pause)",
    )
    parser.add_argument(
        "--just-opened",
        action="store_true",
        help="a new document for every pause, opened with the line already cut, the cursor put on it "
        "(infill/didMoveCursor), --look-ms of reading, then the typing",
    )
    parser.add_argument("--look-ms", type=float, default=1000.0, help="--just-opened: from the open to the first key")
    parser.add_argument("--pauses", type=int, default=24)
    parser.add_argument("--per-file", type=int, default=3)
    parser.add_argument("--keys", type=int, default=4)
    parser.add_argument("--seed", type=int, default=12)
    parser.add_argument(
        "--wait-s",
        type=float,
        default=None,
        help="longest wait for one answer (default 30 s; the gateway: 90 s, past its own 60 s)",
    )
    parser.add_argument("--settings", default="{}", help="initializationOptions (JSON) for the LSP server")
    parser.add_argument("--model", default=None)
    parser.add_argument(
        "--baseline",
        default=None,
        help="another source tree (e.g. an export of main): its "
        "server gets the same pauses, alternating with this one's; reported under 'baseline'",
    )
    parser.add_argument("--verbose", action="store_true", help="one JSON line per pause on stderr")
    args = parser.parse_args()
    settings = json.loads(args.settings)
    args.wait_s = args.wait_s or (90.0 if args.gateway else 30.0)
    if (args.new_lines or args.just_opened) and args.gateway:
        parser.error("--new-lines and --just-opened drive the LSP server only")
    pauses = pick_pauses(args.pauses, args.per_file, args.keys, args.seed, args.new_lines)
    trees = [ROOT] + ([Path(args.baseline).resolve()] if args.baseline else [])
    started = time.perf_counter()
    if args.gateway:
        runs = run_gateway(args, pauses, trees)
        settings = {}
    else:
        runs = asyncio.run(run_lsp(args, pauses, settings, trees))
    seconds = time.perf_counter() - started
    report = summary(*runs[0], args, settings, seconds)
    if args.baseline:
        report["baseline"] = {"tree": str(trees[1]), **summary(*runs[1], args, settings, seconds)}
    print(json.dumps(report))


if __name__ == "__main__":
    main()
