"""One percentile for every figure the project reports (server status, pilot, benchmarks), so p95 means the same
everywhere."""

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


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a proportion (95% for the default z); (0, 1) when there is no trial. Unlike
    p ± z·se it stays inside [0, 1] and is honest at the small counts benchmarks have."""
    if not 0 <= successes <= n:
        raise InfillError(f"need 0 <= successes <= n, got {successes} of {n}")
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def mean_interval(values: Sequence[float], z: float = 1.96) -> tuple[float, float] | None:
    """The normal-approximation interval of a mean (95% for the default z); None with fewer than two values."""
    if len(values) < 2:
        return None
    mean = sum(values) / len(values)
    variance = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
    half = z * math.sqrt(variance / len(values))
    return mean - half, mean + half
