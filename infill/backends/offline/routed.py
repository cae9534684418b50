"""A user's GGUF that is too slow for keystrokes here: it answers explicit requests (an invoked suggestion, Fill
gap, the gateway's requests) and the offline default, Gemma 3 270M, answers keystrokes (`InfillRequest.keystroke`).

Too slow is measured at load, as the prompt window is (calibration.py): a one-line fill of LINE_TOKENS tokens at
the measured one-token forward would take more than KEYSTROKE_LINE_MS. `offlineModelKeystrokes` "yes" or "no"
overrides the measurement. The status label says which model answers what.
"""

from __future__ import annotations

import logging

from infill.backends.offline.backend import LlamaCppBackend, load_default_backend
from infill.backends.offline.settings import ARSettings
from infill.backends.offline.user_model import load_user_backend
from infill.types import (
    UNSTEERED,
    BackendInfo,
    CancelToken,
    FillControl,
    InfillError,
    InfillRequest,
    InfillResult,
    ProgressCallback,
)

log = logging.getLogger(__name__)

KEYSTROKE_CHOICES = ("auto", "yes", "no")
KEYSTROKE_LINE_MS = 300.0  # the keystroke goal: a suggestion within 300 ms p50
LINE_TOKENS = 12  # tokens of a typical one-line fill (a code line's rest: ~40 characters)


def line_ms(backend: LlamaCppBackend) -> float:
    """Milliseconds a one-line fill's decoding takes on this machine by the forward measured at load."""
    return LINE_TOKENS * (backend.token_s or 0.0) * 1000


def serves_keystrokes(backend: LlamaCppBackend, choice: str) -> bool:
    """Whether the user's model answers keystrokes too: the choice ("yes", "no"), or ("auto") its measured speed."""
    if choice != "auto":
        return choice == "yes"
    return line_ms(backend) <= KEYSTROKE_LINE_MS


def open_user_model(
    path: str, keystrokes: str, settings: ARSettings, progress: ProgressCallback | None = None
) -> LlamaCppBackend | RoutedBackend:
    """The user's GGUF; behind a RoutedBackend with Gemma 3 270M for keystrokes where it does not serve them."""
    if keystrokes not in KEYSTROKE_CHOICES:
        raise InfillError(f"offlineModelKeystrokes must be one of {', '.join(KEYSTROKE_CHOICES)}, got {keystrokes!r}")
    mine = load_user_backend(path, settings, progress)
    try:
        if serves_keystrokes(mine, keystrokes):
            return mine
        log.info("%s writes a line in ~%.0f ms here: Gemma 3 270M answers keystrokes", mine.info.label, line_ms(mine))
        return RoutedBackend(mine, load_default_backend(progress=progress, settings=settings))
    except BaseException:
        mine.close()
        raise


class RoutedBackend:
    """Two loaded GGUFs on the one model thread: `explicit` (the user's) and `keystrokes` (the offline default).
    Per-document state (encoded prompts) lives in each; a closed document is forgotten by both."""

    def __init__(self, explicit: LlamaCppBackend, keystrokes: LlamaCppBackend) -> None:
        self.explicit = explicit
        self.keystrokes = keystrokes
        mine, default = explicit.info, keystrokes.info
        self._info = BackendInfo(
            name=mine.name,
            kind=mine.kind,
            model=mine.model,
            device=mine.device,
            dtype=mine.dtype,
            is_fallback=False,
            label=f"{mine.label}: explicit requests and Fill gap; {default.label}: keystrokes "
            f"({mine.label.partition(' (')[0]} writes a line in ~{line_ms(explicit):.0f} ms here)",
        )

    @property
    def info(self) -> BackendInfo:
        return self._info

    def route(self, request: InfillRequest) -> LlamaCppBackend:
        return self.keystrokes if request.keystroke else self.explicit

    def infill(self, request: InfillRequest, control: FillControl = UNSTEERED) -> InfillResult:
        return self.route(request).infill(request, control)

    def warm(self, request: InfillRequest, *, cancel: CancelToken | None = None) -> int:
        return self.route(request).warm(request, cancel=cancel)

    def alternatives(self, request: InfillRequest, count: int, control: FillControl = UNSTEERED) -> list[str]:
        return self.route(request).alternatives(request, count, control)

    def forget(self, document_id: str) -> None:
        self.explicit.forget(document_id)
        self.keystrokes.forget(document_id)

    def close(self) -> None:
        try:
            self.explicit.close()
        finally:
            self.keystrokes.close()
