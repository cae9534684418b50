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

from dataclasses import replace

import numpy as np

from infill.backends.offline.decoding import GreedyDecoder
from infill.backends.offline.fill import DeadlineReached, FillState
from infill.backends.offline.ranking import (
    SUFFIX_CHARS,
    SUFFIX_TOKENS,
    Candidate,
    Followed,
    branch_points,
    follow,
    log_softmax,
)


def _restore(decoder: GreedyDecoder, fill: FillState) -> None:
    """The sequence cut back to the prompt."""
    held = fill.held
    decoder.runtime.cut(held.seq, len(held.ids))
    del held.fed[len(held.ids) :]


def _judged(
    decoder: GreedyDecoder, fill: FillState, text: str, first_lp: np.ndarray, suffix: list[int], branch: int | None
) -> tuple[Candidate, list[int], Followed]:
    """The fill `text` scored by its join with the suffix."""
    _restore(decoder, fill)
    healed = fill.held.healed
    ids = decoder.runtime.tokenize(healed + text) if healed + text else []
    seen = follow(decoder.runtime, fill.held.seq, first_lp, ids + suffix)
    return Candidate(text, sum(seen.logprobs[: len(ids)]), sum(seen.logprobs[len(ids) :]), branch), ids, seen


def _decode_from(decoder: GreedyDecoder, fill: FillState, choice: int, generated: list[int]) -> str:
    """The greedy continuation after the prompt, the tokens `generated` and then `choice`."""
    _restore(decoder, fill)
    forced = np.where(np.arange(fill.first.size) == choice, 0.0, -np.inf)
    held = fill.held
    decoder.prefill(held, held.fed + generated, fill.order.token, fill.order.deadline, logits=False)
    return decoder.decode(fill, forced, generated=generated)


def _suffix_ids(decoder: GreedyDecoder, fill: FillState) -> list[int]:
    return decoder.runtime.tokenize(fill.order.after[:SUFFIX_CHARS])[:SUFFIX_TOKENS]


def best_branch(decoder: GreedyDecoder, fill: FillState, greedy: str) -> str:
    """The fill among greedy and `request.candidates - 1` branches of it that best joins the suffix. Branches stop
    at the deadline or the rank deadline (the explicit-request budget), whichever comes first; greedy always
    stands."""
    suffix, first_lp = _suffix_ids(decoder, fill), log_softmax(np.atleast_2d(fill.first)[-1])
    tally = fill.order.tally
    branching = replace(fill, order=fill.order.for_candidates())
    try:
        best, ids, seen = _judged(decoder, fill, greedy, first_lp, suffix, None)
        tally.candidates = 1
        for position, choice in branch_points(ids, seen, fill.order.request.candidates - 1):
            if branching.order.out_of_time():
                break
            try:
                text = _decode_from(decoder, branching, choice, ids[:position])
            except DeadlineReached:
                break
            tally.candidates += 1
            if text.strip() and text != best.text:
                best = max(best, _judged(decoder, fill, text, first_lp, suffix, position)[0], key=lambda c: c.score)
        return best.text
    finally:
        _restore(decoder, fill)


def first_token_fills(decoder: GreedyDecoder, fill: FillState, count: int) -> list[str]:
    """Up to `count` fills that start with the model's 2nd, 3rd, ... most likely first token (the 1st is the
    greedy fill's), each continued greedily, non-blank and distinct, best join with the suffix first. Branches
    stop at the deadline; what was written by then is ranked."""
    first = np.atleast_2d(fill.first)[-1]
    first_lp = log_softmax(first)
    finite = np.flatnonzero(np.isfinite(first))
    order = finite[np.argsort(-first[finite], kind="stable")][1 : count + 1]
    suffix = _suffix_ids(decoder, fill)
    found: list[Candidate] = []
    try:
        for choice in order:
            if fill.order.out_of_time():
                break
            try:
                text = _decode_from(decoder, fill, int(choice), [])
            except DeadlineReached:
                break
            fill.order.tally.candidates += 1
            if text.strip() and all(text != c.text for c in found):
                found.append(_judged(decoder, fill, text, first_lp, suffix, 0)[0])
        return [c.text for c in sorted(found, key=lambda c: c.score, reverse=True)]
    finally:
        _restore(decoder, fill)
