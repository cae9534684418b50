"""The checkpoint's own weights as plain tensors, in the shapes the engine's forward (forward.py) reads.

Nothing here copies a weight: a bf16 checkpoint's tensors are the loaded model's own (model.py takes them out of
transformers' modules), and the encoder and decoder share every tensor they share in the checkpoint. An FP8
checkpoint (fp8.py) fills the same structures with E4M3 weights and per-output-channel scales.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from infill.engine.kv import kv_bytes_per_token

SLIDING, FULL = "sliding_attention", "full_attention"


@dataclass(frozen=True)
class Linear:
    """y = x @ weight.T: `weight` (out, in) in the model's dtype, or float8_e4m3fn with `scale` (out,) float32, the
    factor that turns each output channel back into the model's units. The experts' are stacked, one per expert
    first: weight (E, out, in), scale (E, out)."""

    weight: torch.Tensor
    scale: torch.Tensor | None = None

    @property
    def fp8(self) -> bool:
        return self.scale is not None

    @property
    def out_features(self) -> int:
        return self.weight.shape[-2]

    def pick(self, index: torch.Tensor | int) -> Linear:
        """The stacked linears at `index` (experts by id), each with its scales."""
        return Linear(self.weight[index], None if self.scale is None else self.scale[index])

    def dequantized(self, dtype: torch.dtype) -> torch.Tensor:
        """The weight in `dtype`, scaled back where it is FP8."""
        return self.weight if self.scale is None else (self.weight.float() * self.scale[..., None]).to(dtype)


@dataclass(frozen=True)
class Experts:
    """The routed experts of one layer, stacked: `gate_up` (E, 2I, H) holds each expert's gate rows then its up
    rows, `down` (E, H, I)."""

    gate_up: Linear
    down: Linear

    @property
    def fp8(self) -> bool:
        return self.gate_up.fp8

    @property
    def count(self) -> int:
        return self.gate_up.weight.shape[0]


@dataclass(frozen=True)
class Norms:
    """The RMSNorm scales of one layer, in the order the layer applies them."""

    input: torch.Tensor
    post_attention: torch.Tensor
    pre_feedforward: torch.Tensor  # before the dense MLP
    post_feedforward_1: torch.Tensor  # after the dense MLP
    pre_feedforward_2: torch.Tensor  # before the experts
    post_feedforward_2: torch.Tensor  # after the experts
    post_feedforward: torch.Tensor  # after their sum


@dataclass(frozen=True)
class Layer:
    kind: str  # SLIDING or FULL
    heads: int
    kv_heads: int
    head_dim: int
    norms: Norms
    q: Linear
    k: Linear
    v: Linear | None  # None: V is K's projection (full-attention layers), normed without a scale
    o: Linear
    q_norm: torch.Tensor  # (head_dim,)
    k_norm: torch.Tensor
    gate: Linear  # the dense MLP
    up: Linear
    down: Linear
    router: torch.Tensor  # (E, H) routing projection (kept in the model's dtype: it picks the experts)
    router_scale: torch.Tensor  # (H,)
    expert_scale: torch.Tensor  # (E,) per-expert weight scale
    experts: Experts
    scalar: torch.Tensor  # (1,) the layer's output scale (a buffer: the encoder's and decoder's may differ)

    @property
    def groups(self) -> int:
        return self.heads // self.kv_heads


@dataclass(frozen=True)
class Rope:
    inv_freq: torch.Tensor  # (head_dim / 2,) float32
    scaling: float


@dataclass(frozen=True)
class EngineWeights:
    embed: torch.Tensor  # (V, H) the decoder's token embeddings (unscaled), also the self-conditioning table
    encoder_embed: torch.Tensor  # (V, H) the encoder's (the same tensor in the published checkpoints)
    embed_scale: torch.Tensor  # () sqrt(H) in the model's dtype, as transformers rounds it
    head: torch.Tensor  # (V, H) the LM head (tied to `embed` in the published checkpoints)
    self_conditioning: tuple[torch.Tensor, Linear, Linear, Linear]  # pre-norm scale, gate, up, down
    final_norm: torch.Tensor
    encoder: tuple[Layer, ...]
    decoder: tuple[Layer, ...]
    rope: dict[str, Rope]
    eps: float
    top_k: int
    sliding_window: int  # sliding layers' window W: a token sees itself and the W - 1 before it
    softcap: float | None
    activation: str  # transformers' name of the MLP and experts' activation
    weight_format: str = "bf16"  # what the status and the log name: "bf16", "float32", "fp8" ...
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def dtype(self) -> torch.dtype:
        return self.embed.dtype

    @property
    def device(self) -> torch.device:
        return self.embed.device

    @property
    def hidden(self) -> int:
        return self.embed.shape[1]

    @property
    def vocab(self) -> int:
        return self.embed.shape[0]

    @property
    def experts_fp8(self) -> bool:
        return any(layer.experts.fp8 for layer in self.decoder)

    def kv_shapes(self) -> list[tuple[int, int]]:
        """(kv_heads, head_dim) of each layer's cache."""
        return [(layer.kv_heads, layer.head_dim) for layer in self.encoder]

    def kv_bytes_per_token(self) -> int:
        return kv_bytes_per_token(self.kv_shapes(), self.dtype)

    def weight_bytes(self) -> int:
        """Bytes of distinct weight tensors (shared ones counted once): what a forward reads at most."""
        seen: dict[int, int] = {}
        for tensor in _tensors(self):
            seen[tensor.data_ptr()] = tensor.numel() * tensor.element_size()
        return sum(seen.values())


def _tensors(value: object) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in _tensors(item)]
    if isinstance(value, dict):
        return [t for item in value.values() for t in _tensors(item)]
    if hasattr(value, "__dataclass_fields__"):
        return [t for name in value.__dataclass_fields__ for t in _tensors(getattr(value, name))]
    return []
