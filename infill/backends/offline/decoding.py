"""Greedy decoding of the offline default on llama.cpp: the prompt encoded a chunk at a time, the first token
masked by the gap's facts, then one token a forward, each forward also verifying tokens drafted from the document
(prompt lookup), where drafts pay on this CPU. Where a fill ends is stops.py's to say.
"""

from __future__ import annotations

import time

import numpy as np

from infill.backends.offline.fill import DeadlineReached, FillState, HeldPrompt
from infill.backends.offline.runtime import LlamaRuntime
from infill.backends.offline.settings import ARSettings
from infill.backends.offline.stops import HEADER_WORDS, cut_fill, line_held_open, trim_unfinished
from infill.backends.offline.tokens import TokenTexts, draft_from_context
from infill.types import CancelToken, Draft, DraftCallback, GapFacts


class GreedyDecoder:
    """Single-threaded, as the backend that owns it: the model worker runs one fill at a time."""

    def __init__(self, runtime: LlamaRuntime, texts: TokenTexts, settings: ARSettings) -> None:
        self.runtime = runtime
        self.texts = texts
        self.settings = settings  # the backend's (it sets both)
        self.default_drafts = 0  # tokens drafted a forward where the settings leave it open (calibration.py)

    @property
    def draft_tokens(self) -> int:
        drafts = self.settings.draft_tokens
        return self.default_drafts if drafts is None else drafts

    def prefill(
        self, held: HeldPrompt, ids: list[int], token: CancelToken, deadline: float | None, logits: bool = True
    ) -> np.ndarray | None:
        """Encode ids[len(held.fed):] into the sequence a chunk at a time; the last position's logits (when
        `logits`). Cancelled and the deadline are raised between chunks, `held.fed` then matching the sequence."""
        chunk, fed = self.settings.prefill_chunk_tokens, held.fed
        # The last token goes alone: its logits then come from the same one-row computation whether the rest was
        # encoded just now, by warming or by the previous keystroke (a batched row rounds differently, and near
        # ties flipped fills between a warm and a cold cache).
        body = ids[:-1] if logits else ids
        while len(fed) < len(body):
            part = body[len(fed) : len(fed) + chunk]
            self.runtime.decode(held.seq, part, outputs=0)
            fed.extend(part)
            token.raise_if_cancelled()
            if deadline is not None and time.monotonic() >= deadline:
                raise DeadlineReached("")
        if not logits:
            return None
        last = self.runtime.decode(held.seq, ids[-1:])
        fed.append(ids[-1])
        return last

    def first_choices(self, logits: np.ndarray, healed: str, gap: GapFacts) -> np.ndarray:
        """The first token's logits without the tokens it may not be: one that does not start with the healed
        text, above a block a word no header starts with, and one that ends a line held open (stops.py)."""
        if healed:
            logits = np.where(self.texts.allowed_after_heal(healed), logits, -np.inf)
        if gap.shape.header:  # (a first token that is all indentation is not one: line starts are not healed)
            logits = np.where(self.texts.word_starts(HEADER_WORDS), logits, -np.inf)
        if line_held_open("", gap):
            logits = np.where(self.texts.line_ends(), -np.inf, logits)
        return logits

    def decode(
        self,
        fill: FillState,
        logits: np.ndarray,
        generated: list[int] | None = None,
        on_draft: DraftCallback | None = None,
    ) -> str:
        """Greedy decoding from `logits` (the next token's, after the prompt and the tokens already `generated`,
        which start the fill). Each forward also verifies tokens drafted from the document (`_step`); a token is
        handled the same way whether it came from a one-token forward or a verified draft."""
        order, fed = fill.order, fill.held.fed
        request, gap, tally = order.request, order.gap, order.tally
        generated = list(generated or [])
        confidence: list[float] = [float("nan")] * len(generated)
        text = ""
        sure = on_draft is not None  # a token's probability is for drafts only (a softmax costs ~1 ms a token)
        pending = pick(logits, sure)
        capacity = self.runtime.shape.sequence_tokens
        while True:
            for next_id, best_p in pending:
                if self.runtime.is_end(next_id):
                    return trim_unfinished(text, gap, request.single_line)
                generated.append(next_id)
                confidence.append(best_p)
                tally.steps += 1
                written = self.runtime.detokenize(generated)[len(fill.held.healed) :]
                text, stop = cut_fill(written, gap, request.single_line)
                if on_draft is not None:
                    later = ("",) * (request.gap_count - len(tally.middles) - 1)  # gaps not reached yet
                    on_draft(
                        Draft(
                            step=len(generated) - 1,
                            middles=tuple(tally.middles) + (text,) + later,
                            confidence=tuple(confidence),
                        )
                    )
                if stop:
                    return text
                if len(generated) >= request.max_middle_tokens or len(fed) + 1 >= capacity:
                    return trim_unfinished(text, gap, request.single_line)  # the token bound ended it, not a stop rule
                order.token.raise_if_cancelled()
                if order.out_of_time():
                    raise DeadlineReached(trim_unfinished(text, gap, request.single_line))
            room = min(request.max_middle_tokens - len(generated), capacity - len(fed) - 1)
            banned = self.texts.line_ends() if line_held_open(text, gap) else None
            pending = self._step(fill, generated[-1], room, sure, banned)

    def _step(
        self, fill: FillState, last: int, room: int, sure: bool, banned: np.ndarray | None
    ) -> list[tuple[int, float]]:
        """Feed `last` plus up to `room - 1` tokens drafted from the context, and return the greedy tokens the
        forward confirms: the model's choice after `last`, and after every draft token that matched it. Exactly
        the tokens one-token forwards would give (a rejected draft only costs its share of this forward); the
        sequence is cut back to the accepted tokens, so `fed` matches it again. `banned` tokens are not chosen
        next (and nothing is drafted: which tokens are banned depends on the text before each)."""
        seq, fed = fill.held.seq, fill.held.fed
        fed.append(last)
        count = 0 if banned is not None else min(self.draft_tokens, room - 1)
        draft = draft_from_context(fed, count, self.settings.draft_ngram, fill.lookahead)
        rows = self.runtime.decode(seq, [last] + draft, outputs=len(draft) + 1)
        assert rows is not None  # outputs > 0
        chosen = pick(rows if banned is None else np.where(banned, -np.inf, rows), sure)
        fill.order.tally.forwards += 1
        accepted = 0
        while accepted < len(draft) and chosen[accepted][0] == draft[accepted]:
            accepted += 1
        fed.extend(draft[:accepted])
        if accepted < len(draft):
            self.runtime.cut(seq, len(fed))
        return chosen[: accepted + 1]


def pick(logits: np.ndarray, sure: bool = True) -> list[tuple[int, float]]:
    """Greedy choice and its probability for each row of `logits` (NaN unless `sure`: the softmax costs ~5%)."""
    rows = np.atleast_2d(logits)
    best = rows.argmax(axis=-1)
    if not sure:
        return [(int(b), float("nan")) for b in best]
    top = rows[np.arange(len(rows)), best]
    probabilities = 1.0 / np.exp(rows - top[:, None]).sum(axis=-1)
    return [(int(b), float(p)) for b, p in zip(best, probabilities)]
