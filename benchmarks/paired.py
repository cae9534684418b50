"""Two runs of fill_quality.py on the same holes, compared hole by hole (before/after a change).

    python benchmarks/paired.py BEFORE.jsonl AFTER.jsonl [--paths lsp,gateway]   # last line: one JSON object

Both files are `fill_quality.py --per-hole` outputs; holes are matched by (id, source, path). Per path: shown,
exact and valid of shown before and after (Wilson 95% intervals); the paired difference in shown and in exact with
Newcombe's 95% interval for paired shares (method 10: Wilson intervals of each run and their correlation); holes
won and lost (`--drop-cut-short` leaves out holes cut short in either run); latency p50/p95 and the after/before ratio
of medians (the runs' machine load may differ: a figure to pair, not to quote alone); why nothing was shown, by the
line's kind, before and after.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from infill.stats import percentile  # noqa: E402
from infill.testing.benchmark_figures import wilson_interval  # noqa: E402


def load(path: str) -> dict[tuple[str, str, str], dict]:
    with open(path, encoding="utf-8") as src:
        records = [json.loads(line) for line in src if line.strip()]
    return {(r["id"], r["source"], r["path"]): r for r in records}


def share(count: int, n: int) -> dict:
    low, high = wilson_interval(count, n)
    return {
        "value": round(count / n, 4) if n else None,
        "ci95": [round(low, 4), round(high, 4)],
        "count": count,
        "of": n,
    }


def paired_difference(before: list[bool], after: list[bool]) -> dict:
    """after - before, for one yes/no figure per hole, with Newcombe's interval (method 10)."""
    n = len(before)
    a = sum(x and y for x, y in zip(before, after))
    b = sum(x and not y for x, y in zip(before, after))  # lost
    c = sum(y and not x for x, y in zip(before, after))  # won
    d = n - a - b - c
    if n == 0:
        return {"difference": None}
    p1, p2 = (a + b) / n, (a + c) / n
    l1, u1 = wilson_interval(a + b, n)
    l2, u2 = wilson_interval(a + c, n)
    denominator = (a + b) * (c + d) * (a + c) * (b + d)
    phi = (a * d - b * c) / math.sqrt(denominator) if denominator else 0.0
    delta = math.sqrt(max(0.0, (p2 - l2) ** 2 - 2 * phi * (p2 - l2) * (u1 - p1) + (u1 - p1) ** 2))
    epsilon = math.sqrt(max(0.0, (u2 - p2) ** 2 - 2 * phi * (u2 - p2) * (p1 - l1) + (p1 - l1) ** 2))
    return {
        "difference": round(p2 - p1, 4),
        "ci95": [round(p2 - p1 - delta, 4), round(p2 - p1 + epsilon, 4)],
        "won": c,
        "lost": b,
    }


def compare(before: list[dict], after: list[dict]) -> dict:
    out: dict = {"holes": len(before)}
    for name, rows in (("before", before), ("after", after)):
        shown = [r for r in rows if r["shown"]]
        judged = [r for r in shown if r["valid"] is not None]
        times = [r["ms"] for r in rows]
        out[name] = {
            "shown": share(len(shown), len(rows)),
            "exact": share(sum(r["exact"] for r in rows), len(rows)),
            "valid_of_shown": share(sum(1 for r in judged if r["valid"]), len(judged)),
            "edit_similarity": round(sum(r["similarity"] for r in rows) / max(1, len(rows)), 4),
            "p50_ms": round(percentile(times, 50) or 0),
            "p95_ms": round(percentile(times, 95) or 0),
        }
    for figure in ("shown", "exact"):
        out[f"{figure}_paired"] = paired_difference([r[figure] for r in before], [r[figure] for r in after])
    p50s = out["before"]["p50_ms"], out["after"]["p50_ms"]
    out["p50_ratio"] = round(p50s[1] / p50s[0], 3) if p50s[0] else None
    kinds = sorted({r.get("kind") or "-" for r in before})
    out["not_shown_by_kind"] = {
        kind: {
            name: dict(
                Counter(
                    r["why_not_shown"] for r in rows if (r.get("kind") or "-") == kind and not r["shown"]
                ).most_common()
            )
            for name, rows in (("before", before), ("after", after))
        }
        for kind in kinds
    }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--paths", default=None, help="comma-separated paths (default: every path in both)")
    parser.add_argument(
        "--drop-cut-short",
        action="store_true",
        help="leave out holes cut short by the deadline in either run (load from other work)",
    )
    args = parser.parse_args(argv)
    before, after = load(args.before), load(args.after)
    common = sorted(set(before) & set(after))
    paths = args.paths.split(",") if args.paths else sorted({key[2] for key in common})
    report: dict = {"before": args.before, "after": args.after, "unmatched": len(set(before) ^ set(after))}
    for path in paths:
        keys = [k for k in common if k[2] == path]
        short = [k for k in keys if "cut_short" in (before[k].get("outcome"), after[k].get("outcome"))]
        if args.drop_cut_short:
            keys = [k for k in keys if k not in set(short)]
        report[path] = {
            **compare([before[k] for k in keys], [after[k] for k in keys]),
            "cut_short_in_either": len(short),
            "cut_short_left_out": args.drop_cut_short,
        }
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
