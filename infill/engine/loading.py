"""Load a DiffusionGemma checkpoint (local directory or hub id) or build one with dummy weights, into the weights
the engine's forward reads (weights.py): the safetensors read straight into them (checkpoint.py), a bf16
checkpoint quantized to FP8 as it is read when asked, a compressed-tensors FP8 checkpoint as stored. transformers
supplies the config, tokenizer and generation config; no transformers model is built.

Safetensors only, never `trust_remote_code`. One clear `InfillError` names what is wrong with a missing, corrupt
or non-DiffusionGemma checkpoint.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, cast

from infill.device import resolve_device_dtype
from infill.device import torch_dtype as to_torch_dtype
from infill.engine.config import LOAD_FORMATS, QUANTIZATIONS, LoadFormat, Quantization
from infill.engine.weights import EngineWeights
from infill.types import InfillError

if TYPE_CHECKING:
    from transformers import (
        DiffusionGemmaConfig,
        DiffusionGemmaForBlockDiffusion,
        DiffusionGemmaGenerationConfig,
        PreTrainedTokenizerBase,
    )

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadedModel:
    tokenizer: PreTrainedTokenizerBase
    model_id: str
    revision: str
    device: str
    dtype: str  # activations and KV (the weights' own format: weights.weight_format)
    config: DiffusionGemmaConfig
    generation_config: DiffusionGemmaGenerationConfig  # eos/pad/bos filled in
    weights: EngineWeights
    checkpoint: Path | None = None  # the local directory the weights were read from (None: dummy weights)

    @cached_property
    def model(self) -> DiffusionGemmaForBlockDiffusion:
        """transformers' own model over the same checkpoint, in eval mode, loaded on first use: a second copy of
        the weights, for tests and reference comparisons only (the engine never reads it)."""
        from transformers import DiffusionGemmaForBlockDiffusion

        if self.checkpoint is None:
            raise InfillError("dummy weights have no transformers model to compare against")
        dtype = to_torch_dtype(self.dtype.removesuffix("(dummy weights)"))
        net = DiffusionGemmaForBlockDiffusion.from_pretrained(self.checkpoint, dtype=dtype).to(self.device)
        net.eval()
        return cast("DiffusionGemmaForBlockDiffusion", net)


def _read_config(model: str, revision: str | None) -> DiffusionGemmaConfig:
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(model, revision=revision, trust_remote_code=False)
    except (OSError, ValueError, json.JSONDecodeError) as exc:
        raise InfillError(f"cannot read a model config from {model!r}: {exc}") from exc
    if getattr(config, "model_type", None) != "diffusion_gemma":
        raise InfillError(
            f"{model!r} is a {getattr(config, 'model_type', 'unknown')!r} checkpoint, not DiffusionGemma "
            "(model_type 'diffusion_gemma')"
        )
    return cast("DiffusionGemmaConfig", config)


def _check_local_weights(path: Path) -> None:
    if not any(path.glob("*.safetensors")):
        if any(path.glob("*.bin")) or any(path.glob("*.pt")):
            raise InfillError(f"{path} has only pickle weights (*.bin/*.pt); infill-ls loads safetensors only")
        raise InfillError(f"{path} has no *.safetensors weights")


def load_diffusion_model(
    model: str,
    *,
    revision: str | None = None,
    device: str | None = None,
    dtype: str | None = None,
    load_format: LoadFormat = "auto",
    quantization: Quantization = "none",
) -> LoadedModel:
    """Load tokenizer, generation config and the engine's weights. `load_format="dummy"` builds the architecture
    from the config with random weights (like vLLM's `--load-format dummy`): real shapes and costs, meaningless
    text. `quantization="fp8"`: projections and experts in FP8, quantized as they are read; a compressed-tensors FP8
    checkpoint is FP8 whatever this says. Each weight is built once, on the device (checkpoint.py)."""
    import torch
    from transformers import AutoTokenizer

    from infill.engine.checkpoint import RandomWeights, SafetensorsFiles, TensorSource, read_weights
    from infill.engine.fp8 import compressed_fp8_scheme
    from infill.engine.model import architecture_shapes, checkpoint_revision, text_config

    if load_format not in LOAD_FORMATS:
        raise InfillError(f"unknown load format {load_format!r} ({' or '.join(LOAD_FORMATS)})")
    if quantization not in QUANTIZATIONS:
        raise InfillError(f"unknown quantization {quantization!r} ({' or '.join(QUANTIZATIONS)})")
    # DiffusionGemma on a CPU is the test and development path, checked in float32: bf16 only when asked for.
    device, dtype_name = resolve_device_dtype(
        device, dtype, supported=("float32", "bfloat16", "float16"), bf16_on_cpu=False
    )
    torch_dtype = to_torch_dtype(dtype_name)
    config = _read_config(model, revision)
    prequantized = compressed_fp8_scheme(config) is not None
    checkpoint: Path | None = None
    source: TensorSource
    if load_format == "dummy":
        # the architecture at random; a compressed-tensors config is quantized as its checkpoint is
        quantize = quantization == "fp8" or prequantized
        source = RandomWeights(
            architecture_shapes(config), torch.device(device), torch_dtype, text_config(config).initializer_range
        )
    else:
        quantize = quantization == "fp8" and not prequantized
        checkpoint = _local_snapshot(model, revision)
        source = SafetensorsFiles(checkpoint)
    weights = read_weights(source, config, torch.device(device), torch_dtype, quantize)
    if device.startswith("cuda"):
        # cuDNN's attention builds an execution plan for every new key length (0.2-2.5 s a keystroke at the full
        # size on an H200, benchmarks/results/engine-gpu-full-size-2219725-h200.json); PyTorch's flash and
        # memory-efficient kernels need none. Process-wide: the engine is this process's CUDA user.
        torch.backends.cuda.enable_cudnn_sdp(False)
    try:
        tokenizer = AutoTokenizer.from_pretrained(model, revision=revision, trust_remote_code=False)
    except (OSError, ValueError, json.JSONDecodeError) as exc:
        raise InfillError(f"cannot load the tokenizer of {model!r}: {exc}") from exc
    generation_config = _fill_special_ids(_generation_config(model, revision), config, tokenizer)
    rev = revision or checkpoint_revision(config) or "local"
    dtype_name = str(torch_dtype).removeprefix("torch.") + ("(dummy weights)" if load_format == "dummy" else "")
    log.info("loaded %s on %s: activations %s, weights %s", model, device, dtype_name, weights.weight_format)
    return LoadedModel(tokenizer, model, str(rev), device, dtype_name, config, generation_config, weights, checkpoint)


def _local_snapshot(model: str, revision: str | None) -> Path:
    """A local directory of the checkpoint's files: `model` itself, or the hub's cached snapshot of it."""
    local = Path(model)
    if local.is_dir():
        _check_local_weights(local)
        return local
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(model, revision=revision, allow_patterns=["*.json", "*.safetensors"]))
    except Exception as exc:  # noqa: BLE001 - every failure here means: no such checkpoint reachable
        raise InfillError(f"cannot fetch the checkpoint {model!r}: {exc}") from exc


def _generation_config(model: str, revision: str | None) -> DiffusionGemmaGenerationConfig | None:
    """The checkpoint's generation_config.json (its sampler settings), or None when it has none, so transformers'
    defaults apply."""
    from transformers import DiffusionGemmaGenerationConfig

    try:
        found = DiffusionGemmaGenerationConfig.from_pretrained(model, revision=revision)
        return cast("DiffusionGemmaGenerationConfig", found)
    except OSError:
        log.info("%s has no generation_config.json: transformers' sampler defaults apply", model)
        return None
    except (ValueError, TypeError, AttributeError) as exc:
        raise InfillError(f"cannot read the generation config of {model!r}: {exc}") from exc


def _fill_special_ids(
    gen: DiffusionGemmaGenerationConfig | None, config: DiffusionGemmaConfig, tokenizer: PreTrainedTokenizerBase
) -> DiffusionGemmaGenerationConfig:
    """A fresh model's generation config has no eos/pad: without them there is no EOS handling."""
    if gen is None:
        from transformers import DiffusionGemmaGenerationConfig

        gen = DiffusionGemmaGenerationConfig()
    for name in ("eos_token_id", "pad_token_id", "bos_token_id"):
        if getattr(gen, name, None) is None:
            setattr(
                gen,
                name,
                getattr(tokenizer, name, None)
                if getattr(tokenizer, name, None) is not None
                else getattr(config.text_config, name, None),
            )
    return gen
