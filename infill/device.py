"""Where a model runs, in what precision, and on how many CPU threads: one policy for every in-process backend.

`--device`/`--dtype` (and the editor's settings) name them the same way for DiffusionGemma and the offline Gemma 3
270M; each backend states only what it supports and whether bf16 pays on a CPU that computes it natively.
"""

from __future__ import annotations

import logging
import os
import platform
import re
from functools import lru_cache

from infill.types import InfillError

log = logging.getLogger(__name__)

DTYPE_NAMES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16",
               "float16": "float16", "fp16": "float16", "int8": "int8"}  # int8: weights (infill/backends/int8.py)
_DEVICE = re.compile(r"cpu|cuda(:\d+)?")


@lru_cache(maxsize=1)
def _cpu_flags() -> frozenset[str]:
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
    if not _cpu_flags():
        return platform.system() == "Darwin" and platform.machine() == "arm64"
    if _x86() and not _torch_allows_avx512():
        return False
    return bool({"avx512_bf16", "amx_bf16", "bf16"} & _cpu_flags())


def _x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64", "i686", "x86")


@lru_cache(maxsize=1)
def _torch_allows_avx512() -> bool:
    import torch

    return torch.backends.cpu.get_cpu_capability().upper().startswith("AVX512")


def resolve_device(device: str | None) -> str:
    """"auto" (or None): CUDA when there is one, else the CPU. A named CUDA device must exist."""
    import torch

    name = (device or "auto").strip().lower()
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if not _DEVICE.fullmatch(name):
        raise InfillError(f"unknown device {device!r}: use auto, cpu, cuda or cuda:N")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise InfillError(f"device {device!r} was asked for but no CUDA device is available; use --device cpu")
    return name


def resolve_dtype(dtype: str | None, device: str, *, supported: tuple[str, ...] = ("float32", "bfloat16", "float16"),
                  bf16_on_cpu: bool = True, cpu_weight_formats: bool = False) -> str:
    """The dtype name for `device`. "auto" (or None): bf16 on CUDA. On a CPU, a backend with the offline default's
    CPU weight formats (`cpu_weight_formats`) gets int8 weights (infill/backends/int8.py) where the CPU computes
    bf16 natively and this torch has the kernels, and bf16 weights with float32 copies for prompts where it does not
    (an AVX2-only CPU; infill/backends/prefill_weights.py): there int8 would compute with float32 activations, the
    slowest (142 ms for a one-token forward of Gemma 3 270M, against 109 with float32 and 34 with bf16). Other
    backends get bf16 where the CPU computes it natively and the backend gains from it (`bf16_on_cpu`), else
    float32. float16 where a backend does not support it (Gemma 3 overflows in fp16) is taken as "auto" with a
    warning: the setting may be meant for another backend."""
    name = (dtype or "auto").strip().lower()
    if name != "auto":
        if name not in DTYPE_NAMES:
            raise InfillError(f"unknown dtype {dtype!r}; use one of auto, {', '.join(sorted(DTYPE_NAMES))}")
        name = DTYPE_NAMES[name]
    if name == "float16" and name not in supported:
        log.warning("float16 is not supported by this model (its activations overflow); choosing automatically")
        name = "auto"
    if name == "auto":
        if device == "cpu" and cpu_weight_formats:
            if cpu_supports_bf16() and "int8" in supported and int8_kernels():
                return "int8"
            if not cpu_supports_bf16() and "bfloat16" in supported:
                return "bfloat16"
        return "bfloat16" if device != "cpu" or (bf16_on_cpu and cpu_supports_bf16()) else "float32"
    if name not in supported:
        raise InfillError(f"unsupported dtype {dtype!r} for this model: use auto or one of {', '.join(supported)}")
    if name == "int8" and (device != "cpu" or not int8_kernels()):
        raise InfillError("int8 weights run on the CPU only (with this torch's int8 kernels); use auto, bfloat16 "
                          "or float32")
    return name


@lru_cache(maxsize=1)
def int8_kernels() -> bool:
    """This torch multiplies by int8 weights on the CPU (`_weight_int8pack_mm`, infill/backends/int8.py)."""
    import torch

    try:
        out = torch.ops.aten._weight_int8pack_mm(torch.ones(1, 32), torch.ones(8, 32, dtype=torch.int8),
                                                 torch.ones(8))
        return bool(out.shape == (1, 8) and float(out[0, 0]) == 32.0)
    except (RuntimeError, AttributeError, NotImplementedError):
        return False


def resolve_device_dtype(device: str | None, dtype: str | None, *,
                         supported: tuple[str, ...] = ("float32", "bfloat16"),
                         bf16_on_cpu: bool = True, cpu_weight_formats: bool = False) -> tuple[str, str]:
    """(device, dtype name) for a backend."""
    resolved = resolve_device(device)
    return resolved, resolve_dtype(dtype, resolved, supported=supported, bf16_on_cpu=bf16_on_cpu,
                                   cpu_weight_formats=cpu_weight_formats)


def torch_dtype(name: str):
    import torch

    return getattr(torch, DTYPE_NAMES[name])


def threads_from_env() -> int | None:
    """INFILL_THREADS as a positive integer, or None (torch's default)."""
    value = os.environ.get("INFILL_THREADS", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def set_threads(threads: int | None) -> None:
    """torch intra-op threads, process-wide; on a small or shared CPU one or two threads beat torch's default
    oversubscription. None leaves torch's default."""
    if threads:
        import torch

        torch.set_num_threads(threads)
