"""What a benchmark prints beside its figures: 95% intervals (of a proportion, of a mean) and the CPU's kernel flags.

Not product code: only benchmarks/ and their tests use it (the percentile every figure shares, the server's and the
pilot's too, is infill/stats.py's)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from infill.device import cpu_flags
from infill.types import InfillError

# The instruction sets that decide which kernels torch and llama.cpp run, named beside every benchmark figure
KERNEL_FLAGS = (
    "avx2",
    "fma",
    "f16c",
    "avx_vnni",
    "avx512f",
    "avx512_vnni",
    "avx512_bf16",
    "amx_tile",
    "amx_int8",
    "amx_bf16",
)


def kernel_flags() -> list[str]:
    """Which of KERNEL_FLAGS this CPU has (empty where /proc/cpuinfo cannot be read)."""
    return [flag for flag in KERNEL_FLAGS if flag in cpu_flags()]


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
