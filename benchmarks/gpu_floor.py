"""What the hardware allows, for benchmarks/engine_gpu.py: the memory bandwidth measured on the card, the bytes each
engine call must read (weights it touches, counted from the experts the router actually picks, and the prompt keys
and values it attends to), and the floor those give (bytes ÷ bandwidth). Works on a CPU too (wall time).
"""

from __future__ import annotations

import statistics
import time

import torch

from infill.engine import experts as experts_module
from infill.engine import forward
from infill.engine.weights import FULL, EngineWeights


def timed_ms(fn, repeat: int, device: torch.device) -> list[float]:
    """Milliseconds of `repeat` calls (CUDA events on a GPU, wall time elsewhere), after one warm-up call."""
    fn()
    out = []
    for _ in range(repeat):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            out.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            out.append((time.perf_counter() - t0) * 1000)
    return out


def bandwidth(device: torch.device, gib: float = 4.0, repeat: int = 10) -> dict:
    """Read bandwidth (a sum over `gib` GiB: reads only) and copy bandwidth (bytes read + written), GB/s."""
    n = int(gib * 2**30) // 2
    x = torch.ones(n, dtype=torch.bfloat16, device=device)
    y = torch.empty_like(x)
    read = statistics.median(timed_ms(lambda: x.sum(dtype=torch.float32), repeat, device))
    copy = statistics.median(timed_ms(lambda: y.copy_(x), repeat, device))
    nbytes = x.numel() * 2
    return {"read_gbs": round(nbytes / read / 1e6, 1), "copy_gbs": round(2 * nbytes / copy / 1e6, 1), "bytes": nbytes}


def _size(t: torch.Tensor | None) -> int:
    return 0 if t is None else t.numel() * t.element_size()


def weight_parts(weights: EngineWeights) -> dict:
    """Bytes by part: per layer the dense weights (attention, MLP, router, norms) and one expert; the embedding."""
    layers = []
    for layer in weights.decoder:
        dense = sum(
            _size(lin.weight) + _size(lin.scale)
            for lin in (layer.q, layer.k, layer.v, layer.o, layer.gate, layer.up, layer.down)
            if lin is not None
        )
        dense += _size(layer.router) + sum(_size(getattr(layer.norms, f)) for f in layer.norms.__dataclass_fields__)
        ex = layer.experts
        per_expert = sum(_size(t) for lin in (ex.gate_up, ex.down) for t in (lin.weight, lin.scale)) // ex.count
        layers.append({"dense": dense, "per_expert": per_expert, "experts": ex.count})
    self_conditioning = sum(_size(lin.weight) + _size(lin.scale) for lin in weights.self_conditioning[1:])
    return {
        "layers": layers,
        "embedding": _size(weights.embed),
        "self_conditioning": self_conditioning,
        "kv_per_token": weights.kv_bytes_per_token(),
    }


def experts_touched(run) -> list[int]:
    """Distinct experts each layer's router picks during `run()` (one forward: the real routing, not the uniform
    estimate), in the order the layers ran."""
    picked: list[set[int]] = []
    route = experts_module.route

    def recording(x, layer, top_k, eps):
        out = route(x, layer, top_k, eps)
        picked.append(set(out[1].flatten().tolist()))
        return out

    forward.route = recording
    try:
        with torch.inference_mode():
            run()
    finally:
        forward.route = route
    return [len(p) for p in picked]


def canvas_forward(weights: EngineWeights, kv, rows: int, width: int, prompt_length: int):
    """An eager decoder forward of a random (rows, width) canvas after the prompt the buffers hold."""
    device = weights.device
    tokens = torch.randint(3, weights.vocab, (rows, width), device=device)
    valid = torch.ones(rows, width, dtype=torch.bool, device=device)
    soft = torch.zeros(rows, width, weights.hidden, dtype=weights.dtype, device=device)
    spans = forward.exact_spans(weights, prompt_length + rows * width, prompt_length)
    return lambda: forward.decode(weights, kv, tokens, soft, prompt_length, valid, spans, "grouped")


def visible_kv_bytes(weights: EngineWeights, prompt_length: int) -> int:
    """Prompt keys and values the canvas attends to: every token in full layers, the last W - 1 in sliding ones."""
    element = torch.empty((), dtype=weights.dtype).element_size()
    total = 0
    for layer in weights.decoder:
        seen = prompt_length if layer.kind == FULL else min(prompt_length, weights.sliding_window - 1)
        total += 2 * layer.kv_heads * layer.head_dim * element * seen
    return total


def floor_bytes(parts: dict, touched: list[int], kv_bytes: int, head: bool) -> int:
    """Bytes a call must read: each layer's dense weights and the experts it touches, the prompt KV it attends to,
    and for a denoising step the embedding twice (the LM head and the self-conditioning input) and the
    self-conditioning MLP."""
    total = kv_bytes + sum(layer["dense"] + layer["per_expert"] * n for layer, n in zip(parts["layers"], touched))
    if head:
        total += 2 * parts["embedding"] + parts["self_conditioning"]
    return total


# The card's memory bandwidth by its name (datasheets, GB/s): what a floor divides by. H100 SXM 3.35 TB/s, H100 NVL
# 3.9, H100 PCIe 2.0; H200 (SXM and NVL) 4.8; A100 80 GB 2.0 (SXM) / 1.9 (PCIe).
CARD_BANDWIDTH_GBS = (
    ("H100 PCIe", 2000.0),
    ("H100 NVL", 3900.0),
    ("H100", 3350.0),
    ("H200", 4800.0),
    ("A100-SXM4-80GB", 2039.0),
    ("A100 80GB PCIe", 1935.0),
)


def card_bandwidth_gbs(name: str) -> float | None:
    """The datasheet bandwidth of the card `name` (torch's device name), None for a card not listed."""
    for prefix, gbs in CARD_BANDWIDTH_GBS:
        if prefix.lower() in name.lower():
            return gbs
    return None


def device_time_us(events) -> float:
    """Device time of profiler events (torch.profiler's key_averages()): only device-side (CUDA) events count. A
    host op's entry also carries the device time of the kernels it launched, so summing both counts each kernel
    twice."""
    return sum(e.self_device_time_total for e in events if str(getattr(e, "device_type", "")).endswith("CUDA"))


def device_kernels(events) -> int:
    return sum(e.count for e in events if str(getattr(e, "device_type", "")).endswith("CUDA"))
