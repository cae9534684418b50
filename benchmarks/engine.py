"""Engine speed figures, measured side by side in one run on this machine (CPU, tiny random-weight models).

Prints intermediate lines, then as its LAST line one JSON object with:
- keystroke_encode_ratio: encoder work for a one-character edit at the end of a 4,096-token prefix (chunked
  tokenisation + the prompt cache's common prefix + encoding the new tail) ÷ a full prefill of it (goal ≤ 0.1);
- step_over_forward: one engine denoising step ÷ one bare decoder forward (transformers' forward with
  self-conditioning logits), vocabulary 262,144, canvas 256, hidden 64 (goal ≤ 1.3); also transformers' own step
  (tests/reference_sampler.py: multinomial + Categorical entropy, transformers' forward) for comparison, and the
  engine's own decoder forward (engine_forward_ms);
- keystroke_vs_generate: median time from a one-character edit to a finished single-line fill through
  `model.generate()` (full re-tokenise + re-prefill, canvas 256) ÷ the same through the engine, same model, same
  number of denoising steps (early stopping disabled on both), 4,096-token prefix (goal ≥ 5).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # transformers' own step, for comparison

from reference_sampler import reference_denoiser  # noqa: E402

from infill.engine.canvas import build_canvas  # noqa: E402
from infill.engine.config import EngineConfig  # noqa: E402
from infill.engine.denoise import CanvasFill, denoise  # noqa: E402
from infill.engine.diffusion import DiffusionEngine  # noqa: E402
from infill.engine.loading import load_diffusion_model  # noqa: E402
from infill.testing.hf_reference import decoder_cache_view, hf_prefill  # noqa: E402
from infill.testing.tiny_checkpoint import write_tiny_checkpoint  # noqa: E402
from infill.types import InfillRequest  # noqa: E402

NEVER_CONFIDENT = 1e-12  # disables early stopping so both sides run exactly the same number of steps


def median_ms(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def source_text(tokens_wanted: int, engine: DiffusionEngine) -> str:
    lines, i = [], 0
    while True:
        lines.append(f"def handler_{i}(request, value={i}):\n    return request.respond(value * {i % 7} + {i})\n\n")
        i += 1
        if i % 20 == 0 and len(engine.prompt_ids("".join(lines))) >= tokens_wanted:
            return "".join(lines)


def keystroke_encode_ratio(engine: DiffusionEngine, text: str, repeat: int) -> dict:
    ids = torch.tensor(engine.prompt_ids(text))

    def full_prefill():
        engine.prompts.clear()
        engine._encode_prompt("bench", torch.tensor(engine.prompt_ids(text)))

    def keystroke():
        engine._encode_prompt("bench", ids)  # the buffers hold `text`
        edited = text + "x"
        t0 = time.perf_counter()
        engine._encode_prompt("bench", torch.tensor(engine.prompt_ids(edited)))
        return (time.perf_counter() - t0) * 1000

    with torch.inference_mode():
        full_prefill()
        prefill = median_ms(full_prefill, repeat)
        key = statistics.median(keystroke() for _ in range(repeat))
    return {
        "prefix_tokens": ids.numel(),
        "prefill_ms": round(prefill, 2),
        "keystroke_encode_ms": round(key, 2),
        "keystroke_encode_ratio": round(key / prefill, 4),
    }


def step_over_forward(steps: int, repeat: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        write_tiny_checkpoint(tmp, vocab_size=262_144, hidden_size=64, layers=2, canvas_length=256)
        loaded = load_diffusion_model(tmp)
        model = loaded.model  # transformers' own, read while the checkpoint is still there
    figures = {}
    for sampler, denoiser in (("fast", denoise), ("reference", reference_denoiser(model))):
        engine = DiffusionEngine(
            loaded, EngineConfig(max_denoising_steps=steps, confidence_threshold=NEVER_CONFIDENT), denoiser=denoiser
        )
        ids = torch.tensor(engine.prompt_ids("def f(x):\n    return x\n" * 20))
        with torch.inference_mode():
            engine._encode_prompt("step", ids)
            canvas = build_canvas([256], [[]], ids.numel(), engine.pad_id, engine.device)
            fill = CanvasFill(canvas, ids, engine.runner)

            def run(denoiser=denoiser, fill=fill, engine=engine):
                out = denoiser(fill, engine.config, torch.Generator().manual_seed(0))
                assert out.steps == steps

            run()
            figures[sampler] = min(median_ms(run, 1) for _ in range(repeat)) / steps
            if sampler == "fast":
                tokens = torch.randint(0, 262_144, (1, 256))
                logits = torch.randn(1, 256, 262_144)
                text = model.config.text_config
                view = decoder_cache_view(hf_prefill(model, ids), text.layer_types, text.sliding_window, 1)

                def bare(tokens=tokens, view=view, logits=logits, canvas=canvas):
                    return model(
                        decoder_input_ids=tokens,
                        cache=view,
                        self_conditioning_logits=logits,
                        decoder_position_ids=canvas.position_ids,
                    )

                bare()
                figures["forward"] = min(median_ms(bare, 3) for _ in range(repeat))
                ours = engine.runner.forward_for(canvas)
                soft = torch.zeros(1, 256, engine.weights.hidden)
                ours(tokens, soft)
                figures["engine_forward"] = min(median_ms(partial(ours, tokens, soft), 3) for _ in range(repeat))
    return {
        "vocab": 262_144,
        "canvas": 256,
        "bare_forward_ms": round(figures["forward"], 1),
        "engine_forward_ms": round(figures["engine_forward"], 1),
        "engine_step_ms": round(figures["fast"], 1),
        "transformers_step_ms": round(figures["reference"], 1),
        "step_over_forward": round(figures["fast"] / figures["forward"], 3),
        "transformers_step_over_forward": round(figures["reference"] / figures["forward"], 3),
    }


def keystroke_vs_generate(loaded, text: str, steps: int, repeat: int) -> dict:
    """The default config on this device (CPU: one 24-slot row per single-line gap) and, as a second figure, the
    GPU default of three candidate rows: on this CPU the tiny model is bound by per-op overhead, so extra rows cost
    what they would not on a GPU at batch 1."""
    figures = {}
    for name, lengths in (("", None), ("_three_rows", (6, 12, 24))):
        engine = DiffusionEngine(
            loaded,
            EngineConfig(max_denoising_steps=steps, single_line_lengths=lengths, confidence_threshold=NEVER_CONFIDENT),
        )
        one = _keystroke_vs_generate(engine, loaded, text, steps, repeat)
        figures.update({f"{key}{name}": value for key, value in one.items()})
    return figures


def _keystroke_vs_generate(engine: DiffusionEngine, loaded, text: str, steps: int, repeat: int) -> dict:
    model, tokenizer = loaded.model, loaded.tokenizer
    suffix = "\n\nprint(handler_0(None))\n"
    state = {"text": text}

    def edit() -> str:
        state["text"] += "x"
        return state["text"]

    def through_generate():
        prompt = edit()
        ids = torch.tensor([[engine.bos_id] + tokenizer.encode(prompt, add_special_tokens=False)])
        out = model.generate(
            ids,
            max_new_tokens=model.config.canvas_length,
            max_denoising_steps=steps,
            confidence_threshold=NEVER_CONFIDENT,
        )
        tokenizer.decode(out.sequences[0, ids.shape[1] :], skip_special_tokens=True).split("\n", 1)[0]

    def through_engine():
        result = engine.infill(InfillRequest(prefix=edit(), suffix=suffix, single_line=True, document_id="doc"))
        assert result.steps == steps, result

    engine.infill(InfillRequest(prefix=text, suffix=suffix, single_line=True, document_id="doc"))
    with torch.inference_mode():
        through_generate()
        gen_ms = median_ms(through_generate, repeat)
        eng_ms = median_ms(through_engine, repeat)
    return {
        "steps": steps,
        "generate_ms": round(gen_ms, 1),
        "engine_ms": round(eng_ms, 1),
        "keystroke_vs_generate": round(gen_ms / eng_ms, 2),
    }


def candidate_batch_cost(loaded, text: str, steps: int, repeat: int) -> dict:
    """What choosing the middle length costs: a multi-line fill with every candidate length as one batch ÷ the
    same fill with one fixed-length row (same steps, early stopping off)."""
    suffix = "\n\ndef handler_last(request):\n    return None\n"
    timings = {}
    for name, lengths in (("batch", EngineConfig().candidate_lengths), ("single", (64,))):
        engine = DiffusionEngine(
            loaded,
            EngineConfig(max_denoising_steps=steps, candidate_lengths=lengths, confidence_threshold=NEVER_CONFIDENT),
        )
        request = InfillRequest(prefix=text, suffix=suffix, document_id="doc")
        engine.infill(request)
        timings[name] = median_ms(partial(engine.infill, request), repeat)
    return {
        "candidate_lengths": list(EngineConfig().candidate_lengths),
        "batch_fill_ms": round(timings["batch"], 1),
        "single_row_fill_ms": round(timings["single"], 1),
        "candidate_batch_cost_ratio": round(timings["batch"] / timings["single"], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--steps", type=int, default=12, help="denoising steps (≈12 passes per canvas on the real model)"
    )
    args = parser.parse_args()
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        write_tiny_checkpoint(tmp, canvas_length=256, max_positions=16384)
        loaded = load_diffusion_model(tmp)
        loaded.model  # noqa: B018 - transformers' own (keystroke_vs_generate), read while the checkpoint is there
    engine = DiffusionEngine(loaded, EngineConfig())
    text = source_text(4096, engine)
    figures = {"machine": f"cpu x{torch.get_num_threads()} threads", "torch": torch.__version__}
    figures.update(keystroke_encode_ratio(engine, text, args.repeat))
    print(json.dumps(figures), flush=True)
    figures.update(keystroke_vs_generate(loaded, text, args.steps, args.repeat))
    print(json.dumps(figures), flush=True)
    figures.update(candidate_batch_cost(loaded, text, args.steps, args.repeat))
    print(json.dumps(figures), flush=True)
    figures.update(step_over_forward(steps=3, repeat=max(2, args.repeat // 2)))
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
