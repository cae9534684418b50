"""Pilot benchmark: holes cut from a real folder, run through the pilot, figures printed as one JSON line.

    python benchmarks/pilot.py                       # stdlib `json` package, tiny random DiffusionGemma
    python benchmarks/pilot.py SRC --backend ar --backend diffusion:DIR [any `infill-ls pilot` option]

Defaults (each only when not given): SRC = the folder of the standard library's `json` package, --out = a
temporary folder, --backend = a tiny random DiffusionGemma written to a temporary folder (its text quality is
meaningless; latency and mechanics are what it shows), --n 20, --concurrency 1,4, --max-seconds 300,
--diffusion-steps 16. The LAST line printed is the JSON summary.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from infill.pilot.cli import build_parser, run  # noqa: E402

DEFAULTS = {"--n": "20", "--concurrency": "1,4", "--max-seconds": "300", "--diffusion-steps": "16"}


def _with_defaults(argv: list[str], scratch: Path) -> list[str]:
    argv = list(argv)
    if not argv or argv[0].startswith("-"):
        argv.insert(0, str(Path(json.__file__).parent))
    if "--out" not in argv:
        argv += ["--out", str(scratch / "pilot")]
    if "--backend" not in argv:
        from infill.testing.tiny_checkpoint import write_tiny_checkpoint

        argv += ["--backend", f"diffusion:{write_tiny_checkpoint(scratch / 'tiny-diffusiongemma')}"]
    for flag, value in DEFAULTS.items():
        if flag not in argv:
            argv += [flag, value]
    return argv + ["--quiet"]


def figures(document: dict) -> dict:
    """The headline numbers per backend: quality, latency, throughput per concurrency level."""
    out = {"holes": document["meta"]["holes"], "stopped_by": document["meta"]["stopped_by"], "backends": {}}
    caveats = {b["label"]: b.get("caveat") for b in document["backends"]}
    for label, s in document["summary"].items():
        out["backends"][label] = {
            "tiny_or_dummy": bool(caveats.get(label)),
            "attempts": s["attempts"],
            "accept_rate": s["accept_rate"],
            "exact_match": s["exact_match"],
            "edit_similarity": s["edit_similarity"],
            "syntax_valid_share": s["syntax_valid_share"],
            "p50_ms": s["p50_ms"],
            "p95_ms": s["p95_ms"],
            "error_rate": s["error_rate"],
            "tokens_per_forward": s["tokens_per_forward"],
            "requests_per_hour": {c: v["throughput_per_hour"] for c, v in s["by_concurrency"].items()},
        }
    return out


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="infill-pilot-") as scratch:
        argv = _with_defaults(argv, Path(scratch))
        args = build_parser().parse_args(argv)
        document, _ = run(args, argv)
        print(f"report: {Path(args.out) / 'report.md'}", file=sys.stderr)
        print(json.dumps(figures(document)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
