"""A DiffusionGemma checkpoint's tensors, read straight into the engine's weights (weights.py): the one map from a
checkpoint's tensor names to the engine's fields, for bf16 checkpoints, compressed-tensors FP8 checkpoints (FP8
`weight` plus `weight_scale` (out, 1) per quantized Linear, experts split per expert) and quantization at load,
from three sources of named tensors: safetensors files, random values of the architecture's shapes
(`--load-format dummy`), and a transformers module's state dict (tests and references).

Each weight is built once, where it is used: no transformers module holds a second copy, and a projection quantized
at load is read and quantized a slice at a time (an expert, or a few MiB of rows), so the peak is the finished
weights plus one slice. Files are read with plain reads, not mapped: a mapped file's pages would count as this
process's memory for as long as it held them.

The encoder shares every decoder tensor but its layer scalars (transformers ties them; checkpoints store the
decoder's), and the LM head is the embedding unless the config unties them.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import torch

from infill.engine.ops import FP8
from infill.engine.weights import FULL, SLIDING, EngineWeights, Experts, Layer, Linear, Norms, Rope
from infill.types import InfillError

if TYPE_CHECKING:
    from transformers import DiffusionGemmaConfig

DECODER = "model.decoder"
ENCODER = "model.encoder.language_model"
EMBED = f"{DECODER}.embed_tokens.weight"
HEAD = "lm_head.weight"
FINAL_NORM = f"{DECODER}.norm.weight"
SELF_CONDITIONING = f"{DECODER}.self_conditioning"
NORMS = (  # in the order of Norms' fields
    "input_layernorm",
    "post_attention_layernorm",
    "pre_feedforward_layernorm",
    "post_feedforward_layernorm_1",
    "pre_feedforward_layernorm_2",
    "post_feedforward_layernorm_2",
    "post_feedforward_layernorm",
)
ATTENTION = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj", "o": "self_attn.o_proj"}
MLP = {"gate": "mlp.gate_proj", "up": "mlp.up_proj", "down": "mlp.down_proj"}
SPLIT_EXPERT = ("gate_proj", "up_proj", "down_proj")  # compressed-tensors: experts.{e}.gate_proj ...
QUANTIZE_SLICE = 1 << 22  # elements quantized at a time (8 MiB of bf16)


class TensorSource(Protocol):
    """Named tensors, in their stored dtype; `read` returns rows [start, stop) of the first dimension."""

    def has(self, name: str) -> bool: ...

    def shape(self, name: str) -> tuple[int, ...]: ...

    def read(self, name: str, start: int = 0, stop: int | None = None) -> torch.Tensor: ...


# ---- sources ---------------------------------------------------------------------------------------------------

_SAFETENSORS_DTYPES = {
    "BF16": torch.bfloat16,
    "F16": torch.float16,
    "F32": torch.float32,
    "F64": torch.float64,
    "F8_E4M3": torch.float8_e4m3fn,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}


@dataclass(frozen=True)
class _Stored:
    path: Path
    dtype: torch.dtype
    shape: tuple[int, ...]
    offset: int  # of its first byte in the file


def _header(path: Path) -> dict[str, _Stored]:
    with path.open("rb") as f:
        (size,) = struct.unpack("<Q", f.read(8).ljust(8, b"\0"))
        header = json.loads(f.read(size))
    base = 8 + size
    return {
        name: _Stored(path, _SAFETENSORS_DTYPES[entry["dtype"]], tuple(entry["shape"]), base + entry["data_offsets"][0])
        for name, entry in header.items()
        if name != "__metadata__"
    }


class SafetensorsFiles:
    """The tensors of a directory's safetensors files (one file or an index of shards)."""

    def __init__(self, directory: Path) -> None:
        index = directory / "model.safetensors.index.json"
        files = (
            sorted({directory / f for f in json.loads(index.read_text())["weight_map"].values()})
            if index.exists()
            else sorted(directory.glob("*.safetensors"))
        )
        if not files:
            raise InfillError(f"{directory} has no *.safetensors weights")
        self.stored: dict[str, _Stored] = {}
        for file in files:
            try:
                self.stored.update(_header(file))
            except (OSError, ValueError, KeyError, TypeError, struct.error) as exc:
                raise InfillError(
                    f"cannot load DiffusionGemma weights from {file}: not a safetensors file ({exc})"
                ) from exc

    def has(self, name: str) -> bool:
        return name in self.stored

    def shape(self, name: str) -> tuple[int, ...]:
        return self._entry(name).shape

    def _entry(self, name: str) -> _Stored:
        if name not in self.stored:
            raise InfillError(f"the checkpoint has no tensor {name!r}")
        return self.stored[name]

    def read(self, name: str, start: int = 0, stop: int | None = None) -> torch.Tensor:
        entry = self._entry(name)
        shape = entry.shape
        rows = shape[0] if shape else 1
        stop = rows if stop is None else stop
        out = torch.empty((stop - start, *shape[1:]) if shape else (), dtype=entry.dtype)
        row_bytes = out.element_size() * math.prod(shape[1:])
        # the tensor's own bytes, read into in place (numpy's stubs here do not declare its buffer protocol)
        buffer = memoryview(out.view(-1).view(torch.uint8).numpy())  # type: ignore[arg-type]
        with entry.path.open("rb") as f:
            f.seek(entry.offset + start * row_bytes)
            if f.readinto(buffer) != buffer.nbytes:
                raise InfillError(f"cannot load DiffusionGemma weights from {entry.path}: {name!r} is cut short")
        return out


class StateDict:
    """A module's state dict (transformers' own model, for references): read returns views, nothing is copied."""

    def __init__(self, tensors: Mapping[str, torch.Tensor]) -> None:
        self.tensors = tensors

    def has(self, name: str) -> bool:
        return name in self.tensors

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self.tensors[name].shape)

    def read(self, name: str, start: int = 0, stop: int | None = None) -> torch.Tensor:
        tensor = self.tensors[name].detach()
        return tensor if start == 0 and stop is None else tensor[start:stop]


class RandomWeights:
    """Random values of the architecture's shapes (`--load-format dummy`), drawn on `device` as they are read:
    matrices from N(0, std), as transformers initialises them; vectors (norm scales, router and layer scalars) ones."""

    def __init__(self, shapes: Mapping[str, tuple[int, ...]], device: torch.device, dtype: torch.dtype, std: float):
        self.shapes, self.device, self.dtype, self.std = shapes, device, dtype, std
        self.generator = torch.Generator(device).manual_seed(0)

    def has(self, name: str) -> bool:
        return name in self.shapes

    def shape(self, name: str) -> tuple[int, ...]:
        return self.shapes[name]

    def read(self, name: str, start: int = 0, stop: int | None = None) -> torch.Tensor:
        shape = self.shapes[name]
        rows = (shape[0] if stop is None else stop) - start
        out = torch.empty((rows, *shape[1:]), dtype=self.dtype, device=self.device)
        return out.fill_(1.0) if len(shape) < 2 else out.normal_(0.0, self.std, generator=self.generator)


# ---- the map ---------------------------------------------------------------------------------------------------


class _Builder:
    """Builds each engine tensor from `source` on `device`: unquantized ones in `dtype`, stored FP8 as stored, and
    with `quantize` every projection (attention, dense MLP, experts) quantized to FP8 a slice at a time."""

    def __init__(self, source: TensorSource, device: torch.device, dtype: torch.dtype, quantize: bool) -> None:
        self.source, self.device, self.dtype, self.quantize = source, device, dtype, quantize

    def tensor(self, name: str) -> torch.Tensor:
        return self.source.read(name).to(device=self.device, dtype=self.dtype)

    def linear(self, name: str, quantize: bool = True) -> Linear:
        if self.source.has(f"{name}.bias"):
            raise InfillError(
                "this DiffusionGemma checkpoint has attention or MLP biases, which the engine does not read"
            )
        if self.source.has(f"{name}.weight_scale"):  # stored in FP8
            scale = self.source.read(f"{name}.weight_scale").to(device=self.device, dtype=torch.float32)
            return Linear(self.source.read(f"{name}.weight").to(self.device), scale.reshape(-1))
        if quantize and self.quantize:
            return self.quantized(f"{name}.weight")
        return Linear(self.tensor(f"{name}.weight"))

    def quantized(self, name: str) -> Linear:
        """The stored tensor (..., out, in) as E4M3 with one scale per output row, read a slice at a time."""
        from infill.engine.fp8 import quantize_rows_of

        shape = self.source.shape(name)
        weight = torch.empty(shape, dtype=FP8, device=self.device)
        scale = torch.empty(shape[:-1], dtype=torch.float32, device=self.device)
        step = max(1, QUANTIZE_SLICE // math.prod(shape[1:]))
        for start in range(0, shape[0], step):
            stop = min(shape[0], start + step)
            weight[start:stop], scale[start:stop] = quantize_rows_of(
                self.source.read(name, start, stop).to(self.device)
            )
        return Linear(weight, scale)

    def experts(self, prefix: str, count: int) -> Experts:
        if self.source.has(f"{prefix}.gate_up_proj"):  # fused (E, 2I, H) and (E, H, I)
            parts = (f"{prefix}.gate_up_proj", f"{prefix}.down_proj")
            if self.quantize:
                return Experts(*(self.quantized(p) for p in parts))
            return Experts(*(Linear(self.tensor(p)) for p in parts))
        return self._split_experts(prefix, count)

    def _split_experts(self, prefix: str, count: int) -> Experts:
        """Experts stored one Linear each (compressed-tensors), in FP8: stacked into the fused layout."""
        gate, up, down = (f"{prefix}.0.{p}.weight" for p in SPLIT_EXPERT)
        if not all(self.source.has(n) for n in (gate, up, down)):
            raise InfillError(f"{prefix}: no experts in the checkpoint")
        inter, hidden = self.source.shape(gate)
        gate_up = Linear(
            torch.empty(count, 2 * inter, hidden, dtype=FP8, device=self.device),
            torch.empty(count, 2 * inter, dtype=torch.float32, device=self.device),
        )
        down_all = Linear(
            torch.empty(count, hidden, inter, dtype=FP8, device=self.device),
            torch.empty(count, hidden, dtype=torch.float32, device=self.device),
        )
        for e in range(count):
            g, u, d = (self.linear(f"{prefix}.{e}.{p}") for p in SPLIT_EXPERT)
            if g.scale is None or u.scale is None or d.scale is None or gate_up.scale is None or down_all.scale is None:
                raise InfillError(f"{prefix}: experts split per expert but not all in FP8")
            gate_up.weight[e, :inter], gate_up.weight[e, inter:] = g.weight, u.weight
            gate_up.scale[e, :inter], gate_up.scale[e, inter:] = g.scale, u.scale
            down_all.weight[e], down_all.scale[e] = d.weight, d.scale
        return Experts(gate_up, down_all)

    def layer(self, i: int, kind: str, experts: int) -> Layer:
        p = f"{DECODER}.layers.{i}"
        linears = {field: self.linear(f"{p}.{name}") for field, name in MLP.items()}
        for field, name in ATTENTION.items():
            if field != "v" or self.source.has(f"{p}.{name}.weight"):
                linears[field] = self.linear(f"{p}.{name}")
        q_norm = self.tensor(f"{p}.self_attn.q_norm.weight")
        head_dim = q_norm.numel()
        return Layer(
            kind=kind,
            heads=linears["q"].out_features // head_dim,
            kv_heads=linears["k"].out_features // head_dim,
            head_dim=head_dim,
            norms=Norms(*(self.tensor(f"{p}.{n}.weight") for n in NORMS)),
            q=linears["q"],
            k=linears["k"],
            v=linears.get("v"),  # absent: V is K's projection (full-attention layers)
            o=linears["o"],
            q_norm=q_norm,
            k_norm=self.tensor(f"{p}.self_attn.k_norm.weight"),
            gate=linears["gate"],
            up=linears["up"],
            down=linears["down"],
            router=self.tensor(f"{p}.router.proj.weight"),
            router_scale=self.tensor(f"{p}.router.scale"),
            expert_scale=self.tensor(f"{p}.router.per_expert_scale"),
            experts=self.experts(f"{p}.experts", experts),
            scalar=self.tensor(f"{p}.layer_scalar"),
        )

    def encoder_scalar(self, i: int, decoder: Layer) -> torch.Tensor:
        name = f"{ENCODER}.layers.{i}.layer_scalar"
        return self.tensor(name) if self.source.has(name) else decoder.scalar


def read_weights(
    source: TensorSource, config: DiffusionGemmaConfig, device: torch.device, dtype: torch.dtype, quantize: bool
) -> EngineWeights:
    """The engine's weights of `config`'s architecture from `source`, on `device`; `quantize`: projections and
    experts in FP8 (a checkpoint's stored FP8 tensors are FP8 whatever this says)."""
    from dataclasses import replace

    from infill.engine.model import rope_of_config, text_config

    text = text_config(config)
    if getattr(text, "use_bidirectional_attention", None) == "all":
        raise InfillError("a DiffusionGemma text stack with a bidirectional encoder is not supported")
    kinds = tuple(text.layer_types[: text.num_hidden_layers])
    if set(kinds) - {SLIDING, FULL}:
        raise InfillError(f"unknown attention layer types {sorted(set(kinds) - {SLIDING, FULL})}")
    b = _Builder(source, device, dtype, quantize)
    decoder = tuple(b.layer(i, kind, text.num_experts) for i, kind in enumerate(kinds))
    encoder = tuple(replace(layer, scalar=b.encoder_scalar(i, layer)) for i, layer in enumerate(decoder))
    embed = b.tensor(EMBED)
    stored_fp8 = decoder[0].q.fp8 and not quantize
    untied = not getattr(config, "tie_word_embeddings", True) and source.has(HEAD)
    return EngineWeights(
        embed=embed,
        encoder_embed=embed,
        embed_scale=torch.tensor(text.hidden_size**0.5).to(dtype).to(device),
        head=b.tensor(HEAD) if untied else embed,
        self_conditioning=(
            b.tensor(f"{SELF_CONDITIONING}.pre_norm.weight"),
            b.linear(f"{SELF_CONDITIONING}.gate_proj", quantize=False),
            b.linear(f"{SELF_CONDITIONING}.up_proj", quantize=False),
            b.linear(f"{SELF_CONDITIONING}.down_proj", quantize=False),
        ),
        final_norm=b.tensor(FINAL_NORM),
        encoder=encoder,
        decoder=decoder,
        rope={kind: Rope(table.inv_freq.to(device), table.scaling) for kind, table in rope_of_config(config).items()},
        eps=text.rms_norm_eps,
        top_k=text.top_k_experts,
        sliding_window=text.sliding_window,
        softcap=text.final_logit_softcapping,
        activation=text.hidden_activation,
        weight_format=(
            "fp8 (compressed-tensors FP8-dynamic checkpoint)"
            if stored_fp8
            else f"fp8 (E4M3 per channel, quantized at load from {str(dtype).removeprefix('torch.')})"
            if quantize
            else str(dtype).removeprefix("torch.")
        ),
    )
