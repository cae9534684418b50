"""Other fills than the greedy one, written by branching the offline default's decoding, ranked by how well each
joins the suffix (ranking.py scores them):

- `best_branch`: for a request that asks for candidates (an invoked Fill gap, a gateway client's `best_of`), the
  greedy fill against its branches at the positions where the model was least sure; the best one is the answer.
- `first_token_fills`: for a fill the pipeline refused (or an empty one), the model's next most likely first tokens,
  each continued greedily, best first; the pipeline shows the first one its checks accept
  (`Pipeline.complete`, `PipelineSettings.alternatives`).

Both run on the document's sequence right after the prompt was encoded, and leave it holding the prompt.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from infill.backends.offline.ranking import (
    SUFFIX_CHARS,
    SUFFIX_TOKENS,
    Candidate,
    Followed,
    branch_points,
    follow,
    log_softmax,
)
from infill.backends.offline.runtime import LlamaRuntime
from infill.types import CancelToken, GapFacts, InfillRequest


class DeadlineReached(Exception):
    """Raised between forwards when a request's deadline passes (args[0]: the fill cut so far)."""


@dataclass
class Branching:
    """Where branches start: the document's sequence holding the prompt, and what decoding continues from."""

    runtime: LlamaRuntime
    prefill: Callable  # the backend's prompt encoder: (seq, ids, fed, token, deadline, logits=False)
    decode: Callable  # the backend's greedy decoding with its stop rules (GemmaBackend._decode)
    seq: int
    fed: list[int]  # the tokens the sequence holds (grows while a branch decodes)
    prompt_length: int
    first: np.ndarray  # the first token's logits after the prompt, healing and shape masks applied
    after: str  # the text after the gap
    lookahead: list[int]  # drafts' extra source: the text after the gap, tokenised
    gap: GapFacts
    healed: str
    request: InfillRequest
    token: CancelToken
    deadline: float | None

    def restore(self) -> None:
        self.runtime.cut(self.seq, self.prompt_length)
        del self.fed[self.prompt_length :]

    def judged(
        self, text: str, first_lp: np.ndarray, suffix: list[int], branch: int | None
    ) -> tuple[Candidate, list[int], Followed]:
        """The fill `text` scored by its join with the suffix."""
        self.restore()
        ids = self.runtime.tokenize(self.healed + text) if self.healed + text else []
        seen = follow(self.runtime, self.seq, first_lp, ids + suffix)
        return Candidate(text, sum(seen.logprobs[: len(ids)]), sum(seen.logprobs[len(ids) :]), branch), ids, seen

    def decode_from(self, choice: int, generated: list[int], tally) -> str:
        """The greedy continuation after the prompt, the tokens `generated` and then `choice`."""
        self.restore()
        forced = np.where(np.arange(self.first.size) == choice, 0.0, -np.inf)
        self.prefill(self.seq, self.fed + generated, self.fed, self.token, self.deadline, logits=False)
        return self.decode(
            self.seq,
            forced,
            self.fed,
            self.lookahead,
            self.gap,
            self.healed,
            self.request,
            self.token,
            self.deadline,
            None,
            tally,
            generated=generated,
        )

    def suffix_ids(self) -> list[int]:
        return self.runtime.tokenize(self.after[:SUFFIX_CHARS])[:SUFFIX_TOKENS]

    def out_of_time(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline


def best_branch(at: Branching, greedy: str, tally) -> str:
    """The fill among greedy and `request.candidates - 1` branches of it that best joins the suffix. Branches stop
    at the deadline, greedy always stands."""
    suffix, first_lp = at.suffix_ids(), log_softmax(np.atleast_2d(at.first)[-1])
    try:
        best, ids, seen = at.judged(greedy, first_lp, suffix, None)
        tally.candidates = 1
        for position, choice in branch_points(ids, seen, at.request.candidates - 1):
            if at.out_of_time():
                break
            try:
                text = at.decode_from(choice, ids[:position], tally)
            except DeadlineReached:
                break
            tally.candidates += 1
            if text.strip() and text != best.text:
                best = max(best, at.judged(text, first_lp, suffix, position)[0], key=lambda c: c.score)
        return best.text
    finally:
        at.restore()


def first_token_fills(at: Branching, count: int, tally) -> list[str]:
    """Up to `count` fills that start with the model's 2nd, 3rd, ... most likely first token (the 1st is the
    greedy fill's), each continued greedily, non-blank and distinct, best join with the suffix first. Branches
    stop at the deadline; what was written by then is ranked."""
    first = np.atleast_2d(at.first)[-1]
    first_lp = log_softmax(first)
    finite = np.flatnonzero(np.isfinite(first))
    order = finite[np.argsort(-first[finite], kind="stable")][1 : count + 1]
    suffix = at.suffix_ids()
    found: list[Candidate] = []
    try:
        for choice in order:
            if at.out_of_time():
                break
            try:
                text = at.decode_from(int(choice), [], tally)
            except DeadlineReached:
                break
            tally.candidates += 1
            if text.strip() and all(text != c.text for c in found):
                found.append(at.judged(text, first_lp, suffix, 0)[0])
        return [c.text for c in sorted(found, key=lambda c: c.score, reverse=True)]
    finally:
        at.restore()
