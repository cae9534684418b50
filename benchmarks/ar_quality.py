"""Quality and latency of the offline default (Gemma 3 270M) on held-out holes from installed packages.

Holes are cut, with a fixed seed, from single-line statements of third-party Python packages in this venv
(httpx, pygls, gguf by default): the cursor sits inside the statement and the rest of the line is the answer,
which is what an inline completion shows. Prints exact match, edit similarity, the share of non-empty fills that
keep the file parsing (ast.parse of prefix + fill + suffix; every source file parses as is), the share left empty
(before and after dropping parse-breaking fills, as the pipeline's watchdog does), and p50/p95 latency of
simulated keystrokes (typing the last characters of the prefix one by one) with and without prefix-KV reuse.

    python benchmarks/ar_quality.py --n 60            # last line: one JSON object
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import statistics
import sys
import time
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from infill.backends.offline.backend import load_default_backend  # noqa: E402
from infill.backends.offline.settings import ARSettings  # noqa: E402
from infill.languages import python_error  # noqa: E402
from infill.metrics import edit_similarity, exact_match  # noqa: E402
from infill.stats import percentile  # noqa: E402
from infill.testing.benchmark_figures import wilson_interval  # noqa: E402
from infill.types import InfillRequest  # noqa: E402

PREFIX_CHARS = 8000  # the pipeline's window before the gap
SUFFIX_CHARS = 2000


@dataclass(frozen=True)
class Hole:
    source: str  # package/relative path:line
    prefix: str
    middle: str  # the rest of the line: the answer
    suffix: str
    full_prefix: str  # everything before the gap (for the parse check)
    full_suffix: str


def _statement_lines(text: str) -> list[int]:
    """1-based numbers of lines holding a whole simple statement (no docstrings, no compound headers)."""
    tree = ast.parse(text)
    lines = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt) or node.lineno != node.end_lineno:
            continue
        if isinstance(
            node,
            (
                ast.If,
                ast.For,
                ast.While,
                ast.With,
                ast.Try,
                ast.FunctionDef,
                ast.ClassDef,
                ast.AsyncFunctionDef,
                ast.AsyncFor,
                ast.AsyncWith,
            ),
        ):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue
        lines.add(node.lineno)
    return sorted(lines)


def cut_holes(packages: list[str], n: int, seed: int) -> list[Hole]:
    rng = random.Random(seed)
    candidates: list[tuple[Path, str, int]] = []
    for name in packages:
        root = Path(import_module(name).__file__).parent
        for path in sorted(root.rglob("*.py")):
            text = path.read_text(encoding="utf-8", errors="replace")
            if text.count("\n") < 30:
                continue
            try:
                numbers = _statement_lines(text)
            except SyntaxError:
                continue
            rel = f"{name}/{path.relative_to(root)}"
            candidates.extend((path, rel, number) for number in numbers)
    holes = []
    for path, rel, number in rng.sample(candidates, min(n, len(candidates))):
        text = path.read_text(encoding="utf-8", errors="replace")
        starts = [0] + [i + 1 for i, ch in enumerate(text) if ch == "\n"]
        line_start = starts[number - 1]
        line = text[line_start:].split("\n", 1)[0]
        indent = len(line) - len(line.lstrip())
        content = line.rstrip()
        cursor = line_start + rng.randint(indent + 1, max(indent + 1, len(content) - 1))
        end = line_start + len(content)
        holes.append(
            Hole(
                source=f"{rel}:{number}",
                prefix=text[max(0, cursor - PREFIX_CHARS) : cursor],
                middle=text[cursor:end],
                suffix=text[end : end + SUFFIX_CHARS],
                full_prefix=text[:cursor],
                full_suffix=text[end:],
            )
        )
    return holes


def parses(text: str) -> bool:
    return python_error(text) is None


def quality(backend, holes: list[Hole], max_tokens: int, per_hole: list | None = None) -> dict:
    exact, similarity, parse_ok, empty, dropped, latencies = 0, [], 0, 0, 0, []
    decode_ms, steps, prefill_ms, prompt_tokens = 0.0, 0, 0.0, 0
    for hole in holes:
        request = InfillRequest(
            prefix=hole.prefix, suffix=hole.suffix, single_line=True, language="python", max_middle_tokens=max_tokens
        )
        backend.sequences.clear()  # quality pass: cold, every hole from scratch
        result = backend.infill(request)
        latencies.append(result.timings.total_ms)
        decode_ms, steps = decode_ms + result.timings.denoise_ms, steps + result.steps
        prefill_ms, prompt_tokens = prefill_ms + result.timings.encode_ms, prompt_tokens + result.prompt_tokens
        fill = result.middle if result.outcome == "ok" else ""
        keeps_parsing = bool(fill.strip()) and parses(hole.full_prefix + fill + hole.full_suffix)
        if not fill.strip():
            empty += 1
        elif keeps_parsing:
            parse_ok += 1
        else:
            dropped += 1
        shown = fill if keeps_parsing else ""
        exact += exact_match(shown, hole.middle)
        similarity.append(edit_similarity(shown, hole.middle))
        if per_hole is not None:
            per_hole.append(
                {
                    "source": hole.source,
                    "fill": fill,
                    "shown": shown,
                    "exact": exact_match(shown, hole.middle),
                    "ms": result.timings.total_ms,
                }
            )
        print(
            f"{hole.source:45s} {result.outcome:9s} {result.timings.total_ms:7.0f} ms  want {hole.middle!r:40.40s}"
            f"  got {fill!r:40.40s}{'' if keeps_parsing or not fill.strip() else '  [breaks parse]'}",
            flush=True,
        )
    n = len(holes)
    non_empty = n - empty
    return {
        "holes": n,
        "exact_match": exact / n,
        "exact_match_95ci": [round(x, 4) for x in wilson_interval(exact, n)],
        "edit_similarity": statistics.mean(similarity),
        "parse_ok_of_non_empty": parse_ok / non_empty if non_empty else float("nan"),
        "empty_rate": empty / n,
        "empty_rate_after_parse_drop": (empty + dropped) / n,
        "cold_p50_ms": percentile(latencies, 50),
        "cold_p95_ms": percentile(latencies, 95),
        "decode_ms_per_token": decode_ms / max(1, steps),
        "prefill_ms_per_prompt_token": prefill_ms / max(1, prompt_tokens),
        "mean_prompt_tokens": prompt_tokens / n,
    }


def keystrokes(backend, holes: list[Hole], typed: int, max_tokens: int) -> dict:
    """Type the last `typed` characters of each prefix one by one; time every keystroke after the first, with
    prefix-KV reuse (one document) and without (a new document id each time), interleaved so that the load of a
    shared machine hits both alike."""
    figures: dict[str, dict[str, list[float]]] = {
        mode: {"total": [], "encode": [], "reused": [], "new": []} for mode in ("reuse", "no_reuse")
    }
    for index, hole in enumerate(holes):
        backend.sequences.clear()
        for k in range(typed, -1, -1):
            prefix = hole.prefix[: len(hole.prefix) - k]
            for mode, doc in (("reuse", f"doc{index}"), ("no_reuse", f"doc{index}-{k}")):
                result = backend.infill(
                    InfillRequest(
                        prefix=prefix,
                        suffix=hole.suffix,
                        single_line=True,
                        language="python",
                        max_middle_tokens=max_tokens,
                        document_id=doc,
                    )
                )
                if k < typed:
                    figures[mode]["total"].append(result.timings.total_ms)
                    figures[mode]["encode"].append(result.timings.encode_ms)
                    figures[mode]["reused"].append(result.reused_tokens / max(1, result.prompt_tokens))
                    figures[mode]["new"].append(result.prompt_tokens - result.reused_tokens)
    out = {}
    for mode, series in figures.items():
        out.update(
            {
                f"keystroke_{mode}_p50_ms": percentile(series["total"], 50),
                f"keystroke_{mode}_p95_ms": percentile(series["total"], 95),
                f"keystroke_{mode}_encode_p50_ms": percentile(series["encode"], 50),
                f"keystroke_{mode}_reused_share": statistics.mean(series["reused"]),
                f"keystroke_{mode}_encoded_tokens_p50": percentile(series["new"], 50),
            }
        )
    out["keystrokes"] = len(figures["reuse"]["total"])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=60, help="holes for the quality pass")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--packages", default="httpx,pygls,gguf")
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--skip", type=int, default=0, help="leave out the first SKIP holes (resume a cut run)")
    parser.add_argument("--latency-holes", type=int, default=6, help="holes for the keystroke simulation")
    parser.add_argument("--typed", type=int, default=3, help="characters typed per hole")
    parser.add_argument("--threads", type=int, default=None, help="llama.cpp threads (default: the physical cores)")
    parser.add_argument("--no-healing", action="store_true", help="turn token healing off")
    parser.add_argument(
        "--fresh-prompt-tokens",
        type=int,
        default=ARSettings.fresh_prompt_tokens,
        help="most prompt tokens encoded from scratch (each hole here is a cold fill; default: "
        "sized by this CPU's speed)",
    )
    parser.add_argument("--max-prompt-tokens", type=int, default=ARSettings.max_prompt_tokens)
    parser.add_argument(
        "--per-hole",
        default=None,
        help="write each hole's fill and exact flag here (JSON lines), to pair two runs hole by hole",
    )
    args = parser.parse_args(argv)

    settings = ARSettings(
        num_threads=args.threads,
        token_healing=not args.no_healing,
        fresh_prompt_tokens=args.fresh_prompt_tokens,
        max_prompt_tokens=args.max_prompt_tokens,
    )
    started = time.monotonic()
    backend = load_default_backend(settings=settings)
    load_s = time.monotonic() - started
    holes = cut_holes(args.packages.split(","), args.n, args.seed)[args.skip :]
    print(
        f"{len(holes)} holes from {args.packages} (seed {args.seed}); model loaded in {load_s:.1f} s; "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores",
        flush=True,
    )
    figures = {
        "model": backend.info.label,
        "weights": backend.info.dtype,
        "versions": backend.versions,
        "seed": args.seed,
        "token_healing": not args.no_healing,
        "threads": args.threads,
        "fresh_prompt_tokens": backend.fresh_prompt_tokens,
        "max_prompt_tokens": settings.max_prompt_tokens,
        "load_s": load_s,
        **quality(backend, holes, args.max_tokens, per_hole := []),
    }
    if args.per_hole:
        Path(args.per_hole).write_text("".join(json.dumps(row) + "\n" for row in per_hole))
    if args.latency_holes > 0:
        figures.update(keystrokes(backend, holes[: args.latency_holes], args.typed, args.max_tokens))
    figures["load_average"] = os.getloadavg()[0]
    figures["wall_s"] = time.monotonic() - started
    backend.close()
    for key, value in figures.items():
        print(f"{key:36s} {value:.3f}" if isinstance(value, float) else f"{key:36s} {value}")
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in figures.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
