"""One reply verdict (server/verdict.py) for inline suggestions and gap fills: a blank fill is no fill. In Fill all
gaps a blank middle must leave its placeholder where it was (replacing it with nothing would delete it), while the
other gaps' fills still apply. The backend is a real RemoteBackend talking to a small real HTTP server written here,
which answers each gap with a scripted middle (a model that gives a blank middle cannot be asked for one)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from lsprotocol import types

from infill.backends.remote import RemoteBackend
from infill.loader import Opened
from infill.pipeline import Fill, Pipeline
from server.fills import FillDeps, compute_fill
from server.handlers_inline import complete_inline
from server.main import create_server
from server.settings import Settings
from server.verdict import reply_verdict

TEXT = "# Notes\n\nThe plan is [[goal]] and the date is [[when]].\n\nMore text follows here.\n"


@pytest.fixture
def middles_server():
    """A completions endpoint answering the n-th request with the n-th scripted middle."""
    middles: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            text = middles.pop(0) if middles else ""
            body = json.dumps({"choices": [{"text": text, "index": 0, "finish_reason": "stop"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    http.daemon_threads = True
    threading.Thread(target=http.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield f"http://127.0.0.1:{http.server_address[1]}/v1", middles
    http.shutdown()
    http.server_close()


async def test_a_blank_middle_in_fill_all_gaps_leaves_its_placeholder(middles_server):
    url, middles = middles_server
    middles.extend(["to ship the parser", "   "])  # the second gap's middle is blank
    server = create_server(Settings(debounce_ms=0))
    backend = RemoteBackend(url, model="scripted", timeout_s=10.0, connect_timeout_s=2.0)
    server.host._loaded = Opened(Pipeline(backend), (backend,))
    server.host.state = "ready"
    uri = "file:///notes.md"
    server.documents.open(types.TextDocumentItem(uri=uri, language_id="markdown", version=1, text=TEXT))
    deps = FillDeps(server.documents, server.host, server.telemetry, server.log, server.settings)
    whole = types.Range(types.Position(0, 0), types.Position(0, 0))
    try:
        outcome = await compute_fill(deps, uri, whole, "gaps", None)
    finally:
        server.host.close()
    assert outcome.result is not None and len(outcome.result.fills) == 2  # the pipeline passed both on
    assert outcome.edit is not None and outcome.edit.document_changes
    (change,) = outcome.edit.document_changes
    assert isinstance(change, types.TextDocumentEdit)
    document = server.documents.get(uri)
    assert document is not None
    goal = TEXT.index("[[goal]]")
    assert [(document.offset_at(e.range.start), document.offset_at(e.range.end)) for e in change.edits] == [
        (goal, goal + len("[[goal]]"))
    ]  # one edit, for the gap with text: "[[when]]" is not replaced
    assert [e.new_text.strip() for e in change.edits] == ["to ship the parser"]
    assert server.telemetry.counts["completions"] == 1 and server.telemetry.counts["empty"] == 0


def test_the_verdict_is_one_rule_for_every_reply():
    text, blank = Fill(0, 0, "value"), Fill(5, 5, " \n\t")
    assert reply_verdict(False, True, [text, blank]) == ("ok", [text])
    assert reply_verdict(False, True, [blank]) == ("empty", [])
    assert reply_verdict(False, True, []) == ("empty", [])
    assert reply_verdict(True, True, [text]) == ("discarded", [text])  # superseded or edited while computing
    assert reply_verdict(False, False, [text]) == ("discarded", [text])  # the document is another text now


async def test_the_completion_log_gives_every_span_in_str_offsets(middles_server, tmp_path):
    """An inline request after a character that takes two UTF-16 units: its logged span is the cursor's str offset
    (start == end), not LSP's [line, UTF-16 column]; a fill's span is its selection in the same unit."""
    url, middles = middles_server
    middles.extend(["the parser", "the parser"])
    server = create_server(Settings(debounce_ms=0))
    backend = RemoteBackend(url, model="scripted", timeout_s=10.0, connect_timeout_s=2.0)
    server.host._loaded = Opened(Pipeline(backend), (backend,))
    server.host.state = "ready"
    server.telemetry.log_path = str(tmp_path / "completions.jsonl")
    uri, text = "file:///smile.txt", "Notes\n\U0001f642 We ship \n"
    server.documents.open(types.TextDocumentItem(uri=uri, language_id="plaintext", version=1, text=text))
    cursor = text.index(" \n") + 1  # after "We ship "
    line_start = text.index("\U0001f642")
    position = types.Position(1, cursor - line_start + 1)  # the emoji is two UTF-16 units, one str character
    invoked = types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked)
    deps = FillDeps(server.documents, server.host, server.telemetry, server.log, server.settings)
    selection = types.Range(types.Position(1, 3), types.Position(1, 5))  # "We"
    try:
        await complete_inline(
            server,
            types.InlineCompletionParams(
                text_document=types.TextDocumentIdentifier(uri=uri), position=position, context=invoked
            ),
        )
        await compute_fill(deps, uri, selection, "gap", None)
    finally:
        server.telemetry.flush(timeout=5.0)
        server.host.close()
    records = [json.loads(line) for line in (tmp_path / "completions.jsonl").read_text().splitlines()]
    spans = {r["kind"]: r["span"] for r in records if r["type"] == "completion"}
    assert spans == {"inline": [cursor, cursor], "gap": [line_start + 2, line_start + 4]}
