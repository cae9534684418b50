"""The one percentile every figure shares (server status, pilot, benchmarks)."""

import pytest

from infill.stats import percentile
from infill.types import InfillError


def test_percentile_interpolates_between_ranks():
    assert percentile([1, 2, 3, 4], 50) == 2.5


def test_percentile_is_none_without_values_and_refuses_a_rank_outside_0_to_100():
    assert percentile([], 50) is None
    assert (percentile([3, 1, 2], 0), percentile([3, 1, 2], 100)) == (1, 3)
    with pytest.raises(InfillError):
        percentile([1.0], 101)
