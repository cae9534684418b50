"""Fuzz sessions against the real `infill-ls` (raw JSON-RPC over stdio, tiny random-weight DiffusionGemma), with
the invariants of issue 14 checked as replies arrive:

- the process stays up until exit, and exits promptly with LSP's code (0 after shutdown, 1 without);
- every request gets a response or an error within HANG_S (requests still running at an exit without shutdown
  are not owed one);
- an action or edit names the version the client had when it asked, lies inside that text, a "Fill gap" edit
  covers exactly the selection (else `bad_edits`); an edit for text the client no longer had when it asked for the
  edit is `stale_edits` (a close and reopen, or newer versions);
- inline ranges are valid UTF-16 positions of the text the request was made on;
- no internal error (-32603, `internal_errors`), no error with data, a traceback or a machine path
  (`protocol_errors`), and no traceback on the server's stderr (`tracebacks`);
- what the server never produced (edge_cases.py) is refused: non-object params get -32602, resolve data of any
  other shape comes back without an edit;
- every reply carries the id of its request, an integer or a string (half the requests use string ids), never null
  (`protocol_errors`);
- a Fill command answers `applied: true` only as often as the client accepted a workspace/applyEdit (the client
  of a session accepts them, refuses them, answers what is not {applied: bool}, or never answers) (`bad_edits`),
  and never for a selection outside the text (`bad_edits`: it was clamped onto another span);
- each request inside a JSON-RPC batch is refused on its own with -32600 (`protocol_errors`; `hangs` when lost);
- the issue-51 interleaving: a Fill gap resolve cancelled with $/cancelRequest and a didChange storm around an
  inlineCompletion whose params are a bare string, which is owed -32602 at once.

A run is bounded by a count of requests (the suite's) or by seconds (benchmarks/fuzz.py): the same seed sends the
same messages either way.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, field

from .edge_cases import edge_request
from .rpc import RawServer
from .stats import Stats, count_tracebacks
from .texts import line_spans, offset_of, random_document, random_position, random_text, utf16_len

# Reasons a Fill command gives only once it got past the check of its selection (a fill was tried or sent): a
# selection outside the text must never get one (the refusals before it, disabled, NUL bytes, stale, may come).
AFTER_CHECK = (
    "no fill",
    "the client",
    "the backend failed",
    "while the fill was computed",
    "before the fill started",
    "the selection is empty",
    "covers the whole document",
)
HANG_S = 60.0
EXIT_S = 10.0
CONFIG = {
    "codeActionBudgetMs": 4000,
    "invokedBudgetMs": 3000,
    "inlineBudgetMs": 400,
    "debounceMs": 20,
    "enabledLanguages": ["plaintext", "markdown", "python"],
    "relatedFiles": True,
}


@dataclass
class Doc:
    uri: str
    language: str
    text: str
    version: int
    generation: int
    history: dict = field(default_factory=dict)  # version -> text, this generation only

    def snapshot(self) -> tuple[int, int, str]:
        return self.generation, self.version, self.text


@dataclass
class Pending:
    kind: str
    sent: float
    doc: Doc | None = None
    state: tuple | None = None  # the doc's (generation, version, text) when sent
    extra: dict = field(default_factory=dict)


class Session:
    def __init__(self, server: RawServer, rng: random.Random, stats: Stats, seed: int = 0) -> None:
        self.server, self.rng, self.stats, self.seed = server, rng, stats, seed
        self.docs: dict[str, Doc] = {}
        self.closed: dict[str, Doc] = {}
        # every text the client ever held, by (uri, version), across close and reopen: an applyEdit the server
        # sent before a close, a reopen or the 50th newer edit reached it still names a text the client had
        self.held: dict[tuple[str, int], list[str]] = {}
        self.pending: dict[int, Pending] = {}
        self.actions: list[tuple[dict, Pending]] = []  # listed actions with what they were listed for
        self.generations = 0
        self.checked_edits = 0
        self.applied_replies = 0  # Fill commands answered applied: true

    # -- sending ---------------------------------------------------------------------------------------------------
    def request(
        self, kind: str, method: str, params=None, doc: Doc | None = None, raw: str | None = None, **extra
    ) -> int:
        msg_id = self.server.request(method, params, raw_params=raw, string_id=self.rng.random() < 0.5)
        self.pending[msg_id] = Pending(kind, time.monotonic(), doc, doc.snapshot() if doc else None, extra)
        self.stats.requests += 1
        return msg_id

    def open(self) -> None:
        language, text = random_document(self.rng)
        uri = f"file:///fuzz/{self.rng.randrange(6)}.{ {'markdown': 'md', 'python': 'py'}.get(language, 'txt') }"
        if uri in self.docs:
            return
        self.generations += 1
        version = self.rng.choice([0, 1, self.rng.randrange(2**31 - 10)])
        doc = Doc(uri, language, text, version, self.generations, {version: text})
        self.held.setdefault((uri, version), []).append(text)
        self.docs[uri] = doc
        self.server.notify(
            "textDocument/didOpen",
            {"textDocument": {"uri": uri, "languageId": language, "version": version, "text": text}},
        )

    def edit(self, doc: Doc) -> None:
        changes, text = [], doc.text
        for _ in range(self.rng.choice([1, 1, 1, 2, 3])):
            if self.rng.random() < 0.05:
                text = random_text(self.rng, self.rng.randint(0, 400))
                changes.append({"text": text})
                continue
            spans = line_spans(text)
            a, b = random_position(self.rng, text, spans), random_position(self.rng, text, spans)
            (l1, c1, o1), (l2, c2, o2) = sorted([a, b], key=lambda p: p[2])
            new = random_text(self.rng, self.rng.choice([0, 1, 1, 3, 20, 200]))
            changes.append(
                {"range": {"start": {"line": l1, "character": c1}, "end": {"line": l2, "character": c2}}, "text": new}
            )
            text = text[:o1] + new + text[o2:]
        jump = self.rng.choice([1, 1, 1, 2, self.rng.randint(1, 100_000)])
        doc.version = min(doc.version + jump, 2**31 - 1)
        doc.text = text
        doc.history[doc.version] = text
        self.held.setdefault((doc.uri, doc.version), []).append(text)
        if len(doc.history) > 50:
            doc.history.pop(next(iter(doc.history)))
        self.server.notify(
            "textDocument/didChange",
            {"textDocument": {"uri": doc.uri, "version": doc.version}, "contentChanges": changes},
        )

    def close(self, doc: Doc) -> None:
        self.server.notify("textDocument/didClose", {"textDocument": {"uri": doc.uri}})
        self.closed[doc.uri] = self.docs.pop(doc.uri)

    def selection(self, doc: Doc) -> dict:
        spans = line_spans(doc.text)
        a, b = random_position(self.rng, doc.text, spans), random_position(self.rng, doc.text, spans)
        (l1, c1, _), (l2, c2, _) = sorted([a, b], key=lambda p: p[2])
        return {"start": {"line": l1, "character": c1}, "end": {"line": l2, "character": c2}}

    def step(self) -> None:
        rng, docs = self.rng, list(self.docs.values())
        model_work = sum(p.kind in ("resolve", "fill", "inline") for p in self.pending.values())
        roll = rng.random()
        if not docs or roll < 0.06:
            return self.open()
        doc = rng.choice(docs)
        if roll < 0.40:
            return self.edit(doc)
        if roll < 0.52:
            rng_sel = self.selection(doc)
            self.request(
                "actions",
                "textDocument/codeAction",
                {"textDocument": {"uri": doc.uri}, "range": rng_sel, "context": {"diagnostics": []}},
                doc,
                selection=rng_sel,
            )
            return None
        if roll < 0.60 and self.actions and model_work < 3:
            action, listed = rng.choice(self.actions)
            self.request(
                "resolve", "codeAction/resolve", action, self.docs.get(listed.doc.uri), action=action, listed=listed
            )
            return None
        if roll < 0.70 and model_work < 3:
            line, character, _ = random_position(rng, doc.text, line_spans(doc.text))
            self.request(
                "inline",
                "textDocument/inlineCompletion",
                {
                    "textDocument": {"uri": doc.uri},
                    "position": {"line": line, "character": character},
                    "context": {"triggerKind": rng.choice([1, 2])},
                },
                doc,
            )
            return None
        if roll < 0.74 and model_work < 3:
            if rng.random() < 0.25:  # a selection past its line's end: refused, never clamped onto another span
                self.request(
                    "fill_outside",
                    "workspace/executeCommand",
                    {"command": "infill.fillGap", "arguments": [doc.uri, self.outside_selection(doc)]},
                    doc,
                )
                return None
            command = rng.choice(["infill.fillGap", "infill.fillAllGaps"])
            self.request(
                "fill",
                "workspace/executeCommand",
                {"command": command, "arguments": [doc.uri, self.selection(doc)]},
                doc,
            )
            return None
        if roll < 0.78:  # cancel storm
            for msg_id in rng.sample(list(self.pending), min(len(self.pending), rng.randint(1, 5))):
                self.server.notify("$/cancelRequest", {"id": msg_id})
            return None
        if roll < 0.80:  # close, then ask about it
            self.close(doc)
            self.request(
                "actions",
                "textDocument/codeAction",
                {"textDocument": {"uri": doc.uri}, "range": self.selection(doc), "context": {"diagnostics": []}},
                None,
            )
            return None
        if roll < 0.83:
            self.request("status", "workspace/executeCommand", {"command": "infill.status"})
            return None
        if roll < 0.90:
            return self.invalid(doc)
        if roll < 0.94:
            return self.malformed()
        if roll < 0.965:
            return self.cancelled_resolve_storm(doc)
        self.configure()
        return None

    def outside_selection(self, doc: Doc) -> dict:
        spans = line_spans(doc.text)
        line = self.rng.randrange(len(spans))
        past = utf16_len(doc.text[spans[line][0] : spans[line][1]]) + self.rng.randint(1, 2000)
        end_line, end_character, _ = random_position(self.rng, doc.text, spans)
        return {
            "start": {"line": line, "character": past},
            "end": {"line": max(line, end_line), "character": end_character},
        }

    def cancelled_resolve_storm(self, doc: Doc) -> None:
        """A Fill gap resolve cancelled at once, and a didChange storm around an inlineCompletion whose params are
        a bare string (the URI): the bad request is owed -32602 whatever is in flight."""
        listed = [(action, pending) for action, pending in self.actions if pending.doc is doc]
        if listed:
            action, pending = self.rng.choice(listed)
            msg_id = self.request("resolve", "codeAction/resolve", action, doc, action=action, listed=pending)
            self.server.notify("$/cancelRequest", {"id": msg_id})
        for _ in range(self.rng.randint(1, 6)):
            self.edit(doc)
        self.request("edge_params", "textDocument/inlineCompletion", raw=json.dumps(doc.uri))
        for _ in range(self.rng.randint(0, 6)):
            self.edit(doc)

    def invalid(self, doc: Doc) -> None:
        if self.rng.random() < 0.5:  # what the server never produced (edge_cases.py)
            kind, method, raw = edge_request(self.rng, doc.uri)
            self.request(kind, method, raw=raw)
            return
        bad = self.rng.choice(["-1", "2147483648", "1e400", "-1e400", "NaN", '"x"', "null", "1.5"])
        method, raw = self.rng.choice(
            [
                (
                    "textDocument/inlineCompletion",
                    f'{{"textDocument": {{"uri": {json.dumps(doc.uri)}}}, "position": '
                    f'{{"line": {bad}, "character": 0}}, "context": {{"triggerKind": 1}}}}',
                ),
                (
                    "textDocument/inlineCompletion",
                    f'{{"textDocument": {{"uri": {json.dumps(doc.uri)}}}, "position": '
                    f'{{"line": 0, "character": 0}}, "context": {{"triggerKind": 9}}}}',
                ),
                (
                    "textDocument/codeAction",
                    f'{{"textDocument": {{"uri": {json.dumps(doc.uri)}}}, "range": {{"start": '
                    f'{{"line": {bad}, "character": 0}}, "end": {{"line": 0, "character": 0}}}}, '
                    f'"context": {{"diagnostics": []}}}}',
                ),
                ("codeAction/resolve", '{"kind": "refactor.rewrite"}'),
                (
                    "codeAction/resolve",
                    f'{{"title": "Fill gap", "data": {{"infill": "gap", "uri": {json.dumps(doc.uri)}, '
                    f'"version": {bad}, "range": [0, {bad}, 0, 1]}}}}',
                ),
                (
                    "workspace/executeCommand",
                    f'{{"command": "infill.fillGap", "arguments": [{json.dumps(doc.uri)}, '
                    f'{{"start": {{"line": {bad}, "character": 0}}, "end": {{"line": 0, '
                    f'"character": 1}}}}]}}',
                ),
                ("textDocument/hover", "{}"),
            ]
        )
        self.request("invalid", method, raw=raw)
        # An invalid didChange is ignored, so the client's text stays as it is (1.5 too: server/jsonrpc.py).
        if self.rng.random() < 0.3:
            self.server.notify(
                "textDocument/didChange",
                raw_params=f'{{"textDocument": {{"uri": '
                f'{json.dumps(doc.uri)}, "version": {bad}}}, "contentChanges": [{{"range": {{"start": '
                f'{{"line": {bad}, "character": 0}}, "end": {{"line": 0, "character": 0}}}}, '
                f'"text": "q"}}]}}',
            )

    def malformed(self) -> None:
        choice = self.rng.randrange(7)
        if choice == 6:  # a batch: LSP has none; each request in it is refused on its own
            ids = [self.server.new_id(), f"b-{self.server.new_id()}"]
            batch = [
                {
                    "jsonrpc": "2.0",
                    "id": ids[0],
                    "method": "workspace/executeCommand",
                    "params": {"command": "infill.status"},
                },
                {"jsonrpc": "2.0", "id": ids[1], "method": "textDocument/inlineCompletion", "params": "file:///x"},
                {"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": ids[0]}},
            ]
            self.server.send(json.dumps(batch))
            for msg_id in ids:
                self.pending[msg_id] = Pending("batch", time.monotonic())
                self.stats.requests += 1
        elif choice == 0:
            self.server.send_bytes(b'{"jsonrpc": "2.0", "id": 1, "method": ')  # truncated JSON
        elif choice == 1:
            self.server.send_bytes(self.rng.choice([b"42", b"[]", b'"x"', b"null", b"\xff\xfe"]))
        else:
            msg_id = self.server.new_id() if self.rng.random() < 0.5 else f"m-{self.server.new_id()}"
            body = self.rng.choice(
                [
                    f'{{"id": {json.dumps(msg_id)}, "method": "infill/none"}}',
                    f'{{"jsonrpc": "1.0", "id": {json.dumps(msg_id)}, "method": "workspace/executeCommand", '
                    f'"params": {{"command": "infill.status"}}}}',
                    f'{{"jsonrpc": "2.0", "id": {json.dumps(msg_id)}, "method": "no/such/method"}}',
                    f'{{"jsonrpc": "2.0", "id": {json.dumps(msg_id)}, "method": "workspace/executeCommand", '
                    f'"params": {{"command": "infill.nope"}}}}',
                ]
            )
            self.server.send(body)
            self.pending[msg_id] = Pending("invalid", time.monotonic())
            self.stats.requests += 1

    def configure(self) -> None:
        bad = self.rng.choice(["1e400", "-1e400", "NaN", "12"])
        enabled = "false" if self.rng.random() < 0.2 else "true"
        related = self.rng.choice(["true", "false", '"yes"'])  # other open files in the prompt, or not; a bad value
        self.server.notify(
            "workspace/didChangeConfiguration",
            raw_params=f'{{"settings": {{"infill": {{"enabled": {enabled}, "debounceMs": {bad}, '
            f'"relatedFiles": {related}}}}}}}',
        )
        if enabled == "false":
            self.server.notify(
                "workspace/didChangeConfiguration", raw_params='{"settings": {"infill": {"enabled": true}}}'
            )

    # -- checking --------------------------------------------------------------------------------------------------
    def check(self, now: float, owed: bool = True) -> None:
        """Check replies that arrived; a request owed a reply for longer than HANG_S is a hang."""
        if (lost := self.server.responses.pop(None, None)) is not None:  # every id this client sends can be echoed
            self.stats.note("protocol_errors", f"seed {self.seed}: a reply without its request's id: {str(lost)[:200]}")
        for msg_id, pending in list(self.pending.items()):
            reply = self.server.responses.get(msg_id)
            if reply is None:
                if owed and now - pending.sent > HANG_S:
                    self.stats.note(
                        "hangs", f"seed {self.seed}: {pending.kind} id {msg_id} unanswered after {HANG_S:.0f} s"
                    )
                    self.server.dump_stacks()  # into the server's log, when it keeps one
                    del self.pending[msg_id]
                continue
            del self.pending[msg_id]
            self.check_reply(pending, reply)
        edits = self.server.applied_edits
        for edit in edits[self.checked_edits :]:
            self.check_applied(edit)
        self.checked_edits = len(edits)

    def check_reply(self, pending: Pending, reply: dict) -> None:
        error = reply.get("error")
        if error is not None:
            text = json.dumps(error)
            if error.get("code") == -32603:
                self.stats.note("internal_errors", f"{pending.kind}: {text}")
            elif "data" in error or "Traceback" in text or "site-packages" in text:
                self.stats.note("protocol_errors", f"{pending.kind}: {text}")
            elif pending.kind == "edge_params" and error.get("code") != -32602:
                self.stats.note("protocol_errors", f"non-object params answered {text}, not -32602")
            elif pending.kind == "batch" and error.get("code") != -32600:
                self.stats.note("protocol_errors", f"a request in a batch answered {text}, not -32600")
            elif pending.kind not in ("invalid", "edge_params", "batch") and error.get("code") not in (-32800,):
                self.stats.note("protocol_errors", f"{pending.kind} answered {text}")
            return
        if pending.kind in ("edge_params", "batch"):
            self.stats.note("protocol_errors", f"{pending.kind} was accepted: {str(reply)[:200]}")
            return
        if pending.kind == "fill_outside":  # refused before any fill, whatever the model would have written there
            outcome = reply.get("result") or {}
            if outcome.get("applied") is not False or any(mark in str(outcome.get("reason")) for mark in AFTER_CHECK):
                self.stats.note(
                    "bad_edits", f"seed {self.seed}: a selection outside the text answered {str(reply)[:200]}"
                )
            return
        if pending.kind == "edge_resolve" and (reply.get("result") or {}).get("edit") is not None:
            self.stats.note("bad_edits", f"resolve data the server never produced got an edit: {str(reply)[:200]}")
        if pending.kind in ("invalid", "edge_resolve"):
            return  # some are valid after all (a null line is refused, "x" is not): an answer is what is owed
        result = reply.get("result")
        if pending.kind == "fill" and isinstance(result, dict) and result.get("applied") is True:
            self.applied_replies += 1
            if self.applied_replies > self.server.accepted_edits:
                self.stats.note(
                    "bad_edits",
                    f"seed {self.seed}: applied: true {self.applied_replies} times, "
                    f"{self.server.accepted_edits} applyEdits accepted",
                )
        if pending.kind == "actions" and pending.doc is not None and result:
            generation, version, text = pending.state
            for action in result:
                self.stats.actions_checked += 1
                data = action.get("data") or {}
                if data.get("version") != version or data.get("uri") != pending.doc.uri:
                    self.stats.note(
                        "stale_edits", f"action listed for version {data.get('version')} while the client had {version}"
                    )
                self.actions.append((action, pending))
            self.actions = self.actions[-30:]
        elif pending.kind == "resolve" and result and result.get("edit"):
            self.check_resolved(pending, result["edit"])
        elif pending.kind == "inline" and result:
            _, _, text = pending.state
            spans = line_spans(text)
            for item in result.get("items", []):
                self.stats.edits_checked += 1
                r = item.get("range")
                if r and (
                    offset_of(text, spans, r["start"]["line"], r["start"]["character"]) is None
                    or offset_of(text, spans, r["end"]["line"], r["end"]["character"]) is None
                ):
                    self.stats.note("bad_edits", f"inline range {r} is not in the text it was asked on")

    def check_resolved(self, pending: Pending, edit: dict) -> None:
        listed: Pending = pending.extra["listed"]
        generation, version, text = listed.state
        (change,) = edit["documentChanges"]
        if change["textDocument"]["version"] != version:
            self.stats.note(
                "bad_edits", f"resolve edit for version {change['textDocument']['version']}, action listed at {version}"
            )
        if pending.state is None or pending.state[0] != generation or pending.state[1] != version:
            self.stats.note(
                "stale_edits",
                f"edit for generation {generation} version {version} while the client "
                f"had {pending.state[:2] if pending.state else 'closed'}",
            )
        self.check_ranges(
            text,
            change["edits"],
            pending.extra["action"]["data"].get("range"),
            pending.extra["action"]["data"].get("infill"),
        )

    def check_applied(self, edit: dict) -> None:
        (change,) = edit["documentChanges"]
        uri, version = change["textDocument"]["uri"], change["textDocument"]["version"]
        texts = self.held.get((uri, version))
        if not texts:
            self.stats.note("stale_edits", f"applyEdit for {uri} version {version}: the client never had it")
            return
        # a version number reused by a reopen holds several texts: the edit must fit one of them
        if not any(self.ranges_fit(text, change["edits"]) for text in texts):
            self.check_ranges(texts[-1], change["edits"], None, None)
        else:
            self.stats.edits_checked += len(change["edits"])

    @staticmethod
    def ranges_fit(text: str, edits: list) -> bool:
        spans = line_spans(text)
        for e in edits:
            r = e["range"]
            start = offset_of(text, spans, r["start"]["line"], r["start"]["character"])
            end = offset_of(text, spans, r["end"]["line"], r["end"]["character"])
            if start is None or end is None or start > end:
                return False
        return True

    def check_ranges(self, text: str, edits: list, selection: list | None, mode: str | None) -> None:
        spans = line_spans(text)
        self.stats.edits_checked += len(edits)
        for e in edits:
            r = e["range"]
            start = offset_of(text, spans, r["start"]["line"], r["start"]["character"])
            end = offset_of(text, spans, r["end"]["line"], r["end"]["character"])
            if start is None or end is None or start > end:
                self.stats.note("bad_edits", f"edit range {r} is not inside the text it claims")
            elif mode == "gap" and selection is not None:
                want = [r["start"]["line"], r["start"]["character"], r["end"]["line"], r["end"]["character"]]
                if want != selection and sorted([tuple(want[:2]), tuple(want[2:])]) != sorted(
                    [tuple(selection[:2]), tuple(selection[2:])]
                ):
                    self.stats.note("bad_edits", f"Fill gap edit {want} is not the selection {selection}")


def run_session(
    checkpoint: str,
    seed: int,
    seconds: float,
    stats: Stats,
    stderr_path: str | None = None,
    requests: int | None = None,
) -> None:
    """One server's session: `seconds` of steps, or until the run has sent `requests` (when given)."""
    rng = random.Random(seed)
    server = RawServer(
        ["--model", str(checkpoint), "--denoising-steps", "2"], configuration=CONFIG, stderr_path=stderr_path
    )
    stats.sessions += 1
    try:
        reply = server.initialize(timeout=180)
        if reply is None or "error" in reply:
            stats.note("protocol_errors", f"initialize answered {reply}")
            return
        ready = server.wait_ready(240)
        if not ready or ready.get("state") != "ready":
            stats.note("hangs", f"not ready: {ready}")
            return
        session = Session(server, rng, stats, seed)
        server.apply_reply = rng.choice(
            [{"applied": True}] * 4
            + [{"applied": False, "failureReason": "read-only"}, {"applied": "false"}, None, "silent"]
        )
        if server.apply_reply == "silent":  # never answers workspace/applyEdit: each Fill command is still owed one
            server.silent_to.add("workspace/applyEdit")
        end = time.monotonic() + seconds
        steps = 0
        while (stats.requests < requests) if requests is not None else (time.monotonic() < end):
            if server.proc.poll() is not None:
                stats.note("crashes", f"seed {seed}: the server exited ({server.proc.returncode}) before exit")
                return
            session.step()
            steps += 1
            if steps % 10 == 0:
                time.sleep(rng.choice([0.0, 0.05, 0.2]))
                session.check(time.monotonic())
        finish(server, session, rng, stats, seed)
    finally:
        server.kill()
        count_tracebacks(stderr_path, stats, seed)


def finish(server: RawServer, session: Session, rng: random.Random, stats: Stats, seed: int) -> None:
    """End the session: shutdown (then a request, owed InvalidRequest) and exit, or exit at once mid-work."""
    if rng.random() < 0.7:
        deadline = time.monotonic() + HANG_S
        while session.pending and time.monotonic() < deadline:  # every request before shutdown is owed a reply
            time.sleep(0.1)
            session.check(time.monotonic(), owed=False)
        session.check(time.monotonic() + HANG_S + 1)  # whatever is left now is a hang
        reply = server.call("shutdown", None, HANG_S)
        if reply is None or "error" in reply:
            stats.note("hangs" if reply is None else "protocol_errors", f"shutdown answered {reply}")
        after = server.call("workspace/executeCommand", {"command": "infill.status"}, 10)
        stats.requests += 2
        if after is None or (after.get("error") or {}).get("code") != -32600:
            stats.note("protocol_errors", f"request after shutdown answered {after}")
        want = 0
    else:
        session.check(time.monotonic(), owed=False)
        want = 1
    started = time.monotonic()
    server.notify("exit")
    code = server.exit_code(EXIT_S)
    if code != want:
        stats.note(
            "crashes" if code is not None else "hangs",
            f"seed {seed}: exit gave code {code} (want {want}) after {time.monotonic() - started:.1f} s",
        )
    if server.unparsable:
        stats.note("protocol_errors", f"{server.unparsable} unparsable frames from the server")


def run_fuzz(
    checkpoint: str,
    seconds: float,
    seed: int = 0,
    session_seconds: float = 40.0,
    stderr_dir: str | None = None,
    requests: int | None = None,
    session_requests: int = 400,
) -> Stats:
    """Sessions on fresh servers for `seconds`, or, with `requests`, until that many were sent (a session ends
    after `session_requests` of them): a count bound finds the same bugs on a slow machine as on a fast one."""
    stats = Stats()
    end = time.monotonic() + seconds
    index = 0
    while (stats.requests < requests) if requests is not None else (time.monotonic() < end):
        left = end - time.monotonic()
        run_session(
            checkpoint,
            seed * 1000 + index,
            min(session_seconds, max(5.0, left)),
            stats,
            f"{stderr_dir}/session-{index}.log" if stderr_dir else None,
            requests=None if requests is None else min(requests, stats.requests + session_requests),
        )
        index += 1
    return stats
