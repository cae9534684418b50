"""Fixed-shape programs, replayed as CUDA graphs.

Why: an eager forward of the full 26B-A4B model launches ~4,400 kernels
(benchmarks/results/engine-gpu-full-size-2219725-h200.json: 30 ms of GPU work in a 105 ms forward on an H200), so
the host, not the GPU, sets the pace. A program is a call
whose every input and output lives in tensors allocated once (its static buffers), so it can be captured once, at
load, and replayed for every keystroke: the prompt's length is a device tensor, never a shape, and the KV buffers
sit at fixed addresses (forward.py reads the whole buffer under a mask).

On CUDA a program is captured (after a warm-up run on a side stream, which also builds cuBLAS plans and anything
compiled); elsewhere it runs its body eagerly on the same buffers, so CPU tests check the very arithmetic the
graph replays. A body that cannot be captured runs eagerly from then on, and the failure is logged once.
All programs of an engine share one memory pool: they never run at the same time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from torch.cuda import _POOL_HANDLE  # the opaque handle of a graph memory pool, as torch.cuda.graphs names it

log = logging.getLogger(__name__)


def bucket(size: int, sizes: tuple[int, ...]) -> int | None:
    """The smallest of `sizes` that holds `size` (None: none does)."""
    return next((s for s in sizes if s >= size), None)


class StaticProgram:
    def __init__(self, name: str, body: Callable[[], None], device: torch.device) -> None:
        self.name = name
        self.body = body
        self.device = device
        self.graph: torch.cuda.CUDAGraph | None = None
        self.failed = False

    @property
    def captured(self) -> bool:
        return self.graph is not None

    def capture(self, pool: _POOL_HANDLE | None = None) -> bool:
        """Capture the body as a CUDA graph (CUDA only; True when it was). Runs the body twice: one warm-up and
        the capture, whose results the next `run` overwrites."""
        if self.device.type != "cuda" or self.graph is not None or self.failed:
            return self.graph is not None
        stream = torch.cuda.Stream(device=self.device)  # type: ignore[no-untyped-call]  # torch leaves it unannotated
        stream.wait_stream(torch.cuda.current_stream(self.device))
        try:
            with torch.cuda.stream(stream):
                self.body()
            torch.cuda.current_stream(self.device).wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                self.body()
        except Exception:  # noqa: BLE001 - any capture failure means: this program runs eagerly
            self.failed = True
            log.warning("the %s program cannot be captured as a CUDA graph; it runs eagerly", self.name, exc_info=True)
            return False
        self.graph = graph
        return True

    def run(self) -> None:
        if self.graph is not None:
            self.graph.replay()
        else:
            self.body()
