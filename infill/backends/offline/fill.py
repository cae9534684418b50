"""The state of one gap's fill while the offline default writes it, as one object (nano-vllm keeps a request's
state the same way): what the request asks, the prompt held in the document's llama.cpp sequence, and what
decoding continues from. Decoding (decoding.py) and the branches (branches.py) read and grow it; the backend
(backend.py) makes one per gap and sums the counters of a request's gaps in a `Tally`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import numpy as np

from infill.types import CancelToken, GapFacts, InfillRequest


class DeadlineReached(Exception):
    """Raised between forwards when a request's deadline passes (args[0]: the fill cut so far)."""


@dataclass
class Tally:
    """Per-request counters summed over gaps."""

    steps: int = 0
    forwards: int = 0  # decoding forwards after the prefill (fewer than steps when drafts are accepted)
    prompt_tokens: int = 0
    reused_tokens: int = 0
    candidates: int = 0  # fills written and ranked by their join with the suffix (0: none ranked)
    encode_s: float = 0.0
    decode_s: float = 0.0
    middles: list[str] = field(default_factory=list)


@dataclass
class HeldPrompt:
    """A prompt in the document's llama.cpp sequence (prompt.py `Prompts.hold`)."""

    seq: int
    ids: list[int]  # the prompt, healed (its last token fed alone, for the next token's logits)
    fed: list[int]  # the tokens the sequence holds (grows while a fill decodes)
    healed: str  # the text of the prompt's last token taken back (token healing): the fill starts with it


@dataclass
class FillOrder:
    """What one gap's fill is asked: the request, the gap's facts and the fixed text after it, when to stop, and
    the request's counters."""

    request: InfillRequest
    gap: GapFacts
    after: str  # the fixed text after the gap
    token: CancelToken
    deadline: float | None
    tally: Tally
    rank_deadline: float | None = None  # other candidates than the greedy fill stop here (FillControl's)

    def out_of_time(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def for_candidates(self) -> FillOrder:
        """This order with the deadline other candidates stop at: the earlier of the two."""
        ends = [end for end in (self.deadline, self.rank_deadline) if end is not None]
        return replace(self, deadline=min(ends) if ends else None)

    def check(self) -> None:
        """Raise Cancelled, or DeadlineReached with no fill."""
        self.token.raise_if_cancelled()
        if self.out_of_time():
            raise DeadlineReached("")


@dataclass
class FillState:
    """One gap's fill under way: its order, the prompt held, and the first token's logits after it (healing and
    shape masks applied), which greedy decoding and every branch continue from."""

    order: FillOrder
    held: HeldPrompt
    first: np.ndarray
    lookahead: list[int]  # drafts' extra source: the text after the gap, tokenised
