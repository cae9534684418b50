"""The offline default (Gemma 3 270M on llama.cpp) against its floor: bare llama.cpp on the same GGUF, paired.

Holes are those of benchmarks/ar_quality.py (seeded, single-line statements of installed packages). Per hole, in
alternating order so that a shared machine's load hits both alike:

- the backend: the prefix minus its last `--typed` characters is filled once (it puts the document's prompt in its
  llama.cpp sequence, as the previous keystroke would), then each last character is typed and filled (timed: a
  keystroke with its prefix cached);
- the floor: llama-cpp-python's own `Llama` on the same GGUF, with the same threads, the same window of prompt
  tokens (one start while the hole is typed; not healed) and number of generated tokens, greedy: the same keystrokes
  (its `generate` reuses the longest cached prefix) and the per-token decode time of its generation.

Reported: per-token decode inside fills (the median over fills of a fill's decoding time per token after its
first) and keystroke p50/p95 for both, and their ratios (backend / floor); the settings modes
(`--modes name:key=value`) run side by side on the backend, the first being the reference.

    python benchmarks/ar_speed.py --n 20            # last line: one JSON object
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import fields, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ar_quality import cut_holes  # noqa: E402

from infill.backends.offline.backend import load_default_backend  # noqa: E402
from infill.backends.offline.model_file import ensure_model  # noqa: E402
from infill.backends.offline.settings import ARSettings  # noqa: E402
from infill.stats import percentile  # noqa: E402
from infill.testing.benchmark_figures import kernel_flags  # noqa: E402
from infill.types import InfillRequest  # noqa: E402


def parse_mode(text: str) -> tuple[str, dict]:
    """`name:key=value,key=value` → (name, ARSettings overrides)."""
    name, _, rest = text.partition(":")
    kinds = {f.name for f in fields(ARSettings)}
    overrides = {}
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        if key not in kinds:
            raise SystemExit(f"unknown setting {key!r} in mode {text!r}")
        overrides[key] = None if value == "None" else (value == "true" if value in ("true", "false") else int(value))
    return name, overrides


class Floor:
    """Bare llama.cpp: llama-cpp-python's `Llama` over the same file, greedy, its prefix cache on."""

    def __init__(self, threads: int) -> None:
        from llama_cpp import Llama

        self.llm = Llama(
            model_path=str(ensure_model()),
            n_ctx=2048,
            n_batch=256,
            n_threads=threads,
            n_threads_batch=threads,
            verbose=False,
            swa_full=True,
        )

    def fill(self, ids: list[int], tokens: int) -> tuple[float, float]:
        """(total ms, decode ms per generated token after the first) for `tokens` greedy tokens after `ids`."""
        started = time.perf_counter()
        first = None
        for count, _ in enumerate(self.llm.generate(ids, temp=0.0, top_k=1, reset=True), start=1):
            if first is None:
                first = time.perf_counter()
            if count >= tokens:
                break
        end = time.perf_counter()
        return (end - started) * 1000, (end - first) * 1000 / max(1, tokens - 1)


def run(backend, floor: Floor, holes, modes: list[tuple[str, dict]], typed: int, max_tokens: int) -> dict:
    base = backend.settings
    rows: dict[str, list[dict]] = {name: [] for name, _ in modes}
    rows["floor"] = []
    for index, hole in enumerate(holes):
        # The floor's prompt keeps one start while the hole is typed, as the backend's does (its KV is reusable)
        first_prompt = backend.tokens.encode(hole.prefix[: len(hole.prefix) - typed])
        start = max(0, len(first_prompt) - backend.fresh_prompt_tokens + 1)
        for k in range(typed, -1, -1):
            prefix = hole.prefix[: len(hole.prefix) - k]
            order = modes if (index + k) % 2 == 0 else modes[::-1]
            steps = None
            for name, overrides in order:
                backend.reconfigure(replace(base, **overrides))
                result = backend.infill(
                    InfillRequest(
                        prefix=prefix,
                        suffix=hole.suffix,
                        single_line=True,
                        language="python",
                        max_middle_tokens=max_tokens,
                        document_id=f"{index}:{name}",
                    )
                )
                steps = steps or result.steps
                if k < typed:
                    rows[name].append(
                        {
                            "total": result.timings.total_ms,
                            "steps": result.steps,
                            "per_token": result.timings.denoise_ms / max(1, result.steps - 1),
                            "per_forward": result.tokens_per_forward,
                            "middle": result.middle,
                        }
                    )
            backend.reconfigure(base)
            ids = [backend.runtime.bos] + backend.tokens.encode(prefix)[start:]
            total, per_token = floor.fill(ids, max(2, steps or 2))
            if k < typed:
                rows["floor"].append({"total": total, "per_token": per_token})
    first = rows[modes[0][0]]
    out: dict = {}
    for name, _ in modes:
        series = rows[name]
        out[name] = {
            "keystroke_p50_ms": percentile([r["total"] for r in series], 50),
            "keystroke_p95_ms": percentile([r["total"] for r in series], 95),
            "decode_ms_per_token": statistics.median(r["per_token"] for r in series if r["steps"] > 1),
            "tokens_per_forward": statistics.mean(r["per_forward"] for r in series),
            "same_fill_as_" + modes[0][0]: statistics.mean(r["middle"] == f["middle"] for r, f in zip(series, first)),
        }
    floor_rows = rows["floor"]
    out["floor"] = {
        "keystroke_p50_ms": percentile([r["total"] for r in floor_rows], 50),
        "keystroke_p95_ms": percentile([r["total"] for r in floor_rows], 95),
        "decode_ms_per_token": statistics.median(r["per_token"] for r in floor_rows),
    }
    reference = out[modes[0][0]]
    out["ratio_decode_per_token_backend_over_floor"] = (
        reference["decode_ms_per_token"] / out["floor"]["decode_ms_per_token"]
    )
    out["ratio_keystroke_p50_backend_over_floor"] = reference["keystroke_p50_ms"] / out["floor"]["keystroke_p50_ms"]
    out["keystrokes_per_mode"] = len(first)
    return out


def _rounded(value):
    if isinstance(value, float):
        return round(value, 4)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20, help="holes")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--packages", default="httpx,pygls,gguf")
    parser.add_argument("--max-tokens", type=int, default=24)
    parser.add_argument("--typed", type=int, default=2, help="characters typed per hole (timed keystrokes)")
    parser.add_argument(
        "--modes", nargs="+", default=["default:"], help="name:setting=value,... per mode; the first is the reference"
    )
    args = parser.parse_args(argv)

    modes = [parse_mode(m) for m in args.modes]
    started = time.monotonic()
    backend = load_default_backend()
    floor = Floor(backend.runtime.shape.threads)
    holes = cut_holes(args.packages.split(","), args.n, args.seed)
    figures: dict = {
        "model": backend.info.label,
        "weights": backend.info.dtype,
        "versions": backend.versions,
        "cores": os.cpu_count(),
        "cpu_flags": kernel_flags(),
        "load_average_start": os.getloadavg()[0],
        "holes": len(holes),
        "typed": args.typed,
        "modes": dict(modes),
    }
    figures.update(run(backend, floor, holes, modes, args.typed, args.max_tokens))
    figures["load_average_end"] = os.getloadavg()[0]
    figures["wall_s"] = time.monotonic() - started
    backend.close()
    print(json.dumps(_rounded(figures)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
