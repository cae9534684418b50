"""The decoder forward of one canvas, replayed as a CUDA graph.

Why: at the full 26B-A4B size on an H200 (random weights, benchmarks/results/engine-gpu-h200.json) one eager
decoder forward launches about 4,400 kernels; the GPU is busy 30 ms of the 105 ms it takes, and the host spends the
rest launching them. Within one fill nothing the forward reads changes shape (canvas, prompt keys, masks), and
only two inputs change value (the canvas tokens and the self-conditioning embeddings), so the forward is captured
once, after the fill's first (eager) step, and replayed for the others. It is not reused across fills: the prompt
KV, and so the graph's key length, changes with every keystroke.

A model whose forward cannot be captured (a host sync inside it, say) runs eager from then on; the failure is
logged once.
"""

from __future__ import annotations

import logging
import weakref
from typing import Callable

import torch

log = logging.getLogger(__name__)

Forward = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (canvas tokens, soft embeddings) -> logits

_uncapturable: weakref.WeakSet = weakref.WeakSet()  # models whose forward failed to capture


def capture_forward(model, forward: Forward, tokens: torch.Tensor, soft: torch.Tensor) -> Forward | None:
    """`forward` captured on CUDA with static copies of `tokens` and `soft`; the returned callable copies its
    arguments into them, replays, and returns the graph's own logits tensor (overwritten by the next replay, so
    read it before calling again). None where the capture fails (then the caller stays eager)."""
    if model in _uncapturable:
        return None
    static_tokens, static_soft = tokens.clone(), soft.clone()
    graph = torch.cuda.CUDAGraph()
    # The capture runs on a side stream, as CUDA requires, without torch.cuda.graph's empty_cache(): that would
    # hand the allocator's cached blocks back to the driver before every fill.
    stream = torch.cuda.Stream(device=tokens.device)
    stream.wait_stream(torch.cuda.current_stream(tokens.device))
    try:
        with torch.cuda.stream(stream):
            graph.capture_begin(capture_error_mode="thread_local")
            try:
                logits = forward(static_tokens, static_soft)
            finally:
                graph.capture_end()
    except Exception:  # noqa: BLE001 - any capture failure means: this model runs eager
        _uncapturable.add(model)
        log.warning("the decoder forward cannot be captured as a CUDA graph; it runs eager", exc_info=True)
        return None
    torch.cuda.current_stream(tokens.device).wait_stream(stream)

    def replay(tokens: torch.Tensor, soft: torch.Tensor) -> torch.Tensor:
        static_tokens.copy_(tokens)
        static_soft.copy_(soft)
        graph.replay()
        return logits

    return replay
