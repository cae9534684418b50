"""What the engine reads of transformers' DiffusionGemma beyond the checkpoint's tensors (checkpoint.py reads
those): the config fields it uses, the limits they set, the rotary tables transformers builds from the config, the
architecture's tensor shapes (for `--load-format dummy`) and the checkpoint's revision. A transformers upgrade that
moves one of these is fixed here alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, cast

import torch

from infill.engine.weights import Rope

if TYPE_CHECKING:
    from transformers import DiffusionGemmaConfig, DiffusionGemmaTextConfig
    from transformers.models.diffusion_gemma.modeling_diffusion_gemma import DiffusionGemmaTextRotaryEmbedding


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
    initializer_range: float


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


def architecture_shapes(config: DiffusionGemmaConfig) -> dict[str, tuple[int, ...]]:
    """The shape of every tensor of `config`'s architecture, by checkpoint name (transformers' own constructor on
    the meta device: no memory, no values), for `--load-format dummy`."""
    from transformers import DiffusionGemmaForBlockDiffusion

    with torch.device("meta"):
        model = DiffusionGemmaForBlockDiffusion._from_config(config)
    return {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}


def checkpoint_revision(config: DiffusionGemmaConfig) -> str | None:
    """The hub commit a config was read from (None: a local directory, or not recorded)."""
    revision = getattr(config, "_commit_hash", None)
    return str(revision) if revision else None


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
