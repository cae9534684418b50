"""One percentile for every figure the project reports (server status, pilot, benchmarks), so p95 means the same
everywhere. (The intervals benchmarks print beside their figures are infill/testing/benchmark_figures.py's.)"""

from __future__ import annotations

import math
from collections.abc import Sequence

from infill.types import InfillError


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100) with linear interpolation between closest ranks (numpy's default); None when
    there are no values."""
    if not 0 <= q <= 100:
        raise InfillError(f"percentile must be within 0..100, got {q}")
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)
