"""Keystroke to finished fill through the pipeline users get (`infill.pipeline.Pipeline`, context, checks and all),
with a DiffusionGemma checkpoint: a file of ~`--context` prompt tokens is opened, then `--keystrokes` characters are
typed at the end of a line, and each keystroke asks for a single-line inline fill of `--steps` denoising steps
(early stopping off, so every engine runs the same steps). Reports p50/p95/max of the whole request, the
engine's own encode and denoise times, and the prompt tokens each keystroke reused and encoded.

Written against the API both today's engine and the engine before the static forward share (load_diffusion_model,
DiffusionEngine, EngineConfig, Pipeline), so benchmarks/gpu.sh runs this one script on both trees, one process
each, for a side-by-side in one run: env INFILL_TREE names the tree to import `infill` from (default: this
script's). Works on any device (a tiny checkpoint on a CPU checks it).

    python benchmarks/engine_pipeline.py --model DIR [--load-format dummy] [--device cuda] [--dtype bfloat16]
                                         [--quantization fp8] [--keystrokes 50] [--steps 12] [--context 2048]
Each stdout line is one JSON object, printed the moment it is known (after the load and warm-up, then every 10
keystrokes, the figures so far): a run cut off keeps what it measured. The last line is the whole run.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, os.environ.get("INFILL_TREE") or str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from infill.engine.config import EngineConfig  # noqa: E402
from infill.engine.diffusion import DiffusionEngine  # noqa: E402
from infill.engine.loading import load_diffusion_model  # noqa: E402
from infill.pipeline import CompletionRequest, Pipeline  # noqa: E402

NEVER_CONFIDENT = 1e-12


def source_text(engine: DiffusionEngine, tokens: int) -> str:
    lines, i = [], 0
    while True:
        lines.append(f"def handler_{i}(request, value={i}):\n    return request.respond(value * {i % 7} + {i})\n\n")
        i += 1
        if i % 20 == 0 and len(engine.prompt_ids("".join(lines))) >= tokens:
            return "".join(lines)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--load-format", default="auto", choices=("auto", "dummy"))
    parser.add_argument("--device", default=None)
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--quantization", default="none", choices=("none", "fp8"))
    parser.add_argument("--keystrokes", type=int, default=50)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--context", type=int, default=2048)
    args = parser.parse_args()
    started = time.perf_counter()
    options = {"device": args.device, "dtype": args.dtype, "load_format": args.load_format}
    if args.quantization != "none":
        if "quantization" not in inspect.signature(load_diffusion_model).parameters:
            print(json.dumps({"error": "this tree cannot load FP8 in-process"}))
            return
        options["quantization"] = args.quantization
    loaded = load_diffusion_model(args.model, **options)
    engine = DiffusionEngine(loaded, EngineConfig(max_denoising_steps=args.steps, confidence_threshold=NEVER_CONFIDENT))
    load_s = time.perf_counter() - started
    warm_s = engine.warm_up()
    head = {
        "engine": getattr(engine.info, "label", ""),
        "weights": engine.versions().get("weights", loaded.dtype),
        "device": loaded.device,
        "load_s": round(load_s, 1),
        "warm_up_s": round(warm_s or 0.0, 1),
        "torch": torch.__version__,
    }
    print(json.dumps(head), flush=True)

    def progress(figures: dict) -> None:
        print(json.dumps({**head, **figures}), flush=True)

    progress(measure_keystrokes(engine, keystrokes=args.keystrokes, context=args.context, on_progress=progress))


def measure_keystrokes(
    engine: DiffusionEngine, *, keystrokes: int, context: int, on_progress: Callable[[dict], None] | None = None
) -> dict:
    """Open a file of ~`context` prompt tokens, then type `keystrokes` characters at the end of a line, each asking
    the pipeline for a single-line inline fill (the file's first request, which encodes the whole prompt, is left
    out of the figures). `on_progress`: called with the figures so far every 10 keystrokes."""
    pipeline = Pipeline(engine)
    text = source_text(engine, context) + "def area(width, height):\n    return "
    suffix = "\n\n\nprint(area(2, 3))\n"
    totals, encodes, denoises, steps, reused, encoded = [], [], [], [], [], []
    for i in range(keystrokes + 1):
        text += "wh"[i % 2]
        request = CompletionRequest(
            text=text + suffix,
            start=len(text),
            mode="inline",
            language="python",
            document_id="file:///bench.py",
            version=i,
        )
        t0 = time.perf_counter()
        result = pipeline.complete(request)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        ms = (time.perf_counter() - t0) * 1000
        r = result.result
        if i == 0:
            continue
        totals.append(ms)
        encodes.append(r.timings.encode_ms)
        denoises.append(r.timings.denoise_ms)
        steps.append(r.steps)
        if getattr(r, "reused_tokens", None) is not None:  # (an engine that reports it)
            reused.append(r.reused_tokens)
            encoded.append(r.prompt_tokens - r.reused_tokens)
        if on_progress is not None and len(totals) % 10 == 0 and len(totals) < keystrokes:
            on_progress(_figures(r.prompt_tokens, totals, encodes, denoises, steps, reused, encoded))
    return _figures(r.prompt_tokens, totals, encodes, denoises, steps, reused, encoded)


def _figures(prompt_tokens, totals, encodes, denoises, steps, reused, encoded) -> dict:
    return {
        "prompt_tokens": prompt_tokens,
        "keystrokes": len(totals),
        "steps": statistics.median(steps),
        "keystroke_to_fill_ms": {
            "p50": round(statistics.median(totals), 1),
            "p95": round(percentile(totals, 0.95), 1),
            "max": round(max(totals), 1),
        },
        "encode_ms_p50": round(statistics.median(encodes), 2),
        "denoise_ms_p50": round(statistics.median(denoises), 1),
        "ms_per_step_p50": round(statistics.median(denoises) / max(statistics.median(steps), 1), 2),
        # per keystroke, in order: prompt tokens whose KV was kept, and those encoded again
        "reused_tokens": reused,
        "encoded_tokens": encoded,
    }


if __name__ == "__main__":
    main()
