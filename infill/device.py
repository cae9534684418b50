"""Where the DiffusionGemma engine runs, in what precision, and on how many CPU threads.

`--device`/`--dtype` (and the editor's settings) name them; the offline default (llama.cpp, a quantised GGUF) takes
only its thread count from here (`threads_from_env`, else `physical_cores`).
"""

from __future__ import annotations

import logging
import os
import platform
import re
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from infill.types import InfillError

if TYPE_CHECKING:  # torch is imported where a backend that needs it loads, not with this module
    import torch

log = logging.getLogger(__name__)

DTYPE_NAMES = {
    "float32": "float32",
    "fp32": "float32",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
}
_DEVICE = re.compile(r"cpu|cuda(:\d+)?")


@lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """The flags /proc/cpuinfo lists (empty where it cannot be read)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            return frozenset(fh.read().split())
    except OSError:
        return frozenset()


@lru_cache(maxsize=1)
def cpu_supports_bf16() -> bool:
    """Native bf16 matmuls (AVX512-BF16/AMX on x86, the BF16 extension on Arm); emulated bf16 is slower than fp32.
    On x86 torch must also be allowed AVX-512 (`ATEN_CPU_CAPABILITY=avx2` makes this machine compute as an
    AVX2-only laptop does, which is how benchmarks measure that case)."""
    if not cpu_flags():
        return platform.system() == "Darwin" and platform.machine() == "arm64"
    if _x86() and not _torch_allows_avx512():
        return False
    return bool({"avx512_bf16", "amx_bf16", "bf16"} & cpu_flags())


def _x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64", "i686", "x86")


@lru_cache(maxsize=1)
def _torch_allows_avx512() -> bool:
    import torch

    return torch.backends.cpu.get_cpu_capability().upper().startswith("AVX512")


def resolve_device(device: str | None) -> str:
    """ "auto" (or None): CUDA when there is one, else the CPU. A named CUDA device must exist."""
    import torch

    name = (device or "auto").strip().lower()
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if not _DEVICE.fullmatch(name):
        raise InfillError(f"unknown device {device!r}: use auto, cpu, cuda or cuda:N")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise InfillError(f"device {device!r} was asked for but no CUDA device is available; use --device cpu")
    return name


def resolve_dtype(
    dtype: str | None,
    device: str,
    *,
    supported: tuple[str, ...] = ("float32", "bfloat16", "float16"),
    bf16_on_cpu: bool = True,
) -> str:
    """The dtype name for `device`. "auto" (or None): bf16 on CUDA; on a CPU bf16 where the CPU computes it
    natively and the backend gains from it (`bf16_on_cpu`), else float32 (emulated bf16 is slower than float32).
    float16 where a backend does not support it is taken as "auto" with a warning: the setting may be meant for
    another backend."""
    name = (dtype or "auto").strip().lower()
    if name != "auto":
        if name not in DTYPE_NAMES:
            raise InfillError(f"unknown dtype {dtype!r}; use one of auto, {', '.join(sorted(DTYPE_NAMES))}")
        name = DTYPE_NAMES[name]
    if name == "float16" and name not in supported:
        log.warning("float16 is not supported by this model (its activations overflow); choosing automatically")
        name = "auto"
    if name == "auto":
        return "bfloat16" if device != "cpu" or (bf16_on_cpu and cpu_supports_bf16()) else "float32"
    if name not in supported:
        raise InfillError(f"unsupported dtype {dtype!r} for this model: use auto or one of {', '.join(supported)}")
    return name


def resolve_device_dtype(
    device: str | None,
    dtype: str | None,
    *,
    supported: tuple[str, ...] = ("float32", "bfloat16"),
    bf16_on_cpu: bool = True,
) -> tuple[str, str]:
    """(device, dtype name) for a backend."""
    resolved = resolve_device(device)
    return resolved, resolve_dtype(dtype, resolved, supported=supported, bf16_on_cpu=bf16_on_cpu)


def torch_dtype(name: str) -> torch.dtype:
    import torch

    dtype: torch.dtype = getattr(torch, DTYPE_NAMES[name])
    return dtype


def threads_from_env() -> int | None:
    """INFILL_THREADS as a positive integer, or None (the backend's default)."""
    value = os.environ.get("INFILL_THREADS", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def set_threads(threads: int | None) -> None:
    """torch intra-op threads, process-wide; on a small or shared CPU one or two threads beat torch's default
    oversubscription. None leaves torch's default."""
    if threads:
        import torch

        torch.set_num_threads(threads)


def physical_cores() -> int:
    """Physical cores this process may run on (hyperthreads beside them slow llama.cpp down, not up)."""
    try:
        allowed = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        return max(1, (os.cpu_count() or 2) // 2)
    cores = set()
    for cpu in allowed:
        siblings = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
        try:
            cores.add(siblings.read_text().strip())
        except OSError:
            cores.add(str(cpu))
    return max(1, len(cores))
