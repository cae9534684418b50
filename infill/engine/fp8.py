"""FP8 weights in-process: E4M3 weights with one scale per output channel, activations quantized per token at run
time (ops.linear, experts.grouped), the scheme the published FP8-dynamic DiffusionGemma checkpoints use.

Two ways in:
- `quantize_weights`: a bf16 checkpoint quantized at load (`--quantization fp8`). Attention, dense MLP and expert
  projections become FP8; embeddings (and so the tied LM head), routers, norms and the self-conditioning MLP stay
  in the model's dtype, as the published checkpoints keep them.
- `load_compressed_tensors`: a checkpoint in the compressed-tensors "float-quantized" format (what LLM Compressor
  writes and vLLM reads): FP8 `weight` plus `weight_scale` (out, 1) per quantized Linear, experts split per expert
  (`experts.{e}.gate_proj/up_proj/down_proj`), everything else as in the bf16 checkpoint. Only the decoder's
  tensors are stored: the encoder shares them (its layer scalars excepted), and the LM head is the embedding.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from infill.engine.ops import FP8, FP8_MAX
from infill.engine.weights import EngineWeights, Experts, Layer, Linear, Norms, Rope
from infill.types import InfillError

if TYPE_CHECKING:
    from transformers import DiffusionGemmaConfig

log = logging.getLogger(__name__)


def quantize_rows_of(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(E4M3 weight, float32 scale per output row) for weight (..., out, in): each row scaled to fill [-448, 448]."""
    w = weight.float()
    scale = w.abs().amax(-1).clamp(min=1e-12) / FP8_MAX
    return (w / scale[..., None]).clamp(-FP8_MAX, FP8_MAX).to(FP8), scale


def _storage(t: torch.Tensor) -> int:
    """Identifies the storage a tensor views: the same for the encoder's and decoder's shared weights, and still
    the same once that storage was released."""
    return int(t.untyped_storage()._cdata)


class _Quantizer:
    """Quantizes each distinct tensor once (the encoder and decoder share theirs) and moves the rest to `device`.
    `release`: each source tensor it quantized gives its memory back at once (its storage shrinks to nothing), so
    the peak is the FP8 model plus one source tensor; the source weights are unusable afterwards."""

    def __init__(self, device: torch.device, release: bool = False) -> None:
        self.device = device
        self.release = release
        # what each source storage became: a tensor moved to the device, a quantized Linear, quantized experts
        self.moved: dict[int, torch.Tensor] = {}
        self.linears: dict[int, Linear] = {}
        self.experts_done: dict[int, Experts] = {}

    def keep(self, t: torch.Tensor) -> torch.Tensor:
        key = _storage(t)
        if key not in self.moved:
            self.moved[key] = t.to(self.device)
        return self.moved[key]

    def _quantized(self, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = quantize_rows_of(t.to(self.device))
        if self.release:
            try:
                t.untyped_storage().resize_(0)
            except RuntimeError:  # a memory-mapped file's storage: nothing on the device to give back
                pass
        return out

    def linear(self, layer: Linear) -> Linear:
        if layer.fp8:
            return layer
        key = _storage(layer.weight)
        if key not in self.linears:
            self.linears[key] = Linear(*self._quantized(layer.weight))
        return self.linears[key]

    def experts(self, experts: Experts) -> Experts:
        if experts.fp8:
            return experts
        key = _storage(experts.gate_up.weight)
        if key not in self.experts_done:
            gate_up, down = (Linear(*self._quantized(part.weight)) for part in (experts.gate_up, experts.down))
            self.experts_done[key] = Experts(gate_up, down)
        return self.experts_done[key]

    def layer(self, layer: Layer) -> Layer:
        n = layer.norms
        return Layer(
            kind=layer.kind,
            heads=layer.heads,
            kv_heads=layer.kv_heads,
            head_dim=layer.head_dim,
            norms=Norms(*(self.keep(getattr(n, f)) for f in n.__dataclass_fields__)),
            q=self.linear(layer.q),
            k=self.linear(layer.k),
            v=None if layer.v is None else self.linear(layer.v),
            o=self.linear(layer.o),
            q_norm=self.keep(layer.q_norm),
            k_norm=self.keep(layer.k_norm),
            gate=self.linear(layer.gate),
            up=self.linear(layer.up),
            down=self.linear(layer.down),
            router=self.keep(layer.router),
            router_scale=self.keep(layer.router_scale),
            expert_scale=self.keep(layer.expert_scale),
            experts=self.experts(layer.experts),
            scalar=self.keep(layer.scalar),
        )


def quantize_weights(
    weights: EngineWeights, device: torch.device | str | None = None, *, release: bool = False
) -> EngineWeights:
    """`weights` with their projections in FP8, on `device` (default: where they are). Quantizing on the target
    device one tensor at a time keeps the peak there at the FP8 model plus one bf16 tensor when the bf16 weights
    sit elsewhere (the CPU) or are released as they go (`release`, see _Quantizer)."""
    q = _Quantizer(torch.device(device) if device is not None else weights.device, release)
    pre_norm, gate, up, down = weights.self_conditioning
    return EngineWeights(
        embed=q.keep(weights.embed),
        encoder_embed=q.keep(weights.encoder_embed),
        embed_scale=q.keep(weights.embed_scale),
        head=q.keep(weights.head),
        self_conditioning=(
            q.keep(pre_norm),
            Linear(q.keep(gate.weight)),
            Linear(q.keep(up.weight)),
            Linear(q.keep(down.weight)),
        ),
        final_norm=q.keep(weights.final_norm),
        encoder=tuple(q.layer(layer) for layer in weights.encoder),
        decoder=tuple(q.layer(layer) for layer in weights.decoder),
        rope={kind: Rope(table.inv_freq.to(q.device), table.scaling) for kind, table in weights.rope.items()},
        eps=weights.eps,
        top_k=weights.top_k,
        sliding_window=weights.sliding_window,
        softcap=weights.softcap,
        activation=weights.activation,
        weight_format=f"fp8 (E4M3 per channel, quantized at load from {weights.weight_format})",
    )


# ---- the compressed-tensors checkpoint format ------------------------------------------------------------------


def compressed_fp8_scheme(config: DiffusionGemmaConfig) -> dict[str, Any] | None:
    """The FP8-dynamic scheme of a checkpoint's `quantization_config` (None: not quantized). Raises InfillError for
    any other quantization, naming it."""
    qc = getattr(config, "quantization_config", None)
    if qc is None:
        return None
    qc = qc if isinstance(qc, dict) else qc.to_dict()
    method = qc.get("quant_method")
    if method != "compressed-tensors":
        raise InfillError(
            f"the checkpoint is quantized with {method!r}; infill-ls loads compressed-tensors FP8 "
            "(FP8-dynamic) checkpoints or unquantized ones (use --quantization fp8 on those)"
        )
    for name, group in (qc.get("config_groups") or {}).items():
        w, a = group.get("weights") or {}, group.get("input_activations") or {}
        fmt = group.get("format") or qc.get("format")
        if not (
            fmt == "float-quantized"
            and w.get("num_bits") == 8
            and w.get("type") == "float"
            and w.get("strategy") == "channel"
            and a.get("num_bits") == 8
            and a.get("type") == "float"
            and a.get("strategy") == "token"
            and a.get("dynamic") is True
        ):
            raise InfillError(
                f"compressed-tensors group {name!r} is not FP8 per-channel weights with dynamic "
                f"per-token activations (format {fmt!r}, weights {w}, activations {a}): not supported"
            )
    return qc


class _Tensors:
    """Named tensors of a safetensors checkpoint (one file or an index of shards), read one at a time."""

    def __init__(self, directory: Path, device: torch.device) -> None:
        from safetensors import safe_open

        self.device = device
        index = directory / "model.safetensors.index.json"
        files = (
            sorted({directory / f for f in json.loads(index.read_text())["weight_map"].values()})
            if index.exists()
            else sorted(directory.glob("*.safetensors"))
        )
        if not files:
            raise InfillError(f"{directory} has no *.safetensors weights")
        self.handles = [safe_open(str(f), framework="pt") for f in files]
        # safetensors' own stubs leave `keys` and `get_tensor` unannotated
        self.where = {key: h for h in self.handles for key in h.keys()}  # type: ignore[no-untyped-call]

    def has(self, name: str) -> bool:
        return name in self.where

    def get(self, name: str) -> torch.Tensor:
        if name not in self.where:
            raise InfillError(f"the checkpoint has no tensor {name!r}")
        tensor: torch.Tensor = self.where[name].get_tensor(name)  # type: ignore[no-untyped-call]
        return tensor.to(self.device)

    def linear(self, name: str, dtype: torch.dtype) -> Linear:
        weight = self.get(f"{name}.weight")
        if weight.dtype != FP8:
            return Linear(weight.to(dtype))
        return Linear(weight, self.get(f"{name}.weight_scale").float().reshape(-1))


def _experts(t: _Tensors, prefix: str, count: int, dtype: torch.dtype) -> Experts:
    if t.has(f"{prefix}.gate_up_proj"):  # fused, unquantized
        return Experts(
            Linear(t.get(f"{prefix}.gate_up_proj").to(dtype)), Linear(t.get(f"{prefix}.down_proj").to(dtype))
        )
    per = [[t.linear(f"{prefix}.{e}.{p}", dtype) for p in ("gate_proj", "up_proj", "down_proj")] for e in range(count)]

    def scale(lin: Linear) -> torch.Tensor:
        if lin.scale is None:
            raise InfillError(f"{prefix}: experts split per expert but not all in FP8")
        return lin.scale

    scales = [[scale(lin) for lin in row] for row in per]
    gate_up = torch.stack([torch.cat([g.weight, u.weight]) for g, u, _ in per])
    gate_up_scale = torch.stack([torch.cat([g, u]) for g, u, _ in scales])
    down = torch.stack([d.weight for _, _, d in per])
    return Experts(Linear(gate_up, gate_up_scale), Linear(down, torch.stack([d for _, _, d in scales])))


def load_compressed_tensors(
    directory: str | Path, config: DiffusionGemmaConfig, device: torch.device, dtype: torch.dtype
) -> EngineWeights:
    """EngineWeights from a compressed-tensors FP8 checkpoint, read tensor by tensor onto `device`; tensors left
    unquantized are cast to `dtype`."""
    from infill.engine.model import rope_of_config, text_config

    text = text_config(config)
    t = _Tensors(Path(directory), device)
    kinds = tuple(text.layer_types[: text.num_hidden_layers])

    def layer(i: int, kind: str, scalar_prefix: str, shared: Layer | None) -> Layer:
        p = f"model.decoder.layers.{i}"
        scalar = (
            t.get(f"{scalar_prefix}.layers.{i}.layer_scalar").to(dtype)
            if t.has(f"{scalar_prefix}.layers.{i}.layer_scalar")
            else t.get(f"{p}.layer_scalar").to(dtype)
        )
        if shared is not None:
            return replace(shared, scalar=scalar)
        q = t.linear(f"{p}.self_attn.q_proj", dtype)
        k = t.linear(f"{p}.self_attn.k_proj", dtype)
        head_dim = t.get(f"{p}.self_attn.q_norm.weight").numel()
        return Layer(
            kind=kind,
            heads=q.out_features // head_dim,
            kv_heads=k.out_features // head_dim,
            head_dim=head_dim,
            norms=Norms(
                *(
                    t.get(f"{p}.{n}.weight").to(dtype)
                    for n in (
                        "input_layernorm",
                        "post_attention_layernorm",
                        "pre_feedforward_layernorm",
                        "post_feedforward_layernorm_1",
                        "pre_feedforward_layernorm_2",
                        "post_feedforward_layernorm_2",
                        "post_feedforward_layernorm",
                    )
                )
            ),
            q=q,
            k=k,
            v=t.linear(f"{p}.self_attn.v_proj", dtype) if t.has(f"{p}.self_attn.v_proj.weight") else None,
            o=t.linear(f"{p}.self_attn.o_proj", dtype),
            q_norm=t.get(f"{p}.self_attn.q_norm.weight").to(dtype),
            k_norm=t.get(f"{p}.self_attn.k_norm.weight").to(dtype),
            gate=t.linear(f"{p}.mlp.gate_proj", dtype),
            up=t.linear(f"{p}.mlp.up_proj", dtype),
            down=t.linear(f"{p}.mlp.down_proj", dtype),
            router=t.get(f"{p}.router.proj.weight").to(dtype),
            router_scale=t.get(f"{p}.router.scale").to(dtype),
            expert_scale=t.get(f"{p}.router.per_expert_scale").to(dtype),
            experts=_experts(t, f"{p}.experts", text.num_experts, dtype),
            scalar=scalar,
        )

    decoder = tuple(layer(i, kind, "model.decoder", None) for i, kind in enumerate(kinds))
    encoder = tuple(layer(i, kind, "model.encoder.language_model", decoder[i]) for i, kind in enumerate(kinds))
    embed = t.get("model.decoder.embed_tokens.weight").to(dtype)
    sc = "model.decoder.self_conditioning"
    scale = torch.tensor(text.hidden_size**0.5).to(dtype).to(device)
    log.info("loaded compressed-tensors FP8 weights from %s", directory)
    return EngineWeights(
        embed=embed,
        encoder_embed=embed,
        embed_scale=scale,
        head=t.get("lm_head.weight").to(dtype) if t.has("lm_head.weight") else embed,
        self_conditioning=(
            t.get(f"{sc}.pre_norm.weight").to(dtype),
            t.linear(f"{sc}.gate_proj", dtype),
            t.linear(f"{sc}.up_proj", dtype),
            t.linear(f"{sc}.down_proj", dtype),
        ),
        final_norm=t.get("model.decoder.norm.weight").to(dtype),
        encoder=encoder,
        decoder=decoder,
        rope={kind: Rope(table.inv_freq.to(device), table.scaling) for kind, table in rope_of_config(config).items()},
        eps=text.rms_norm_eps,
        top_k=text.top_k_experts,
        sliding_window=text.sliding_window,
        softcap=text.final_logit_softcapping,
        activation=text.hidden_activation,
        weight_format="fp8 (compressed-tensors FP8-dynamic checkpoint)",
    )
