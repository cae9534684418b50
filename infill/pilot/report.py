"""report.md and PNG plots (matplotlib, Agg) from a pilot's summary."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infill.pilot.summary import latencies, read_jsonl

PLOTS = {
    "quality_vs_latency.png": "Quality vs p95 latency",
    "latency_cdf.png": "Latency CDF",
    "throughput.png": "Throughput vs concurrency",
}


def _fmt(value: Any, kind: str = "") -> str:
    if value is None:
        return "–"
    if kind == "%":
        return f"{100 * value:.1f}%"
    if kind == "ms":
        return f"{value:,.0f}"
    if kind == "$":
        return f"{value:.4f}"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in rows]


def _quality_cells(q: dict[str, Any]) -> list[str]:
    return [
        str(q["attempts"]),
        _fmt(q["shown_rate"], "%"),
        _fmt(q["exact_match"], "%"),
        _fmt(q["edit_similarity"]),
        _fmt(q["syntax_valid_share"], "%"),
        _fmt(q["accept_rate"], "%"),
        _fmt(q["p50_ms"], "ms"),
        _fmt(q["p95_ms"], "ms"),
    ]


QUALITY_HEADER = ["attempts", "shown", "exact match", "edit sim.", "syntax valid", "accepted", "p50 ms", "p95 ms"]


def _side_by_side_section(summary: dict[str, Any]) -> list[str]:
    """Each kind with every backend next to each other: the diffusion vs autoregressive comparison at a glance."""
    kinds = sorted({k for f in summary.values() for k in f["by_kind"]})
    rows = []
    for kind in kinds:
        for label, f in summary.items():
            q = f["by_kind"].get(kind)
            if q:
                rows.append(
                    [
                        kind,
                        f"`{label}`",
                        str(q["attempts"]),
                        _fmt(q["accept_rate"], "%"),
                        _fmt(q["exact_match"], "%"),
                        _fmt(q["edit_similarity"]),
                        _fmt(q["p50_ms"], "ms"),
                        _fmt(q["p95_ms"], "ms"),
                    ]
                )
    header = ["kind", "backend", "attempts", "accepted", "exact match", "edit sim.", "p50 ms", "p95 ms"]
    return ["## Per kind, side by side", ""] + _table(header, rows) + [""]


def _clip(text: str, limit: int = 240) -> str:
    text = text if len(text) <= limit else text[:limit] + " …"
    return text.replace("~~~", "~ ~ ~")


def _examples_section(attempts: list[dict[str, Any]], labels: list[str]) -> list[str]:
    """The first hole of each kind, with what each backend showed (at its lowest concurrency level)."""
    lines = ["## Examples (first hole of each kind)", ""]
    firsts: dict[str, dict[str, Any]] = {}
    for a in attempts:
        firsts.setdefault(a["kind"], a)
    for kind, first in sorted(firsts.items()):
        lines += [
            f"**{kind}** — `{first['path']}` line {first['line']}; expected:",
            "",
            "~~~",
            _clip(first.get("expected", "")),
            "~~~",
            "",
        ]
        for label in labels:
            mine = sorted(
                (a for a in attempts if a["backend"] == label and a["hole_id"] == first["hole_id"]),
                key=lambda a: a["concurrency"],
            )
            if not mine:
                continue
            a = mine[0]
            verdict = (
                "accepted" if a.get("accepted") else "shown, not accepted" if a.get("shown") else "nothing shown"
            ) + (f" — rejected: {', '.join(r[1] for r in a['rejections'])}" if a.get("rejections") else "")
            verdict += f" — error: {_clip(a['error'], 120)}" if a.get("error") else ""
            lines += [f"`{label}` ({verdict}; edit similarity {_fmt(a.get('edit_similarity'))}):", ""]
            if a.get("shown"):
                lines += ["~~~", _clip(a.get("predicted", "")), "~~~", ""]
    return lines


def _backend_section(label: str, target: dict[str, Any], figures: dict[str, Any], meta: dict[str, Any]) -> list[str]:
    lines = [f"## Backend: `{label}`", ""]
    if target.get("caveat"):
        lines += [f"> **{target['caveat'].upper().split(':')[0]}**: {target['caveat'].split(':', 1)[-1].strip()}", ""]
    if target.get("open_error"):
        lines += [f"**Failed to open:** {target['open_error']}", ""]
    else:
        lines += [
            f"- engine: {target.get('name')} (kind {target.get('kind')}, model `{target.get('model')}`, "
            f"{target.get('device')}, {target.get('dtype')}), "
            + (
                "the same instance as an earlier backend"
                if target.get("shared_engine")
                else f"loaded in {target.get('load_seconds')} s"
            )
        ]
        if target.get("fallback"):
            lines += [f"- fallback: {target['fallback']}"]
        elif target.get("kind") != "autoregressive":  # an editor's default has one here: say this run has none
            lines += [
                "- fallback: none, measured alone (an editor puts the offline default behind it by default; "
                "`+fallback` measures that)"
            ]
        if target.get("kind") == "remote":
            lines += ["- served by a remote endpoint: the hardware line above is the client's, not the server's"]
    lines += [
        f"- fallback rate {_fmt(figures['fallback_rate'], '%')}, error rate {_fmt(figures['error_rate'], '%')}, "
        f"tokens per forward {_fmt(figures['tokens_per_forward'])}, attempts stopped by the time cap or "
        f"Ctrl-C (left out): {figures['stopped_attempts']}",
        "",
    ]
    price = meta.get("gpu_hour_price")
    lines += ["### Latency, throughput and cost per concurrency", ""]
    rows = [
        [
            c,
            str(v["attempts"]),
            _fmt(v["p50_ms"], "ms"),
            _fmt(v["p95_ms"], "ms"),
            _fmt(v["throughput_per_hour"], "ms"),
            str(v["accepted"]),
            _fmt(v["cost_per_accepted"], "$"),
            f"{v['wall_seconds']:.1f}",
            v["stopped_by"],
        ]
        for c, v in figures["by_concurrency"].items()
    ]
    lines += _table(
        [
            "concurrency",
            "attempts",
            "p50 ms",
            "p95 ms",
            "requests/hour",
            "accepted",
            f"cost/accepted ({'at ' + str(price) + '/GPU-h' if price is not None else 'no price given'})",
            "wall s",
            "ended",
        ],
        rows,
    ) + [""]
    lines += ["### Quality (all concurrency levels together)", ""]
    lines += _table(QUALITY_HEADER, [_quality_cells(figures)]) + [""]
    lines += ["### Per kind", ""]
    lines += _table(["kind"] + QUALITY_HEADER, [[k] + _quality_cells(q) for k, q in figures["by_kind"].items()])
    lines += [""]
    if figures["rejections"]:
        lines += ["### Watchdog rejections", ""]
        lines += _table(["reason", "count"], [[r, str(n)] for r, n in figures["rejections"].items()]) + [""]
    if figures["errors"]:
        lines += ["### Errors", ""]
        lines += _table(["error", "count"], [[e.replace("|", "\\|"), str(n)] for e, n in figures["errors"].items()])
        lines += [""]
    return lines


def _setup_section(meta: dict[str, Any]) -> list[str]:
    skipped = ", ".join(f"{n} {r}" for r, n in meta.get("skipped", {}).items()) or "none"
    kinds = ", ".join(f"{k} {n}" for k, n in meta.get("hole_kinds", {}).items())
    hw = meta.get("hardware", {})
    return [
        "## Setup",
        "",
        f"- source: `{meta.get('src')}` "
        f"({'tracked files of a git repository' if meta.get('from_git') else 'folder walk'}), "
        f"{meta.get('files')} usable files; skipped: {skipped}",
        f"- holes: {meta.get('holes')} (seed {meta.get('seed')}): {kinds}",
        f"- concurrency levels: {meta.get('concurrency')}; time cap {meta.get('max_seconds')} s; per-attempt "
        f"deadline: {meta.get('deadline_ms') or 'none'}; max middle tokens {meta.get('max_middle_tokens')}; "
        f"max denoising steps (in-process diffusion) {meta.get('diffusion_steps')}",
        f"- accept rule: edit similarity ≥ {meta.get('accept_threshold')} and the filled file parses",
        f"- hardware: {hw.get('cpu')} ({hw.get('cpus')} CPUs), accelerator: {hw.get('accelerator')}; "
        f"Python {hw.get('python')}, torch {hw.get('torch')}, {hw.get('platform')}",
        f"- run: {meta.get('started')} → {meta.get('finished')}, ended by: {meta.get('stopped_by')}",
        f"- command: `{meta.get('command')}`",
        "",
    ]


def _summary_section(summary: dict[str, Any], targets: list[dict[str, Any]]) -> list[str]:
    caveats = {t["label"]: t.get("caveat") for t in targets}
    rows = []
    for label, f in summary.items():
        best: dict[str, Any] = max(
            f["by_concurrency"].values(), key=lambda v: v["throughput_per_hour"] or 0, default={}
        )
        name = f"`{label}`" + (" ⚠ tiny/dummy" if caveats.get(label) else "")
        rows.append([name] + _quality_cells(f) + [_fmt(best.get("throughput_per_hour"), "ms")])
    return (
        ["## Summary", ""]
        + _table(["backend"] + QUALITY_HEADER + ["best requests/hour"], rows)
        + [
            "",
            "⚠ tiny/dummy: a random-weight DiffusionGemma; its text quality is meaningless, only its latency and "
            "mechanics are measured."
            if any(caveats.values())
            else "",
            "",
        ]
    )


NOTES = """## What was measured

- Every attempt goes through `infill.pipeline.Pipeline.complete` with the same request for every backend: the file
  with the middle removed and an empty span where it was (`inline` mode for single-line holes, `gap` for the rest).
- **Latency** is wall time around `Pipeline.complete` (context building, backend, post-processing, fallback), in
  ms; p50/p95 use linear interpolation and leave out attempts that failed (they return early). A warm-up attempt
  per backend is not recorded.
- **Exact match** and **edit similarity** (1 − Levenshtein / longer length) compare the shown middle with the
  original after normalising line endings, trailing spaces and blank lines at either end; nothing shown scores 0.
- **Syntax valid**: the filled file parses (Python: `ast`; other languages: tree-sitter finds no more ERROR/MISSING
  nodes than in the original). Share among shown fills whose file could be judged.
- **Accepted without material edit**: shown, edit similarity ≥ the threshold, and not syntax-invalid.
- **Throughput**: completed attempts per hour of a cell's wall time at that concurrency (worker threads).
- **Cost per accepted**: GPU-hour price × the cell's wall hours / accepted results in it. An accepted result is
  what the editor's telemetry counts as an accept (`infill.status`: `accepted`); its characters are
  `accepted_chars`, and `retained_chars` are those of them the author wrote too, by the definition the server
  uses for accepted characters still present 30 s later (`infill.metrics.retained_chars`).
- **Watchdog rejections** and **fallback rate** come from the pipeline's `rejections` and `route`.
- Raw data: `holes.jsonl` (every hole with prefix/middle/suffix), `attempts.jsonl` (every attempt),
  `cells.jsonl` (every backend × concurrency pass), `summary.json`.
"""


def write_report(out_dir: Path, summary: dict[str, Any], targets: list[dict[str, Any]], meta: dict[str, Any]) -> Path:
    lines = [f"# infill-ls pilot: {Path(str(meta.get('src', ''))).name or meta.get('src')}", ""]
    if meta.get("stopped_by") not in (None, "done"):
        lines += [f"**Partial run** — ended by {meta['stopped_by']}; the figures cover the attempts that finished.", ""]
    lines += _setup_section(meta) + _summary_section(summary, targets) + _side_by_side_section(summary)
    by_label = {t["label"]: t for t in targets}
    for label, figures in summary.items():
        lines += _backend_section(label, by_label.get(label, {"label": label}), figures, meta)
    attempts = [a for a in read_jsonl(out_dir / "attempts.jsonl") if not a.get("stopped")]
    lines += _examples_section(attempts, list(summary))
    lines += ["## Plots", ""] + [f"![{title}]({name})" for name, title in PLOTS.items()] + [""]
    lines += [NOTES]
    path = out_dir / "report.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


def write_plots(out_dir: Path, summary: dict[str, Any]) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    attempts = [a for a in read_jsonl(out_dir / "attempts.jsonl") if not a.get("stopped")]
    paths = []

    colors = {label: f"C{i % 10}" for i, label in enumerate(summary)}  # one colour per backend in every plot
    levels = sorted({a["concurrency"] for a in attempts})
    markers = {c: "osD^v<>p*h"[i % 10] for i, c in enumerate(levels)}
    dashes = {c: ["-", "--", ":", "-."][i % 4] for i, c in enumerate(levels)}

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for label, f in summary.items():
        for c, v in f["by_concurrency"].items():
            mine = [a for a in attempts if a["backend"] == label and str(a["concurrency"]) == c]
            if v["p95_ms"] is None or not mine:
                continue
            accept = sum(bool(a.get("accepted")) for a in mine) / len(mine)
            sim = sum(float(a.get("edit_similarity") or 0) for a in mine) / len(mine)
            style = {"color": colors[label], "marker": markers.get(int(c), "o"), "s": 45, "label": f"{label} c={c}"}
            left.scatter(v["p95_ms"], 100 * accept, **style)
            right.scatter(v["p95_ms"], sim, **style)
    for axis, ylabel, top in ((left, "accepted without material edit (%)", 100), (right, "mean edit similarity", 1)):
        axis.set_xlabel("p95 latency (ms, log scale)")
        axis.set_xscale("log")
        axis.set_ylabel(ylabel)
        axis.set_ylim(-0.03 * top, 1.03 * top)
        axis.grid(alpha=0.3)
    _legend(left)
    fig.suptitle("Quality vs p95 latency (one point per backend and concurrency level)")
    fig.tight_layout()
    paths.append(_save(fig, out_dir / "quality_vs_latency.png", plt))

    fig, axis = plt.subplots(figsize=(7, 4.2))
    for label in summary:
        for c in sorted({a["concurrency"] for a in attempts if a["backend"] == label}):
            lat = sorted(latencies([a for a in attempts if a["backend"] == label and a["concurrency"] == c]))
            if lat:
                axis.step(
                    lat,
                    [(i + 1) / len(lat) for i in range(len(lat))],
                    where="post",
                    color=colors[label],
                    linestyle=dashes[c],
                    label=f"{label} c={c}",
                )
    axis.set_xscale("log")
    axis.set_xlabel("latency (ms, log scale)")
    axis.set_ylabel("share of attempts")
    axis.set_ylim(0, 1.02)
    axis.grid(alpha=0.3)
    _legend(axis)
    axis.set_title("Latency CDF")
    fig.tight_layout()
    paths.append(_save(fig, out_dir / "latency_cdf.png", plt))

    fig, axis = plt.subplots(figsize=(7, 4.2))
    for label, f in summary.items():
        points = [
            (int(c), v["throughput_per_hour"])
            for c, v in f["by_concurrency"].items()
            if v["throughput_per_hour"] is not None
        ]
        if points:
            axis.plot([p[0] for p in points], [p[1] for p in points], marker="o", color=colors[label], label=label)
    axis.set_xscale("log", base=2)
    if levels:
        axis.set_xticks(levels, [str(c) for c in levels])
    axis.set_xlabel("concurrency (worker threads)")
    axis.set_ylabel("completed requests / hour")
    axis.grid(alpha=0.3)
    _legend(axis)
    axis.set_title("Throughput vs concurrency")
    fig.tight_layout()
    paths.append(_save(fig, out_dir / "throughput.png", plt))
    return paths


def _legend(axis: Any) -> None:
    if axis.get_legend_handles_labels()[0]:  # a run with no answered attempt has nothing to label
        axis.legend(fontsize=7)


def _save(fig: Any, path: Path, plt: Any) -> Path:
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
