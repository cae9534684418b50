"""The intervals every benchmark reports."""

import pytest

from infill.testing.benchmark_figures import mean_interval, wilson_interval
from infill.types import InfillError


def test_wilson_interval_matches_the_score_interval_textbook_values():
    # Newcombe (1998), table I: 0/10 gives 0-0.2775, 1/29 gives 0.0061-0.1718.
    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert wilson_interval(1, 29) == pytest.approx((0.0061, 0.1718), abs=1e-4)
    low, high = wilson_interval(10, 10)
    assert high == 1.0 and low == pytest.approx(0.7225, abs=1e-4)


def test_wilson_interval_refuses_impossible_counts_and_is_vacuous_without_trials():
    assert wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(InfillError):
        wilson_interval(3, 2)


def test_mean_interval_narrows_with_more_values_and_needs_two():
    assert mean_interval([0.5]) is None
    few, many = mean_interval([0.0, 1.0] * 5), mean_interval([0.0, 1.0] * 50)
    assert few[0] < many[0] < 0.5 < many[1] < few[1]
