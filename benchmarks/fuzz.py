"""Fuzz the real infill-ls over stdio (tiny random-weight DiffusionGemma) for --minutes and print one JSON line:
sessions, requests, crashes, hangs, stale_edits, bad_edits, protocol_errors, internal_errors, tracebacks (and the
first problems found). --gateway fuzzes the real gateway instead: --slow slow connections kept open beside normal
traffic and bursts of --burst connections at once (tests/fuzz/gateway.py).

    .venv/bin/python benchmarks/fuzz.py --minutes 30 [--seed 14] [--session-seconds 60] [--busy-on 60 --busy-off 60]
    .venv/bin/python benchmarks/fuzz.py --gateway --minutes 10 [--slow 200] [--burst 200]
    .venv/bin/python benchmarks/fuzz.py --actions    # listing code actions on huge Markdown, and infill.status

--busy-on S --busy-off S: a CPU-heavy process per core beside the server, S seconds on then S seconds off, for
the whole run (the loaded machine of issue 51: a server under load must still answer, late but always).

The generator and invariants are tests/fuzz/session.py (the suite runs the same by a count of requests)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from infill.testing.benchmark_figures import kernel_flags  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument("--session-seconds", type=float, default=60.0)
    parser.add_argument(
        "--log-dir", help="keep each session's server log here (a hang also dumps the server's thread stacks into it)"
    )
    parser.add_argument(
        "--actions",
        action="store_true",
        help="instead: ms to list code actions on a 2 MB CR-only and a 1 MB one-line Markdown file, "
        "and how long infill.status waits meanwhile",
    )
    parser.add_argument("--busy-on", type=float, default=0.0, help="seconds a CPU-heavy process per core runs")
    parser.add_argument("--busy-off", type=float, default=0.0, help="seconds it then pauses (repeating)")
    parser.add_argument("--gateway", action="store_true", help="fuzz the gateway with slow connections instead")
    parser.add_argument("--slow", type=int, default=200, help="--gateway: slow connections kept open")
    parser.add_argument("--burst", type=int, default=200, help="--gateway: connections opened at once, each burst")
    args = parser.parse_args()
    from fuzz.session import run_fuzz

    from infill.testing.tiny_checkpoint import write_tiny_checkpoint

    with tempfile.TemporaryDirectory(prefix="infill-fuzz-") as tmp:
        checkpoint = write_tiny_checkpoint(Path(tmp) / "tiny")
        if args.actions:
            print(
                json.dumps({**time_actions(checkpoint), "cores": os.cpu_count(), "cpu_flags": " ".join(kernel_flags())})
            )
            return 0
        if args.gateway:
            print(
                json.dumps(
                    {
                        **fuzz_gateway(checkpoint, args),
                        "seed": args.seed,
                        "cores": os.cpu_count(),
                        "cpu_flags": " ".join(kernel_flags()),
                    }
                )
            )
            return 0
        if args.log_dir:
            Path(args.log_dir).mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        busy = BusyCpu(args.busy_on, args.busy_off)
        try:
            stats = run_fuzz(
                str(checkpoint),
                args.minutes * 60,
                seed=args.seed,
                session_seconds=args.session_seconds,
                stderr_dir=args.log_dir or tmp,
            )
        finally:
            busy.stop()
        summary = stats.summary()
        summary["minutes"] = round((time.monotonic() - started) / 60, 2)
        summary["busy_cpu_minutes"] = round(busy.seconds / 60, 2)
    summary["seed"] = args.seed
    summary["cores"] = os.cpu_count()
    summary["cpu_flags"] = " ".join(kernel_flags())
    print(json.dumps(summary))
    return 0


class BusyCpu:
    """One spinning process per core, `on_s` seconds on and `off_s` off, until stopped; `seconds` counts the on
    time. on_s 0: never."""

    def __init__(self, on_s: float, off_s: float) -> None:
        self.on_s, self.off_s, self.seconds = on_s, off_s, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        if on_s > 0:
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            spinners = [
                subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)
            ]
            began = time.monotonic()
            self._stop.wait(self.on_s)
            for spinner in spinners:
                spinner.kill()
                spinner.wait()
            self.seconds += time.monotonic() - began
            self._stop.wait(self.off_s)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()


def fuzz_gateway(checkpoint, args) -> dict:
    from fuzz.gateway import run_gateway_fuzz

    from infill.engine.config import EngineConfig
    from infill.engine.diffusion import DiffusionEngine
    from infill.engine.loading import load_diffusion_model
    from infill.pipeline import Pipeline

    engine = DiffusionEngine(load_diffusion_model(str(checkpoint)), EngineConfig(max_denoising_steps=2))
    started = time.monotonic()
    try:
        stats = run_gateway_fuzz(Pipeline(engine), args.minutes * 60, seed=args.seed, slow=args.slow, burst=args.burst)
    finally:
        engine.close()
    return {**stats, "minutes": round((time.monotonic() - started) / 60, 2)}


CR_UNIT, LINE_UNIT = "Some prose with a ___ blank, and [[a gap]] here.\r___\r\r", "A ___ blank and [[a gap]]. "
HUGE = {  # the two shapes of issue 14, fault 2 (just under the default maxDocumentChars of 2,000,000)
    "cr_only_2mb": CR_UNIT * (1_999_000 // len(CR_UNIT)),
    "one_line_1mb": LINE_UNIT * (1_000_000 // len(LINE_UNIT)),
}
TIMEOUT_S = 60.0


def time_actions(checkpoint) -> dict:
    """Per document: ms until the code-action listing (cursor at the end, no selection) answers, and ms until an
    infill.status sent right after it answers (the event loop's wait); TIMEOUT_S * 1000 means no answer by then."""
    from fuzz.rpc import RawServer

    server = RawServer(["--model", str(checkpoint)], configuration={"enabledLanguages": ["markdown"]})
    results = {}
    try:
        server.initialize()
        server.wait_ready()
        for name, text in HUGE.items():
            uri = f"file:///{name}.md"
            server.notify(
                "textDocument/didOpen",
                {"textDocument": {"uri": uri, "languageId": "markdown", "version": 1, "text": text}},
            )
            server.status()  # the open is applied
            last = text.count("\r")
            at = {"line": last, "character": 0}
            sent = time.monotonic()
            listing = server.request(
                "textDocument/codeAction",
                {"textDocument": {"uri": uri}, "range": {"start": at, "end": at}, "context": {"diagnostics": []}},
            )
            status = server.request("workspace/executeCommand", {"command": "infill.status"})
            answers = {key: server.wait(msg_id, TIMEOUT_S) for key, msg_id in (("list", listing), ("status", status))}
            results[name] = {
                f"{key}_ms": round(((reply or {}).get("_at", sent + TIMEOUT_S) - sent) * 1000, 1)
                for key, reply in answers.items()
            }
            reply = answers["list"] or {}
            results[name]["titles"] = (
                [a["title"] for a in reply.get("result") or []]
                if "result" in reply
                else reply.get("error", "no answer")
            )
            if answers["list"] is None:
                break  # the loop is still busy with it: a second document would only queue behind
    finally:
        server.kill()
    return results


if __name__ == "__main__":
    sys.exit(main())
