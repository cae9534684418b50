"""The denoising loop over one infill canvas, around one named hot step.

`denoise_step` is one step on tensors: decoder forward over the canvas (reading the prompt KV, never writing it)
→ `sample_step`: sampling math (sampler.py) → entropy-bound accept / renoise of free slots → fixed slots clamped
back → finished rows frozen → stable+confident stopping per row → the next step's self-conditioning. It reads no
value back to the host and branches on no tensor value; its random numbers come in as tensors. On CUDA
`sample_step` is compiled (torch.compile, CUDA graphs: its shapes are fixed by the canvas), and the decoder
forward is captured as a CUDA graph after each fill's first step and replayed for the rest of that fill
(graphs.py; its key length changes with every prompt, so one graph lives for one fill). On CPU everything runs
eager.

`denoise` keeps the loop control: cancel and deadline between steps (never inside a forward), drafts, and stopping
once every row finished (the loop's one host sync per step, plus the draft when a draft callback asks for one).
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Callable

import torch

from infill.engine.canvas import Canvas
from infill.engine.config import EngineConfig
from infill.engine.graphs import Forward, capture_forward
from infill.engine.model import decoder_logits, embed, embedding_table, shape_of, soft_embeddings
from infill.engine.sampler import entropy_bound_accept, fast_step, logit_scale, stable_and_confident, temperature
from infill.types import CancelToken


@dataclass
class DenoiseOutput:
    tokens: torch.Tensor  # (B, W) final argmax canvas, fixed slots clamped
    join_score: torch.Tensor  # (B,) mean log-prob of the clamped anchor tokens at the last step
    steps: int  # decoder forwards
    outcome: str  # "ok", "cut_short" or "cancelled"
    row_steps: torch.Tensor | None = None  # (B,) forwards each row ran before it stopped (transformers' count)


StepCallback = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], None]  # (step, argmax, max_prob, score)


@dataclass(frozen=True)
class StepInputs:
    """What every step of one canvas reads and never changes."""

    view: object  # the decoder's DynamicCache view of the prompt KV
    masks: dict
    canvas: Canvas
    clamp_embeddings: torch.Tensor  # (B, W, H) embedding of each slot's clamped token
    embed_weight: torch.Tensor  # (V, H)
    embed_scale: torch.Tensor  # ()
    softcap: float | None
    entropy_bound: float
    confidence: float


@dataclass(frozen=True)
class StepState:
    """What one step hands the next."""

    current: torch.Tensor  # (B, W) tokens the next forward reads
    argmax: torch.Tensor  # (B, W) the draft: argmax at free slots, clamped tokens elsewhere
    score: torch.Tensor  # (B,) how well each row joins its clamped anchor
    soft: torch.Tensor  # (B, W, H) self-conditioning embeddings for the next forward
    finished: torch.Tensor  # (B,) bool
    history: torch.Tensor  # (S, B, W) the last S argmax canvases (stability)
    max_prob: torch.Tensor  # (B, W) draft confidence


def join_score(probs_at_tokens: torch.Tensor, anchor: torch.Tensor) -> torch.Tensor:
    logp = probs_at_tokens.clamp_min(1e-30).log()
    count = anchor.sum(-1)
    return torch.where(count > 0, (logp * anchor).sum(-1) / count.clamp_min(1),
                       torch.zeros_like(count, dtype=logp.dtype))


def sample_step(logits, current, argmax, score, finished, history, free, fixed, anchor, clamp_embeddings,
                embed_weight, embed_scale, scale, uniform, noise, softcap: float | None, entropy_bound: float,
                confidence: float) -> tuple[torch.Tensor, ...]:
    """Everything after the forward, on plain tensors (what torch.compile sees). Returns the next
    (current, argmax, score, soft, finished, history, max_prob)."""
    out = fast_step(logits, softcap, scale, uniform)
    at_tokens = out.probs.gather(-1, fixed[..., None]).squeeze(-1)
    entropy = out.entropy.masked_fill(~free, 0.0)
    accepted = entropy_bound_accept(entropy, entropy_bound)
    nxt = torch.where(free, torch.where(accepted, out.sample, noise), fixed)
    new_argmax = torch.where(free, out.argmax, fixed)
    new_score = join_score(at_tokens, anchor)
    # Finished rows keep their tokens and score, as in transformers (not their probabilities: rows never see each
    # other, so what a finished row's next forward reads changes nothing).
    keep = finished[:, None]
    new_argmax, nxt = torch.where(keep, argmax, new_argmax), torch.where(keep, current, nxt)
    new_score = torch.where(finished, score, new_score)
    stopped, history = stable_and_confident(history, new_argmax, entropy, free, confidence)
    soft = soft_embeddings(out.probs, embed_weight, embed_scale, clamp_embeddings, free)
    return nxt, new_argmax, new_score, soft, finished | stopped, history, out.max_prob


def denoise_step(model, inputs: StepInputs, state: StepState, scale: torch.Tensor, uniform: torch.Tensor,
                 noise: torch.Tensor, sample: Callable = sample_step, forward: Forward | None = None) -> StepState:
    """One denoising step. `scale` (0-d) is the step's logit scale (softcap and temperature), `uniform` (B, W)
    draws the samples, `noise` (B, W) renoises the slots not accepted. `forward`: the decoder forward of this
    canvas as a replayable graph (None: eager)."""
    c = inputs.canvas
    if forward is not None:
        logits = forward(state.current, state.soft)
    else:
        logits = decoder_logits(model, state.current, state.soft, inputs.view, c.position_ids, inputs.masks)
    return StepState(*sample(logits, state.current, state.argmax, state.score, state.finished, state.history,
                             c.free, c.fixed_tokens, c.anchor, inputs.clamp_embeddings, inputs.embed_weight,
                             inputs.embed_scale, scale, uniform, noise, inputs.softcap, inputs.entropy_bound,
                             inputs.confidence))


@functools.cache
def sample_step_for(device_type: str) -> Callable:
    """`sample_step` compiled for CUDA (mode "reduce-overhead": CUDA graphs, one per canvas shape), eager
    elsewhere: CPU never compiles."""
    if device_type != "cuda":
        return sample_step
    compiled = torch.compile(sample_step, mode="reduce-overhead", fullgraph=True)

    def run(*args):
        torch.compiler.cudagraph_mark_step_begin()
        # A CUDA graph's outputs are overwritten by its next replay, and each step's outputs feed the next one.
        return tuple(t.clone() for t in compiled(*args))

    return run


def first_state(inputs: StepInputs, config: EngineConfig, vocab: int, generator: torch.Generator,
                start: torch.Tensor | None = None) -> StepState:
    """`start` (B, W): the free slots' first tokens (a seed canvas shared with another implementation); None: drawn
    uniformly from `generator`."""
    c = inputs.canvas
    rows, width = c.shape
    device = c.free.device
    if start is None:
        start = torch.randint(0, vocab, (rows, width), generator=generator, device=device)
    current = torch.where(c.free, start.to(device), c.fixed_tokens)
    history = torch.full((config.stability_threshold, rows, width), -1, dtype=current.dtype, device=device)
    return StepState(current=current, argmax=current, score=torch.zeros(rows, device=device),
                     soft=torch.zeros_like(inputs.clamp_embeddings),
                     finished=torch.zeros(rows, dtype=torch.bool, device=device), history=history,
                     max_prob=torch.zeros(rows, width, device=device))


def step_scales(config: EngineConfig, softcap: float | None, device: torch.device) -> torch.Tensor:
    """Each step's logit scale (the linear temperature schedule, fused with the softcap), made once per canvas."""
    n = config.max_denoising_steps
    return torch.tensor([logit_scale(softcap, 1.0 / temperature(remaining, n, config.t_min, config.t_max))
                         for remaining in range(n, 0, -1)], dtype=torch.float32, device=device)


def denoise(model, config: EngineConfig, canvas: Canvas, view, masks: dict, generator: torch.Generator, *,
            cancel: CancelToken | None = None, deadline: float | None = None,
            on_step: StepCallback | None = None, start: torch.Tensor | None = None) -> DenoiseOutput:
    shape = shape_of(model)
    rows, width = canvas.shape
    device = canvas.free.device
    weight, scale = embedding_table(model)
    inputs = StepInputs(view, masks, canvas, embed(model, canvas.fixed_tokens), weight, scale, shape.softcap,
                        config.entropy_bound, config.confidence_threshold)
    sample = sample_step_for(device.type)
    state = first_state(inputs, config, shape.vocab_size, generator, start)
    scales = step_scales(config, shape.softcap, device)
    steps, outcome = 0, "ok"
    graphed: Forward | None = None
    row_steps = torch.zeros(rows, dtype=torch.int32, device=device)
    for step in range(config.max_denoising_steps):
        if cancel is not None and cancel.cancelled:
            outcome = "cancelled"
            break
        if deadline is not None and steps > 0 and time.monotonic() >= deadline:
            outcome = "cut_short"
            break
        uniform = torch.rand((rows, width), generator=generator, device=device)
        noise = torch.randint(0, shape.vocab_size, (rows, width), generator=generator, device=device)
        row_steps += ~state.finished
        state = denoise_step(model, inputs, state, scales[step], uniform, noise, sample, graphed)
        steps += 1
        if on_step is not None:
            on_step(steps, state.argmax, state.max_prob, state.score)
        if bool(state.finished.all()):  # the step's one host sync
            break
        if steps == 1 and config.cuda_graph_steps and device.type == "cuda":
            graphed = capture_forward(model, lambda tokens, soft: decoder_logits(
                model, tokens, soft, view, canvas.position_ids, masks), state.current, state.soft)
    return DenoiseOutput(state.argmax, state.score, steps, outcome, row_steps)
