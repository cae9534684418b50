"""The full-size DiffusionGemma architecture (google/diffusiongemma-26B-A4B-it: Gemma 4 26B-A4B's text stack, 30
layers, 128 experts top-8, 262,144-token vocabulary), as configs, for benchmarks and tests that need the real
dimensions without the ~50 GB checkpoint: `--load-format dummy` builds it with random weights, and a few layers
keep it small enough for a CPU.

The checkpoint's config.json cannot be downloaded here; these values are Gemma 4 26B-A4B's published text config.
Two checks tie them to what was measured elsewhere: 1.51 GiB of bf16 weights per layer (vLLM measured 1.53 GiB
per layer with the real config, /work/shared/notes/vllm-cpu.md) and 25 sliding layers of 8 KV heads x 256 plus 5
full layers of 2 KV heads x 512 (the ~210 KiB per prompt token issue 23 quotes, counting the full layers' shared
K=V once; the cache stores both, so 220 KiB).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from transformers import DiffusionGemmaConfig, DiffusionGemmaForBlockDiffusion, DiffusionGemmaTextConfig

FULL_SIZE_TEXT: dict[str, Any] = {
    "vocab_size": 262_144,
    "hidden_size": 2816,
    "intermediate_size": 2112,
    "num_hidden_layers": 30,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "num_global_key_value_heads": 2,
    "head_dim": 256,
    "global_head_dim": 512,
    "attention_k_eq_v": True,
    "sliding_window": 1024,
    "max_position_embeddings": 262_144,
    "num_experts": 128,
    "top_k_experts": 8,
    "moe_intermediate_size": 704,
    "final_logit_softcapping": 30.0,
    "pad_token_id": 0,
    "eos_token_id": 1,
    "bos_token_id": 2,
}
FULL_SIZE_CANVAS = 256
# transformers' DiffusionGemma generation defaults, written out as a checkpoint would carry them (vLLM reads them)
FULL_SIZE_GENERATION: dict[str, Any] = {
    "max_denoising_steps": 48,
    "t_min": 0.4,
    "t_max": 0.8,
    "stability_threshold": 1,
    "confidence_threshold": 0.005,
    "sampler_config": {"_cls_name": "EntropyBoundSamplerConfig", "entropy_bound": 0.1},
    "pad_token_id": 0,
    "eos_token_id": 1,
    "bos_token_id": 2,
}


def full_size_config(layers: int | None = None) -> DiffusionGemmaConfig:
    """The 26B-A4B `DiffusionGemmaConfig`; `layers` keeps only the first N layers of the real 5:1 sliding/full
    pattern (the last is always full attention, as transformers forces)."""
    from transformers import DiffusionGemmaConfig, DiffusionGemmaTextConfig

    from infill.testing.tiny_checkpoint import minimal_vision_config

    text = dict(FULL_SIZE_TEXT)
    if layers is not None:
        pattern = ["sliding_attention" if (i + 1) % 6 else "full_attention" for i in range(layers)]
        pattern[-1] = "full_attention"
        text.update(num_hidden_layers=layers, layer_types=pattern)
    return DiffusionGemmaConfig(
        text_config=DiffusionGemmaTextConfig(**text),
        vision_config=minimal_vision_config(),
        canvas_length=FULL_SIZE_CANVAS,
    )


def write_full_size_config(directory: str | Path, layers: int | None = None) -> Path:
    """A checkpoint directory without weights (config, generation config, a stand-in tokenizer) for
    `--load-format dummy`. The tokenizer is the tiny test one (Gemma 4's is not on PyPI): its ids are valid in the
    real vocabulary, so shapes and costs are real; text is meaningless anyway with random weights."""
    from infill.testing.tiny_checkpoint import tiny_tokenizer

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    full_size_config(layers).save_pretrained(directory)
    (directory / "generation_config.json").write_text(json.dumps(FULL_SIZE_GENERATION, indent=2))
    tiny_tokenizer().save_pretrained(directory)
    return directory


RANDOM_POOL = 2**26 - 5  # values drawn once for full_size_model; each weight matrix reads them from its own offset


def full_size_model(layers: int, seed: int = 0, dtype: str = "float32") -> DiffusionGemmaForBlockDiffusion:
    """The full-size architecture with `layers` layers as a `DiffusionGemmaForBlockDiffusion` in `dtype` on the
    CPU, with random weights, built without transformers' per-parameter initialisation (which also fills the
    encoder's copy of every shared weight before tying them: twice the memory and time). Every weight matrix holds
    values uniform in +-1/sqrt(fan-in): one pool of RANDOM_POOL uniform draws, read cyclically from a random offset
    of the matrix's own, so matrices, experts and rows all differ, which is what a comparison needs (drawing each of
    the 2 layers' 2.4 billion values alone took 26 s on two AVX2 cores: the CPU generator is serial). Vectors (norm
    scales, router scales) keep their constructor values."""
    import torch
    from transformers import DiffusionGemmaForBlockDiffusion
    from transformers.initialization import no_init_weights

    with no_init_weights():
        model = DiffusionGemmaForBlockDiffusion._from_config(full_size_config(layers), dtype=getattr(torch, dtype))
    model.tie_weights()
    generator = torch.Generator().manual_seed(seed)
    pool = torch.empty(RANDOM_POOL).uniform_(-1.0, 1.0, generator=generator).to(getattr(torch, dtype))
    seen: set[int] = set()
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() < 2 or param.data_ptr() in seen:
                continue
            seen.add(param.data_ptr())
            flat, filled = param.view(-1), 0
            offset = int(torch.randint(RANDOM_POOL, (1,), generator=generator))
            while filled < flat.numel():
                take = min(flat.numel() - filled, RANDOM_POOL - offset)
                flat[filled : filled + take].copy_(pool[offset : offset + take])
                filled, offset = filled + take, 0
            param.mul_(param.shape[-1] ** -0.5)
    model.eval()
    return cast("DiffusionGemmaForBlockDiffusion", model)


def kv_shapes(text: DiffusionGemmaTextConfig) -> list[tuple[int, int]]:
    """(kv heads, head dim) of each layer's cache, read from a `DiffusionGemmaTextConfig` (full-attention layers take
    their per-layer overrides): what the engine's weights (EngineWeights.kv_shapes) must agree with."""
    layers = [text.per_layer_config[i] for i in range(text.num_hidden_layers)]
    return [(layer.num_key_value_heads, layer.head_dim) for layer in layers]


def write_full_size_checkpoint(directory: str | Path, layers: int, dtype: str = "bfloat16") -> Path:
    """`write_full_size_config` plus weights: a checkpoint of the full-size architecture with `layers` layers, one
    safetensors shard per layer (and one for the rest) with an index, as transformers saves big checkpoints: the
    tensors a saved checkpoint holds (the decoder's, the encoder's layer scalars, the vision tower; not the tied
    encoder copies or LM head), each a constant (their values do not matter to what this is for: memory and
    shapes). Written a shard at a time, so writing holds one layer's weights, not the model's."""
    import torch
    from safetensors.torch import save_file

    from infill.engine.checkpoint import ENCODER, HEAD
    from infill.engine.model import architecture_shapes

    directory = write_full_size_config(directory, layers)
    shapes = architecture_shapes(full_size_config(layers))
    stored = [n for n in shapes if n != HEAD and (not n.startswith(f"{ENCODER}.") or n.endswith("layer_scalar"))]

    def shard_of(name: str) -> str:
        parts = name.split(".")
        return f"layer-{parts[3]}" if name.startswith("model.decoder.layers.") else "rest"

    weight_map: dict[str, str] = {}
    for shard in sorted({shard_of(n) for n in stored}):
        names = [n for n in stored if shard_of(n) == shard]
        tensors = {n: torch.full(shapes[n], 0.01, dtype=getattr(torch, dtype)) for n in names}
        save_file(tensors, str(directory / f"{shard}.safetensors"), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(names, f"{shard}.safetensors"))
        del tensors
    index = {"metadata": {}, "weight_map": weight_map}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index, indent=1))
    return directory
