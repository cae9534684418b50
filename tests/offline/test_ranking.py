"""Fills ranked by their join with the suffix (infill/backends/offline/ranking.py) on the real offline default, and
the two ways to ask for them: the Fill gap setting `fillCandidates` and a gateway client's `best_of`."""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import pytest

from infill.backends.offline.fill import Tally
from infill.backends.offline.ranking import SUFFIX_CHARS, SUFFIX_TOKENS, Followed, branch_points, follow, log_softmax
from infill.context.gap_facts import read_gap
from infill.gateway.openai_api import GatewaySettings, HttpError, parse_completion_params, run_completion
from infill.pipeline import CompletionRequest, Pipeline, PipelineSettings
from infill.types import CancelToken, FillControl, InfillError, InfillRequest
from server.settings import Settings, parse_settings

# `total = 0` right before `return total / len(values)` is what the prefix alone suggests; the suffix says the
# line sums the values.
MEAN_PREFIX = "def mean(values):\n    total = "
MEAN_SUFFIX = "\n    return total / len(values)\n"


def mean_request(candidates: int, document: str | None = None) -> InfillRequest:
    return InfillRequest(
        prefix=MEAN_PREFIX,
        suffix=MEAN_SUFFIX,
        language="python",
        single_line=True,
        candidates=candidates,
        document_id=document,
    )


def join_score(backend, request: InfillRequest, text: str) -> float:
    """log P(`text` and the suffix's first tokens | the prompt), read from the model on the backend's own prompt
    (healed, its first token masked by the gap's facts): the score the ranking maximises, measured apart from it."""
    runtime, gap = backend.runtime, read_gap(request.prefix, request.suffix, request.language)
    with backend.prompts.hold(request.prefix, request, Tally()) as held:
        logits = backend.decoder.prefill(held, held.ids, CancelToken(), None)
        first = log_softmax(np.atleast_2d(backend.decoder.first_choices(logits, held.healed, gap))[-1])
        ids = runtime.tokenize(held.healed + text) if held.healed + text else []
        suffix = runtime.tokenize(request.suffix[:SUFFIX_CHARS])[:SUFFIX_TOKENS]
        seen = follow(runtime, held.seq, first, ids + suffix)
        runtime.cut(held.seq, len(held.ids))
        del held.fed[len(held.ids) :]
    return float(sum(seen.logprobs))


def test_the_fill_that_joins_the_suffix_best_wins_over_the_greedy_one(ar_backend):
    # (`total = 0` is what the prefix alone suggests; which fill wins differs by CPU class, the order never does)
    greedy = ar_backend.infill(mean_request(1))
    ranked = ar_backend.infill(mean_request(4))
    assert greedy.versions["ranked_candidates"] == 0 and greedy.middles[0].strip()
    assert 2 <= ranked.versions["ranked_candidates"] <= 4 and ranked.middles[0].strip()
    assert ranked.generated_tokens > greedy.generated_tokens  # the branches were written, and are counted
    request = mean_request(1)
    assert join_score(ar_backend, request, ranked.middles[0]) >= join_score(ar_backend, request, greedy.middles[0])


def test_ranking_leaves_the_documents_prompt_cached_and_intact(ar_backend):
    ranked = ar_backend.infill(mean_request(4, document="ranked-doc"))
    again = ar_backend.infill(mean_request(1, document="ranked-doc"))
    fresh = ar_backend.infill(mean_request(1, document="greedy-doc"))
    repeated = ar_backend.infill(mean_request(1, document="greedy-doc"))
    assert ranked.middles == ar_backend.infill(mean_request(4, document="ranked-fresh")).middles
    # the sequence holds the prompt again, not a branch: as much is reused as after a greedy fill, and the greedy
    # fill after it is the one a fresh cache gives
    assert again.reused_tokens == repeated.reused_tokens > 0
    assert again.middles == fresh.middles and fresh.middles[0].strip()


def test_nothing_is_ranked_without_a_suffix_or_for_a_multi_line_gap(ar_backend):
    no_suffix = ar_backend.infill(
        InfillRequest(prefix=MEAN_PREFIX, suffix="\n\n", language="python", single_line=True, candidates=4)
    )
    multi_line = ar_backend.infill(
        InfillRequest(prefix=MEAN_PREFIX, suffix=MEAN_SUFFIX, language="python", candidates=4)
    )
    assert no_suffix.versions["ranked_candidates"] == 0 and multi_line.versions["ranked_candidates"] == 0


def test_branch_points_are_the_least_sure_positions():
    seen = Followed(logprobs=[-0.1, -0.9, -0.2, -3.0], alternatives=[(7, 2.0), (8, 0.1), (9, float("inf")), (10, 0.5)])
    assert branch_points([1, 2, 3], seen, 2) == [(1, 8), (0, 7)]  # the suffix's positions are not branched on
    assert branch_points([1, 2, 3], seen, 5) == [(1, 8), (0, 7)]  # nor one whose second choice is impossible


def test_candidates_are_validated():
    for bad in (0, 9, True, "4"):
        with pytest.raises(InfillError, match="candidates"):
            InfillRequest(prefix="x", candidates=bad)  # type: ignore[arg-type]
    settings, problems = parse_settings({"fillCandidates": 9}, Settings())
    assert settings.fill_candidates == Settings().fill_candidates and "fillCandidates must be in 1..8" in problems[0]
    assert parse_settings({"fillCandidates": 1}, Settings())[0].fill_candidates == 1


def test_gateway_best_of_ranks_and_is_bounded(ar_backend):
    settings = GatewaySettings()
    params = parse_completion_params({"prompt": MEAN_PREFIX, "suffix": MEAN_SUFFIX, "best_of": 4}, settings)
    unhurried = Pipeline(ar_backend, settings=PipelineSettings(explicit_budget_ms=600_000))  # (any machine's speed)
    extension, text, _ = run_completion(unhurried, params, settings)
    assert extension["versions"]["ranked_candidates"] >= 2
    assert text.strip() == ar_backend.infill(mean_request(4)).middles[0].strip()  # the backend's ranked fill
    plain = parse_completion_params({"prompt": MEAN_PREFIX, "suffix": MEAN_SUFFIX}, settings)
    extension, text, _ = run_completion(Pipeline(ar_backend), plain, settings)
    assert extension["versions"]["ranked_candidates"] == 0
    assert text.strip() == ar_backend.infill(mean_request(1)).middles[0].strip()
    for body in ({"best_of": 9}, {"best_of": 0}, {"n": 2}):
        with pytest.raises(HttpError):
            parse_completion_params({"prompt": "x", **body}, settings)


def test_a_passed_rank_deadline_keeps_the_greedy_fill_and_writes_no_branch(ar_backend):
    """The explicit-request budget (FillControl.rank_deadline) bounds the other candidates only: past it, the greedy
    fill stands alone, while the request's own deadline is far away."""
    far = time.monotonic() + 600
    greedy = ar_backend.infill(mean_request(1))
    bounded = ar_backend.infill(mean_request(4), FillControl(deadline=far, rank_deadline=time.monotonic() - 1))
    free = ar_backend.infill(mean_request(4), FillControl(deadline=far, rank_deadline=far))
    assert bounded.outcome == "ok" and bounded.versions["ranked_candidates"] == 1
    assert bounded.middles == greedy.middles
    assert free.versions["ranked_candidates"] >= 2


def test_an_explicit_request_ranks_within_the_pipelines_explicit_budget(ar_backend):
    """A CompletionRequest marked explicit gets its rank deadline from PipelineSettings.explicit_budget_ms; a request
    not marked explicit ranks until its own deadline."""
    text = MEAN_PREFIX + MEAN_SUFFIX
    request = CompletionRequest(text=text, start=len(MEAN_PREFIX), language="python", candidates=4)
    tight = Pipeline(ar_backend, settings=PipelineSettings(explicit_budget_ms=1))
    explicit = tight.complete(replace(request, explicit=True))
    unmarked = tight.complete(request)
    assert explicit.result is not None and explicit.result.versions["ranked_candidates"] == 1
    assert unmarked.result is not None and unmarked.result.versions["ranked_candidates"] >= 2
    with pytest.raises(InfillError, match="explicit_budget_ms"):
        PipelineSettings(explicit_budget_ms=0)
    settings, problems = parse_settings({"explicitBudgetMs": 0}, Settings())
    assert settings.explicit_budget_ms == 2000 and "explicitBudgetMs" in problems[0]
