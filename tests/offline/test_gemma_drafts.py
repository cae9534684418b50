"""Drafted (prompt-lookup) decoding of the offline default: the text of one token per forward, in fewer forwards.

llama.cpp computes the rows of a batch with other kernels than a lone row, so a near tie between the model's two
best tokens can go the other way in a drafted forward: the fills agree except where that happens (how often
depends on the CPU's kernels: 1 hole of 6 on an AVX-512 Xeon, 3 of 6 on an AVX2-only EPYC), and the test checks
that each difference starts at such a tie.
"""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from pathlib import Path

import pytest

from infill.backends.offline.settings import ARSettings
from infill.backends.offline.tokens import draft_from_context
from infill.types import CancelToken, FillControl, InfillError, InfillRequest

# A real module that does not change with this repository (infill/pipeline.py did, and with it how much of each
# fill the drafts could confirm).
SOURCE = Path(dataclasses.__file__).read_text()


def test_drafts_continue_the_latest_earlier_occurrence_of_the_last_tokens():
    ids = [1, 2, 3, 9, 9, 1, 2, 3, 7, 8, 5, 1, 2, 3]
    assert draft_from_context(ids, 2, 3) == [7, 8]  # the latest earlier "1 2 3" was followed by 7 8
    assert draft_from_context(ids, 10, 3) == [7, 8, 5, 1, 2, 3]  # as many as there are
    assert draft_from_context([4, 5, 6, 0, 5, 6], 2, 3) == [0, 5]  # "4 5 6" never recurs: "5 6" does
    assert draft_from_context([1, 2, 3, 4], 3, 3) == []  # nothing repeats
    # The text after the gap, nearest first, when the context has no occurrence of that length
    assert draft_from_context([1, 2, 3, 4], 3, 3, later=[9, 3, 4, 5, 6, 7, 3, 4, 8]) == [5, 6, 7]
    assert draft_from_context([3, 4, 0, 3, 4], 2, 3, later=[3, 4, 9]) == [0, 3]  # the context's own comes first
    assert draft_from_context([1, 2, 3, 4], 3, 3, later=[3, 4]) == []  # nothing follows it there
    assert draft_from_context(ids, 0, 3) == []


def test_draft_settings_are_validated():
    with pytest.raises(InfillError):
        ARSettings(draft_tokens=-1)
    with pytest.raises(InfillError):
        ARSettings(draft_ngram=1)


def _holes() -> list[InfillRequest]:
    """Cursor positions in a real module: mid-line (single-line fills) and at line starts inside blocks."""
    requests = []
    for needle in ("        return ", "    def ", "self.", "if not "):
        at = SOURCE.index(needle, len(SOURCE) // 3) + len(needle)
        requests.append(
            InfillRequest(
                prefix=SOURCE[at - 1500 : at],
                suffix=SOURCE[at:],
                single_line=True,
                language="python",
                max_middle_tokens=16,
                document_id=f"hole{len(requests)}",
            )
        )
    for line in (140, 200):
        at = sum(len(s) for s in SOURCE.splitlines(keepends=True)[:line])
        requests.append(
            InfillRequest(
                prefix=SOURCE[at - 1500 : at],
                suffix=SOURCE[at:],
                language="python",
                max_middle_tokens=24,
                document_id=f"hole{len(requests)}",
            )
        )
    return requests


TIE_P = 0.55  # two tokens within ~0.2 nats of each other: neither has more than about this probability


def _first_difference(plain: list, drafted: list) -> tuple[int, list[float]]:
    """The first token at which two runs' drafts part, and the probability each run gave its own token there."""
    at = next(
        (i for i, (p, d) in enumerate(zip(plain, drafted)) if p.middles != d.middles), min(len(plain), len(drafted))
    )  # no draft parted: one run ended there (its end token has no draft)
    return at, [trail[at].confidence[at] for trail in (plain, drafted) if at < len(trail)]


@pytest.mark.slow
@pytest.mark.timeout(900)  # twelve real fills; on a shared 2-core machine at load 15 this took 20 minutes
def test_drafted_decoding_gives_the_text_of_one_token_per_forward(ar_backend):
    original = ar_backend.settings
    try:
        results, trails = {}, {}
        for drafts in (0, 8):
            ar_backend.reconfigure(replace(original, draft_tokens=drafts))
            ar_backend.sequences.clear()
            trails[drafts] = [[] for _ in _holes()]
            results[drafts] = [
                ar_backend.infill(request, FillControl(on_draft=trail.append))
                for request, trail in zip(_holes(), trails[drafts])
            ]
    finally:
        ar_backend.reconfigure(original)
    plain, drafted = results[0], results[8]
    for d, p, d_trail, p_trail in zip(drafted, plain, trails[8], trails[0]):
        if d.middle == p.middle:
            assert d.steps == p.steps
            continue
        # A difference starts at a near tie: both runs' chosen tokens were unsure there, and about equally so
        at, chances = _first_difference(p_trail, d_trail)
        assert chances and max(chances) < TIE_P and max(chances) - min(chances) < 0.05, (
            at,
            chances,
            p.middle,
            d.middle,
        )
    assert sum(d.middle == p.middle for d, p in zip(drafted, plain)) >= 2
    assert all(r.tokens_per_forward <= 1.0 for r in plain)
    # The drafts were used: several tokens confirmed per forward on code that repeats itself.
    assert sum(r.steps for r in drafted) / sum(r.steps / r.tokens_per_forward for r in drafted if r.steps) > 1.3


@pytest.mark.slow
def test_a_drafted_fill_leaves_a_cache_that_the_next_keystroke_reuses_exactly(ar_backend):
    hole = _holes()[-1]
    request = replace(hole, prefix=hole.prefix[-500:])  # whole in a fresh prompt: both fills see the same text
    typed = replace(request, prefix=request.prefix + "    ", document_id="typed.py")
    ar_backend.infill(replace(request, document_id="typed.py"))  # drafts accepted and rejected along the way
    reused = ar_backend.infill(typed)
    fresh = ar_backend.infill(replace(typed, document_id="fresh.py"))
    assert reused.reused_tokens >= reused.prompt_tokens - 4 and fresh.reused_tokens == 0
    assert reused.prompt_tokens == fresh.prompt_tokens < ar_backend.fresh_prompt_tokens
    assert reused.middles == fresh.middles and reused.middles[0].strip()


@pytest.mark.slow
def test_a_warmed_prompt_leaves_one_token_to_feed_and_the_same_fill(ar_backend):
    """warm() (run during the editor's debounce) encodes all of the prompt but its last token; the fill that follows
    reuses it and is the fill a cold document gets."""
    prefix = "import os\n\n\ndef config_path(name):\n    base = os.path.expanduser('~')\n    return os.path."
    cold = ar_backend.infill(InfillRequest(prefix=prefix, suffix="\n", single_line=True, document_id="warm-cold"))
    held = ar_backend.warm(InfillRequest(prefix=prefix, suffix="\n", single_line=True, document_id="warm-hot"))
    hot = ar_backend.infill(InfillRequest(prefix=prefix, suffix="\n", single_line=True, document_id="warm-hot"))
    # (token healing may hold back the prompt's last token too, so held is prompt_tokens - 1 or - 2)
    assert held > 10 and hot.reused_tokens == held and hot.prompt_tokens - 2 <= held <= hot.prompt_tokens - 1
    assert cold.reused_tokens == 0 and hot.middles == cold.middles and hot.middles[0].strip()
    cancelled = CancelToken()
    cancelled.cancel("superseded")
    assert ar_backend.warm(InfillRequest(prefix=prefix + "x", document_id="warm-none"), cancel=cancelled) == 0
