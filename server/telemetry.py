"""Local telemetry: counts of what became of suggestions (shown / accepted full or partial / rejected / accepted
characters retained, see acceptance.py), completion latencies, and an opt-in JSONL log (setting completionLog) of
every completion and event. Nothing is sent anywhere."""

from __future__ import annotations

import json
import logging
import os
import queue
import threading
import time
from collections import Counter, deque
from typing import Any, TextIO

from infill.pipeline import PipelineResult
from infill.stats import percentile

from .acceptance import AcceptanceTracker, Suggestion
from .documents import Document
from .verdict import Verdict

log = logging.getLogger(__name__)

EVENTS = ("shown", "accepted", "rejected")


class Telemetry:
    def __init__(self, log_path: str | None = None, window: int = 1000) -> None:
        self.counts: Counter[str] = Counter()
        self.latencies_ms: deque[float] = deque(maxlen=window)
        self.log_path = log_path
        self._writer = LogWriter()
        self.acceptance = AcceptanceTracker(self.count_event)

    # -- counters --------------------------------------------------------------------------------------------------
    def offered(self, document: Document, items: list[tuple[str, int, int]]) -> list[str]:
        """An inline reply sent (each item's text and str range): counted, and remembered to infer what becomes
        of it; the ids of its suggestions."""
        self.counts["offered"] += 1
        return self.acceptance.offer(document, items)

    def record_latency(self, ms: float) -> None:
        self.latencies_ms.append(ms)

    def latency_summary(self) -> dict[str, Any]:
        values = list(self.latencies_ms)
        p50, p95 = percentile(values, 50), percentile(values, 95)
        return {
            "p50_ms": None if p50 is None else round(p50, 1),
            "p95_ms": None if p95 is None else round(p95, 1),
            "count": len(values),
        }

    def record_event(self, event: dict[str, Any]) -> str | None:
        """Count one `infill/telemetry` event; returns a problem line if it is malformed (then nothing counts)."""
        kind = event.get("event")
        if kind not in EVENTS:
            return f"infill/telemetry: unknown event {kind!r} (expected one of {', '.join(EVENTS)}); ignored"
        self.acceptance.inferring = False  # this client reports every event itself: inferring would count twice
        self.counts[kind] += 1
        if kind == "accepted":
            self.counts["accepted_partial" if event.get("partial") else "accepted_full"] += 1
            accepted = event.get("acceptedChars")
            if isinstance(accepted, int) and not isinstance(accepted, bool) and accepted >= 0:
                self.counts["accepted_chars"] += accepted
        self.append(
            {
                "type": "telemetry",
                **{
                    k: event.get(k)
                    for k in ("event", "uri", "version", "itemId", "acceptedChars", "totalChars", "partial")
                },
            }
        )
        return None

    def count_event(self, event: str, suggestion: Suggestion | None, **fields: Any) -> None:
        """Count one event of acceptance.py and log it. "accepted" counts accept actions (whole or partial),
        "accepted_chars" the characters they added; "retained_chars" of "retained_of_chars" were still there
        after the delay ("retained_measured" suggestions)."""
        if event == "shown":
            self.counts["shown"] += 1
        elif event in ("accepted_full", "accepted_partial"):
            self.counts["accepted"] += 1
            self.counts[event] += 1
            self.counts["accepted_chars"] += fields.get("gainedChars", 0)
        elif event == "rejected":
            self.counts["rejected"] += 1
        elif event == "retained":
            self.counts["retained_measured"] += 1
            self.counts["retained_of_chars"] += fields["acceptedChars"]
            self.counts["retained_chars"] += fields["retainedChars"]
        name = "accepted" if event.startswith("accepted_") else event
        partial = {"partial": event == "accepted_partial"} if name == "accepted" else {}
        self.append(
            {
                "type": "telemetry",
                "event": name,
                **partial,
                "uri": suggestion.uri if suggestion else None,
                "itemId": suggestion.id if suggestion else None,
                **fields,
            }
        )

    def summary(self) -> dict[str, int]:
        return {
            key: self.counts.get(key, 0)
            for key in (
                "offered",
                "shown",
                "accepted",
                "accepted_full",
                "accepted_partial",
                "accepted_chars",
                "rejected",
                "retained_measured",
                "retained_of_chars",
                "retained_chars",
                "completions",
                "empty",
                "discarded",
            )
        }

    # -- JSONL log -------------------------------------------------------------------------------------------------
    def record_completion(
        self,
        *,
        kind: str,
        uri: str,
        version: int | None,
        span: tuple[int, int],
        outcome: Verdict,
        result: PipelineResult | None,
        server_ms: float,
        fills: list[str],
    ) -> None:
        """Count a reply and log it (with `completionLog` set). `span`: where the request asked, in Python str
        offsets of the document's text (not LSP's UTF-16 columns): an inline request's cursor (start == end), a
        fill's selection; `outcome`: server/verdict.py's verdict."""
        self.counts["completions"] += 1
        if outcome == "empty":
            self.counts["empty"] += 1
        elif outcome == "discarded":
            self.counts["discarded"] += 1
        if not self.log_path:
            return
        infill = result.result if result is not None else None
        timings = infill.timings if infill is not None else None
        self.append(
            {
                "type": "completion",
                "kind": kind,
                "uri": uri,
                "version": version,
                "span": list(span),
                "outcome": outcome,
                "route": result.route if result else None,
                "backend": infill.backend if infill else None,
                "backend_outcome": infill.outcome if infill else None,
                "latency_ms": {
                    "server": round(server_ms, 2),
                    "context": round(result.context_ms, 2) if result else None,
                    "pipeline": round(result.total_ms, 2) if result else None,
                    "encode": timings.encode_ms if timings else None,
                    "denoise": timings.denoise_ms if timings else None,
                    "backend": timings.total_ms if timings else None,
                },
                "steps": infill.steps if infill else None,
                "rejections": result.rejections if result else [],
                "versions": infill.versions if infill else {},
                "fills": fills,
                "pipeline": result.to_log() if result is not None else None,
            }
        )

    def append(self, record: dict[str, Any]) -> None:
        path = self.log_path
        if not path:
            return
        self._writer.put(path, json.dumps({"time": time.time(), **record}, default=str, ensure_ascii=False))

    def flush(self, timeout: float = 2.0) -> None:
        """Wait (bounded) until every record appended so far is in the file."""
        self._writer.flush(timeout)


class LogWriter:
    """Appends lines to log files on its own thread, so the event loop never waits for the disk (opening and
    appending to a file costs milliseconds on a cold cache, in the reply path of every completion)."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[str | None, Any]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    def put(self, path: str, line: str) -> None:
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="infill-log-writer", daemon=True)
                self._thread.start()
        self._queue.put((path, line))

    def flush(self, timeout: float) -> None:
        if self._thread is None:
            return
        done = threading.Event()
        self._queue.put((None, done))
        done.wait(timeout)

    def _run(self) -> None:
        handle: TextIO | None = None
        open_path: str | None = None
        while True:
            path, line = self._queue.get()
            try:
                if path is None:  # a flush marker: everything before it is written
                    if handle is not None:
                        handle.flush()
                    continue
                if path != open_path:
                    if handle is not None:
                        handle.close()
                    handle, open_path = None, None
                    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
                    # (a lone surrogate from a client's text must not stop the log)
                    handle, open_path = open(path, "a", encoding="utf-8", errors="backslashreplace"), path
                assert handle is not None  # (opened above)
                handle.write(line + "\n")
                if self._queue.empty():
                    handle.flush()
            except Exception as exc:  # noqa: BLE001 - the writer thread must outlive any one bad line or disk
                log.warning("cannot append to completion log %s: %s", path or open_path, exc)
            finally:
                if path is None:
                    line.set()


class RefusalLog:
    """Which refusals were logged already: each (uri, version, reason) once (server/gate.py logs them)."""

    REMEMBERED = 1000  # keys kept; past it the log starts over

    def __init__(self) -> None:
        self._logged: set[tuple[str, int | None, str]] = set()

    def first(self, uri: str, version: int | None, reason: str) -> bool:
        """Whether this refusal is new (and now remembered)."""
        key = (uri, version, reason)
        if key in self._logged:
            return False
        if len(self._logged) >= self.REMEMBERED:
            self._logged.clear()
        self._logged.add(key)
        return True


class LogThrottle:
    """At most one line per key every `every_s` seconds, saying how many were held back since: for things that
    happen on every keystroke (a completion superseded by the next key), where a line each would flood the
    client's log and cost the event loop a notification per key."""

    def __init__(self, every_s: float = 10.0, max_keys: int = 1000) -> None:
        self.every_s = every_s
        self.max_keys = max_keys
        self._last: dict[object, tuple[float, int]] = {}  # key -> (time of the last line, lines held back since)

    def admit(self, key: object, now: float) -> int | None:
        """None: hold this line back. Otherwise log it, noting the returned count of lines held back before it."""
        last = self._last.get(key)
        if last is not None and now - last[0] < self.every_s:
            self._last[key] = (last[0], last[1] + 1)
            return None
        if len(self._last) >= self.max_keys:
            self._last.clear()
        self._last[key] = (now, 0)
        return 0 if last is None else last[1]
