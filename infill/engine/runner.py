"""Runs the engine's forwards: the weights, the prompt's KV buffers, and on CUDA one captured program per shape.

- `encode(ids, start)`: a prompt chunk's keys and values into the buffers. Static (CUDA): the chunk goes into the
  smallest encode bucket that holds it (ENCODE_BUCKETS), pads after the real tokens (causal attention keeps every
  real token blind to them; the prompt's length counts the real ones only), and that bucket's graph is replayed.
- `stepper(canvas, inputs)`: the denoising steps of one canvas. Static: the canvas is padded into the smallest
  (rows, width) bucket (CANVAS_ROWS x CANVAS_WIDTHS), and that bucket's graph replays a whole step: embedding,
  self-conditioning, every layer, the LM head and the sampling math, its state kept in the program's buffers.
  Eager: forward and sampling on the canvas's own shape, reading exact slices of the buffers.
A shape no bucket holds runs eagerly. On CUDA the loader's warm-up builds and captures every program
(`capture_all`) before any request; a program first met during a request (an engine whose warm-up never ran, or
`EngineConfig.static_programs` on a CPU, where nothing is captured) is built then and runs its body eagerly. CPU runs
eager by default; the CPU tests set `static_programs` to check the bucketed arithmetic without a GPU.
"""

from __future__ import annotations

import logging
import time
from typing import TypedDict

import torch

from infill.engine import forward
from infill.engine.canvas import Canvas, build_canvas, padded_to
from infill.engine.config import EngineConfig
from infill.engine.denoise import (
    EagerStepper,
    Forward,
    StepInputs,
    Stepper,
    StepState,
    denoise_step,
    sample_step,
    sample_step_for,
)
from infill.engine.graphs import StaticProgram, bucket
from infill.engine.kv import KVBuffers
from infill.engine.weights import EngineWeights

log = logging.getLogger(__name__)

ENCODE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
PREFILL_CHUNK_TOKENS = ENCODE_BUCKETS[-1]  # a long prompt is encoded in chunks the largest bucket holds
CANVAS_ROWS = (1, 3, 5)  # one row, the GPU's single-line candidates, the multi-line candidates
CANVAS_WIDTHS = (32, 80, 256)  # a line, a few lines, the model's whole canvas
ALIGN = 64  # buffer lengths are kept a multiple of this (aligned rows for attention kernels)


class CaptureReport(TypedDict, total=False):
    """What `capture_all` captured, for the log and the benchmarks (empty until it ran)."""

    captured: int  # programs captured as CUDA graphs
    programs: int  # programs built
    failed: list[str]  # names of those that run eagerly
    seconds: float


def expert_kernel(config: EngineConfig, weights: EngineWeights) -> str:
    """`config.expert_kernel`, or for "auto": grouped matmuls where torch has them for the dtype (bf16 on CUDA,
    any on CPU), the batched per-pair kernel elsewhere."""
    if config.expert_kernel != "auto":
        return config.expert_kernel
    if weights.device.type != "cuda" or weights.dtype == torch.bfloat16 or weights.experts_fp8:
        return "grouped"
    return "pairs"


class ModelRunner:
    def __init__(
        self,
        weights: EngineWeights,
        config: EngineConfig,
        *,
        max_prompt: int,
        max_canvas_slots: int,
        pad_id: int,
    ) -> None:
        self.weights = weights
        self.pad_id = pad_id
        self.config = config
        self.device = weights.device
        self.static = config.static_programs_on(str(self.device))
        self.kernel = expert_kernel(config, weights)
        slots = max(max_canvas_slots, max(CANVAS_ROWS) * max(CANVAS_WIDTHS), max(ENCODE_BUCKETS))
        capacity = -(-(max_prompt + slots) // ALIGN) * ALIGN
        self.kv = KVBuffers(weights.kv_shapes(), capacity, weights.dtype, self.device)
        self.layer_fn = forward.layer_forward
        self.sample = sample_step
        self._encoders: dict[int, _EncodeProgram] = {}
        self._steps: dict[tuple[int, int], _StepProgram] = {}
        self._pool = torch.cuda.graph_pool_handle() if self.device.type == "cuda" and self.static else None
        log.info(
            "KV buffers: %d tokens, %.0f MiB; experts kernel %s; %s",
            capacity,
            self.kv.nbytes / 2**20,
            self.kernel,
            "static programs (CUDA graphs)" if self.static else "eager",
        )

    # ---- prompt -------------------------------------------------------------------------------------------------

    def encode(self, ids: torch.Tensor, start: int) -> None:
        """Write the keys and values of `ids` (on the device) at positions start.. into the buffers."""
        size = bucket(ids.numel(), ENCODE_BUCKETS) if self.static else None
        if size is None:
            forward.encode(
                self.weights,
                self.kv,
                ids,
                start,
                forward.exact_spans(self.weights, start + ids.numel(), start),
                self.kernel,
                self.layer_fn,
            )
            return
        self._encoder(size).run(ids, start)

    def _encoder(self, size: int) -> _EncodeProgram:
        if size not in self._encoders:
            self._encoders[size] = _EncodeProgram(self, size)
        return self._encoders[size]

    # ---- canvas -------------------------------------------------------------------------------------------------

    def step_inputs(self, canvas: Canvas, config: EngineConfig) -> StepInputs:
        w = self.weights
        return StepInputs(
            free=canvas.free,
            fixed=canvas.fixed_tokens,
            anchor=canvas.anchor,
            clamp_embeddings=forward.embed(w, canvas.fixed_tokens),
            embed=w.embed,
            embed_scale=w.embed_scale,
            softcap=w.softcap,
            entropy_bound=config.entropy_bound,
            confidence=config.confidence_threshold,
        )

    def forward_for(self, canvas: Canvas) -> Forward:
        """The decoder forward of `canvas` after the prompt the buffers hold now, on exact slices (eager)."""
        length = self.kv.length
        rows, width = canvas.shape
        spans = forward.exact_spans(self.weights, length + rows * width, length)
        masks = forward.decode_masks(self.weights, spans, length, canvas.valid)
        return lambda tokens, soft: forward.decode(
            self.weights, self.kv, tokens, soft, length, canvas.valid, spans, self.kernel, self.layer_fn, masks
        )

    def stepper(self, canvas: Canvas, inputs: StepInputs) -> Stepper:
        rows, width = canvas.shape
        bucket_rows = bucket(rows, CANVAS_ROWS) if self.static else None
        bucket_width = bucket(width, CANVAS_WIDTHS) if self.static else None
        if bucket_rows is None or bucket_width is None:
            return EagerStepper(self.forward_for(canvas), inputs, sample_step_for(self.device.type))
        shape = (bucket_rows, bucket_width)
        if shape not in self._steps:
            self._steps[shape] = _StepProgram(self, *shape)
        program = self._steps[shape]
        program.load(canvas, inputs)
        return program

    # ---- load time ----------------------------------------------------------------------------------------------

    def compile_layers(self) -> None:
        """On CUDA, fuse each layer's small operations (norms, rotary, routing, residuals) with torch.compile;
        shapes are dynamic so one compiled layer serves every bucket. Called before capture."""
        self.layer_fn = torch.compile(forward.layer_forward, dynamic=True)
        self.sample = torch.compile(sample_step, dynamic=True)

    def capture_all(self) -> CaptureReport:
        """Build and capture every program (CUDA graphs; a warm-up run each), so no request pays for it. Returns
        what was captured and how long it took, for the log and the benchmarks."""
        started = time.perf_counter()
        for size in ENCODE_BUCKETS:
            self._encoder(size).program.capture(self._pool)
        for rows in CANVAS_ROWS:
            for width in CANVAS_WIDTHS:
                program = self._steps.setdefault((rows, width), _StepProgram(self, rows, width))
                program.capture()
        programs = [p.program for p in self._encoders.values()] + [p.program for p in self._steps.values()]
        self.kv.set_length(0)  # the warm-up runs wrote nothing anyone reads, and hold no prompt
        return {
            "captured": sum(p.captured for p in programs),
            "programs": len(programs),
            "failed": [p.name for p in programs if p.failed],
            "seconds": round(time.perf_counter() - started, 2),
        }


class _EncodeProgram:
    def __init__(self, runner: ModelRunner, size: int) -> None:
        self.runner = runner
        self.tokens = torch.zeros(size, dtype=torch.long, device=runner.device)
        self.start = torch.zeros((), dtype=torch.long, device=runner.device)
        spans = forward.whole_spans(runner.kv)
        self.program = StaticProgram(
            f"encode {size}",
            lambda: forward.encode(
                runner.weights, runner.kv, self.tokens, self.start, spans, runner.kernel, runner.layer_fn
            ),
            runner.device,
        )

    def run(self, ids: torch.Tensor, start: int) -> None:
        self.tokens[: ids.numel()].copy_(ids)  # the rest: earlier tokens, now pads nobody sees
        self.start.fill_(start)
        self.program.run()


class _StepProgram:
    """One denoising step of a (rows, width) bucket, its canvas and state in buffers of that shape."""

    def __init__(self, runner: ModelRunner, rows: int, width: int) -> None:
        self.runner, self.rows, self.width = runner, rows, width
        w, device, config = runner.weights, runner.device, runner.config

        def zeros(*shape: int, dtype: torch.dtype = torch.long) -> torch.Tensor:
            return torch.zeros(shape, dtype=dtype, device=device)

        self.valid = zeros(rows, width, dtype=torch.bool)
        self.inputs = StepInputs(
            free=zeros(rows, width, dtype=torch.bool),
            fixed=zeros(rows, width),
            anchor=zeros(rows, width, dtype=torch.bool),
            clamp_embeddings=zeros(rows, width, w.hidden, dtype=w.dtype),
            embed=w.embed,
            embed_scale=w.embed_scale,
            softcap=w.softcap,
            entropy_bound=config.entropy_bound,
            confidence=config.confidence_threshold,
        )
        self.state = StepState(
            current=zeros(rows, width),
            argmax=zeros(rows, width),
            score=zeros(rows, dtype=torch.float32),
            soft=zeros(rows, width, w.hidden, dtype=w.dtype),
            finished=zeros(rows, dtype=torch.bool),
            history=zeros(config.stability_threshold, rows, width),
            max_prob=zeros(rows, width, dtype=torch.float32),
        )
        self.scale = zeros(dtype=torch.float32)
        self.uniform = zeros(rows, width, dtype=torch.float32)
        self.noise = zeros(rows, width)
        self.shape = (rows, width)
        self.program = StaticProgram(f"step {rows}x{width}", self._body, device)

    def _forward(self, tokens: torch.Tensor, soft: torch.Tensor) -> torch.Tensor:
        # reads the runner's layer function at call time, so layers compiled before capture are the ones captured
        runner = self.runner
        return forward.decode(
            runner.weights,
            runner.kv,
            tokens,
            soft,
            runner.kv.length_tensor,
            self.valid,
            forward.whole_spans(runner.kv),
            runner.kernel,
            runner.layer_fn,
        )

    def _body(self) -> None:
        # the same hot step the eager stepper runs, written into this program's fixed buffers
        state = self.state
        new = denoise_step(self._forward, self.inputs, state, self.scale, self.uniform, self.noise, self.runner.sample)
        for mine, theirs in zip(state.tensors(), new.tensors()):
            mine.copy_(theirs)

    def load(self, canvas: Canvas, inputs: StepInputs) -> None:
        padded = padded_to(canvas, self.rows, self.width, self.runner.pad_id)
        for mine, theirs in (
            (self.valid, padded.valid),
            (self.inputs.free, padded.free),
            (self.inputs.fixed, padded.fixed_tokens),
            (self.inputs.anchor, padded.anchor),
        ):
            mine.copy_(theirs)
        rows, width = canvas.shape
        self.inputs.clamp_embeddings.zero_()
        self.inputs.clamp_embeddings[:rows, :width].copy_(inputs.clamp_embeddings)
        self.shape = (rows, width)

    def start(self, state: StepState) -> None:
        """Copy the first state in; the added rows start finished, so they never hold the loop open."""
        for mine, theirs in zip(self.state.tensors(), state.tensors()):
            mine.zero_()
            mine[_real(mine, theirs)].copy_(theirs)
        self.state.finished[self.shape[0] :] = True

    def step(self, scale: torch.Tensor, uniform: torch.Tensor, noise: torch.Tensor) -> StepState:
        rows, width = self.shape
        self.scale.copy_(scale)
        self.uniform[:rows, :width].copy_(uniform)
        self.noise[:rows, :width].copy_(noise)
        self.program.run()
        rows, width = self.shape
        s = self.state
        return StepState(
            s.current[:rows, :width],
            s.argmax[:rows, :width],
            s.score[:rows],
            s.soft[:rows, :width],
            s.finished[:rows],
            s.history[:, :rows, :width],
            s.max_prob[:rows, :width],
        )

    def capture(self) -> bool:
        """Capture on a stand-in canvas of this bucket's shape (its values change nothing captured)."""
        runner = self.runner
        canvas = build_canvas([self.width] * self.rows, [[]], runner.kv.length, runner.pad_id, runner.device)
        self.load(canvas, runner.step_inputs(canvas, runner.config))
        return self.program.capture(runner._pool)


def _real(buffer: torch.Tensor, like: torch.Tensor) -> tuple[slice, ...]:
    """The leading block of `buffer` that a tensor of `like`'s shape fills."""
    return tuple(slice(0, n) for n in like.shape)
