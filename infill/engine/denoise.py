"""The denoising loop over one infill canvas, around one named hot step.

`denoise_step` is one step on tensors: the decoder forward over the canvas (forward.decode: the prompt's keys and
values read in place) → `sample_step`: sampling math (sampler.py) → entropy-bound accept / renoise of free slots →
fixed slots clamped back → finished rows frozen → stable+confident stopping per row → the next step's
self-conditioning. It reads no value back to the host and branches on no tensor value; its random numbers come in
as tensors. On CUDA the runner (runner.py) replays the whole step, forward and sampling, as one CUDA graph per
canvas bucket; elsewhere it runs eagerly on the canvas's own shape.

`denoise` keeps the loop control: cancel and deadline between steps (never inside a forward), drafts, and stopping
once every row finished. Without a step callback the finished flag is read one step late on CUDA (the copy overlaps
the next step, so the host never waits on the device; a row that finished stays frozen, so the extra step changes
no token); with one, and elsewhere, at once.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Literal, Protocol

import torch

from infill.engine.canvas import Canvas
from infill.engine.config import EngineConfig
from infill.engine.forward import soft_embeddings
from infill.engine.sampler import entropy_bound_accept, fast_step, logit_scale, stable_and_confident, temperature
from infill.types import CancelToken

if TYPE_CHECKING:
    from infill.engine.weights import EngineWeights


@dataclass
class DenoiseOutput:
    tokens: torch.Tensor  # (B, W) final argmax canvas, fixed slots clamped
    join_score: torch.Tensor  # (B,) mean log-prob of the clamped anchor tokens at the last step
    steps: int  # decoder forwards
    outcome: Literal["ok", "cut_short", "cancelled"]


# (step, argmax, max_prob, score, finished): the draft after each step, and which rows have stopped
StepCallback = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], None]
Forward = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (canvas tokens, soft embeddings) -> raw logits


@dataclass(frozen=True)
class StepInputs:
    """What every step of one canvas reads and never changes."""

    free: torch.Tensor  # (B, W) bool: slots the model fills
    fixed: torch.Tensor  # (B, W) clamped token at fixed and pad slots
    anchor: torch.Tensor  # (B, W) bool: clamped slots scored for the join
    clamp_embeddings: torch.Tensor  # (B, W, H) embedding of each slot's clamped token
    embed: torch.Tensor  # (V, H) the self-conditioning table
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

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return tuple(getattr(self, f.name) for f in fields(self))


def join_score(probs_at_tokens: torch.Tensor, anchor: torch.Tensor) -> torch.Tensor:
    logp = probs_at_tokens.clamp_min(1e-30).log()
    count = anchor.sum(-1)
    return torch.where(
        count > 0, (logp * anchor).sum(-1) / count.clamp_min(1), torch.zeros_like(count, dtype=logp.dtype)
    )


def sample_step(
    logits: torch.Tensor,
    state: StepState,
    inputs: StepInputs,
    scale: torch.Tensor,
    uniform: torch.Tensor,
    noise: torch.Tensor,
) -> StepState:
    """Everything after the forward, on plain tensors (what torch.compile sees)."""
    free, fixed = inputs.free, inputs.fixed
    out = fast_step(logits, inputs.softcap, scale, uniform)
    at_tokens = out.probs.gather(-1, fixed[..., None]).squeeze(-1)
    entropy = out.entropy.masked_fill(~free, 0.0)
    accepted = entropy_bound_accept(entropy, inputs.entropy_bound)
    nxt = torch.where(free, torch.where(accepted, out.sample, noise), fixed)
    new_argmax = torch.where(free, out.argmax, fixed)
    new_score = join_score(at_tokens, inputs.anchor)
    # Finished rows keep their tokens and score, as in transformers (not their probabilities: rows never see each
    # other, so what a finished row's next forward reads changes nothing).
    finished = state.finished
    keep = finished[:, None]
    new_argmax, nxt = torch.where(keep, state.argmax, new_argmax), torch.where(keep, state.current, nxt)
    new_score = torch.where(finished, state.score, new_score)
    stopped, history = stable_and_confident(state.history, new_argmax, entropy, free, inputs.confidence)
    soft = soft_embeddings(out.probs, inputs.embed, inputs.embed_scale, inputs.clamp_embeddings, free)
    return StepState(nxt, new_argmax, new_score, soft, finished | stopped, history, out.max_prob)


# (logits, state, inputs, scale, uniform, noise) -> the next state: sample_step, or a compiled copy of it
SampleStep = Callable[[torch.Tensor, StepState, StepInputs, torch.Tensor, torch.Tensor, torch.Tensor], StepState]


def denoise_step(
    forward: Forward,
    inputs: StepInputs,
    state: StepState,
    scale: torch.Tensor,
    uniform: torch.Tensor,
    noise: torch.Tensor,
    sample: SampleStep = sample_step,
) -> StepState:
    """One denoising step. `scale` (0-d) is the step's logit scale (softcap and temperature), `uniform` (B, W)
    draws the samples, `noise` (B, W) renoises the slots not accepted."""
    return sample(forward(state.current, state.soft), state, inputs, scale, uniform, noise)


@functools.cache
def sample_step_for(device_type: str) -> SampleStep:
    """`sample_step` compiled for CUDA (mode "reduce-overhead": CUDA graphs, one per canvas shape) where the step
    runs outside a captured program, eager elsewhere: CPU never compiles."""
    if device_type != "cuda":
        return sample_step
    compiled = torch.compile(sample_step, mode="reduce-overhead", fullgraph=True)

    def run(*step: Any) -> StepState:  # (sample_step's arguments: SampleStep types them for every caller)
        torch.compiler.cudagraph_mark_step_begin()  # type: ignore[no-untyped-call]  # torch leaves it unannotated
        # A CUDA graph's outputs are overwritten by its next replay, and each step's outputs feed the next one.
        new: StepState = compiled(*step)
        return StepState(*(t.clone() for t in new.tensors()))

    return run


def first_state(inputs: StepInputs, config: EngineConfig, vocab: int, generator: torch.Generator) -> StepState:
    """The free slots' first tokens drawn uniformly from `generator` (its first draw), the fixed ones clamped."""
    rows, width = inputs.free.shape
    device = inputs.free.device
    start = torch.randint(0, vocab, (rows, width), generator=generator, device=device)
    current = torch.where(inputs.free, start, inputs.fixed)
    history = torch.full((config.stability_threshold, rows, width), -1, dtype=current.dtype, device=device)
    return StepState(
        current=current,
        argmax=current,
        score=torch.zeros(rows, device=device),
        soft=torch.zeros_like(inputs.clamp_embeddings),
        finished=torch.zeros(rows, dtype=torch.bool, device=device),
        history=history,
        max_prob=torch.zeros(rows, width, device=device),
    )


def step_scales(config: EngineConfig, softcap: float | None, device: torch.device) -> torch.Tensor:
    """Each step's logit scale (the linear temperature schedule, fused with the softcap), made once per canvas."""
    n = config.max_denoising_steps
    return torch.tensor(
        [
            logit_scale(softcap, 1.0 / temperature(remaining, n, config.t_min, config.t_max))
            for remaining in range(n, 0, -1)
        ],
        dtype=torch.float32,
        device=device,
    )


class Stepper(Protocol):
    """Runs the steps of one canvas: `start` takes the first state, `step` returns the next (a view that the
    following step may overwrite: read it before stepping again)."""

    def start(self, state: StepState) -> None: ...

    def step(self, scale: torch.Tensor, uniform: torch.Tensor, noise: torch.Tensor) -> StepState: ...


class EagerStepper:
    """Forward and sampling on the canvas's own shape, as plain calls."""

    def __init__(self, forward: Forward, inputs: StepInputs, sample: SampleStep = sample_step) -> None:
        self.forward, self.inputs, self.sample = forward, inputs, sample
        self.state: StepState | None = None

    def start(self, state: StepState) -> None:
        self.state = state

    def step(self, scale: torch.Tensor, uniform: torch.Tensor, noise: torch.Tensor) -> StepState:
        if self.state is None:
            raise RuntimeError("a stepper steps only after start()")
        self.state = denoise_step(self.forward, self.inputs, self.state, scale, uniform, noise, self.sample)
        return self.state


class CanvasRunner(Protocol):
    """What the loop asks of the runner (runner.ModelRunner, which holds the weights and the prompt's
    keys and values): the weights, a canvas's fixed inputs, and what steps it."""

    @property
    def weights(self) -> EngineWeights: ...

    def step_inputs(self, canvas: Canvas, config: EngineConfig) -> StepInputs: ...

    def stepper(self, canvas: Canvas, inputs: StepInputs) -> Stepper: ...


@dataclass(frozen=True)
class CanvasFill:
    """What a denoiser needs for one canvas: the canvas, the prompt before it, and the runner."""

    canvas: Canvas
    prompt_ids: torch.Tensor
    runner: CanvasRunner


def denoise(
    fill: CanvasFill,
    config: EngineConfig,
    generator: torch.Generator,
    *,
    cancel: CancelToken | None = None,
    deadline: float | None = None,
    on_step: StepCallback | None = None,
) -> DenoiseOutput:
    canvas, runner = fill.canvas, fill.runner
    rows, width = canvas.shape
    device = canvas.free.device
    inputs = runner.step_inputs(canvas, config)
    stepper: Stepper = runner.stepper(canvas, inputs)
    state = first_state(inputs, config, runner.weights.vocab, generator)
    stepper.start(state)
    scales = step_scales(config, runner.weights.softcap, device)
    finished_late = _FinishedFlag(device) if device.type == "cuda" and on_step is None else None
    steps = 0
    outcome: Literal["ok", "cut_short", "cancelled"] = "ok"
    for step in range(config.max_denoising_steps):
        if cancel is not None and cancel.cancelled:
            outcome = "cancelled"
            break
        if deadline is not None and steps > 0 and time.monotonic() >= deadline:
            outcome = "cut_short"
            break
        uniform = torch.rand((rows, width), generator=generator, device=device)
        noise = torch.randint(0, runner.weights.vocab, (rows, width), generator=generator, device=device)
        state = stepper.step(scales[step], uniform, noise)
        steps += 1
        if on_step is not None:
            on_step(steps, state.argmax, state.max_prob, state.score, state.finished)
        if finished_late is not None:
            if finished_late.read():  # the previous step's flag: every row had finished by then
                break
            finished_late.post(state.finished)
        elif bool(state.finished.all()):  # the step's one host sync
            break
    return DenoiseOutput(state.argmax.clone(), state.score.clone(), steps, outcome)


class _FinishedFlag:
    """`finished.all()` copied to the host without waiting: posted after a step, read after the next one."""

    def __init__(self, device: torch.device) -> None:
        self.host = torch.zeros((), dtype=torch.bool, pin_memory=True)
        self.event = torch.cuda.Event()  # type: ignore[no-untyped-call]  # torch leaves it unannotated
        self.posted = False

    def post(self, finished: torch.Tensor) -> None:
        self.host.copy_(finished.all(), non_blocking=True)
        self.event.record()
        self.posted = True

    def read(self) -> bool:
        if not self.posted:
            return False
        self.event.synchronize()
        return bool(self.host)
