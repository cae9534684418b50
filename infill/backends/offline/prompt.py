"""The offline default's prompt in tokens: fitted to the budgets (infill/cache/tokens.py `fit_prompt`), healed, and
held in the document's llama.cpp sequence with all of it reused that can be (sequences.py).

A prompt is fitted once per request: `warm` (during the editor's debounce) fits and heals it, and the `infill` and
`alternatives` that follow for the same text take that fit, as long as the document's sequence still starts where
that fit cut (a refit would then choose the same window: the fit's anchor is what the sequence was put back with).

A model with FIM tokens (fim.py) gets its own format around the same fitted prefix: the prefix token ahead of it, and
the suffix token, the head of the text after the gap and the middle token after it; its prompt is not healed (its
last token is the middle token).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from infill.backends.offline.fill import DeadlineReached, HeldPrompt, Tally
from infill.backends.offline.fim import FimTokens, fim_head, fim_tail
from infill.backends.offline.runtime import LlamaRuntime
from infill.backends.offline.sequences import DocumentSequences
from infill.backends.offline.settings import ARSettings
from infill.backends.offline.tokens import TokenTexts
from infill.cache.tokens import ChunkedTokenizer, FittedPrompt, fit_prompt
from infill.types import Cancelled, InfillRequest


@dataclass(frozen=True)
class _Fit:
    """The last prompt fitted, and what it was fitted for."""

    document_id: str | None
    text: str
    after: str  # the text after the gap (a FIM prompt holds its head)
    extra_context: str
    settings: ARSettings
    fresh_prompt_tokens: int
    fitted: FittedPrompt
    prompt: list[int]  # fitted.ids, healed
    healed: str


class Prompts:
    """Single-threaded, as the backend that owns it."""

    def __init__(
        self,
        runtime: LlamaRuntime,
        tokens: ChunkedTokenizer,
        sequences: DocumentSequences,
        texts: TokenTexts,
        settings: ARSettings,
        fresh_prompt_tokens: Callable[[], int],
        fim: FimTokens | None = None,
    ) -> None:
        self.runtime = runtime
        self.tokens = tokens
        self.sequences = sequences
        self.texts = texts
        self.settings = settings  # the backend's (it sets both)
        self.fresh_prompt_tokens = fresh_prompt_tokens  # the setting, or sized by the speed at load (calibration.py)
        self.fim = fim  # the model's FIM tokens (None: the prompt is the prefix alone)
        self._last: _Fit | None = None

    def forget(self, document_id: str) -> None:
        """A closed document: its sequence freed, and its last fit (which holds its text) dropped."""
        self.sequences.forget(document_id)
        if self._last is not None and self._last.document_id == document_id:
            self._last = None

    @contextmanager
    def hold(self, before: str, request: InfillRequest, tally: Tally, after: str = "") -> Iterator[HeldPrompt]:
        """The prompt for the text `before` a gap (and `after` it, for a FIM model) in the document's sequence, all
        of it reused that can be, at least its last token left to feed (for the next token's logits). The sequence
        stays the document's afterwards, unless an error left what it holds unknown."""
        fitted, prompt, healed = self._fitted(before, after if self.fim is not None else "", request)
        seq, reused = self.sequences.take(request.document_id, prompt, max_keep=len(prompt) - 1)
        held = HeldPrompt(seq, prompt, prompt[:reused], healed)
        tally.prompt_tokens += len(fitted.ids)
        tally.reused_tokens += reused
        intact = False
        try:
            yield held
            intact = True
        except (Cancelled, DeadlineReached):
            intact = True  # raised between forwards or chunks: `fed` matches the sequence
            raise
        finally:
            if intact:
                self.sequences.put(request.document_id, seq, held.fed, fitted.anchor)
            else:
                self.sequences.drop(seq)

    def _fitted(self, text: str, after: str, request: InfillRequest) -> tuple[FittedPrompt, list[int], str]:
        """The fitted and healed prompt for `text`: the last one, where it was fitted for this text and the
        document's sequence still starts where it cut, else fitted now."""
        last, fresh = self._last, self.fresh_prompt_tokens()
        if (
            last is not None
            and last.document_id == request.document_id
            and last.text == text
            and last.after == after
            and last.extra_context == request.extra_context
            and last.settings == self.settings
            and last.fresh_prompt_tokens == fresh
            and last.fitted.anchor == self.sequences.anchor(request.document_id)
        ):
            return last.fitted, last.prompt, last.healed
        fitted = self.fit(text, request, after)
        prompt, healed = self.heal(fitted.ids)
        self._last = _Fit(
            request.document_id, text, after, request.extra_context, self.settings, fresh, fitted, prompt, healed
        )
        return fitted, prompt, healed

    def fit(self, text: str, request: InfillRequest, after: str = "") -> FittedPrompt:
        """The prompt for `text`: BOS, the request's extra context whole (its own budget), then the near end of
        the text within `fresh_prompt_tokens`, unless growing the cached prompt from its start (up to
        max_prompt_tokens) encodes no more tokens anew than starting over would. Typing, and moving on down a file,
        so keep more context at no more cost than starting over. A FIM model's prompt is in its format, with the
        head of `after`."""
        key, settings = request.document_id, self.settings
        # (whole trailing lines of it: the last names the current file)
        other_files = self.tokens.encode_tail(request.extra_context, settings.extra_context_tokens)
        bos = [self.runtime.bos] if self.runtime.adds_bos else []
        head = fim_head(self.fim, other_files, bos) if self.fim is not None else bos + other_files
        chunks, anchor, extra = self.tokens.chunks(text), self.sequences.anchor(key), len(head) - 1
        fresh = fit_prompt(chunks, head, self.fresh_prompt_tokens() + extra, anchor=anchor, refit_fraction=1.0)
        grown = fit_prompt(chunks, head, settings.max_prompt_tokens + extra, anchor=anchor, keep_anchor=True)

        def new(fitted: FittedPrompt) -> int:
            return len(fitted.ids) - self.sequences.reusable(key, fitted.ids)

        chosen = grown if len(grown.ids) > len(fresh.ids) and new(grown) <= new(fresh) else fresh
        if self.fim is None:
            return chosen
        suffix = self.tokens.encode_head(after, settings.fim_suffix_tokens) if settings.fim_suffix_tokens else []
        return FittedPrompt(chosen.ids + fim_tail(self.fim, suffix), chosen.dropped_chars, chosen.anchor)

    def heal(self, ids: list[int]) -> tuple[list[int], str]:
        if self.fim is not None or not self.settings.token_healing:
            return ids, ""
        return self.texts.heal(ids)
