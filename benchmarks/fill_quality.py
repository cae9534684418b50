"""What users are shown, on held-out holes, through the pipeline: the LSP path and the gateway without a language.

Holes are cut by the pilot's cutter (`infill.pilot.holes`, seeded) from the Python files of installed third-party
packages, in two disjoint sets:
- held-out (`--set heldout`, the default): HELD_OUT_PACKAGES with HELD_OUT_SEED. No choice is made on these: no
  setting, prompt format or rule may be picked by looking at them. Report them; tune nothing on them.
- development (`--set dev`): DEV_PACKAGES, any seed. Every package an earlier benchmark chose anything on
  (ar_quality's httpx, pygls and gguf; ghost_typing's sources) is here, never in the held-out set.
- clients (`--set clients`): holes cut the way editors and FIM clients send them (benchmarks/client_holes.py: any
  code line, decorators, docstring lines, block and bracket openers, the cursor at the line's start or inside it)
  from CLIENT_PACKAGES, which no benchmark had used, with CLIENT_SEED: held out like `heldout`, run once before and
  once after a change. `--set clients-dev`: the same rule on DEV_PACKAGES, any seed: where client rules are tuned.
  Their figures also come by the line's kind and by the cursor's place (`by_kind`, `by_cursor`).

Each hole goes through `infill.pipeline.Pipeline.complete`, the watchdog, cleaning and fallback included:
- lsp: as the server asks: the document's language given, the server's pipeline settings, the inline guard
  (server/scheduling.py's cap: automatic requests are stopped by the client, not by a deadline) and the other
  fills an automatic request tries where its first is refused (`INLINE_ALTERNATIVES`); lsp-invoked (on request):
  an explicitly invoked request at the same cursor, `fillCandidates` fills ranked within the explicit budget
  (a tree from before explicit requests: one fill);
- gateway: as a generic FIM client asks `infill-ls serve`: prompt + suffix, no `language`, through the gateway's
  own request parsing and `run_completion` (HTTP itself left out);
- and on request (`--paths`) gateway-best-of: the same with `best_of` at the Fill gap default (`fillCandidates`):
  that many fills ranked by their join with the suffix (infill/backends/offline/ranking.py);
- fill-gap and fill-gap-greedy: the Fill gap code action's request (server/fills.py): the hole's text selected,
  mode "gap", the language given, `fillCandidates` fills (fill-gap) or one (fill-gap-greedy), the action's
  budget (codeActionBudgetMs) as the deadline.

Per path: shown (a non-blank fill), empty, exact match and edit similarity (the pilot's definitions: nothing shown
scores 0), valid of shown (the filled file parses), each with a 95% interval (Wilson for shares, normal for means);
p50/p95 latency over every hole; why nothing was shown (the backend's outcome and the watchdog's reasons); and
for the gateway the language it detected. A cold prompt per hole: each has its own document.

    python benchmarks/fill_quality.py [--set heldout|dev] [--n 120] [--kinds single-line] [--paths lsp,gateway]
                                      [--per-hole FILE.jsonl]       # last line: one JSON object
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from client_holes import cut_client_holes  # noqa: E402

from infill.backends.offline.backend import LlamaCppBackend, load_default_backend  # noqa: E402
from infill.backends.offline.routed import RoutedBackend, open_user_model  # noqa: E402
from infill.backends.offline.settings import ARSettings  # noqa: E402
from infill.gateway.openai_api import (
    GatewaySettings,
    detect_language,
    parse_completion_params,  # noqa: E402
    run_completion,
)
from infill.metrics import edit_similarity, exact_match  # noqa: E402
from infill.pilot.files import Discovery, discover  # noqa: E402
from infill.pilot.holes import CutSettings, Hole, cut_holes  # noqa: E402
from infill.pilot.syntax import syntax_valid  # noqa: E402
from infill.pipeline import CompletionRequest, Pipeline, PipelineResult, PipelineSettings  # noqa: E402
from infill.stats import percentile  # noqa: E402
from infill.testing.benchmark_figures import (  # noqa: E402
    kernel_flags,  # noqa: E402
    mean_interval,
    wilson_interval,
)
from infill.types import FillControl  # noqa: E402
from server import scheduling  # noqa: E402
from server.budget import GUARD_CAP_MS  # noqa: E402
from server.settings import Settings  # noqa: E402

HELD_OUT_PACKAGES = ("cattrs", "h11", "anyio", "fsspec", "markdown_it", "networkx")
HELD_OUT_SEED = 2026
DEV_PACKAGES = ("httpx", "pygls", "gguf", "jinja2", "click", "packaging", "rich", "urllib3", "requests", "attr")
CLIENT_PACKAGES = ("pyparsing", "dateutil", "typer", "pluggy", "tqdm", "httpcore", "diskcache", "charset_normalizer")
CLIENT_SEED = 4711


@dataclass
class Attempt:
    shown: str  # the middle as shown ("" when nothing was)
    ms: float
    outcome: str
    reasons: list[str]
    language: str | None
    written: str | None = None  # what the backend wrote for the gap, before cleaning and judging (in-process paths)


class Recording(Pipeline):
    """The pipeline, keeping its last result: what the backend wrote for a hole that showed nothing."""

    last: PipelineResult | None = None

    def complete(self, *args, **kwargs) -> PipelineResult:
        self.last = super().complete(*args, **kwargs)
        return self.last


def _written(pipeline: Pipeline) -> str | None:
    result = pipeline.last.result if isinstance(pipeline, Recording) and pipeline.last else None
    return result.middles[0] if result is not None and result.middles else None


def package_files(names: tuple[str, ...]) -> Discovery:
    """The Python files of the named packages that are installed, paths prefixed with the package's name."""
    merged = Discovery(root=Path("."), from_git=False)
    for name in names:
        try:
            root = Path(import_module(name).__file__).parent
        except ImportError:
            continue
        found = discover(root)
        merged.files.extend(
            type(f)(path=f"{name}/{f.path}", language=f.language, text=f.text)
            for f in found.files
            if f.language == "python"
        )
        merged.skipped.update(found.skipped)
    return merged


def middle_of(text: str, start: int, end: int, fill: str, hole: Hole) -> str:
    """The middle a fill replacing text[start:end] shows between the hole's prefix and suffix (a fill may also
    rewrite typed characters before the cursor or text after it)."""
    filled = text[:start] + fill + text[end:]
    if not (filled.startswith(hole.prefix) and filled.endswith(hole.suffix)):
        return fill  # it rewrote the context itself: judged as it stands
    return filled[len(hole.prefix) : len(filled) - len(hole.suffix)]


# Whether this tree's requests can be marked explicit (ranked within the explicit budget); a tree from before:
# its invoked inline requests were not ranked, its Fill gap ranked until the action's deadline.
EXPLICIT = "explicit" in CompletionRequest.__dataclass_fields__


def ask_lsp(pipeline: Pipeline, hole: Hole, deadline_ms: float, invoked: bool = False) -> Attempt:
    """As the server asks at the hole's cursor: an automatic request (with its other fills where the first is
    refused), or with `invoked` an explicitly invoked one (this tree's server ranks its fills: `fillCandidates`)."""
    text, start = hole.text_without_middle, len(hole.prefix)
    # An automatic request's other fills, as the server asks them (a tree from before they existed: none).
    other = {"alternatives": scheduling.INLINE_ALTERNATIVES} if hasattr(scheduling, "INLINE_ALTERNATIVES") else {}
    if invoked:
        other = {"candidates": Settings().fill_candidates, "explicit": True} if EXPLICIT else {}
    request = CompletionRequest(
        text=text,
        start=start,
        end=start,
        mode=hole.mode,
        language=hole.language,
        document_id=f"bench-{'invoked' if invoked else 'lsp'}:{hole.id}",
        keystroke=not invoked,  # an automatic request is a keystroke, as the server sends it (offline/routed.py)
        **other,
    )
    t0 = time.perf_counter()
    outcome = pipeline.complete(request, FillControl(deadline=time.monotonic() + deadline_ms / 1000))
    ms = (time.perf_counter() - t0) * 1000
    fill = outcome.fills[0] if outcome.fills else None
    shown = middle_of(text, fill.start, fill.end, fill.text, hole) if fill and fill.text.strip() else ""
    return Attempt(
        shown,
        ms,
        outcome.result.outcome if outcome.result else "none",
        [reason for _, reason in outcome.rejections],
        hole.language,
        _written(pipeline),
    )


PATHS = ("lsp", "lsp-invoked", "gateway", "gateway-best-of", "fill-gap", "fill-gap-greedy", "http")


def ask_fill_gap(pipeline: Pipeline, hole: Hole, candidates: int) -> Attempt:
    """As the Fill gap action asks: the hole's own text is the selection (the model never sees it), mode "gap"."""
    start, end = len(hole.prefix), len(hole.prefix) + len(hole.middle)
    text = hole.prefix + hole.middle + hole.suffix
    request = CompletionRequest(
        text=text,
        start=start,
        end=end,
        mode="gap",
        language=hole.language,
        document_id=f"bench-gap{candidates}:{hole.id}",
        candidates=candidates,
        **({"explicit": True} if EXPLICIT else {}),  # as server/fills.py asks
    )
    t0 = time.perf_counter()
    outcome = pipeline.complete(
        request, FillControl(deadline=time.monotonic() + Settings().code_action_budget_ms / 1000)
    )
    ms = (time.perf_counter() - t0) * 1000
    fill = outcome.fills[0] if outcome.fills else None
    shown = middle_of(text, fill.start, fill.end, fill.text, hole) if fill and fill.text.strip() else ""
    return Attempt(
        shown,
        ms,
        outcome.result.outcome if outcome.result else "none",
        [reason for _, reason in outcome.rejections],
        hole.language,
    )


def ask_gateway(pipeline: Pipeline, hole: Hole, settings: GatewaySettings, best_of: int = 1) -> Attempt:
    params = parse_completion_params(
        {
            "prompt": hole.prefix,
            "suffix": hole.suffix,
            "best_of": best_of,
            "infill_document": f"bench-gw{best_of}-{hole.id}",
        },
        settings,
    )
    t0 = time.perf_counter()
    extension, text, _ = run_completion(pipeline, params, settings)
    ms = (time.perf_counter() - t0) * 1000
    start, end = extension["replace"]
    shown = middle_of(hole.text_without_middle, start, end, text, hole) if text.strip() else ""
    return Attempt(
        shown,
        ms,
        extension["outcome"],
        [reason for _, reason in extension["rejections"]],
        detect_language(hole.prefix, hole.suffix),
        _written(pipeline),
    )


def ask_http(url: str, hole: Hole, token: str | None) -> Attempt:
    """As `ask_gateway`, over HTTP to a running `infill-ls serve` (any version: to pair trees)."""
    body = json.dumps({"prompt": hole.prefix, "suffix": hole.suffix}).encode()
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url.rstrip("/") + "/v1/completions", body, headers), timeout=120
        ) as reply:
            answer = json.loads(reply.read())
    except (OSError, ValueError) as exc:
        return Attempt("", (time.perf_counter() - t0) * 1000, f"http error: {exc}", [], None)
    ms = (time.perf_counter() - t0) * 1000
    text, extension = answer["choices"][0]["text"], answer.get("infill") or {}
    start, end = extension.get("replace") or (len(hole.prefix), len(hole.prefix))
    shown = middle_of(hole.text_without_middle, start, end, text, hole) if text.strip() else ""
    return Attempt(
        shown,
        ms,
        extension.get("outcome", "ok" if shown else "empty"),
        [reason for _, reason in extension.get("rejections", [])],
        extension.get("language"),
    )


def judge(hole: Hole, attempt: Attempt) -> dict:
    original = hole.prefix + hole.middle + hole.suffix
    shown = bool(attempt.shown.strip())
    valid = syntax_valid(hole.language, original, hole.prefix + attempt.shown + hole.suffix) if shown else None
    why = None if shown else (attempt.reasons[0].split(":")[0] if attempt.reasons else attempt.outcome)
    return {
        "shown": shown,
        "exact": shown and exact_match(attempt.shown, hole.middle),
        "similarity": edit_similarity(attempt.shown, hole.middle) if shown else 0.0,
        "valid": valid,
        "ms": round(attempt.ms, 1),
        "why_not_shown": why,
        "language": attempt.language,
        "fill": attempt.shown,
        "outcome": attempt.outcome,
        **({} if shown else {"written": attempt.written}),
    }


def _share(count: int, n: int) -> dict:
    low, high = wilson_interval(count, n)
    return {
        "value": round(count / n, 4) if n else None,
        "ci95": [round(low, 4), round(high, 4)],
        "count": count,
        "of": n,
    }


def summarise(records: list[dict]) -> dict:
    summary = _figures(records)
    for field in ("kind", "cursor"):
        groups = sorted({r[field] for r in records if r.get(field)})
        if groups:
            summary[f"by_{field}"] = {
                g: _figures([r for r in records if r.get(field) == g], brief=True) for g in groups
            }
    return summary


def _figures(records: list[dict], brief: bool = False) -> dict:
    n = len(records)
    shown = [r for r in records if r["shown"]]
    judged = [r for r in shown if r["valid"] is not None]
    similarity = [r["similarity"] for r in records]
    interval = mean_interval(similarity)
    times = [r["ms"] for r in records]
    if brief:
        return {
            "holes": n,
            "shown": _share(len(shown), n),
            "exact": _share(sum(r["exact"] for r in records), n),
            "valid_of_shown": _share(sum(1 for r in judged if r["valid"]), len(judged)),
            "why_not_shown": dict(Counter(r["why_not_shown"] for r in records if not r["shown"]).most_common()),
        }
    return {
        "holes": n,
        "shown": _share(len(shown), n),
        "empty": _share(n - len(shown), n),
        "exact": _share(sum(r["exact"] for r in records), n),
        "edit_similarity": {
            "value": round(sum(similarity) / n, 4) if n else None,
            "ci95": [round(min(1.0, max(0.0, x)), 4) for x in interval] if interval else None,
        },
        "valid_of_shown": _share(sum(1 for r in judged if r["valid"]), len(judged)),
        "p50_ms": round(percentile(times, 50) or 0),
        "p95_ms": round(percentile(times, 95) or 0),
        "why_not_shown": dict(Counter(r["why_not_shown"] for r in records if not r["shown"]).most_common()),
        "languages": dict(Counter(str(r["language"]) for r in records).most_common()),
        # cut short by the deadline: on this shared machine, mostly other work's load (paired.py can leave them out)
        "cut_short": sum(r.get("outcome") == "cut_short" for r in records),
    }


def _commit() -> str | None:
    try:
        return (
            subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"],
                cwd=Path(__file__).resolve().parents[1],
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout.strip()
            or None
        )
    except OSError:
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", choices=("heldout", "dev", "clients", "clients-dev"), default="heldout")
    parser.add_argument("--n", type=int, default=120)
    parser.add_argument("--seed", type=int, default=None, help="dev set only (the held-out seed is fixed)")
    parser.add_argument("--kinds", default="single-line", help="comma-separated pilot hole kinds")
    parser.add_argument(
        "--paths",
        default="lsp,gateway",
        help="lsp, lsp-invoked, gateway, gateway-best-of, fill-gap and fill-gap-greedy (in-process), http (--url)",
    )
    parser.add_argument(
        "--url", default=None, help="path http: a running `infill-ls serve`, e.g. http://127.0.0.1:8765"
    )
    parser.add_argument("--per-hole", default=None, help="write each hole's result here (JSON lines)")
    parser.add_argument("--offline-model", default=None, help="a GGUF in place of Gemma 3 270M (user_model.py)")
    parser.add_argument("--offline-model-keystrokes", default="auto", choices=("auto", "yes", "no"))
    args = parser.parse_args(argv)
    fixed = {"heldout": HELD_OUT_SEED, "clients": CLIENT_SEED}.get(args.set)
    if fixed is not None and args.seed not in (None, fixed):
        parser.error(f"the held-out set {args.set} has one seed ({fixed}); other seeds are for the dev sets")
    packages = {"heldout": HELD_OUT_PACKAGES, "clients": CLIENT_PACKAGES}.get(args.set, DEV_PACKAGES)
    seed = fixed if fixed is not None else (args.seed if args.seed is not None else 1)
    paths = [p for p in args.paths.split(",") if p]
    if unknown := set(paths) - set(PATHS):
        parser.error(f"unknown path(s) {', '.join(sorted(unknown))}; choose from {', '.join(PATHS)}")

    started = time.monotonic()
    files = package_files(packages)
    if args.set.startswith("clients"):
        cut = cut_client_holes(files, args.n, seed)
        holes, kinds = [c.hole for c in cut], {c.hole.id: (c.kind, c.cursor) for c in cut}
    else:
        holes, kinds = cut_holes(files, CutSettings(n=args.n, seed=seed, kinds=tuple(args.kinds.split(",")))), {}
    if "http" in paths and not args.url:
        parser.error("path http needs --url")
    backend: LlamaCppBackend | RoutedBackend | None = None
    if set(paths) - {"http"}:
        backend = (
            open_user_model(args.offline_model, args.offline_model_keystrokes, ARSettings())
            if args.offline_model
            else load_default_backend()
        )
    lsp = Recording(backend, settings=PipelineSettings(max_middle_tokens=Settings().max_middle_tokens))
    gateway, gateway_settings = Recording(backend), GatewaySettings()
    records: dict[str, list[dict]] = {path: [] for path in paths}
    out = open(args.per_hole, "w", encoding="utf-8") if args.per_hole else None
    for hole in holes:
        for path in paths:
            attempt = (
                ask_lsp(lsp, hole, GUARD_CAP_MS)
                if path == "lsp"
                else ask_lsp(lsp, hole, GUARD_CAP_MS, invoked=True)
                if path == "lsp-invoked"
                else ask_http(args.url, hole, os.environ.get("INFILL_GATEWAY_TOKEN"))
                if path == "http"
                else ask_gateway(gateway, hole, gateway_settings, Settings().fill_candidates)
                if path == "gateway-best-of"
                else ask_fill_gap(lsp, hole, Settings().fill_candidates if path == "fill-gap" else 1)
                if path.startswith("fill-gap")
                else ask_gateway(gateway, hole, gateway_settings)
            )
            record = judge(hole, attempt)
            if hole.id in kinds:
                record["kind"], record["cursor"] = kinds[hole.id]
            records[path].append(record)
            if out:
                out.write(
                    json.dumps(
                        {
                            "id": hole.id,
                            "path": path,
                            "source": f"{hole.path}:{hole.line}",
                            "want": hole.middle,
                            **record,
                        }
                    )
                    + "\n"
                )
            print(
                f"{path:7s} {hole.path}:{hole.line:<5d} {record['ms']:7.0f} ms want {hole.middle!r:.40s} "
                f"got {record['fill']!r:.40s} {'' if record['shown'] else record['why_not_shown']}",
                flush=True,
            )
    if out:
        out.close()
    if backend is not None:
        backend.close()
    report = {
        "set": args.set,
        "packages": [p for p in packages if p in {f.path.split("/")[0] for f in files.files}],
        "seed": seed,
        "kinds": "clients" if kinds else args.kinds,
        "commit": _commit(),
        "holes": len(holes),
        **{path: summarise(recs) for path, recs in records.items()},
        "backend": backend.info.model if backend else args.url,
        "backend_label": backend.info.label if backend else None,
        "prompt": backend.versions["prompt"] if isinstance(backend, LlamaCppBackend) else None,
        "cores": os.cpu_count(),
        "cpu_flags": kernel_flags(),
        "load_avg": [round(x, 2) for x in os.getloadavg()],
        "seconds": round(time.monotonic() - started),
    }
    if len(paths) == 2:
        pairs = list(zip(*records.values()))
        report["exact_only_in"] = {
            paths[0]: sum(a["exact"] and not b["exact"] for a, b in pairs),
            paths[1]: sum(b["exact"] and not a["exact"] for a, b in pairs),
        }
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
