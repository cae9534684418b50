"""`infill-ls pilot SRC --out DIR`: cut holes from a real tree, run them through each backend at each concurrency
level, and write report.md, PNG plots, holes.jsonl, attempts.jsonl, cells.jsonl and summary.json into DIR."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shlex
import sys
from pathlib import Path
from typing import Any

from infill.backends.choose import BackendSpec, add_model_options, open_backend, spec_from_args
from infill.metrics import AcceptRule
from infill.pilot.files import DiscoverySettings, discover
from infill.pilot.holes import CutSettings, cut_holes, write_holes
from infill.pilot.report import write_plots, write_report
from infill.pilot.runner import Progress, RunSettings, run_pilot
from infill.pilot.spans import KINDS
from infill.pilot.summary import summarise
from infill.pilot.targets import TargetPool, parse_target
from infill.pipeline import PipelineSettings
from infill.types import InfillBackend, InfillError


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="infill-ls pilot", description=__doc__)
    p.add_argument("src", help="a local folder or git repository (git: tracked files only)")
    p.add_argument("--out", required=True, help="output folder (created; earlier results in it are replaced)")
    p.add_argument("--n", type=int, default=50, help="number of holes (default 50)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--kinds",
        nargs="+",
        default=None,
        help=f"hole kinds (space or comma separated; default all: {' '.join(KINDS)})",
    )
    p.add_argument(
        "--backend",
        action="append",
        default=None,
        help="repeatable: ar | diffusion:DIR | diffusion-dummy:DIR_OR_CONFIG | http://HOST:PORT/v1"
        "[#model=NAME&token=T], each optionally +fallback (AR fallback) or +raw (no post-processing, "
        "watchdog or fallback) (default: ar)",
    )
    p.add_argument("--concurrency", default="1,4,16", help="comma-separated worker counts (default 1,4,16)")
    p.add_argument("--max-seconds", type=float, default=600.0, help="time cap for the whole run (default 600)")
    p.add_argument("--deadline-ms", type=float, default=None, help="per-attempt deadline passed to the backend")
    p.add_argument("--accept-threshold", type=float, default=0.7, help="edit similarity to count as accepted")
    p.add_argument("--gpu-hour-price", type=float, default=None, help="price of one GPU hour, for cost/accepted")
    p.add_argument("--max-middle-tokens", type=int, default=PipelineSettings().max_middle_tokens)
    p.add_argument("--max-file-bytes", type=int, default=DiscoverySettings().max_file_bytes)
    p.add_argument("--no-warmup", action="store_true", help="record the first attempt per backend too")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    add_model_options(p, choose_model=False)  # for every in-process engine the --backend specs open
    return p


def _kinds(values: list[str] | None) -> tuple[str, ...]:
    if not values:
        return KINDS
    return tuple(k for v in values for k in v.split(",") if k)


def _concurrency(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise InfillError(f"--concurrency must be comma-separated integers, got {text!r}") from None


def hardware() -> dict[str, Any]:
    info = {
        "cpu": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "accelerator": "none (CPU only)",
        "torch": None,
    }
    try:
        import torch

        info["torch"] = torch.__version__
        if torch.cuda.is_available():
            info["accelerator"] = ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
    except ImportError:
        pass
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return info


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


class StepCapRecorder:
    """Opens backends as the pilot's pool does, noting each in-process DiffusionGemma engine's step cap as the
    engine resolved it (an explicit --denoising-steps, else the checkpoint's generation_config.json, else the
    default) and where it came from, so that the report states the cap that ran, not the option given."""

    def __init__(self) -> None:
        self.by_model: dict[str, tuple[int, str]] = {}

    def __call__(self, spec: BackendSpec) -> InfillBackend:
        backend = open_backend(spec)
        versions = getattr(backend, "versions", None)
        if spec.model and not spec.endpoint and backend.info.kind == "diffusion" and callable(versions):
            described = versions()
            self.by_model[spec.model] = (
                described["max_denoising_steps"],
                described["settings_from"]["max_denoising_steps"],
            )
        return backend

    def meta(self) -> dict[str, Any]:
        """{"diffusion_steps", "diffusion_steps_from"}: one value each when every engine agrees (None when no
        in-process engine ran), else one per checkpoint."""
        steps = {model: cap for model, (cap, _) in self.by_model.items()}
        sources = {model: source for model, (_, source) in self.by_model.items()}

        def one_or_each(values: dict[str, Any]) -> Any:
            distinct = set(values.values())
            if len(distinct) > 1:
                return values
            return distinct.pop() if distinct else None

        return {"diffusion_steps": one_or_each(steps), "diffusion_steps_from": one_or_each(sources)}


def run(args: argparse.Namespace, argv: list[str]) -> tuple[dict[str, Any], str]:
    """The whole pilot; returns (summary.json content, how the run ended)."""
    specs = [parse_target(s) for s in (args.backend or ["ar"])]
    labels = [s.label for s in specs]
    if len(set(labels)) != len(labels):
        raise InfillError(f"the same --backend twice: {sorted({x for x in labels if labels.count(x) > 1})}")
    settings = RunSettings(
        concurrency=_concurrency(args.concurrency),
        max_seconds=args.max_seconds,
        deadline_ms=args.deadline_ms,
        accept=AcceptRule(args.accept_threshold),
        pipeline=PipelineSettings(max_middle_tokens=args.max_middle_tokens),
        warmup=not args.no_warmup,
        backend=spec_from_args(args),
    )
    if args.gpu_hour_price is not None and args.gpu_hour_price < 0:
        raise InfillError("--gpu-hour-price must be >= 0")
    found = discover(args.src, DiscoverySettings(max_file_bytes=args.max_file_bytes))
    holes = cut_holes(found, CutSettings(n=args.n, seed=args.seed, kinds=_kinds(args.kinds)))
    if not holes:
        raise InfillError(f"no hole of kind(s) {', '.join(_kinds(args.kinds))} in {args.src!r}")
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name in ("attempts.jsonl", "cells.jsonl"):
            (out / name).unlink(missing_ok=True)
    except OSError as exc:
        raise InfillError(f"cannot write to {str(out)!r}: {exc}") from exc
    write_holes(holes, out / "holes.jsonl")
    started = _now()
    steps = StepCapRecorder()
    pool = TargetPool(settings.pipeline, open_fn=steps, base=settings.backend)
    try:
        pilot = run_pilot(holes, specs, settings, out, Progress(enabled=not args.quiet), pool=pool)
    finally:
        pool.close()
    kinds: dict[str, int] = {}
    for hole in holes:
        kinds[hole.kind] = kinds.get(hole.kind, 0) + 1
    meta = {
        "src": args.src,
        "from_git": found.from_git,
        "files": len(found.files),
        "skipped": dict(found.skipped.most_common()),
        "holes": len(holes),
        "hole_kinds": kinds,
        "seed": args.seed,
        "concurrency": list(settings.concurrency),
        "max_seconds": settings.max_seconds,
        "deadline_ms": settings.deadline_ms,
        **steps.meta(),
        "max_middle_tokens": settings.pipeline.max_middle_tokens,
        "accept_threshold": settings.accept.threshold,
        "gpu_hour_price": args.gpu_hour_price,
        "hardware": hardware(),
        "started": started,
        "finished": _now(),
        "stopped_by": pilot.stopped_by,
        "command": "infill-ls pilot " + shlex.join(argv),
    }
    summary = summarise(out, pilot.targets, args.gpu_hour_price)
    document = {"meta": meta, "backends": pilot.targets, "summary": summary}
    (out / "summary.json").write_text(json.dumps(document, indent=2), encoding="utf-8")
    write_report(out, summary, pilot.targets, meta)
    write_plots(out, summary)
    return document, pilot.stopped_by


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    try:
        _, stopped_by = run(args, argv)
    except InfillError as exc:
        print(f"infill-ls pilot: {exc}", file=sys.stderr)
        return 2
    print(
        f"infill-ls pilot: report written to {Path(args.out) / 'report.md'}"
        + ("" if stopped_by == "done" else f" (partial: {stopped_by})"),
        file=sys.stderr,
    )
    return 130 if stopped_by == "interrupted" else 0


if __name__ == "__main__":
    sys.exit(main())
