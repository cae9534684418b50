"""Load a DiffusionGemma checkpoint (local directory or hub id) or build one with dummy weights.

Safetensors only, never `trust_remote_code`. One clear `InfillError` names what is wrong with a missing, corrupt
or non-DiffusionGemma checkpoint.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from infill.device import resolve_device_dtype, torch_dtype as to_torch_dtype
from infill.types import InfillError

log = logging.getLogger(__name__)

LoadFormat = Literal["auto", "dummy"]


@dataclass(frozen=True)
class LoadedModel:
    model: Any  # DiffusionGemmaForBlockDiffusion, eval mode
    tokenizer: Any  # PreTrainedTokenizerBase
    model_id: str
    revision: str
    device: str
    dtype: str


def _read_config(model: str, revision: str | None):
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(model, revision=revision, trust_remote_code=False)
    except (OSError, ValueError, json.JSONDecodeError) as exc:
        raise InfillError(f"cannot read a model config from {model!r}: {exc}") from exc
    if getattr(config, "model_type", None) != "diffusion_gemma":
        raise InfillError(f"{model!r} is a {getattr(config, 'model_type', 'unknown')!r} checkpoint, not DiffusionGemma "
                          "(model_type 'diffusion_gemma')")
    return config


def _check_local_weights(path: Path) -> None:
    if not any(path.glob("*.safetensors")):
        if any(path.glob("*.bin")) or any(path.glob("*.pt")):
            raise InfillError(f"{path} has only pickle weights (*.bin/*.pt); infill-ls loads safetensors only")
        raise InfillError(f"{path} has no *.safetensors weights")


def load_diffusion_model(model: str, *, revision: str | None = None, device: str | None = None,
                         dtype: str | None = None, load_format: LoadFormat = "auto") -> LoadedModel:
    """Load model, tokenizer and generation config. `load_format="dummy"` builds the architecture from the config
    with random weights (like vLLM's `--load-format dummy`): real shapes and costs, meaningless text."""
    import torch
    from safetensors import SafetensorError
    from transformers import AutoTokenizer, DiffusionGemmaForBlockDiffusion

    # DiffusionGemma on a CPU is the test and development path, checked in float32: bf16 only when asked for.
    device, dtype_name = resolve_device_dtype(device, dtype, supported=("float32", "bfloat16", "float16"),
                                              bf16_on_cpu=False)
    torch_dtype = to_torch_dtype(dtype_name)
    config = _read_config(model, revision)
    local = Path(model)
    if load_format == "dummy":
        with torch.device(device):
            net = DiffusionGemmaForBlockDiffusion._from_config(config, dtype=torch_dtype)
        _read_generation_config(net, model, revision)
    else:
        if local.is_dir():
            _check_local_weights(local)
        try:
            net = DiffusionGemmaForBlockDiffusion.from_pretrained(
                model, revision=revision, dtype=torch_dtype, use_safetensors=True, trust_remote_code=False,
                device_map=device if device.startswith("cuda") else None)
        except (OSError, ValueError, RuntimeError, SafetensorError) as exc:
            raise InfillError(f"cannot load DiffusionGemma weights from {model!r}: {exc}") from exc
        if not device.startswith("cuda"):
            net = net.to(device)
    net.eval()
    if device.startswith("cuda"):
        # cuDNN's attention builds an execution plan for every new key length, and every keystroke makes one:
        # 0.2-2.5 s a keystroke at the full size on an H200 (benchmarks/results/engine-gpu-h200.json). PyTorch's
        # flash and memory-efficient kernels need no plan. Process-wide: the engine is this process's CUDA user.
        torch.backends.cuda.enable_cudnn_sdp(False)
    try:
        tokenizer = AutoTokenizer.from_pretrained(model, revision=revision, trust_remote_code=False)
    except (OSError, ValueError, json.JSONDecodeError) as exc:
        raise InfillError(f"cannot load the tokenizer of {model!r}: {exc}") from exc
    _fill_special_ids(net, tokenizer)
    rev = revision or getattr(config, "_commit_hash", None) or "local"
    dtype_name = str(torch_dtype).removeprefix("torch.") + ("(dummy weights)" if load_format == "dummy" else "")
    log.info("loaded %s on %s as %s", model, device, dtype_name)
    return LoadedModel(net, tokenizer, model, str(rev), device, dtype_name)


def _read_generation_config(net, model: str, revision: str | None) -> None:
    """Dummy weights skip from_pretrained, which reads generation_config.json: read it here, so the checkpoint's
    sampler settings apply as they would to its real weights. A checkpoint without one keeps the defaults."""
    from transformers.models.diffusion_gemma.generation_diffusion_gemma import DiffusionGemmaGenerationConfig

    try:
        net.generation_config = DiffusionGemmaGenerationConfig.from_pretrained(model, revision=revision)
    except OSError:
        log.info("%s has no generation_config.json: transformers' sampler defaults apply", model)
    except (ValueError, TypeError, AttributeError) as exc:
        raise InfillError(f"cannot read the generation config of {model!r}: {exc}") from exc


def _fill_special_ids(net, tokenizer) -> None:
    """A fresh model's generation config has no eos/pad: without them there is no EOS handling."""
    gen = net.generation_config
    for name in ("eos_token_id", "pad_token_id", "bos_token_id"):
        if getattr(gen, name, None) is None:
            setattr(gen, name, getattr(tokenizer, name, None) if getattr(tokenizer, name, None) is not None
                    else getattr(net.config.text_config, name, None))
