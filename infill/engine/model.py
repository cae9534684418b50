"""The one module that reaches into transformers' DiffusionGemma internals: it takes the loaded model's own tensors
out of its modules (encoder and decoder layers, embeddings, rotary tables, self-conditioning) into the engine's
plain structures (weights.py), reads the limits the engine needs from its config, and builds the architecture with
random weights (`--load-format dummy`). A transformers upgrade that moves an internal is fixed here alone. Nothing
is copied: the engine's forward reads these very tensors.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, cast

import torch

from infill.engine.weights import FULL, SLIDING, EngineWeights, Experts, Layer, Linear, Norms, Rope
from infill.types import InfillError

if TYPE_CHECKING:
    from transformers import DiffusionGemmaConfig, DiffusionGemmaForBlockDiffusion, DiffusionGemmaTextConfig
    from transformers.models.diffusion_gemma.modeling_diffusion_gemma import (
        DiffusionGemmaDecoderTextLayer,
        DiffusionGemmaEncoderTextLayer,
        DiffusionGemmaTextRotaryEmbedding,
    )

    TextLayer = DiffusionGemmaEncoderTextLayer | DiffusionGemmaDecoderTextLayer


class TextConfig(Protocol):
    """What the engine reads of a `DiffusionGemmaTextConfig` (transformers types these fields as optional; a
    DiffusionGemmaConfig always fills them)."""

    num_hidden_layers: int
    layer_types: list[str]
    hidden_size: int
    num_experts: int
    top_k_experts: int
    rms_norm_eps: float
    sliding_window: int
    final_logit_softcapping: float | None
    hidden_activation: str
    max_position_embeddings: int


def text_config(config: DiffusionGemmaConfig) -> TextConfig:
    return cast("TextConfig", config.text_config)


@dataclass(frozen=True)
class ModelLimits:
    max_positions: int
    canvas_length: int


def model_limits(config: DiffusionGemmaConfig) -> ModelLimits:
    return ModelLimits(
        max_positions=text_config(config).max_position_embeddings, canvas_length=cast(int, config.canvas_length)
    )


def random_model(config: DiffusionGemmaConfig, dtype: torch.dtype) -> DiffusionGemmaForBlockDiffusion:
    """The architecture of `config` with random weights, in `dtype`, on torch's current default device (transformers'
    own constructor from a config, which also picks the attention implementation)."""
    from transformers import DiffusionGemmaForBlockDiffusion

    # transformers leaves `_from_config` unannotated
    model = DiffusionGemmaForBlockDiffusion._from_config(config, dtype=dtype)  # type: ignore[no-untyped-call]
    return cast("DiffusionGemmaForBlockDiffusion", model)


def checkpoint_revision(config: DiffusionGemmaConfig) -> str | None:
    """The hub commit a config was read from (None: a local directory, or not recorded)."""
    revision = getattr(config, "_commit_hash", None)
    return str(revision) if revision else None


def _linear(module: torch.nn.Linear) -> Linear:
    if getattr(module, "bias", None) is not None:
        raise InfillError("this DiffusionGemma checkpoint has attention or MLP biases, which the engine does not read")
    return Linear(module.weight.detach())


def _layer(module: TextLayer, kind: str) -> Layer:
    attn = module.self_attn
    heads = attn.q_proj.out_features // attn.head_dim
    kv_heads = attn.k_proj.out_features // attn.head_dim
    return Layer(
        kind=kind,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=attn.head_dim,
        norms=Norms(
            input=module.input_layernorm.weight.detach(),
            post_attention=module.post_attention_layernorm.weight.detach(),
            pre_feedforward=module.pre_feedforward_layernorm.weight.detach(),
            post_feedforward_1=module.post_feedforward_layernorm_1.weight.detach(),
            pre_feedforward_2=module.pre_feedforward_layernorm_2.weight.detach(),
            post_feedforward_2=module.post_feedforward_layernorm_2.weight.detach(),
            post_feedforward=module.post_feedforward_layernorm.weight.detach(),
        ),
        q=_linear(attn.q_proj),
        k=_linear(attn.k_proj),
        v=_linear(attn.v_proj) if attn.v_proj is not None else None,
        o=_linear(attn.o_proj),
        q_norm=attn.q_norm.weight.detach(),
        k_norm=attn.k_norm.weight.detach(),
        gate=_linear(module.mlp.gate_proj),
        up=_linear(module.mlp.up_proj),
        down=_linear(module.mlp.down_proj),
        router=module.router.proj.weight.detach(),
        router_scale=module.router.scale.detach(),
        expert_scale=module.router.per_expert_scale.detach(),
        experts=Experts(Linear(module.experts.gate_up_proj.detach()), Linear(module.experts.down_proj.detach())),
        scalar=module.layer_scalar.detach(),
    )


def _rope(rotary: DiffusionGemmaTextRotaryEmbedding, kinds: Iterable[str]) -> dict[str, Rope]:
    return {
        kind: Rope(
            getattr(rotary, f"{kind}_inv_freq").detach().float(), float(getattr(rotary, f"{kind}_attention_scaling"))
        )
        for kind in kinds
    }


def rope_of_config(config: DiffusionGemmaConfig) -> dict[str, Rope]:
    """The rotary tables transformers builds for a DiffusionGemma config (for checkpoints read without it)."""
    from transformers.models.diffusion_gemma.modeling_diffusion_gemma import DiffusionGemmaTextRotaryEmbedding

    text = text_config(config)
    kinds = set(text.layer_types[: text.num_hidden_layers])
    rotary = DiffusionGemmaTextRotaryEmbedding(cast("DiffusionGemmaTextConfig", config.text_config), device="cpu")
    return _rope(rotary, kinds)


def engine_weights(model: DiffusionGemmaForBlockDiffusion) -> EngineWeights:
    """The weights of a loaded `DiffusionGemmaForBlockDiffusion`, as the engine's forward reads them."""
    text = text_config(model.config)
    if getattr(text, "use_bidirectional_attention", None) == "all":
        raise InfillError("a DiffusionGemma text stack with a bidirectional encoder is not supported")
    encoder = model.model.encoder.language_model
    decoder = model.model.decoder
    kinds = tuple(text.layer_types[: text.num_hidden_layers])
    if set(kinds) - {SLIDING, FULL}:
        raise InfillError(f"unknown attention layer types {sorted(set(kinds) - {SLIDING, FULL})}")
    sc = decoder.self_conditioning
    dtype = decoder.embed_tokens.weight.dtype
    device = decoder.embed_tokens.weight.device
    rope = {k: Rope(t.inv_freq.to(device), t.scaling) for k, t in _rope(decoder.rotary_emb, set(kinds)).items()}
    for kind, table in _rope(encoder.rotary_emb, set(kinds)).items():
        if not torch.equal(table.inv_freq.to(device), rope[kind].inv_freq):
            raise InfillError("the encoder's and decoder's rotary tables differ")
    return EngineWeights(
        embed=decoder.embed_tokens.weight.detach(),
        encoder_embed=encoder.embed_tokens.weight.detach(),
        embed_scale=decoder.embed_tokens.embed_scale.to(dtype),
        head=model.lm_head.weight.detach(),
        self_conditioning=(
            sc.pre_norm.weight.detach(),
            _linear(sc.gate_proj),
            _linear(sc.up_proj),
            _linear(sc.down_proj),
        ),
        final_norm=decoder.norm.weight.detach(),
        encoder=tuple(_layer(layer, kind) for layer, kind in zip(encoder.layers, kinds)),
        decoder=tuple(_layer(layer, kind) for layer, kind in zip(decoder.layers, kinds)),
        rope=rope,
        eps=text.rms_norm_eps,
        top_k=text.top_k_experts,
        sliding_window=text.sliding_window,
        softcap=text.final_logit_softcapping,
        activation=text.hidden_activation,
        weight_format=str(dtype).removeprefix("torch."),
    )
