"""The engine at real dimensions against the floor the card allows, section by section (benchmarks/gpu.sh runs it on
the full-size 26B-A4B architecture with random weights, `--load-format dummy`).

Sections, each under its own time limit, each appended as one JSON line to `--out` the moment it ends (a section
that fails or runs out of time records why, and the next one runs; benchmarks/gpu_sections.py):
- before: the engine before the static forward (`--baseline` tree), keystroke to fill through the pipeline in a
  process of its own, the same keystrokes, steps and prompt as the pipeline section; first, while the GPU is free;
- env: the GPU, its memory, its datasheet bandwidth, torch / transformers / triton versions;
- bandwidth: HBM read and copy bandwidth measured on the card (benchmarks/gpu_floor.py);
- load: load time, the load's peak device memory over the weights' bytes (`torch.cuda.max_memory_allocated`),
  warm-up (compile when on, and capture of every program) time, and each program captured or eager (on CUDA an
  eager one fails the section);
- floors: bytes each case must read (the experts the router actually picks, counted on a sample; the prompt KV
  attended to; the embedding twice for a step) and the floor at the card's datasheet bandwidth (the measured read
  bandwidth for a card not listed);
- steps: ms per denoising step (12 steps, the captured program of each bucket, named with whether it ran captured)
  for canvases 1x32, 3x32, 5x80 and 1x256 after a 2k and an 8k prompt, and over the floor;
- keystroke: the encode of exactly 1, 2 and 8 new tokens after a 2,048-token prompt, p50 and max (2 tokens: 50
  keystrokes), with the prompt tokens reused and encoded;
- pipeline: keystroke to finished 12-step single-line fill through `Pipeline` (benchmarks/engine_pipeline.py),
  p50/p95, with each keystroke's reused and encoded prompt tokens;
- experts: each experts kernel (infill/engine/experts.py) on one layer at 2, 8, 20, 32, 96 and 256 tokens: ms,
  GB/s over the experts touched, largest difference from the reference loop; FP8 grouped too;
- profile: kernels launched and device time of one replayed step and one eager forward (torch.profiler);
- fp8: the bf16 engine released, the model loaded again quantized to FP8 as it is read (its load peak), its floors
  (FP8 bytes), then steps, keystroke and pipeline again;
- compile: a second engine over the same (FP8, after the fp8 section) weights with each layer compiled
  (torch.compile), its warm-up time and 3x32 / 1x256 steps, and keystrokes.
Last stdout line: every section's figures as one JSON object.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from dataclasses import replace
from functools import partial
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
# the sibling benchmark modules, with benchmarks/ on the path only while they are imported (its server.py would
# shadow the `server` package for everything imported after)
_BENCHMARKS = str(Path(__file__).resolve().parent)
sys.path.insert(0, _BENCHMARKS)
try:
    import gpu_floor
    import gpu_sections
    from engine_pipeline import measure_keystrokes
finally:
    sys.path.remove(_BENCHMARKS)
_TESTS = str(Path(__file__).resolve().parents[1] / "tests")  # the reference experts kernel, on the path only while
sys.path.insert(0, _TESTS)  # it is imported (tests/server/ would shadow the `server` package too)
try:
    from reference_experts import loop as reference_experts
finally:
    sys.path.remove(_TESTS)

from infill.engine import forward  # noqa: E402
from infill.engine.canvas import build_canvas  # noqa: E402
from infill.engine.config import EngineConfig  # noqa: E402
from infill.engine.denoise import CanvasFill, denoise  # noqa: E402
from infill.engine.diffusion import DiffusionEngine  # noqa: E402
from infill.engine.experts import KERNELS, route  # noqa: E402
from infill.engine.fp8 import quantize_rows_of  # noqa: E402
from infill.engine.graphs import bucket  # noqa: E402
from infill.engine.loading import load_diffusion_model  # noqa: E402
from infill.engine.ops import activation  # noqa: E402
from infill.engine.runner import CANVAS_ROWS, CANVAS_WIDTHS  # noqa: E402
from infill.engine.weights import Experts, Linear  # noqa: E402

CANVASES = ((1, 32), (3, 32), (5, 80), (1, 256))
EXPERT_TOKENS = (2, 8, 20, 32, 96, 256)
NEVER_CONFIDENT = 1e-12  # random weights never converge; every fill runs all its steps


def note(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


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
        self.floor_table: dict = {}  # the current engine's floors (bf16, then FP8 after the fp8 section)

    @property
    def device(self) -> torch.device:
        return self.engine.device if self.engine is not None else torch.device(self.args.device)

    def ids(self, count: int, seed: int) -> torch.Tensor:
        vocab = self.engine.weights.vocab
        return torch.randint(3, vocab, (count,), generator=torch.Generator().manual_seed(seed))

    # ---- sections -----------------------------------------------------------------------------------------------

    def before(self) -> dict:
        options = ["--model", self.args.model, "--load-format", self.args.load_format, "--device", self.args.device]
        options += [
            "--dtype",
            self.args.dtype,
            "--keystrokes",
            str(self.args.keystrokes),
            "--steps",
            str(self.args.steps),
        ]
        options += ["--context", str(self.args.context)]
        log = Path(self.args.out).with_name("before.log") if self.args.out else None
        limit = section_limit(self.args, "before") - 5  # inside the section's own limit
        return gpu_sections.baseline_pipeline(Path(self.args.baseline), options, limit, log)

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
                datasheet_gbs=gpu_floor.card_bandwidth_gbs(p.name),
            )
        return out

    def bandwidth(self) -> dict:
        return gpu_floor.bandwidth(self.device, gib=4.0 if self.device.type == "cuda" else 0.25)

    def _load(self, quantization: str = "none") -> tuple[dict, object]:
        """Load the model, measuring the load's own peak on the device over the weights it ends with."""
        gc.collect()
        cuda = self.device.type == "cuda"
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated() if cuda else 0
        t0 = time.perf_counter()
        loaded = load_diffusion_model(
            self.args.model,
            load_format=self.args.load_format,
            device=self.args.device,
            dtype=self.args.dtype,
            quantization=quantization,
        )
        weight_bytes = loaded.weights.weight_bytes()
        out = {"load_s": round(time.perf_counter() - t0, 1), "weights": loaded.weights.weight_format}
        out["weight_gib"] = round(weight_bytes / 2**30, 2)
        if cuda:
            peak = torch.cuda.max_memory_allocated() - before
            out.update(load_peak_gib=round(peak / 2**30, 2), load_peak_over_weights=round(peak / weight_bytes, 3))
        return out, loaded

    def _start(self, loaded, **config) -> dict:
        """An engine over `loaded`, warmed up (every program captured on CUDA), with each program's state."""
        self.engine = DiffusionEngine(loaded, self.config(**config))
        warm_s = self.engine.warm_up()
        self.floor_table = {}
        expect = self.engine.device.type == "cuda" and self.engine.runner.static
        return {"warm_up_s": round(warm_s, 1), "programs": self.engine.programs, "expect_captured": expect}

    def _buckets(self, figures: dict) -> dict:
        try:
            figures["buckets"] = gpu_sections.bucket_report(self.engine.runner, figures["expect_captured"])
        except gpu_sections.SectionFailed as exc:
            raise gpu_sections.SectionFailed(str(exc), {**figures, **exc.figures}) from None
        return figures

    def load(self) -> dict:
        figures, loaded = self._load()
        figures.update(self._start(loaded, compile=False))
        w = self.engine.weights
        figures.update(
            layers=len(w.decoder),
            experts=w.decoder[0].experts.count,
            vocab=w.vocab,
            kv_buffers_gib=round(self.engine.runner.kv.nbytes / 2**30, 2),
            **memory(self.device),
        )
        return self._buckets(figures)

    def config(self, **changes) -> EngineConfig:
        return EngineConfig(max_denoising_steps=self.args.steps, confidence_threshold=NEVER_CONFIDENT, **changes)

    def bandwidth_gbs(self) -> tuple[float | None, str]:
        """What a floor divides by: the card's datasheet bandwidth, else the read bandwidth measured here."""
        gpu = self.figures.get("env", {}).get("gpu")
        datasheet = gpu_floor.card_bandwidth_gbs(gpu) if gpu else None
        if datasheet:
            return datasheet, f"datasheet ({gpu})"
        return self.figures.get("bandwidth", {}).get("read_gbs"), "measured read"

    def floors(self) -> dict:
        self.floor_table = self.floors_of(self.engine)
        return self.floor_table

    def floors_of(self, engine: DiffusionEngine) -> dict:
        w = engine.weights
        gbs, source = self.bandwidth_gbs()
        parts = gpu_floor.weight_parts(w)
        out = {
            "bandwidth_gbs": gbs,
            "bandwidth_from": source,
            "weights": w.weight_format,
            "parts": {k: v for k, v in parts.items() if k != "layers"},
            "dense_per_layer": parts["layers"][0]["dense"],
            "per_expert": parts["layers"][0]["per_expert"],
        }

        def floor(touched: list[int], nbytes: int) -> dict:
            return {
                "experts_touched_mean": round(statistics.mean(touched), 1),
                "bytes": nbytes,
                "floor_ms": round(nbytes / gbs / 1e6, 3) if gbs else None,
            }

        for context in self.contexts(engine):
            ids = self.ids(context, context)
            engine._encode_prompt("floors", ids)
            for rows, width in CANVASES:
                touched = gpu_floor.experts_touched(gpu_floor.canvas_forward(w, engine.runner.kv, rows, width, context))
                nbytes = gpu_floor.floor_bytes(parts, touched, gpu_floor.visible_kv_bytes(w, context), head=True)
                out[f"{rows}x{width}@{context}"] = floor(touched, nbytes)
        context = self.args.context
        engine._encode_prompt("floors", self.ids(context, 1))
        for new in (1, 2, 8):
            extra = self.ids(new, 100 + new).to(self.device)
            spans = forward.exact_spans(w, context + new, context)
            touched = gpu_floor.experts_touched(
                partial(forward.encode, w, engine.runner.kv, extra, context, spans, "grouped")
            )
            nbytes = gpu_floor.floor_bytes(parts, touched, gpu_floor.visible_kv_bytes(w, context), head=False)
            out[f"encode {new} after {context}"] = floor(touched, nbytes)
        engine.prompts.clear()
        return out

    def contexts(self, engine: DiffusionEngine | None = None) -> list[int]:
        engine = engine or self.engine
        return [min(int(c), engine.max_prompt) for c in self.args.contexts.split(",")]

    def steps(self, engine: DiffusionEngine | None = None, canvases=CANVASES) -> dict:
        engine = engine or self.engine
        out = {}
        for context in self.contexts(engine):
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
                floor = self.floor_table.get(case, {}).get("floor_ms")
                out[case] = {
                    "ms_per_step": round(ms, 2),
                    "steps": result.steps,
                    "over_floor": round(ms / floor, 2) if floor else None,
                    "program": _step_program(engine, rows, width),
                }
                note(f"step {case}: {ms:.2f} ms" + (f" ({ms / floor:.2f}x floor)" if floor else ""))
        engine.prompts.clear()
        return out

    def keystroke(self, engine: DiffusionEngine | None = None) -> dict:
        """A keystroke that adds exactly `new` tokens to a 2,048-token prompt: the label is the tokens encoded."""
        engine = engine or self.engine
        out = {}
        many = self.args.encodes
        for new, count in ((2, many), (1, max(1, many * 2 // 5)), (8, max(1, many * 2 // 5))):
            ids = self.ids(self.args.context, 3)
            engine._encode_prompt("keys", ids)
            times, reused, encoded = [], [], []
            for i in range(count):
                typed = torch.cat([ids, self.ids(new, 1000 + i)])
                t0 = time.perf_counter()
                kept, done = engine._encode_prompt("keys", typed)
                sync(engine.device)
                times.append((time.perf_counter() - t0) * 1000)
                reused.append(kept)
                encoded.append(done - kept)
                ids = typed
            floor = self.floor_table.get(f"encode {new} after {self.args.context}", {}).get("floor_ms")
            p50 = statistics.median(times)
            out[f"{new} tokens"] = {
                "p50_ms": round(p50, 2),
                "max_ms": round(max(times), 2),
                "keystrokes": count,
                "encoded_tokens": sorted(set(encoded)),
                "reused_tokens_first_last": [reused[0], reused[-1]],
                "over_floor": round(p50 / floor, 2) if floor else None,
            }
        engine.prompts.clear()
        return out

    def pipeline(self, engine: DiffusionEngine | None = None) -> dict:
        return measure_keystrokes(engine or self.engine, keystrokes=self.args.keystrokes, context=self.args.context)

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
            reference = reference_experts(x, ids, weights, layer.experts, act).float()
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
        ids = self.ids(self.args.context, 5)
        engine._encode_prompt("profile", ids)
        canvas = build_canvas([32] * 3, [[]], self.args.context, engine.pad_id, engine.device)
        fill = CanvasFill(canvas, ids, engine.runner)
        config = replace(engine.config, max_denoising_steps=1)
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.device.type == "cuda" else [])
        out = {}
        for name, run in (
            ("replayed step", lambda: denoise(fill, config, torch.Generator(engine.device))),
            ("eager forward", gpu_floor.canvas_forward(engine.weights, engine.runner.kv, 3, 32, self.args.context)),
        ):
            with torch.inference_mode():
                run()
                sync(self.device)
                with profile(activities=activities) as prof:
                    run()
                    sync(self.device)
            events = prof.key_averages()
            device = [e for e in events if str(getattr(e, "device_type", "")).endswith("CUDA")]
            top = sorted(device, key=lambda e: e.self_device_time_total, reverse=True)[:8]
            out[name] = {
                "device_ms": round(gpu_floor.device_time_us(events) / 1000, 2),
                "kernels": gpu_floor.device_kernels(events),
                "top": [[e.key[:60], round(e.self_device_time_total / 1000, 3)] for e in top],
            }
        engine.prompts.clear()
        return out

    def fp8(self) -> dict:
        """The bf16 engine goes; the model is loaded again, quantized to FP8 as it is read."""
        self.engine.close()
        self.engine = None
        figures, loaded = self._load(quantization="fp8")
        figures.update(self._start(loaded, compile=False))
        figures.update(memory(self.device))
        self.floor_table = self.floors_of(self.engine)
        figures["floors"] = {k: v for k, v in self.floor_table.items() if "@" in k or k.startswith("encode")}
        figures["steps"] = self.steps(self.engine, canvases=((1, 32), (3, 32), (1, 256)))
        figures["keystroke"] = self.keystroke(self.engine)
        figures["pipeline"] = self.pipeline(self.engine)
        return self._buckets(figures)

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


def _step_program(engine: DiffusionEngine, rows: int, width: int) -> str:
    """Which program ran a (rows, width) canvas: its bucket, captured or eager (or eager: no bucket, no programs)."""
    runner = engine.runner
    if not runner.static:
        return "eager (no programs)"
    shape = (bucket(rows, CANVAS_ROWS), bucket(width, CANVAS_WIDTHS))
    if shape not in runner._steps:
        return "eager (no bucket holds it)"
    program = runner._steps[shape].program
    return f"{program.name}: {'captured' if program.captured else 'eager'}"


def section_limit(args, name: str) -> int:
    return max(1, round(LIMIT_S[name] * args.time_scale))


# Each section's limit on a GPU, seconds (--time-scale multiplies them): the default sections add up to at most
# 300 s, gpu.sh's limit for the whole run; most take a fraction of theirs. `compile` runs only when asked for.
LIMIT_S = {
    "before": 70,
    "env": 10,
    "bandwidth": 15,
    "load": 60,
    "floors": 20,
    "steps": 30,
    "keystroke": 10,
    "pipeline": 15,
    "experts": 10,
    "profile": 10,
    "fp8": 50,
    "compile": 90,
}
SECTIONS = tuple(name for name in LIMIT_S if name != "compile")
NEEDS_ENGINE = {"floors", "steps", "keystroke", "pipeline", "experts", "profile", "compile", "fp8"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="checkpoint or config directory")
    parser.add_argument("--load-format", default="auto", choices=("auto", "dummy"))
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keystrokes", type=int, default=30, help="pipeline keystrokes, before and after alike")
    parser.add_argument("--contexts", default="2048,8192", help="prompt lengths of the steps section")
    parser.add_argument("--context", type=int, default=2048, help="prompt of the keystroke and pipeline sections")
    parser.add_argument("--encodes", type=int, default=50, help="2-token keystrokes timed (1 and 8: 2/5 of it)")
    parser.add_argument("--sections", default=",".join(SECTIONS))
    parser.add_argument("--time-scale", type=float, default=1.0, help="multiplies every section's limit (LIMIT_S)")
    parser.add_argument("--baseline", default=".baseline", help="tree of the engine before the static forward")
    parser.add_argument("--out", help="append each section's JSON line here as it finishes")
    args = parser.parse_args(argv)
    bench = Bench(args)
    names = args.sections.split(",")

    def skip(name: str) -> str | None:
        if name in NEEDS_ENGINE and bench.engine is None:
            return "no engine (load failed or did not run)"
        return None

    def section(name: str):
        def run() -> dict:
            with torch.inference_mode():
                result = getattr(bench, name)()
            bench.figures[name] = result
            return result

        return run

    figures = gpu_sections.run_sections(
        {name: section(name) for name in names},
        limit_s=lambda name: section_limit(args, name),
        out=args.out,
        skip=skip,
    )
    bench.figures.update(figures)
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
