"""How often the watchdog refuses candidates, and what context building costs per keystroke.

1. A seeded, deterministic hole set cut from real source files (this venv's installed packages: Python, plus any
   Markdown/JS/JSON there): rest-of-line holes (single-line) and 1-3 removed lines (multi-line). Each hole goes
   through the real Pipeline with the tiny DiffusionGemma engine (random weights: a worst case for the watchdog) and,
   with --ar, the offline Gemma 3 270M. Printed: the share of candidates rejected per reason, per backend.
2. Context building per keystroke on a 5,000-line Python file: typing a line character by character, each keystroke
   re-parses incrementally and builds the window (p50/p95 ms), plus the syntax check of a candidate on that file.

Last line: one JSON object of figures.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import sysconfig
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from infill.checks.watchdog import check_syntax  # noqa: E402
from infill.pipeline import CompletionRequest, Pipeline, PipelineSettings  # noqa: E402
from infill.stats import percentile  # noqa: E402
from infill.types import FillControl  # noqa: E402

_LANG_BY_EXT = {".py": "python", ".md": "markdown", ".js": "javascript", ".json": "json"}


def source_files(root: Path) -> list[Path]:
    files = [p for p in root.rglob("*") if p.suffix in _LANG_BY_EXT and p.is_file()]
    return sorted(p for p in files if 2_000 < p.stat().st_size < 200_000)


def cut_holes(files: list[Path], count: int, seed: int) -> list[tuple[str, int, str, str]]:
    """(document text with the hole cut out, cursor, language, removed text) for `count` holes: 70% Python,
    the rest spread over the other languages present."""
    rng = random.Random(seed)
    by_language: dict[str, list[Path]] = {}
    for path in files:
        by_language.setdefault(_LANG_BY_EXT[path.suffix], []).append(path)
    others = sorted(k for k in by_language if k != "python")
    holes = []
    while len(holes) < count:
        language = "python" if not others or rng.random() < 0.7 else rng.choice(others)
        path = rng.choice(by_language[language])
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        lines = text.split("\n")
        candidates = [i for i, line in enumerate(lines) if len(line.strip()) >= 8]
        if len(candidates) < 10:
            continue
        row = rng.choice(candidates[3:])
        start = sum(len(line) + 1 for line in lines[:row])
        line = lines[row]
        if rng.random() < 0.5:  # single-line: the rest of a line from a random column after the indentation
            indent = len(line) - len(line.lstrip())
            column = rng.randint(indent + 1, max(indent + 1, len(line) - 2))
            cursor, end = start + column, start + len(line)
        else:  # multi-line: 1-3 whole lines removed, the cursor on the emptied line's indentation
            span = rng.randint(1, 3)
            indent = len(line) - len(line.lstrip())
            cursor = start + indent
            end = start + len("\n".join(lines[row : row + span]))
        holes.append((text[:cursor] + text[end:], cursor, _LANG_BY_EXT[path.suffix], text[cursor:end]))
    return holes


def run_holes(pipeline: Pipeline, holes, budget_s: float | None) -> dict:
    """Share of candidates rejected per reason, overall and per kind of hole (language, single/multi-line)."""
    shown, exact, latencies, context_ms = 0, 0, [], []
    groups: dict[str, Counter] = {}
    for i, (text, cursor, language, removed) in enumerate(holes):
        deadline = None if budget_s is None else time.monotonic() + budget_s
        out = pipeline.complete(
            CompletionRequest(text, cursor, language=language, document_id=f"hole{i}"), FillControl(deadline=deadline)
        )
        shown += bool(out.fills)
        exact += bool(out.fills) and out.fills[0].text.strip() == removed.strip()
        latencies.append(out.total_ms)
        context_ms.append(out.context_ms)
        for key in ("all", language, "single_line" if out.single_line else "multi_line"):
            group = groups.setdefault(key, Counter())
            group["candidates"] += 1
            group["shown"] += bool(out.fills)
            for _, reason in out.rejections:
                group[reason] += 1
    return {
        "holes": len(holes),
        "shown_share": round(shown / len(holes), 3),
        "exact_match_of_shown": round(exact / shown, 3) if shown else None,  # fill == the text cut out
        "rejected_share": {
            key: {
                reason: round(n / g["candidates"], 3)
                for reason, n in sorted(g.items())
                if reason not in ("candidates", "shown")
            }
            | {"n": g["candidates"]}
            for key, g in groups.items()
        },
        "p50_total_ms": round(statistics.median(latencies), 1),
        "p50_context_ms": round(statistics.median(context_ms), 2),
    }


def five_thousand_lines(files: list[Path]) -> str:
    """A real 5,000-line Python file: whole modules from the venv concatenated in sorted order."""
    lines: list[str] = []
    for path in files:
        if path.suffix != ".py":
            continue
        try:
            lines += path.read_text(encoding="utf-8").split("\n")
        except (UnicodeDecodeError, OSError):
            continue
        if len(lines) >= 5000:
            break
    return "\n".join(lines[:5000]) + "\n"


def keystroke_costs(text: str, keystrokes: int) -> dict:
    """Type a new line in the middle of a 5,000-line file one character at a time."""
    pipeline = Pipeline(backend=None, settings=PipelineSettings())  # type: ignore[arg-type]  # context only
    line_starts = [i + 1 for i, ch in enumerate(text) if ch == "\n"]
    insert_at = line_starts[len(line_starts) // 2]
    typed = "    result = compute_total(values, weights, normalise=True)  # typed one key at a time\n" * 8
    typed = typed[:keystrokes]
    t0 = time.perf_counter()
    pipeline.prepare(CompletionRequest(text, insert_at, language="python", document_id="big.py"))
    cold_ms = (time.perf_counter() - t0) * 1000
    per_key = []
    for n in range(1, len(typed) + 1):
        doc = text[:insert_at] + typed[:n] + text[insert_at:]
        t0 = time.perf_counter()
        pipeline.prepare(CompletionRequest(doc, insert_at + n, language="python", document_id="big.py"))
        per_key.append((time.perf_counter() - t0) * 1000)
    # The watchdog's syntax check of one candidate on the same file (incremental parse of a copy).
    prep = pipeline.prepare(CompletionRequest(text, insert_at, language="python", document_id="big.py"))
    request, spans, parsed = prep.request, prep.spans, prep.doc
    check = []
    for _ in range(30):
        t0 = time.perf_counter()
        check_syntax(["x = compute(1, 2)\n"], spans, parsed)
        check.append((time.perf_counter() - t0) * 1000)
    return {
        "file_lines": text.count("\n"),
        "keystrokes": len(per_key),
        "cold_parse_ms": round(cold_ms, 2),
        "context_p50_ms": round(percentile(per_key, 50), 3),
        "context_p95_ms": round(percentile(per_key, 95), 3),
        "syntax_check_p50_ms": round(percentile(check, 50), 3),
        "syntax_check_p95_ms": round(percentile(check, 95), 3),
        "prefix_chars": len(request.prefix),
        "suffix_chars": len(request.suffix),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--holes", type=int, default=60)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--root", default=sysconfig.get_paths()["purelib"], help="source folder to cut holes from")
    parser.add_argument("--ar", action="store_true", help="also run the offline Gemma 3 270M backend")
    parser.add_argument("--ar-holes", type=int, default=20)
    parser.add_argument("--keystrokes", type=int, default=200)
    parser.add_argument("--prefix-tokens", type=int, default=384)
    args = parser.parse_args(argv)

    files = source_files(Path(args.root))
    holes = cut_holes(files, args.holes, args.seed)
    figures: dict = {"seed": args.seed, "root": args.root, "languages": dict(Counter(h[2] for h in holes))}
    figures["keystroke"] = keystroke_costs(five_thousand_lines(files), args.keystrokes)
    print("context per keystroke:", json.dumps(figures["keystroke"]))

    # Windows smaller than the editor default keep the run short on a shared CPU; the checks are the same.
    settings = PipelineSettings(prefix_tokens=args.prefix_tokens, suffix_tokens=args.prefix_tokens // 4)
    figures["prefix_tokens"] = args.prefix_tokens
    from infill.engine.config import EngineConfig
    from infill.engine.diffusion import DiffusionEngine
    from infill.engine.loading import load_diffusion_model
    from infill.testing.tiny_checkpoint import write_tiny_checkpoint

    with tempfile.TemporaryDirectory() as tmp:
        engine = DiffusionEngine(
            load_diffusion_model(str(write_tiny_checkpoint(Path(tmp)))), EngineConfig(max_denoising_steps=8)
        )
        figures["tiny_engine"] = run_holes(Pipeline(engine, settings=settings), holes, budget_s=None)
        engine.close()
    print("tiny engine:", json.dumps(figures["tiny_engine"]))
    if args.ar:
        from infill.backends.offline.backend import load_default_backend

        backend = load_default_backend()
        figures["ar"] = run_holes(Pipeline(backend, settings=settings), holes[: args.ar_holes], budget_s=None)
        backend.close()
        print("gemma 3 270m:", json.dumps(figures["ar"]))
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
