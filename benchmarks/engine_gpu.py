"""The engine at real dimensions, on any device: `--model DIR --load-format dummy` builds a checkpoint's
architecture with random weights (benchmarks/gpu.sh writes the full-size 26B-A4B config for it).

Timing is device-aware: CUDA events around each measured call and a synchronize before reading them, generators on
the model's device; on a CPU, wall time. Measures: load time and memory; prefill of 512 / 2k / 8k tokens;
keystroke encode (edit at the end of a 2k prompt: crop + encode the tail); one decoder forward for canvases 1x32,
3x32, 5x80, 1x256 against the weight-bytes floor (bytes a forward must read ÷ --bandwidth-gbs); `sample_step`
compiled vs eager (compile time, CUDA graphs skipped or not, equality); 12 denoising steps of one canvas with the
decoder forward replayed as a CUDA graph against all eager (time per step, equal tokens); a profile of one decoder
forward and one keystroke encode (host against device time, kernels launched, top ops); a full single-line and
multi-line fill; the prefix-KV size after 200 keystrokes. Prints progress to stderr and, as its LAST stdout line,
one JSON object.
"""

from __future__ import annotations

import argparse
import json
import resource
import signal
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from infill.engine.canvas import build_canvas, decoder_masks  # noqa: E402
from infill.engine.config import resolve_engine_config  # noqa: E402
from infill.engine.denoise import denoise, first_state, sample_step, StepInputs, step_scales  # noqa: E402
from infill.engine.diffusion import DiffusionEngine  # noqa: E402
from infill.engine.loading import load_diffusion_model  # noqa: E402
from infill.engine.model import decoder_cache_view, decoder_logits, embed, embedding_table, encode  # noqa: E402
from infill.types import InfillRequest  # noqa: E402

CANVASES = ((1, 32), (3, 32), (5, 80), (1, 256))


def note(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class Clock:
    """Milliseconds of a call on the model's device (CUDA events + synchronize, or wall time)."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def time_ms(self, fn) -> tuple[float, object]:
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            out = fn()
            end.record()
            torch.cuda.synchronize()
            return start.elapsed_time(end), out
        t0 = time.perf_counter()
        out = fn()
        return (time.perf_counter() - t0) * 1000, out

    def median_ms(self, fn, repeat: int) -> float:
        return statistics.median(self.time_ms(fn)[0] for _ in range(repeat))


def memory(device: torch.device) -> dict:
    if device.type == "cuda":
        return {"allocated_gib": round(torch.cuda.memory_allocated(device) / 2**30, 2),
                "peak_gib": round(torch.cuda.max_memory_allocated(device) / 2**30, 2)}
    return {"process_peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)}


def random_ids(count: int, vocab: int, seed: int) -> torch.Tensor:
    return torch.randint(3, vocab, (count,), generator=torch.Generator().manual_seed(seed))


def weight_bytes(model) -> dict:
    """Bytes a decoder forward reads, by part: the layers' dense weights, their experts, the embedding table
    (read twice: self-conditioning and the tied LM head)."""
    decoder = model.model.decoder
    dense = experts = 0
    for layer in decoder.layers:
        for name, p in layer.named_parameters():
            size = p.numel() * p.element_size()
            if "experts." in name:
                experts += size
            else:
                dense += size
    dense += sum(p.numel() * p.element_size() for p in decoder.self_conditioning.parameters())
    table = decoder.embed_tokens.weight
    return {"dense": dense, "experts": experts, "embedding": table.numel() * table.element_size()}


def floor_bytes(parts: dict, slots: int, text_config) -> int:
    """Expected bytes for `slots` canvas tokens: each layer reads the experts any slot routes to (top-k of E,
    taken as uniform: 1 - (1 - k/E)^slots of them)."""
    e, k = text_config.num_experts or 1, text_config.top_k_experts or 1
    touched = 1 - (1 - k / e) ** slots
    return int(parts["dense"] + parts["experts"] * touched + 2 * parts["embedding"])


def prefill(engine: DiffusionEngine, clock: Clock, sizes: list[int], vocab: int) -> dict:
    out = {}
    for size in sizes:
        size = min(size, engine.max_prompt)
        ids = random_ids(size, vocab, size)
        key = f"prefill-{size}"
        ms, _ = clock.time_ms(lambda: engine._encode_prompt(key, ids))
        out[str(size)] = round(ms, 1)
        note(f"prefill {size}: {ms:.0f} ms")
    engine.store.clear()
    return out


def keystroke_encode(engine: DiffusionEngine, clock: Clock, vocab: int, repeat: int, context: int) -> dict:
    ids = random_ids(context, vocab, 1)
    cache, _, _ = engine._encode_prompt("keys", ids)
    engine.store.put("keys", ids, cache)
    times = []
    for i in range(repeat):
        typed = torch.cat([ids[:-1], torch.tensor([3 + (1000 + i) % (vocab - 3), 3 + (2000 + i) % (vocab - 3)])])

        def step():
            cache, _, _ = engine._encode_prompt("keys", typed)
            engine.store.put("keys", typed, cache)

        times.append(clock.time_ms(step)[0])
        ids = typed
    return {"p50": round(statistics.median(times), 2), "max": round(max(times), 2), "keystrokes": repeat}


def canvas_inputs(engine: DiffusionEngine, cache, prompt_length: int, rows: int, width: int):
    canvas = build_canvas([width] * rows, [[]], prompt_length, engine.pad_id, engine.device)
    view = decoder_cache_view(cache, engine.layer_types, engine.sliding_window, rows)
    masks = decoder_masks(canvas, view, engine.layer_types, engine.model.dtype, engine.additive_masks)
    return canvas, view, masks


def forwards(engine: DiffusionEngine, clock: Clock, vocab: int, repeat: int, bandwidth_gbs: float,
             context: int) -> dict:
    model = engine.model
    ids = random_ids(context, vocab, 2)
    cache, _, _ = engine._encode_prompt("forward", ids)
    parts = weight_bytes(model)
    out = {"weight_bytes": parts, "bandwidth_gbs": bandwidth_gbs, "prompt_tokens": ids.numel()}
    for rows, width in CANVASES:
        canvas, view, masks = canvas_inputs(engine, cache, ids.numel(), rows, width)
        tokens = torch.randint(3, vocab, (rows, width), device=engine.device)
        soft = torch.zeros(rows, width, model.config.text_config.hidden_size, dtype=model.dtype, device=engine.device)

        def forward():
            with torch.inference_mode():
                return decoder_logits(model, tokens, soft, view, canvas.position_ids, masks)

        forward()  # first call: allocator and kernel warm-up
        ms = clock.median_ms(forward, repeat)
        floor = floor_bytes(parts, rows * width, model.config.text_config)
        floor_ms = floor / (bandwidth_gbs * 1e9) * 1000
        out[f"{rows}x{width}"] = {"ms": round(ms, 2), "floor_bytes": floor, "floor_ms": round(floor_ms, 4),
                                  "over_floor": round(ms / floor_ms, 2)}
        note(f"decoder forward {rows}x{width}: {ms:.1f} ms (floor {floor_ms:.1f} ms)")
    return out


def step_arguments(engine: DiffusionEngine, rows: int, width: int, vocab: int) -> tuple:
    """The inputs `sample_step` gets inside a fill, for one canvas shape, on the model's device."""
    model, device = engine.model, engine.device
    cap = model.config.text_config.final_logit_softcapping
    canvas = build_canvas([width - 8] * rows, [list(range(3, 11))], 100, engine.pad_id, device)
    weight, scale = embedding_table(model)
    inputs = StepInputs(None, {}, canvas, embed(model, canvas.fixed_tokens), weight, scale, cap,
                        engine.config.entropy_bound, engine.config.confidence_threshold)
    gen = torch.Generator(device).manual_seed(0)
    state = first_state(inputs, engine.config, vocab, gen)
    logits = torch.randn(rows, width, vocab, generator=gen, device=device) * 8
    uniform = torch.rand(rows, width, generator=gen, device=device)
    noise = torch.randint(0, vocab, (rows, width), generator=gen, device=device)
    scales = step_scales(engine.config, cap, device)
    return (logits, state.current, state.argmax, state.score, state.finished, state.history, canvas.free,
            canvas.fixed_tokens, canvas.anchor, inputs.clamp_embeddings, weight, scale, scales[0], uniform, noise,
            cap, engine.config.entropy_bound, engine.config.confidence_threshold)


def cudagraph_skips(counters) -> int:
    """Inductor's count of CUDA graphs it skipped (an int in torch 2.11; older releases kept a dict by reason)."""
    value = counters["inductor"]["cudagraph_skips"]
    return sum(value.values()) if isinstance(value, dict) else int(value)


def compiled_vs_eager(engine: DiffusionEngine, clock: Clock, vocab: int, repeat: int) -> dict:
    out = {}
    for rows, width in ((3, 32), (5, 80)):
        args = step_arguments(engine, rows, width, vocab)
        with torch.inference_mode():
            eager = clock.median_ms(lambda: sample_step(*args), repeat)
            entry = {"eager_ms": round(eager, 2)}
            if engine.device.type == "cuda":
                from torch._dynamo.utils import counters

                from infill.engine.denoise import sample_step_for

                skips_before = cudagraph_skips(counters)
                compiled = sample_step_for("cuda")
                compile_ms, first = clock.time_ms(lambda: compiled(*args))
                steady = clock.median_ms(lambda: compiled(*args), repeat)
                reference = sample_step(*args)
                skips = cudagraph_skips(counters) - skips_before
                equal = all(torch.equal(a, b) for a, b in zip(first[:3], reference[:3]) if a.dtype != torch.float32)
                close = all(torch.allclose(a.float(), b.float(), atol=1e-3)
                            for a, b in zip(first, reference) if a.is_floating_point())
                entry.update(first_call_ms=round(compile_ms, 1), compiled_ms=round(steady, 3),
                             cudagraph_skips=int(skips), tokens_equal=bool(equal), floats_close=bool(close))
            else:
                entry["compiled"] = "not run: the engine compiles only on CUDA"
        out[f"{rows}x{width}"] = entry
        note(f"sample_step {rows}x{width}: {entry}")
    return out


def graphs_vs_eager(engine: DiffusionEngine, clock: Clock, vocab: int, context: int, steps: int) -> dict:
    """One canvas (the GPU's single-line rows) denoised for `steps` steps from the same seed, with the decoder
    forward replayed as a CUDA graph after the first step and all eager: time per step and whether they agree."""
    ids = random_ids(context, vocab, 3)
    cache, _, _ = engine._encode_prompt("graphs", ids)
    lengths = engine.config.single_line_lengths_for(str(engine.device))
    canvas = build_canvas(list(lengths), [list(range(3, 11))], ids.numel(), engine.pad_id, engine.device)
    view = decoder_cache_view(cache, engine.layer_types, engine.sliding_window, len(lengths))
    masks = decoder_masks(canvas, view, engine.layer_types, engine.model.dtype, engine.additive_masks)
    # The engine's own sampler settings (the compiled step specializes on them), `steps` at most.
    base = replace(engine.config, max_denoising_steps=steps)
    out = {}
    for name, graphs in (("graphs", True), ("eager", False), ("graphs_again", True)):
        config = replace(base, cuda_graph_steps=graphs)
        generator = torch.Generator(engine.device).manual_seed(7)
        ms, result = clock.time_ms(lambda: denoise(engine.model, config, canvas, view, masks, generator))
        out[name] = {"ms": round(ms, 1), "steps": result.steps, "ms_per_step": round(ms / max(result.steps, 1), 2),
                     "tokens": result.tokens}
        note(f"denoise {name}: {ms:.0f} ms, {result.steps} steps")
    eager = out["eager"].pop("tokens")
    for name in ("graphs", "graphs_again"):
        out[name]["tokens_equal_eager"] = bool(torch.equal(out[name].pop("tokens"), eager))
    out["rows"], out["prompt_tokens"] = list(lengths), ids.numel()
    engine.store.clear()
    return out


def host_and_device(engine: DiffusionEngine, clock: Clock, vocab: int, context: int) -> dict:
    """torch.profiler over one 1x32 decoder forward and one 2-token encode after `context` prompt tokens: host and
    device time, kernels launched, the ops that took most device time (host time far above it: launch-bound)."""
    from torch.profiler import ProfilerActivity, profile

    model, device, kernel = engine.model, engine.device, torch.autograd.DeviceType.CUDA
    ids = random_ids(context, vocab, 4)
    cache, _, _ = engine._encode_prompt("profile", ids)
    canvas, view, masks = canvas_inputs(engine, cache, ids.numel(), 1, 32)
    tokens = torch.randint(3, vocab, (1, 32), device=device)
    soft = torch.zeros(1, 32, model.config.text_config.hidden_size, dtype=model.dtype, device=device)
    tail = random_ids(2, vocab, 5).to(device)
    calls = {"decoder_forward_1x32": lambda: decoder_logits(model, tokens, soft, view, canvas.position_ids, masks),
             "encode_2_tokens": lambda: encode(model, tail, cache, ids.numel())}
    out = {}
    for name, call in calls.items():
        call()  # warm: the profiled call is the second (the encode's first append is cropped away)
        if cache.get_seq_length() > ids.numel():
            cache.crop(ids.numel() - cache.get_seq_length())
        with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if clock.cuda else [])) as prof:
            call()
            clock.sync()
        events = prof.key_averages()
        key = (lambda e: e.self_device_time_total) if clock.cuda else (lambda e: e.self_cpu_time_total)
        top = sorted((e for e in events if e.key.startswith("aten::")), key=key, reverse=True)[:5]
        device_us = sum(e.self_device_time_total for e in events if e.device_type == kernel)  # kernels, not ops
        out[name] = {"host_ms": round(sum(e.self_cpu_time_total for e in events) / 1000, 2),
                     "device_ms": round(device_us / 1000, 2),
                     "kernels": sum(1 for e in prof.events() if e.device_type == kernel),
                     "top_ops_ms": {e.key: round(key(e) / 1000, 3) for e in top}}
        note(f"profile {name}: {out[name]}")
    engine.store.clear()
    return out


def source_text(lines: int) -> str:
    return "".join(f"def handler_{i}(request, value={i}):\n    return request.respond(value * {i % 7} + {i})\n\n"
                   for i in range(lines))


def fills(engine: DiffusionEngine, lines: int) -> dict:
    text = source_text(lines)
    single = InfillRequest(prefix=text + "def area(w, h):\n    return ", suffix="\n\nprint(area(2, 3))\n",
                           single_line=True, document_id="fill", max_middle_tokens=24)
    multi = InfillRequest(prefix=text + "def area(w, h):\n", suffix="\n\nprint(area(2, 3))\n",
                          document_id="fill", max_middle_tokens=64)
    out = {}
    for name, request in (("single_line", single), ("multi_line", multi)):
        runs = [engine.infill(request) for _ in range(2)]  # the second reuses the prompt cache
        out[name] = [{"outcome": r.outcome, "steps": r.steps, "total_ms": round(r.timings.total_ms, 1),
                      "encode_ms": round(r.timings.encode_ms, 1), "denoise_ms": round(r.timings.denoise_ms, 1),
                      "ms_per_step": round(r.timings.denoise_ms / max(r.steps, 1), 1),
                      "prompt_tokens": r.prompt_tokens, "reused_tokens": r.reused_tokens,
                      "rows": len(r.versions.get("candidate_lengths", [])), "error": r.error} for r in runs]
        note(f"{name} fill: {out[name]}")
    return out


def kv_after_keystrokes(engine: DiffusionEngine, clock: Clock, keystrokes: int, lines: int) -> dict:
    text = source_text(lines) + "def area(w, h):\n    return "
    typed = "w * h + (w - h) * 0 if w > 0 else -1  # the area of the rectangle, in square units, rounded" * 3
    times = []
    for i in range(keystrokes):
        request = InfillRequest(prefix=text + typed[:i], suffix="\n", document_id="kv")
        times.append(clock.time_ms(lambda: engine.warm(request))[0])
    held = engine.store.reusable("kv", engine.prompt_ids(text + typed[:keystrokes - 1], "\n"))
    return {"keystrokes": keystrokes, "store_bytes": engine.store.nbytes, "store_max_bytes": engine.store.max_bytes,
            "prompt_tokens_held": held, "bytes_per_token": engine.kv_bytes_per_token,
            "warm_ms_p50": round(statistics.median(times), 2), "warm_ms_max": round(max(times), 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="checkpoint or config directory")
    parser.add_argument("--load-format", default="auto", choices=("auto", "dummy"))
    parser.add_argument("--device", default=None)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--steps", type=int, default=None, help="denoising steps per fill (default: checkpoint's)")
    parser.add_argument("--prefills", default="512,2048,8192")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--keystrokes", type=int, default=200)
    parser.add_argument("--context", type=int, default=2048, help="prompt tokens for keystrokes and forwards")
    parser.add_argument("--text-lines", type=int, default=200,
                        help="source lines before the gap in fills and keystrokes (200: ~7k tokens, 30: ~1k)")
    parser.add_argument("--bandwidth-gbs", type=float, default=4300.0, help="memory bandwidth for the floor (H200)")
    parser.add_argument("--skip", default="", help="comma-separated sections to leave out")
    args = parser.parse_args(argv)
    skip = set(filter(None, args.skip.split(",")))

    t0 = time.perf_counter()
    loaded = load_diffusion_model(args.model, device=args.device, dtype=args.dtype, load_format=args.load_format)
    explicit = {"max_denoising_steps": args.steps} if args.steps else None
    engine = DiffusionEngine(loaded, resolve_engine_config(loaded.model.generation_config, loaded.model.config,
                                                           explicit))
    device = engine.device
    clock = Clock(device)
    clock.sync()
    load_s = time.perf_counter() - t0
    text = loaded.model.config.text_config
    vocab = text.vocab_size  # the model's (the stand-in tokenizer of a dummy run has fewer ids)
    result: dict = {"settings": {k: v for k, v in vars(args).items() if k != "model"}, "device": str(device), "device_name": torch.cuda.get_device_name(device)
                    if device.type == "cuda" else "cpu", "dtype": loaded.dtype, "layers": text.num_hidden_layers,
                    "vocab_size": text.vocab_size, "hidden_size": text.hidden_size, "experts": text.num_experts,
                    "steps": engine.config.max_denoising_steps, "torch": torch.__version__,
                    "load_s": round(load_s, 1), "load_memory": memory(device),
                    "cudnn_attention": torch.backends.cuda.cudnn_sdp_enabled()}
    note(f"loaded in {load_s:.1f} s: {result['load_memory']}")
    def cut_off(signum, frame):  # a timeout still leaves the figures measured so far as the last line
        result["cut_off"] = f"signal {signum} after {time.perf_counter() - t0:.0f} s"
        print(json.dumps(result), flush=True)
        sys.exit(1)

    signal.signal(signal.SIGTERM, cut_off)
    warm_s = engine.warm_up()
    result["warm_up_s"] = round(warm_s, 1)
    with torch.inference_mode():
        # The long prefills last: on a slow device a timeout then cuts them, not the rest.
        sections = [("keystroke_encode_ms", lambda: keystroke_encode(engine, clock, vocab, args.repeat, args.context)),
                    ("decoder_forward", lambda: forwards(engine, clock, vocab, args.repeat, args.bandwidth_gbs,
                                                                 args.context)),
                    ("sample_step", lambda: compiled_vs_eager(engine, clock, vocab, args.repeat)),
                    ("graphs_vs_eager", lambda: graphs_vs_eager(engine, clock, vocab, args.context, 12)),
                    ("host_and_device", lambda: host_and_device(engine, clock, vocab, args.context)),
                    ("fills", lambda: fills(engine, args.text_lines)),
                    ("kv_after_keystrokes", lambda: kv_after_keystrokes(engine, clock, args.keystrokes,
                                                                                   args.text_lines)),
                    ("prefill_ms", lambda: prefill(engine, clock, [int(n) for n in args.prefills.split(",")], vocab))]
        for name, run in sections:
            if name in skip:
                continue
            try:
                result[name] = run()
            except Exception as exc:  # one failing section must not hide the others' figures
                result[name] = {"error": f"{type(exc).__name__}: {exc}"}
                note(f"{name} failed: {exc!r}")
            note(f"{name}: {json.dumps(result[name])}")
    result["peak_memory"] = memory(device)
    result["total_s"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(result))
    return 0 if not any(isinstance(v, dict) and "error" in v for v in result.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
