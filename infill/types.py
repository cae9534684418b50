"""Backend-neutral requests, results, cancel tokens and the backend protocol.

Every backend (the in-process DiffusionGemma engine, the in-process autoregressive fallback, a remote
OpenAI-compatible endpoint) takes an `InfillRequest` and returns an `InfillResult`, so callers reach every
backend through one protocol; what a backend can do beyond it is asked through the optional protocols
(`WarmsPrompts`, `WarmsUp`, ...).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

from infill.languages import is_prose_language

BackendKind = Literal["diffusion", "autoregressive", "remote"]
Outcome = Literal["ok", "cut_short", "cancelled", "error", "empty"]


class InfillError(ValueError):
    """A request the backend cannot serve, with a message that says why (shown to users and logged)."""


class Cancelled(Exception):
    """Raised inside a backend loop when its cancel token fires; backends turn it into a cancelled result."""


class CancelToken:
    """Thread-safe cancellation flag, checked by backends between steps (never inside a forward)."""

    __slots__ = ("_event", "reason")

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason = ""

    def cancel(self, reason: str = "cancelled") -> None:
        if not self._event.is_set():
            self.reason = reason
            self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def raise_if_cancelled(self) -> None:
        if self._event.is_set():
            raise Cancelled(self.reason)


T = TypeVar("T")


def wait_polling(future: Future[T], every_s: float, check: Callable[[], None]) -> T:
    """`future`'s result, asking `check()` every `every_s` seconds until it is done: the one poll of a waiter that
    may stop waiting (the model worker's callers cancel a job nobody waits for any more; the remote backend stops
    waiting for a cancelled or late answer while its socket is still blocked). `check` raises to stop waiting, or
    acts (cancels a token) and returns to keep waiting."""
    while True:
        try:
            return future.result(timeout=every_s)
        except FutureTimeout:
            check()


def require_integers(owner: object, least: dict[str, int], what: str = "") -> None:
    """Raise InfillError unless each attribute of `owner` that `least` names is an integer (not a bool) no smaller
    than its bound: the one check settings classes make of their whole-number fields (JSON gives floats, strings
    and booleans too). `what` starts the message ("watchdog setting ")."""
    for name, bound in least.items():
        value = getattr(owner, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < bound:
            wanted = "a positive integer" if bound == 1 else f"an integer >= {bound}"
            raise InfillError(f"{what}{name} must be {wanted}, got {value!r}")


def deadline_in(seconds: float | None) -> float | None:
    """An absolute `time.monotonic()` deadline `seconds` from now (None: no deadline)."""
    return None if seconds is None else time.monotonic() + seconds


ProgressCallback = Callable[[str, "float | None"], None]  # model loading: (message, fraction 0..1 or None)


@dataclass(frozen=True)
class GapShape:
    """What the text after a gap says about the shape of its fill (infill/context/shape.py reads it from the parsed
    document once a request; the backend's stop rules and the watchdog both act on it). The defaults say nothing."""

    string_end: str = ""  # the gap is in a string that goes on below and ends with this (`"""`): stay inside it
    must_open: str = ""  # brackets the text after the gap closes and nothing before it opens, outermost first
    one_line: bool = False  # a line starts at the gap with code right below it: the fill is that one line
    header: bool = False  # ... and the code below is deeper, in no bracket: a block's header (`if x:`; Python)
    before_definition: bool = False  # ... and the line below is a `def`, `class` or decorator at the gap's depth
    # (the watchdog's stand-in for the line may then be a decorator)


@dataclass(frozen=True)
class GapFacts:
    """The one description of a gap that reaches a backend: what a backend that only continues the text needs to
    know to end the fill where the gap ends. The pipeline makes it for the first gap from the parsed document
    (`InfillRequest.gap`); a backend given none (a bare request, a later gap of several, whose text before it
    holds the earlier fills) reads the same facts from the text (infill/context/gap_facts.py `read_gap`)."""

    line_before: str  # the gap's line up to the gap (whole, even when the prompt window starts inside it)
    line_after: str  # the rest of the gap's line after the gap
    next_line: str  # the first non-blank line after the gap's line, stripped (a fill stops before repeating it)
    body_indent: int  # a later line of the fill indented less (languages.indent_width) leaves the enclosing block
    is_prose: bool  # prose rules (Markdown, plain text); code in a Markdown fence is code
    shape: GapShape = GapShape()  # what the text after the gap says the fill must look like
    in_comment: bool = False  # the gap is in a comment: its one-line fill ends at the newline, as prose's does

    @property
    def code(self) -> bool:
        """Code, not prose or a comment: a one-line fill may wrap a call over lines (languages.one_line_fill)."""
        return not self.is_prose and not self.in_comment

    @staticmethod
    def first_line_below(after: str) -> str:
        """`next_line` of a gap followed by `after` (the fixed text up to the next gap or the window's end)."""
        below = after.partition("\n")[2]
        return next((line.strip() for line in below.split("\n") if line.strip()), "")


MAX_CANDIDATES = 8  # most ranked fills one request may ask for


@dataclass(frozen=True)
class InfillRequest:
    """Fill the gap(s) between fixed texts.

    One gap: `prefix` + GAP + `suffix`. Several gaps (placeholders in a contract, values in a JSON skeleton):
    `prefix` + GAP + between[0] + GAP + between[1] + ... + GAP + `suffix`, filled jointly; fixed text is never
    changed. `document_id` keys prefix-KV reuse and supersession (a newer request for the same document cancels the
    older one); `version` is echoed back in the result so callers only apply it to the version it was computed for.
    """

    prefix: str
    suffix: str = ""
    between: tuple[str, ...] = ()
    max_middle_tokens: int = 64
    single_line: bool = False
    language: str | None = None
    document_id: str | None = None
    version: int | None = None
    seed: int | None = None
    gap: GapFacts | None = None  # the first gap as the pipeline's context saw it (None: read from the text)
    # Code from other open files, ready to stand ahead of the prompt (infill/context/related.py); backends keep it
    # whole at the prompt's start, outside the prefix window, and may leave it out ("" when there is none).
    extra_context: str = ""
    # Fills a backend may write for the first gap and rank by how well each joins the suffix (1: its single best
    # guess). Where a person waits anyway (an invoked Fill gap, a gateway client's `best_of`); a backend that holds
    # the suffix itself (DiffusionGemma) ignores it.
    candidates: int = 1
    # An automatic suggestion while the person types (not an invoked request, Fill gap or a gateway request): a
    # backend whose model is too slow for keystrokes leaves these to a faster one (infill/backends/offline/routed.py).
    keystroke: bool = False

    @property
    def gap_count(self) -> int:
        return len(self.between) + 1

    @property
    def wraps_lines(self) -> bool:
        """A one-line fill of this request is code that may wrap a call over lines (`languages.one_line_fill`): by
        the first gap's facts, or else by the language (prose ends at the newline)."""
        return self.gap.code if self.gap is not None else not is_prose_language(self.language)

    def __post_init__(self) -> None:
        for name in ("prefix", "suffix", "extra_context"):
            if not isinstance(getattr(self, name), str):
                raise InfillError(f"{name} must be text, got {type(getattr(self, name)).__name__}")
        if not all(isinstance(b, str) for b in self.between):
            raise InfillError("between must be a tuple of texts")
        if not isinstance(self.max_middle_tokens, int) or self.max_middle_tokens < 1:
            raise InfillError(f"max_middle_tokens must be a positive integer, got {self.max_middle_tokens!r}")
        if (
            not isinstance(self.candidates, int)
            or isinstance(self.candidates, bool)
            or not 1 <= self.candidates <= MAX_CANDIDATES
        ):
            raise InfillError(f"candidates must be an integer from 1 to {MAX_CANDIDATES}, got {self.candidates!r}")


@dataclass(frozen=True)
class Draft:
    """One intermediate state, emitted per step to a draft callback: the current middle(s) and per-position
    confidence (max probability of each middle position, 0..1)."""

    step: int
    middles: tuple[str, ...]
    confidence: tuple[float, ...]


DraftCallback = Callable[[Draft], None]


@dataclass(frozen=True, kw_only=True)
class FillControl:
    """How a caller steers one fill while it runs, handed down from caller to backend: `cancel` is checked between
    model steps, at `deadline` (time.monotonic()) the best draft so far comes back flagged cut_short, and `on_draft`
    sees the drafts as they form (the diffusion engine's steps). A layer that narrows one of them passes on a copy
    (`dataclasses.replace`)."""

    cancel: CancelToken | None = None
    deadline: float | None = None
    on_draft: DraftCallback | None = None
    # When a backend stops writing further candidates of a request that asks for several (the explicit-request
    # budget: infill/pipeline.py sets it); the fills written by then are ranked, the first (greedy) one always
    # stands. None: only `deadline` bounds them.
    rank_deadline: float | None = None

    @property
    def cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.cancelled

    def raise_if_cancelled(self) -> None:
        if self.cancel is not None:
            self.cancel.raise_if_cancelled()


UNSTEERED = FillControl()  # no cancel, no deadline, no drafts: holds no state, so one serves every caller


@dataclass(frozen=True)
class Timings:
    encode_ms: float = 0.0  # prompt tokenisation + prefill of the new tail (KV reuse makes this small)
    denoise_ms: float = 0.0  # the denoising / decoding loop
    total_ms: float = 0.0  # wall time inside the backend, queueing for the model included


@dataclass(frozen=True)
class InfillResult:
    middles: tuple[str, ...]
    outcome: Outcome
    backend: str  # BackendInfo.name of the backend that produced it
    steps: int = 0  # decoder forwards (diffusion) or decode steps (autoregressive)
    tokens_per_forward: float = 0.0
    generated_tokens: int = 0  # tokens the model wrote for the middles (what usage counts as completion tokens)
    timings: Timings = field(default_factory=Timings)
    prompt_tokens: int = 0
    reused_tokens: int = 0  # prompt tokens whose KV came from the store, not re-encoded
    version: int | None = None  # echoed from the request
    versions: dict[str, Any] = field(default_factory=dict)  # model id/revision, dtype, sampler and stopping parameters
    error: str | None = None

    @property
    def middle(self) -> str:
        return self.middles[0] if self.middles else ""

    @property
    def cut_short(self) -> bool:
        return self.outcome == "cut_short"

    @property
    def cancelled(self) -> bool:
        return self.outcome == "cancelled"


@dataclass(frozen=True)
class BackendInfo:
    name: str  # e.g. "diffusiongemma:google/diffusiongemma-26B-A4B-it"
    kind: BackendKind
    model: str
    device: str = "cpu"
    dtype: str = "float32"
    is_fallback: bool = False  # True for the small offline default: clients label it as such
    label: str = ""  # one human line for status bars and logs


@runtime_checkable
class InfillBackend(Protocol):
    """What every backend provides. `infill` is blocking (run it in a worker thread from async code), honours
    its control's `cancel` between steps, and returns its best draft flagged `cut_short` at its `deadline`.
    What only some backends can do is a protocol of its own below (`WarmsPrompts`, `WritesAlternatives`,
    `WarmsUp`, `ForgetsDocuments`), checked once where a backend is taken on (the pipeline, the loader), never
    looked up per call."""

    @property
    def info(self) -> BackendInfo: ...

    def infill(self, request: InfillRequest, control: FillControl = UNSTEERED) -> InfillResult: ...

    def close(self) -> None: ...


@runtime_checkable
class WarmsPrompts(Protocol):
    """A backend that can encode a request's prompt ahead of its fill (both in-process backends): the server warms
    during its debounce, the gateway on a prompt-only request, so the fill that follows only decodes."""

    def warm(self, request: InfillRequest, *, cancel: CancelToken | None = None) -> int:
        """Encode `request`'s prompt now; the prompt tokens the backend holds for it (0: it could not warm)."""
        ...


@runtime_checkable
class WritesAlternatives(Protocol):
    """A backend that can branch (the offline default): other fills for a one-gap request whose fill was refused
    or empty, best first, within the control's `deadline`."""

    def alternatives(self, request: InfillRequest, count: int, control: FillControl = UNSTEERED) -> list[str]: ...


@runtime_checkable
class WarmsUp(Protocol):
    """A backend with one-time costs it can pay before serving (DiffusionGemma on CUDA compiles and captures its
    steps); returns the seconds spent (None: not measured)."""

    def warm_up(self) -> float | None: ...


@runtime_checkable
class ForgetsDocuments(Protocol):
    """A backend that keeps state per document (both in-process backends: the encoded prompt, its tokens): told
    when the editor closes a document, it drops that state at once instead of waiting for its cache to evict it."""

    def forget(self, document_id: str) -> None: ...
