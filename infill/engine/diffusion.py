"""The persistent in-process DiffusionGemma infill engine (an `InfillBackend`).

One loaded model per process, kept warm. Single-threaded and lock-free: callers run it on the model worker
(infill/worker.py), which also owns supersession. A request: tokenise the prompt by chunks → take the document's
prompt keys and values (kv.PromptCache: the common prefix with what it holds is kept, only the new tail is encoded)
→ build a canvas with one row per candidate middle length and the suffix anchor clamped → denoise (denoise.py, the
forwards run by runner.py over the checkpoint's own weights) → pick the row that best joins the fixed text →
decode. Cancellation and the deadline act between prompt chunks and between denoising steps.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, cast

import torch
import transformers

from infill import languages
from infill.cache.tokens import EXTRA_CONTEXT_TOKENS, ChunkedTokenizer, fit_prompt
from infill.engine.canvas import Canvas, build_canvas
from infill.engine.config import EngineSettings, ResolvedEngineConfig, resolve_engine_config
from infill.engine.denoise import CanvasFill, DenoiseOutput, StepCallback, denoise
from infill.engine.kv import PromptCache, stash_budget
from infill.engine.layout import choose_lengths
from infill.engine.loading import LoadedModel
from infill.engine.model import model_limits
from infill.engine.runner import PREFILL_CHUNK_TOKENS, CaptureReport, ModelRunner
from infill.types import (
    UNSTEERED,
    BackendInfo,
    CancelToken,
    Draft,
    DraftCallback,
    FillControl,
    InfillError,
    InfillRequest,
    InfillResult,
    Outcome,
    Timings,
)

log = logging.getLogger(__name__)

_ANONYMOUS = "\0anonymous"


def _should_stop(cancel: CancelToken | None, deadline: float | None) -> bool:
    return (cancel is not None and cancel.cancelled) or (deadline is not None and time.monotonic() >= deadline)


class DiffusionEngine:
    def __init__(
        self,
        loaded: LoadedModel,
        config: EngineSettings | ResolvedEngineConfig = None,
        *,
        denoiser: Callable[..., DenoiseOutput] = denoise,
    ) -> None:
        """`config`: a ResolvedEngineConfig is used as it is; EngineOverrides' given fields, a mapping's fields, or
        an EngineConfig's non-default fields (None: none) override the checkpoint's own sampler settings
        (config.resolve_engine_config). `denoiser`: the loop over one canvas (benchmarks/engine.py and the tests
        run transformers' exact sampler, tests/reference_sampler.py, through it)."""
        self.loaded = loaded
        self.tokenizer = loaded.tokenizer
        resolved = (
            config
            if isinstance(config, ResolvedEngineConfig)
            else resolve_engine_config(loaded.generation_config, loaded.config, config)
        )
        self.config, self.config_sources = resolved.config, resolved.sources
        log.info("DiffusionGemma engine settings for %s: %s", loaded.model_id, resolved.describe())
        self.denoiser = denoiser
        limits = model_limits(loaded.config)
        self.weights = loaded.weights
        self.width = self.config.canvas_length or limits.canvas_length
        self.max_prompt = min(self.config.max_prompt_tokens, limits.max_positions - self.width - 1)
        gen = loaded.generation_config
        if gen.pad_token_id is None:
            raise InfillError(f"{loaded.model_id} names no pad token (generation config, tokenizer or model config)")
        self.bos_id, self.eos_id, self.pad_id = gen.bos_token_id, gen.eos_token_id, gen.pad_token_id
        self.stop_ids = {i for i in (self.eos_id if isinstance(self.eos_id, list) else [self.eos_id]) if i is not None}
        self.stop_ids.add(self.pad_id)
        self.device = self.weights.device
        self.tokens = ChunkedTokenizer(self.tokenizer)
        rows = self.config.max_rows(str(self.device))
        self.runner = ModelRunner(
            self.weights,
            self.config,
            max_prompt=self.max_prompt,
            max_canvas_slots=rows * self.width,
            pad_id=self.pad_id,
        )
        per_token = self.runner.kv.bytes_per_token()
        explicit_bytes = self.config.kv_store_bytes
        self.prompts = PromptCache(
            self.runner.kv,
            explicit_bytes if explicit_bytes is not None else stash_budget(per_token, self.device, self.max_prompt),
        )
        log.info(
            "prompt KV: live buffers %.0f MiB, other documents up to %.0f MiB (%s), %d bytes a token",
            self.runner.kv.nbytes / 2**20,
            self.prompts.stash_bytes / 2**20,
            "explicit" if explicit_bytes is not None else "by device",
            per_token,
        )
        self.programs: CaptureReport = {}  # what warm_up captured (CUDA)
        self._info = BackendInfo(
            name=f"diffusiongemma:{loaded.model_id}",
            kind="diffusion",
            model=loaded.model_id,
            device=loaded.device,
            dtype=loaded.dtype,
            label=f"DiffusionGemma {loaded.model_id} ({loaded.device}, {self.weights.weight_format})",
        )

    @property
    def info(self) -> BackendInfo:
        return self._info

    def close(self) -> None:
        self.prompts.clear()

    def forget(self, document_id: str) -> None:
        """The editor closed the document: its prompt's keys and values (live or stashed) go now."""
        self.prompts.forget(document_id)

    def versions(self) -> dict[str, Any]:
        return {
            "backend": "diffusion",
            "model": self.loaded.model_id,
            "revision": self.loaded.revision,
            "dtype": self.loaded.dtype,
            "device": self.loaded.device,
            "canvas_width": self.width,
            "weights": self.weights.weight_format,
            "experts_kernel": self.runner.kernel,
            "transformers": transformers.__version__,
            **self.config.describe(),
            "static_programs": self.runner.static,  # (the setting's None resolved for this device)
            "settings_from": dict(self.config_sources),
            "kv_store_bytes": self.prompts.stash_bytes,
        }

    # ---- public entry point -------------------------------------------------------------------------------------

    def infill(self, request: InfillRequest, control: FillControl = UNSTEERED) -> InfillResult:
        started = time.perf_counter()
        cancel = control.cancel or CancelToken()
        try:
            return self._infill(request, cancel, control.deadline, control.on_draft, started)
        except InfillError as exc:
            log.info("infill request refused: %s", exc)
            return self._empty(request, "error", started, str(exc))
        except Exception as exc:  # a failing model must never take the engine down
            log.exception("diffusion engine failed")
            return self._empty(request, "error", started, f"{type(exc).__name__}: {exc}")

    def warm(self, request: InfillRequest, *, cancel: CancelToken | None = None) -> int:
        """Encode `request`'s prompt into the document's prompt KV now (while an editor's debounce runs), so that
        its `infill` only denoises. Stops between chunks when cancelled and keeps what it encoded (the next
        keystroke's prompt shares all of it up to the edit). Returns the prompt tokens now held. Warming is an
        optimisation: failures are logged, never raised."""
        cancel = cancel or CancelToken()
        if cancel.cancelled:
            return 0
        try:
            key = request.document_id or _ANONYMOUS
            ids = torch.tensor(
                self.prompt_ids(request.prefix, request.suffix, request.extra_context, key), dtype=torch.long
            )
            with torch.inference_mode():
                _, done = self._encode_prompt(key, ids, cancel)
            return done
        except Exception:  # noqa: BLE001 - the infill that follows will meet (and report) the same problem
            log.exception("warming the prompt cache failed")
            return 0

    def warm_up(self) -> float:
        """On CUDA, pay the one-time costs now, outside any request: each layer compiled (config.compile) and every
        encode and canvas program captured as a CUDA graph (config.cuda_graphs). Elsewhere nothing is compiled or
        captured and this returns at once. Returns seconds spent."""
        if self.device.type != "cuda" or not self.runner.static:
            return 0.0
        started = time.perf_counter()
        if self.config.compile:
            self.runner.compile_layers()
        with torch.inference_mode():
            self.programs = self.runner.capture_all()
        self.prompts.clear()  # the captures wrote into the buffers
        log.info(
            "captured %d of %d programs in %.1f s%s",
            self.programs["captured"],
            self.programs["programs"],
            self.programs["seconds"],
            f" (eager: {', '.join(self.programs['failed'])})" if self.programs["failed"] else "",
        )
        return time.perf_counter() - started

    def _empty(self, request: InfillRequest, outcome: Outcome, started: float, error: str | None) -> InfillResult:
        return InfillResult(
            middles=tuple("" for _ in range(request.gap_count)),
            outcome=outcome,
            backend=self._info.name,
            version=request.version,
            versions=self.versions(),
            error=error,
            timings=Timings(total_ms=(time.perf_counter() - started) * 1000),
        )

    # ---- one request ---------------------------------------------------------------------------------------------

    def prompt_ids(self, prefix: str, suffix: str = "", extra: str = "", document_id: str | None = None) -> list[int]:
        """BOS [+ other files' code, its last EXTRA_CONTEXT_TOKENS at most] [+ framed suffix] + the near end of the
        prefix within max_prompt_tokens, whole lines dropped from its far end where `fit_prompt` cuts: for a
        document, where its last prompt was cut while that still fits, else a new cut with headroom. The most stable
        parts go first and the start stays put while the user types, so the cached prompt survives typing."""
        head = [self.bos_id] if self.bos_id is not None else []
        if extra:
            head += self.tokens.encode_tail(extra, min(EXTRA_CONTEXT_TOKENS, self.max_prompt // 4))
        budget = self.config.suffix_in_prompt_tokens
        if budget and suffix.strip():
            opening, closing = self.config.suffix_frame
            head += self.tokens.encode(opening) + self.tokens.encode_head(suffix, budget) + self.tokens.encode(closing)
        anchor = self.prompts.anchor(document_id) if document_id is not None else ""
        fitted = fit_prompt(self.tokens.chunks(prefix), head, self.max_prompt, anchor=anchor)
        if document_id is not None:
            self.prompts.set_anchor(document_id, fitted.anchor)
        return fitted.ids

    def _fixed_segments(self, request: InfillRequest) -> list[list[int]]:
        between = [self.tokens.encode(text) for text in request.between]
        size = self.config.canvas_plan(request.single_line, str(self.device))[1]
        anchor = self.tokens.encode_head(request.suffix, size) if request.suffix else []
        return between + [anchor]

    def _candidate_lengths(self, request: InfillRequest, fixed: list[list[int]]) -> tuple[list[int], list[list[int]]]:
        candidates = self.config.canvas_plan(request.single_line, str(self.device))[0]
        between, anchor = fixed[:-1], fixed[-1]
        lengths, kept = choose_lengths(
            candidates, request.max_middle_tokens, [len(f) for f in between], len(anchor), self.width
        )
        return lengths, [*between, anchor[:kept]]

    def _encode_prompt(
        self, key: str, ids: torch.Tensor, cancel: CancelToken | None = None, deadline: float | None = None
    ) -> tuple[int, int]:
        """Make the buffers hold `ids` for document `key`: what they (or the document's stash) hold of it is kept,
        the rest encoded in chunks so a long prefill still stops for a cancel or the deadline. Returns (reused,
        encoded_up_to); a stopped prefill keeps what it encoded, so the next keystroke resumes it."""
        reused = self.prompts.claim(key, ids)
        done = reused
        while done < ids.numel():
            if done > reused and _should_stop(cancel, deadline):
                break
            end = min(done + PREFILL_CHUNK_TOKENS, ids.numel())
            self.runner.encode(ids[done:end].to(self.device), done)
            done = end
            self.prompts.extend(ids, done)
        return reused, done

    def _infill(
        self,
        request: InfillRequest,
        cancel: CancelToken,
        deadline: float | None,
        on_draft: DraftCallback | None,
        started: float,
    ) -> InfillResult:
        if cancel.cancelled:
            return self._empty(request, "cancelled", started, cancel.reason)
        key = request.document_id or _ANONYMOUS
        ids = torch.tensor(
            self.prompt_ids(request.prefix, request.suffix, request.extra_context, key), dtype=torch.long
        )
        lengths, fixed = self._candidate_lengths(request, self._fixed_segments(request))
        with torch.inference_mode():
            reused, encoded_to = self._encode_prompt(key, ids, cancel, deadline)
            if encoded_to < ids.numel():
                stopped: Outcome = "cancelled" if cancel.cancelled else "cut_short"
                return self._empty(
                    request,
                    stopped,
                    started,
                    f"stopped during the prefill ({encoded_to} of {ids.numel()} prompt tokens encoded and kept)",
                )
            encoded = time.perf_counter()
            canvas = build_canvas(lengths, fixed, ids.numel(), self.pad_id, self.device)
            seed = request.seed if request.seed is not None else self.config.seed
            generator = torch.Generator(self.device)
            if seed is None:
                generator.seed()
            else:
                generator.manual_seed(seed)
            on_step = self._draft_emitter(canvas, on_draft, request) if on_draft else None
            out = self.denoiser(
                CanvasFill(canvas, ids, self.runner),
                self.config,
                generator,
                cancel=cancel,
                deadline=deadline,
                on_step=on_step,
            )
        done = time.perf_counter()
        if out.outcome == "cancelled":
            return self._empty(request, "cancelled", started, cancel.reason or "cancelled")
        return self._result(request, canvas, out, ids.numel(), reused, started, encoded, done)

    # ---- turning the canvas into text ---------------------------------------------------------------------------

    def _best_row(self, canvas: Canvas, score: torch.Tensor) -> int:
        if not bool(canvas.anchor.any()):
            return len(canvas.lengths) - 1
        return int(torch.argmax(score))

    def _middle_ids(self, canvas: Canvas, tokens: torch.Tensor, row: int, gap: int) -> list[int]:
        picked: list[int] = tokens[row][canvas.gap_of[row] == gap].tolist()
        for i, token in enumerate(picked):
            if token in self.stop_ids:
                return picked[:i]
        return picked

    def _decode(self, ids: list[int], single_line: bool, wraps: bool = True) -> str:
        # one sequence of ids decodes to one string (the `list[str]` in decode's type is for batches)
        text = cast(str, self.tokenizer.decode([i for i in ids if i < len(self.tokenizer)], skip_special_tokens=True))
        return languages.one_line_fill(text, wraps=wraps) if single_line else text

    def _middles(self, canvas: Canvas, tokens: torch.Tensor, row: int, request: InfillRequest) -> tuple[list[str], int]:
        middles: list[str] = []
        count = 0
        for gap in range(request.gap_count):
            ids = self._middle_ids(canvas, tokens, row, gap)
            count += len(ids)
            middles.append(self._decode(ids, request.single_line, request.wraps_lines))
        return middles, count

    def _draft_emitter(self, canvas: Canvas, on_draft: DraftCallback, request: InfillRequest) -> StepCallback:
        def emit(
            step: int, tokens: torch.Tensor, max_prob: torch.Tensor, score: torch.Tensor, finished: torch.Tensor
        ) -> None:
            row = self._best_row(canvas, score)
            middles, _ = self._middles(canvas, tokens, row, request)
            confidence = tuple(round(float(p), 4) for p in max_prob[row][canvas.free[row]].tolist())
            try:
                on_draft(Draft(step=step, middles=tuple(middles), confidence=confidence))
            except Exception:  # a broken callback must not break the request
                log.exception("draft callback failed")

        return emit

    def _result(
        self,
        request: InfillRequest,
        canvas: Canvas,
        out: DenoiseOutput,
        prompt_tokens: int,
        reused: int,
        started: float,
        encoded: float,
        done: float,
    ) -> InfillResult:
        row = self._best_row(canvas, out.join_score)
        middles, produced = self._middles(canvas, out.tokens, row, request)
        versions = self.versions() | {
            "middle_length": canvas.lengths[row],
            "candidate_lengths": list(canvas.lengths),
            "join_score": round(float(out.join_score[row]), 4),
        }
        outcome: Outcome = out.outcome if any(middles) or out.outcome != "ok" else "empty"
        return InfillResult(
            middles=tuple(middles),
            outcome=outcome,
            backend=self._info.name,
            steps=out.steps,
            tokens_per_forward=produced / max(out.steps, 1),
            generated_tokens=produced,
            timings=Timings(
                encode_ms=(encoded - started) * 1000,
                denoise_ms=(done - encoded) * 1000,
                total_ms=(time.perf_counter() - started) * 1000,
            ),
            prompt_tokens=prompt_tokens,
            reused_tokens=reused,
            version=request.version,
            versions=versions,
        )
