"""Tiny random-weight DiffusionGemma checkpoints for tests, benchmarks and `--load-format dummy`.

The real checkpoint (~50 GB) and its Gemma-4 tokenizer cannot be downloaded here, so tests build the real
`DiffusionGemmaForBlockDiffusion` class from small configs and a small byte-level BPE tokenizer made in code,
saved as an ordinary checkpoint directory: the same loading path then serves the real checkpoint.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from transformers import (
        DiffusionGemmaConfig,
        DiffusionGemmaForBlockDiffusion,
        DiffusionGemmaTextConfig,
        Gemma4VisionConfig,
        PreTrainedTokenizerFast,
    )

# Special ids follow Gemma 4's layout (pad 0, eos 1, bos 2) so code paths are the same as for the real tokenizer.
PAD, EOS, BOS = "<pad>", "<eos>", "<bos>"

_CORPUS = '''
def add(a, b):
    """Return the sum of a and b."""
    return a + b

class Point:
    def __init__(self, x, y):
        self.x = x
        self.y = y

    def norm(self):
        return (self.x ** 2 + self.y ** 2) ** 0.5

for i in range(10):
    if i % 2 == 0:
        print(i)

function greet(name) { return `Hello, ${name}!`; }
const items = [1, 2, 3].map((x) => x * 2);
{"name": "infill", "version": "0.1.0", "tags": ["lsp", "diffusion"]}
The Tenant shall pay the Rent on the first day of each month.
This Agreement is made between the Landlord and the Tenant.
'''


def text_config_kwargs(
    vocab_size: int = 512, hidden_size: int = 64, layers: int = 4, sliding_window: int = 64, max_positions: int = 16384
) -> dict[str, Any]:
    """Keyword arguments for a small `DiffusionGemmaTextConfig` with the real layer mix (sliding + full, MoE)."""
    layer_types = ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(layers)]
    return {
        "vocab_size": vocab_size,
        "hidden_size": hidden_size,
        "intermediate_size": 2 * hidden_size,
        "num_hidden_layers": layers,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 32,
        "global_head_dim": 32,
        "sliding_window": sliding_window,
        "max_position_embeddings": max_positions,
        "num_experts": 4,
        "top_k_experts": 2,
        "moe_intermediate_size": hidden_size // 2,
        "layer_types": layer_types,
        "pad_token_id": 0,
        "eos_token_id": 1,
        "bos_token_id": 2,
    }


def tiny_config(canvas_length: int = 64, **text_kwargs: Any) -> DiffusionGemmaConfig:
    """A tiny `DiffusionGemmaConfig`. A minimal vision config is passed explicitly: `vision_config=None` silently
    builds a 167M-parameter vision tower."""
    from transformers import DiffusionGemmaConfig, DiffusionGemmaTextConfig

    text = DiffusionGemmaTextConfig(**text_config_kwargs(**text_kwargs))
    return DiffusionGemmaConfig(text_config=text, vision_config=minimal_vision_config(), canvas_length=canvas_length)


def minimal_vision_config() -> Gemma4VisionConfig:
    """The smallest vision tower a config accepts (the engine is text only)."""
    from transformers import Gemma4VisionConfig

    return Gemma4VisionConfig(
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=1,
        num_key_value_heads=1,
        head_dim=16,
    )


def tiny_tokenizer(vocab_size: int = 512) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer with Gemma's special-token ids, trained in code on a small fixed corpus
    (deterministic), wrapped as a `PreTrainedTokenizerFast`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[PAD, EOS, BOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([_CORPUS] * 4, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=PAD, eos_token=EOS, bos_token=BOS)


def make_confident(model: DiffusionGemmaForBlockDiffusion, winners: tuple[int, int], gain: float = 1e4) -> None:
    """Edit `model`'s weights in place so that every canvas slot predicts `winners[0]` or `winners[1]` with
    near-certainty (entropy ~1e-12 at the default temperatures), so that stable+confident stopping can fire.

    The decoder's final norm keeps one hidden dimension k, scaled by `gain`; in the tied embedding, column k is
    zero except +1 for winners[0] and -1 for winners[1]. The logits are then ±gain·x_k/rms(x) for the two winners
    and 0 elsewhere, softcapped to ±30: the sign of x_k picks the winner per slot, so the canvas still depends on
    the prompt and on the previous step, and stability takes real steps to reach."""
    import torch

    k = 0
    with torch.no_grad():
        norm = model.model.decoder.norm.weight
        norm.zero_()
        norm[k] = gain
        table = model.model.decoder.embed_tokens.weight  # tied with lm_head
        table[:, k] = 0.0
        table[winners[0], k] = 1.0
        table[winners[1], k] = -1.0


def write_tiny_checkpoint(
    directory: str | Path,
    seed: int = 0,
    canvas_length: int = 64,
    confident: tuple[int, int] | None = None,
    stutter: int | None = None,
    **text_kwargs: Any,
) -> Path:
    """Write a complete random-weight checkpoint (config, safetensors, tokenizer, generation config) to `directory`.
    `confident`: two token ids the model then predicts with near-certainty (`make_confident`); `stutter`: one token
    id every canvas slot predicts (`make_stutter`)."""
    import torch
    from transformers import DiffusionGemmaForBlockDiffusion

    directory = Path(directory)
    config = tiny_config(canvas_length=canvas_length, **text_kwargs)
    torch.manual_seed(seed)
    model = DiffusionGemmaForBlockDiffusion(config)
    if confident is not None:
        make_confident(model, confident)
    if stutter is not None:
        make_stutter(model, stutter)
    model.generation_config.eos_token_id = 1
    model.generation_config.pad_token_id = 0
    model.generation_config.bos_token_id = 2
    model.save_pretrained(directory, safe_serialization=True)
    text = cast("DiffusionGemmaTextConfig", config.text_config)  # a DiffusionGemmaConfig always builds one
    tiny_tokenizer(text.vocab_size).save_pretrained(directory)
    return directory


def make_stutter(model: DiffusionGemmaForBlockDiffusion, token: int, gain: float = 10.0) -> None:
    """Edit `model`'s weights in place so that every canvas slot predicts `token`, whatever the prompt: each fill
    repeats one token, a stutter the watchdog rejects (the fallback's tests).

    Each decoder layer's output norms are zeroed, so no layer adds to the residual stream, and the
    self-conditioning adds nothing: a slot's final hidden state is its input token's embedding, normalised. In the
    tied embedding, hidden dimension k is 1 for `token` and 0.1 for every other token, so it is positive whatever
    the input; the final norm keeps only dimension k, scaled by `gain`. The logits are gain·x_k/rms(x) times 1
    for `token` and 0.1 for the rest: after the softcap (30) `token` leads every other by about 20."""
    import torch

    k = 0
    with torch.no_grad():
        decoder = model.model.decoder
        for layer in decoder.layers:
            layer.post_attention_layernorm.weight.zero_()
            layer.post_feedforward_layernorm.weight.zero_()
        decoder.self_conditioning.down_proj.weight.zero_()
        norm = decoder.norm.weight
        norm.zero_()
        norm[k] = gain
        table = decoder.embed_tokens.weight  # tied with lm_head
        table[:, k] = 0.1
        table[token, k] = 1.0


def write_compressed_fp8_checkpoint(source: str | Path, directory: str | Path) -> Path:
    """Rewrite the checkpoint at `source` in the compressed-tensors FP8-dynamic layout the published DiffusionGemma
    FP8 checkpoints use (what LLM Compressor writes, what vLLM and infill/engine/fp8.py read): each Linear of the
    decoder's attention and dense MLP as an E4M3 `weight` with a float32 `weight_scale` (out, 1), one per output
    channel; the fused experts split per expert into gate/up/down Linears quantized the same way; embeddings,
    norms, routers and the self-conditioning MLP as they were; config.json's `quantization_config` naming the
    scheme. Other files are copied."""
    import json
    import shutil

    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file

    from infill.engine.fp8 import quantize_rows_of

    source, directory = Path(source), Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    out: dict[str, torch.Tensor] = {}
    quantized = (
        "self_attn.q_proj",
        "self_attn.k_proj",
        "self_attn.v_proj",
        "self_attn.o_proj",
        "mlp.gate_proj",
        "mlp.up_proj",
        "mlp.down_proj",
    )

    def put(name: str, weight: torch.Tensor) -> None:
        q, scale = quantize_rows_of(weight)
        out[f"{name}.weight"], out[f"{name}.weight_scale"] = q.contiguous(), scale[:, None].contiguous()

    for file in sorted(source.glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as f:
            for key in f.keys():
                tensor = f.get_tensor(key)
                stem = key.removesuffix(".weight")
                if key.startswith("model.decoder.layers.") and stem.endswith(quantized):
                    put(stem, tensor)
                elif key.endswith("experts.gate_up_proj"):
                    prefix, half = key.removesuffix(".gate_up_proj"), tensor.shape[1] // 2
                    for e in range(tensor.shape[0]):
                        put(f"{prefix}.{e}.gate_proj", tensor[e, :half])
                        put(f"{prefix}.{e}.up_proj", tensor[e, half:])
                elif key.endswith("experts.down_proj"):
                    for e in range(tensor.shape[0]):
                        put(f"{key.removesuffix('.down_proj')}.{e}.down_proj", tensor[e])
                else:
                    out[key] = tensor.contiguous()
    save_file(out, str(directory / "model.safetensors"), metadata={"format": "pt"})
    for file in source.iterdir():
        if file.is_file() and file.suffix != ".safetensors" and file.name != "model.safetensors.index.json":
            shutil.copy(file, directory / file.name)
    config = json.loads((directory / "config.json").read_text())
    fp8 = {"num_bits": 8, "type": "float", "symmetric": True}
    config["quantization_config"] = {
        "quant_method": "compressed-tensors",
        "format": "float-quantized",
        "quantization_status": "compressed",
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "format": "float-quantized",
                "weights": {**fp8, "strategy": "channel", "dynamic": False},
                "input_activations": {**fp8, "strategy": "token", "dynamic": True},
            }
        },
        "ignore": ["lm_head", "re:.*embed_tokens.*", "re:.*router.*", "re:.*vision.*", "re:.*self_conditioning.*"],
    }
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    return directory
