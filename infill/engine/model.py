"""The one module that reaches into transformers' DiffusionGemma internals: it takes the loaded model's own tensors
out of its modules (encoder and decoder layers, embeddings, rotary tables, self-conditioning) into the engine's
plain structures (weights.py), and reads the limits the engine needs from its config. A transformers upgrade that
moves an internal is fixed here alone. Nothing is copied: the engine's forward reads these very tensors.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from infill.engine.weights import FULL, SLIDING, EngineWeights, Experts, Layer, Linear, Norms, Rope
from infill.types import InfillError


@dataclass(frozen=True)
class ModelLimits:
    max_positions: int
    canvas_length: int


def model_limits(config) -> ModelLimits:
    return ModelLimits(max_positions=config.text_config.max_position_embeddings, canvas_length=config.canvas_length)


def kv_shapes(text) -> list[tuple[int, int]]:
    """(kv heads, head dim) of each layer's cache for a DiffusionGemma text config (full-attention layers take their
    per-layer overrides)."""
    layers = [text.per_layer_config[i] for i in range(text.num_hidden_layers)]
    return [(layer.num_key_value_heads, layer.head_dim) for layer in layers]


def _linear(module) -> Linear:
    if getattr(module, "bias", None) is not None:
        raise InfillError("this DiffusionGemma checkpoint has attention or MLP biases, which the engine does not read")
    return Linear(module.weight.detach())


def _layer(module, kind: str) -> Layer:
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
        experts=Experts(module.experts.gate_up_proj.detach(), module.experts.down_proj.detach()),
        scalar=module.layer_scalar.detach(),
    )


def _rope(rotary, kinds) -> dict[str, Rope]:
    return {
        kind: Rope(
            getattr(rotary, f"{kind}_inv_freq").detach().float(), float(getattr(rotary, f"{kind}_attention_scaling"))
        )
        for kind in kinds
    }


def rope_of_config(text) -> dict[str, Rope]:
    """The rotary tables transformers builds for a DiffusionGemma text config (for checkpoints read without it)."""
    from transformers.models.diffusion_gemma.modeling_diffusion_gemma import DiffusionGemmaTextRotaryEmbedding

    kinds = set(text.layer_types[: text.num_hidden_layers])
    return _rope(DiffusionGemmaTextRotaryEmbedding(text, device="cpu"), kinds)


def engine_weights(model) -> EngineWeights:
    """The weights of a loaded `DiffusionGemmaForBlockDiffusion`, as the engine's forward reads them."""
    text = model.config.text_config
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
