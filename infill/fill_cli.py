"""`infill-ls fill PATH --at LINE:COL | --range L1:C1-L2:C2 | --all-gaps [--json]`: one fill through the editor
pipeline.

Lines and columns are 1-based; a range's end is exclusive. Prints the middle, or one JSON object with --json.
--all-gaps fills every Markdown placeholder ([[...]], {{...}}, ___) jointly, as Fill all gaps does in an editor, and
prints the whole filled document.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

from infill.backends.choose import add_model_options, spec_from_args
from infill.completion import Mode
from infill.context.builder import find_placeholders
from infill.context.lines import line_content, split_lines
from infill.context.syntax import apply_fills, language_of_path
from infill.loader import add_fallback_options, close_quietly, fallback_from_args, open_pipeline
from infill.pipeline import MAX_GAPS, CompletionRequest, PipelineSettings
from infill.types import FillControl, InfillError, deadline_in
from infill.worker import ModelWorker, OnWorker

MAX_FILE_BYTES = 10 * 2**20


def parse_point(text: str) -> tuple[int, int]:
    try:
        line, col = (int(part) for part in text.split(":"))
    except ValueError:
        raise InfillError(f"expected LINE:COL (1-based), got {text!r}") from None
    if line < 1 or col < 1:
        raise InfillError(f"lines and columns are 1-based, got {text!r}")
    return line, col


def offset_of(text: str, line: int, col: int) -> int:
    lines = split_lines(text)  # lines as an editor counts them (str.splitlines also breaks at form feeds, U+2028)
    if line > len(lines):
        raise InfillError(f"line {line} is past the end of the file ({len(lines) - (lines[-1] == '')} lines)")
    start = sum(len(x) for x in lines[: line - 1])
    body = line_content(lines[line - 1])
    if col > len(body) + 1:
        raise InfillError(f"column {col} is past the end of line {line} ({len(body)} characters)")
    return start + col - 1


def read_document(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InfillError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if len(data) > MAX_FILE_BYTES:
        raise InfillError(
            f"{path} is {len(data) // 2**20} MB; infill-ls fills files up to {MAX_FILE_BYTES // 2**20} MB"
        )
    if b"\0" in data[:8192]:
        raise InfillError(f"{path} looks binary (NUL bytes); nothing to fill")
    return data.decode("utf-8", errors="replace")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="infill-ls fill", description=__doc__)
    p.add_argument("path", type=Path)
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--at", help="cursor LINE:COL (1-based)")
    where.add_argument("--range", help="selection L1:C1-L2:C2 to replace (1-based, end exclusive)")
    where.add_argument("--all-gaps", action="store_true", help="fill every [[...]], {{...}} and ___ placeholder")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--budget-ms", type=float, default=None, help="latency budget (default: none)")
    p.add_argument("--max-middle-tokens", type=int, default=64)
    p.add_argument("--language")
    p.add_argument("-v", "--verbose", action="store_true")
    add_model_options(p)
    add_fallback_options(p)
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, stream=sys.stderr)
    try:
        text = read_document(args.path)
        spans = find_placeholders(text, limit=MAX_GAPS) if args.all_gaps else []
        if args.all_gaps and not spans:
            raise InfillError(f"{args.path} has no placeholders ([[...]], {{{{...}}}} or ___) to fill")
        if len(spans) == MAX_GAPS:
            print(
                f"infill-ls fill: filling the first {MAX_GAPS} placeholders; run it again for the rest", file=sys.stderr
            )
        if args.all_gaps:
            start, end = spans[0]
        elif args.at:
            start = end = offset_of(text, *parse_point(args.at))
        else:
            first, _, second = args.range.partition("-")
            start, end = offset_of(text, *parse_point(first)), offset_of(text, *parse_point(second))
            if end < start:
                raise InfillError(f"range end {second} is before its start {first}")
        opened = open_pipeline(
            spec_from_args(args),
            fallback=fallback_from_args(args),
            settings=PipelineSettings(max_middle_tokens=args.max_middle_tokens),
            progress=lambda msg, frac: print(msg, file=sys.stderr),
        )
    except InfillError as exc:
        print(f"infill-ls fill: {exc}", file=sys.stderr)
        return 2
    if opened.model_error:
        print(f"infill-ls fill: {opened.model_error}; Gemma 3 270M fills instead", file=sys.stderr)
    pipeline, backend = opened.pipeline, opened.pipeline.backend
    language = args.language or language_of_path(str(args.path)) or args.path.suffix.lstrip(".") or None
    t0 = time.perf_counter()
    mode: Mode = "gaps" if spans else "gap" if end > start else "inline"
    request = CompletionRequest(
        text=text, start=start, end=end, mode=mode, language=language, document_id=str(args.path), spans=tuple(spans)
    )
    worker = ModelWorker("infill-fill-model")  # model work runs on the model worker, as in the server and gateway
    try:
        outcome = OnWorker(pipeline, worker, kind=None).complete(
            request, FillControl(deadline=deadline_in(args.budget_ms / 1000 if args.budget_ms else None))
        )
    finally:
        # joined, not left: a daemon thread still dropping the fill's tensors while Python exits aborts the process
        # ("terminate called without an active exception" from torch, seen on a loaded 2-core machine)
        worker.shutdown(wait=True)
    latency_ms = (time.perf_counter() - t0) * 1000
    result = outcome.result
    middle = outcome.fills[0].text if outcome.fills else ""
    if spans:  # the whole document, each placeholder replaced by its fill (left as it was when none came)
        fills = sorted(outcome.fills, key=lambda f: f.start)
        middle = apply_fills(text, [(f.start, f.end) for f in fills], [f.text for f in fills])
    if args.json:
        print(
            json.dumps(
                {
                    "middle": middle,
                    "latency_ms": round(latency_ms, 1),
                    "steps": result.steps if result else 0,
                    "tokens_per_forward": round(result.tokens_per_forward, 3) if result else 0.0,
                    "cut_short": bool(result and result.cut_short),
                    "model": backend.info.model,
                    "backend": backend.info.name,
                    "kind": backend.info.kind,
                    "is_fallback": backend.info.is_fallback,
                    "outcome": result.outcome if result else "none",
                    "route": outcome.route,
                    "answered_by": result.backend if outcome.fills and result else None,
                    "fallback": pipeline.fallback.info.name if pipeline.fallback is not None else None,
                    "rejections": [list(r) for r in outcome.rejections],
                    "error": result.error if result else None,
                }
            )
        )
    else:
        if outcome.route == "fallback" and pipeline.fallback is not None:
            print(
                f"[answered by the fallback, {pipeline.fallback.info.label or pipeline.fallback.info.name}: "
                + "; ".join(f"{name}: {reason}" for name, reason in outcome.rejections)
                + "]",
                file=sys.stderr,
            )
        elif backend.info.is_fallback:
            print(f"[{backend.info.label}]", file=sys.stderr)
        print(middle)
    for opened_backend in opened.backends:
        close_quietly(opened_backend)
    return 0 if result is None or result.outcome != "error" else 1
