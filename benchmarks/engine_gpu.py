"""The engine at real dimensions against the floor the card allows, section by section (benchmarks/gpu.sh runs it on
the full-size 26B-A4B architecture with random weights, `--load-format dummy`).

Sections, each under its own time limit, each appended as one JSON line to `--out` as it finishes (a section that
fails or runs out of time records why, and the next one runs):
- env: the GPU, its memory, torch / transformers / triton versions;
- bandwidth: HBM read and copy bandwidth measured on the card (benchmarks/gpu_floor.py);
- load: load time and memory, warm-up (compile when on, and capture of every program) time, programs captured;
- floors: bytes each case must read (the experts the router actually picks, counted on a sample; the prompt KV
  attended to; the embedding twice for a step) and the floor at the measured read bandwidth;
- steps: ms per denoising step (12 steps, the captured program of each bucket) for canvases 1x32, 3x32, 5x80 and
  1x256 after a 2k and an 8k prompt (the same programs serve both prompts), and over the floor;
- keystroke: the encode of 1, 2 and 8 new tokens after a 2,048-token prompt, p50 and max (2 tokens: 50 keystrokes);
- pipeline: keystroke to finished 12-step single-line fill through `Pipeline` (benchmarks/engine_pipeline.py),
  p50/p95 (gpu.sh runs the same measurement on the engine before the static forward, in its own process);
- experts: each experts kernel (infill/engine/experts.py) on one layer at 2, 8, 20, 32, 96 and 256 tokens: ms,
  GB/s over the experts touched, largest difference from the reference loop; FP8 grouped too;
- profile: kernels launched and device time of one replayed step and one eager forward (torch.profiler);
- fp8: the weights quantized to FP8 at load (the bf16 ones released), then steps, keystroke and pipeline again;
- compile: a second engine over the same (FP8, after the fp8 section) weights with each layer compiled
  (torch.compile), its warm-up time and 3x32 / 1x256 steps, and keystrokes.
Last stdout line: every section's figures as one JSON object.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import time
import traceback
from dataclasses import replace
from functools import partial
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import gpu_floor  # noqa: E402
from engine_pipeline import measure_keystrokes  # noqa: E402

from infill.engine import forward  # noqa: E402
from infill.engine.canvas import build_canvas  # noqa: E402
from infill.engine.config import EngineConfig  # noqa: E402
from infill.engine.denoise import CanvasFill, denoise  # noqa: E402
from infill.engine.diffusion import DiffusionEngine  # noqa: E402
from infill.engine.experts import KERNELS, route  # noqa: E402
from infill.engine.fp8 import quantize_rows_of, quantize_weights  # noqa: E402
from infill.engine.loading import load_diffusion_model  # noqa: E402
from infill.engine.ops import activation  # noqa: E402
from infill.engine.weights import Experts, Linear  # noqa: E402

CANVASES = ((1, 32), (3, 32), (5, 80), (1, 256))
EXPERT_TOKENS = (2, 8, 20, 32, 96, 256)
NEVER_CONFIDENT = 1e-12  # random weights never converge; every fill runs all its steps


def note(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class Timeout(Exception):
    pass


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def memory(device: torch.device) -> dict:
    if device.type != "cuda":
        return {}
    return {
        "allocated_gib": round(torch.cuda.memory_allocated(device) / 2**30, 2),
        "peak_gib": round(torch.cuda.max_memory_allocated(device) / 2**30, 2),
    }


class Bench:
    def __init__(self, args) -> None:
        self.args = args
        self.figures: dict = {}
        self.engine: DiffusionEngine | None = None
        self.loaded = None

    @property
    def device(self) -> torch.device:
        return self.engine.device if self.engine is not None else torch.device(self.args.device)

    def ids(self, count: int, seed: int) -> torch.Tensor:
        vocab = self.engine.weights.vocab
        return torch.randint(3, vocab, (count,), generator=torch.Generator().manual_seed(seed))

    # ---- sections -----------------------------------------------------------------------------------------------

    def env(self) -> dict:
        import transformers

        out = {"torch": torch.__version__, "transformers": transformers.__version__, "device": self.args.device}
        try:
            import triton

            out["triton"] = triton.__version__
        except ImportError:
            pass
        if torch.cuda.is_available():
            p = torch.cuda.get_device_properties(0)
            out.update(
                gpu=p.name,
                memory_gib=round(p.total_memory / 2**30, 1),
                sms=p.multi_processor_count,
                capability=f"{p.major}.{p.minor}",
            )
        return out

    def bandwidth(self) -> dict:
        return gpu_floor.bandwidth(self.device, gib=4.0 if self.device.type == "cuda" else 0.25)

    def load(self) -> dict:
        t0 = time.perf_counter()
        self.loaded = load_diffusion_model(
            self.args.model, load_format=self.args.load_format, device=self.args.device, dtype=self.args.dtype
        )
        load_s = time.perf_counter() - t0
        self.engine = DiffusionEngine(self.loaded, self.config(compile=False))
        warm_s = self.engine.warm_up()
        w = self.engine.weights
        return {
            "load_s": round(load_s, 1),
            "warm_up_s": round(warm_s, 1),
            "programs": self.engine.programs,
            "layers": len(w.decoder),
            "experts": w.decoder[0].experts.count,
            "vocab": w.vocab,
            "weights": w.weight_format,
            "weight_gib": round(w.weight_bytes() / 2**30, 2),
            "kv_buffers_gib": round(self.engine.runner.kv.nbytes / 2**30, 2),
            **memory(self.device),
        }

    def config(self, **changes) -> EngineConfig:
        return EngineConfig(max_denoising_steps=self.args.steps, confidence_threshold=NEVER_CONFIDENT, **changes)

    def floors(self) -> dict:
        engine, w = self.engine, self.engine.weights
        read = self.figures.get("bandwidth", {}).get("read_gbs") or 4800.0
        parts = gpu_floor.weight_parts(w)
        out = {
            "read_gbs": read,
            "parts": {k: v for k, v in parts.items() if k != "layers"},
            "dense_per_layer": parts["layers"][0]["dense"],
            "per_expert": parts["layers"][0]["per_expert"],
        }
        for context in self.contexts():
            ids = self.ids(context, context)
            engine._encode_prompt("floors", ids)
            for rows, width in CANVASES:
                touched = gpu_floor.experts_touched(gpu_floor.canvas_forward(w, engine.runner.kv, rows, width, context))
                nbytes = gpu_floor.floor_bytes(parts, touched, gpu_floor.visible_kv_bytes(w, context), head=True)
                out[f"{rows}x{width}@{context}"] = {
                    "experts_touched_mean": round(statistics.mean(touched), 1),
                    "bytes": nbytes,
                    "floor_ms": round(nbytes / read / 1e6, 3),
                }
        context = 2048
        engine._encode_prompt("floors", self.ids(context, 1))
        for new in (1, 2, 8):
            extra = self.ids(new, 100 + new).to(self.device)
            spans = forward.exact_spans(w, context + new, context)
            touched = gpu_floor.experts_touched(
                partial(forward.encode, w, engine.runner.kv, extra, context, spans, "grouped")
            )
            nbytes = gpu_floor.floor_bytes(parts, touched, gpu_floor.visible_kv_bytes(w, context), head=False)
            out[f"encode {new} after {context}"] = {
                "experts_touched_mean": round(statistics.mean(touched), 1),
                "bytes": nbytes,
                "floor_ms": round(nbytes / read / 1e6, 3),
            }
        engine.prompts.clear()
        return out

    def contexts(self) -> list[int]:
        return [min(int(c), self.engine.max_prompt) for c in self.args.contexts.split(",")]

    def steps(self, engine: DiffusionEngine | None = None, canvases=CANVASES) -> dict:
        engine = engine or self.engine
        out = {}
        for context in self.contexts():
            ids = self.ids(context, 7 + context)
            engine._encode_prompt("steps", ids)
            for rows, width in canvases:
                canvas = build_canvas([width] * rows, [[]], context, engine.pad_id, engine.device)
                fill = CanvasFill(canvas, ids, engine.runner)

                def run(fill=fill):
                    result = denoise(fill, engine.config, torch.Generator(engine.device).manual_seed(0))
                    sync(engine.device)
                    return result

                run()
                times = []
                for _ in range(self.args.repeat):
                    t0 = time.perf_counter()
                    result = run()
                    times.append((time.perf_counter() - t0) * 1000 / result.steps)
                case = f"{rows}x{width}@{context}"
                ms = statistics.median(times)
                floor = self.figures.get("floors", {}).get(case, {}).get("floor_ms")
                out[case] = {
                    "ms_per_step": round(ms, 2),
                    "steps": result.steps,
                    "over_floor": round(ms / floor, 2) if floor else None,
                }
                note(f"step {case}: {ms:.2f} ms" + (f" ({ms / floor:.2f}x floor)" if floor else ""))
        engine.prompts.clear()
        return out

    def keystroke(self, engine: DiffusionEngine | None = None) -> dict:
        engine = engine or self.engine
        out = {}
        for new, count in ((2, 50), (1, 20), (8, 20)):
            ids = self.ids(2048, 3)
            engine._encode_prompt("keys", ids)
            times = []
            for i in range(count):
                typed = torch.cat([ids[:-1], self.ids(new + 1, 1000 + i)])
                t0 = time.perf_counter()
                engine._encode_prompt("keys", typed)
                sync(engine.device)
                times.append((time.perf_counter() - t0) * 1000)
                ids = typed
            floor = self.figures.get("floors", {}).get(f"encode {new} after 2048", {}).get("floor_ms")
            p50 = statistics.median(times)
            out[f"{new} tokens"] = {
                "p50_ms": round(p50, 2),
                "max_ms": round(max(times), 2),
                "keystrokes": count,
                "over_floor": round(p50 / floor, 2) if floor else None,
            }
        engine.prompts.clear()
        return out

    def pipeline(self, engine: DiffusionEngine | None = None) -> dict:
        return measure_keystrokes(engine or self.engine, keystrokes=self.args.keystrokes, context=2048)

    def experts(self) -> dict:
        w = self.engine.weights
        layer = w.decoder[0]
        act = activation(w.activation)
        per_expert = gpu_floor.weight_parts(w)["layers"][0]["per_expert"]
        fp8 = Experts(*(Linear(*quantize_rows_of(part.weight)) for part in (layer.experts.gate_up, layer.experts.down)))
        out = {}
        for n in EXPERT_TOKENS:
            x = torch.randn(n, w.hidden, device=self.device, dtype=w.dtype)
            weights, ids = route(x, layer, w.top_k, w.eps)
            touched = int(torch.unique(ids).numel())
            reference = KERNELS["loop"](x, ids, weights, layer.experts, act).float()
            row = {"experts_touched": touched}
            for name, kernel in list(KERNELS.items()) + [("fp8_grouped", None)]:
                if name == "pairs" and n * w.top_k > 256:
                    continue  # it copies each pair's expert weights: at 96 tokens that is several GB
                experts = fp8 if kernel is None else layer.experts
                fn = KERNELS["grouped"] if kernel is None else kernel
                call = partial(fn, x, ids, weights, experts, act)
                ms = statistics.median(gpu_floor.timed_ms(call, 20, self.device))
                diff = (fn(x, ids, weights, experts, act).float() - reference).abs().max().item()
                nbytes = touched * (per_expert // (2 if kernel is None else 1))
                row[name] = {
                    "ms": round(ms, 4),
                    "gbs": round(nbytes / ms / 1e6, 1),
                    "max_diff": float(f"{diff:.3g}"),
                    "scale": float(f"{reference.abs().max().item():.3g}"),
                }
            out[str(n)] = row
        return out

    def profile(self) -> dict:
        from torch.profiler import ProfilerActivity, profile

        engine = self.engine
        ids = self.ids(2048, 5)
        engine._encode_prompt("profile", ids)
        canvas = build_canvas([32] * 3, [[]], 2048, engine.pad_id, engine.device)
        fill = CanvasFill(canvas, ids, engine.runner)
        config = replace(engine.config, max_denoising_steps=1)
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.device.type == "cuda" else [])
        out = {}
        for name, run in (
            ("replayed step", lambda: denoise(fill, config, torch.Generator(engine.device))),
            ("eager forward", gpu_floor.canvas_forward(engine.weights, engine.runner.kv, 3, 32, 2048)),
        ):
            with torch.inference_mode():
                run()
                sync(self.device)
                with profile(activities=activities) as prof:
                    run()
                    sync(self.device)
            events = prof.key_averages()
            device_us = sum(getattr(e, "self_device_time_total", 0) for e in events)
            kernels = sum(
                e.count
                for e in events
                if getattr(e, "device_type", None) is not None and str(e.device_type).endswith("CUDA")
            )
            top = sorted(events, key=lambda e: getattr(e, "self_device_time_total", 0), reverse=True)[:8]
            out[name] = {
                "device_ms": round(device_us / 1000, 2),
                "kernels": kernels,
                "top": [[e.key[:60], round(getattr(e, "self_device_time_total", 0) / 1000, 3)] for e in top],
            }
        engine.prompts.clear()
        return out

    def fp8(self) -> dict:
        t0 = time.perf_counter()
        weights = quantize_weights(self.engine.weights, self.device, release=True)  # the bf16 engine ends here
        self.engine.close()
        self.engine = None
        loaded = replace(self.loaded, model=None, weights=weights)
        self.loaded = None
        torch.cuda.empty_cache() if torch.cuda.is_available() else None
        quantize_s = time.perf_counter() - t0
        engine = DiffusionEngine(loaded, self.config(compile=False))
        warm_s = engine.warm_up()
        self.engine = engine
        return {
            "quantize_s": round(quantize_s, 1),
            "warm_up_s": round(warm_s, 1),
            "weights": weights.weight_format,
            "weight_gib": round(weights.weight_bytes() / 2**30, 2),
            **memory(self.device),
            "steps": self.steps(engine, canvases=((3, 32), (1, 256))),
            "keystroke": self.keystroke(engine),
            "pipeline": self.pipeline(engine),
        }

    def compile(self) -> dict:
        engine = DiffusionEngine(self.engine.loaded, self.config(compile=True))
        warm_s = engine.warm_up()
        out = {
            "warm_up_s": round(warm_s, 1),
            "programs": engine.programs,
            "steps": self.steps(engine, canvases=((3, 32), (1, 256))),
            "keystroke": self.keystroke(engine),
        }
        engine.close()
        return out


SECTIONS = (
    "env",
    "bandwidth",
    "load",
    "floors",
    "steps",
    "keystroke",
    "pipeline",
    "experts",
    "profile",
    "fp8",
    "compile",
)
NEEDS_ENGINE = {"floors", "steps", "keystroke", "pipeline", "experts", "profile", "compile", "fp8"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="checkpoint or config directory")
    parser.add_argument("--load-format", default="auto", choices=("auto", "dummy"))
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keystrokes", type=int, default=50)
    parser.add_argument("--contexts", default="2048,8192")
    parser.add_argument("--sections", default=",".join(SECTIONS))
    parser.add_argument("--section-timeout", type=int, default=120, help="seconds per section (load: twice)")
    parser.add_argument("--out", help="append each section's JSON line here as it finishes")
    args = parser.parse_args(argv)
    bench = Bench(args)

    def cut_off(signum, frame):
        raise Timeout(f"section ran past {args.section_timeout} s")

    signal.signal(signal.SIGALRM, cut_off)
    for name in args.sections.split(","):
        if name in NEEDS_ENGINE and bench.engine is None:
            bench.figures[name] = {"error": "no engine (load failed or did not run)"}
            continue
        note(f"== {name}")
        started = time.perf_counter()
        signal.alarm(args.section_timeout * (2 if name in ("load", "compile", "fp8") else 1))
        try:
            with torch.inference_mode():
                result = getattr(bench, name)()
        except Exception as exc:  # noqa: BLE001 - a section's failure is a figure too; the next section runs
            result = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-1500:]}
        finally:
            signal.alarm(0)
        result["section_s"] = round(time.perf_counter() - started, 1)
        bench.figures[name] = result
        note(json.dumps({name: result})[:2000])
        if args.out:
            with open(args.out, "a") as f:
                f.write(json.dumps({"section": name, **result}) + "\n")
    print(json.dumps(bench.figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
