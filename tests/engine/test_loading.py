"""Checkpoint loading: the real path (config, safetensors, tokenizer, generation config), dummy weights, and one
clear error for each kind of bad checkpoint."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys

import pytest
import torch
from counting_tokenizer import CountingTokenizer

from infill.backends.choose import BackendSpec, open_backend
from infill.cache.tokens import ChunkedTokenizer, split_chunks
from infill.device import resolve_device, resolve_device_dtype, resolve_dtype
from infill.engine.loading import load_diffusion_model
from infill.types import InfillError, InfillRequest


def _tensors(weights) -> dict[str, torch.Tensor]:
    """Every tensor of an EngineWeights by its path (encoder.0.q.weight ...)."""
    out: dict[str, torch.Tensor] = {}

    def walk(path: str, value) -> None:
        if isinstance(value, torch.Tensor):
            out[path] = value
        elif isinstance(value, (tuple, list)):
            for i, item in enumerate(value):
                walk(f"{path}.{i}", item)
        elif isinstance(value, dict):
            for key, item in value.items():
                walk(f"{path}.{key}", item)
        elif hasattr(value, "__dataclass_fields__"):
            for name in value.__dataclass_fields__:
                walk(f"{path}.{name}", getattr(value, name))

    walk("", weights)
    return out


def test_the_checkpoint_read_directly_equals_transformers_own_weights(tiny_checkpoint):
    """The loader reads the safetensors into the engine's weights itself: every tensor equals the one transformers
    loads from the same checkpoint (through the same name map), and no transformers model was built for it."""
    from infill.testing.hf_reference import engine_weights

    loaded = load_diffusion_model(str(tiny_checkpoint))
    assert loaded.device == "cpu" and loaded.dtype == "float32" and loaded.weights.weight_format == "float32"
    assert "model" not in loaded.__dict__  # transformers' model is built only when a test asks for it
    assert loaded.generation_config.eos_token_id == 1 and loaded.generation_config.pad_token_id == 0
    ours, theirs = _tensors(loaded.weights), _tensors(engine_weights(loaded.model))
    assert ours.keys() == theirs.keys() and len(ours) > 100
    for path, tensor in ours.items():
        assert tensor.dtype == theirs[path].dtype and torch.equal(tensor, theirs[path]), path
    assert loaded.weights.encoder[0].q.weight is loaded.weights.decoder[0].q.weight  # shared, as transformers ties


def test_dummy_load_format_builds_random_weights_of_the_same_shape(tiny_checkpoint):
    real = _tensors(load_diffusion_model(str(tiny_checkpoint)).weights)
    dummy_loaded = load_diffusion_model(str(tiny_checkpoint), load_format="dummy")
    dummy = _tensors(dummy_loaded.weights)
    assert "dummy" in dummy_loaded.dtype and dummy.keys() == real.keys()
    for path, tensor in dummy.items():
        assert tensor.shape == real[path].shape and tensor.dtype == real[path].dtype, path
        assert torch.isfinite(tensor).all(), path
    assert not torch.equal(dummy[".head"], real[".head"])
    with pytest.raises(InfillError, match="dummy weights have no transformers model"):
        dummy_loaded.model  # noqa: B018


def test_missing_checkpoint_is_one_clear_error(tmp_path):
    with pytest.raises(InfillError, match="cannot read a model config"):
        load_diffusion_model(str(tmp_path / "nowhere"))


def test_non_diffusiongemma_checkpoint_is_named(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(InfillError, match="'gpt2' checkpoint, not DiffusionGemma"):
        load_diffusion_model(str(tmp_path))


def test_pickle_only_weights_are_refused(tiny_checkpoint, tmp_path):
    target = tmp_path / "pickled"
    shutil.copytree(tiny_checkpoint, target)
    (target / "model.safetensors").rename(target / "pytorch_model.bin")
    with pytest.raises(InfillError, match="safetensors only"):
        load_diffusion_model(str(target))


def test_corrupt_weights_are_one_clear_error(tiny_checkpoint, tmp_path):
    target = tmp_path / "corrupt"
    shutil.copytree(tiny_checkpoint, target)
    (target / "model.safetensors").write_bytes(b"\x00" * 100)
    with pytest.raises(InfillError, match="cannot load DiffusionGemma weights"):
        load_diffusion_model(str(target))


def test_unknown_dtype_is_refused():
    with pytest.raises(InfillError, match="unknown dtype"):
        resolve_dtype("float8", "cpu")
    assert resolve_dtype(None, "cpu", bf16_on_cpu=False) == "float32" and resolve_dtype(None, "cuda") == "bfloat16"


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="ATEN_CPU_CAPABILITY is x86's")
def test_a_torch_held_to_avx2_computes_in_float32_as_an_avx2_laptop_does():
    """ATEN_CPU_CAPABILITY=avx2 (how benchmarks measure an AVX2-only laptop on a bigger CPU) turns native bf16 off,
    so DiffusionGemma on such a CPU computes in float32, whatever the CPU under the hold."""
    probe = (
        "from infill.device import cpu_supports_bf16, resolve_dtype; print(cpu_supports_bf16(), "
        "resolve_dtype(None, 'cpu'))"
    )
    held = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "ATEN_CPU_CAPABILITY": "avx2"},
    )
    assert held.returncode == 0, held.stderr
    assert held.stdout.split() == ["False", "float32"]


def test_both_backends_read_device_and_dtype_the_same_way(tiny_checkpoint):
    # The offline backend once refused the "bf16" alias DiffusionGemma accepted, and DiffusionGemma took a CUDA
    # device that does not exist to the weight loader; one policy now answers both.
    assert resolve_device_dtype("cpu", "bf16") == ("cpu", "bfloat16")  # the offline default's support set
    assert resolve_dtype("fp32", "cpu") == "float32"
    assert resolve_dtype("fp16", "cpu", supported=("float32", "bfloat16"), bf16_on_cpu=False) == "float32"
    with pytest.raises(InfillError, match="unknown device"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(InfillError, match="no CUDA device"):
            load_diffusion_model(str(tiny_checkpoint), device="cuda")


def test_open_backend_serves_a_configured_checkpoint(tiny_checkpoint):
    backend = open_backend(BackendSpec(model=str(tiny_checkpoint)))
    assert backend.info.kind == "diffusion" and not backend.info.is_fallback
    assert backend.infill(InfillRequest(prefix="x = ")).outcome in ("ok", "empty")


def test_chunked_tokenisation_round_trips_and_memoises(tiny_checkpoint):
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(tiny_checkpoint))
    counting = CountingTokenizer(hf)
    tokens = ChunkedTokenizer(counting)
    text = "def f(x):\n    return x\n\n\nclass A:\n    pass\n"
    assert "".join(split_chunks(text)) == text
    assert hf.decode(tokens.encode(text)) == text
    before = len(counting.texts)
    tokens.encode(text + "y = 1")
    assert counting.texts[before:] == ["y = 1"]


def test_fill_cli_prints_json(tiny_checkpoint, tmp_path):
    source = tmp_path / "demo.py"
    source.write_text("def add(a, b):\n    return a + b\n\nprint(add(1, 2))\n")
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "server.cli",
            "fill",
            str(source),
            "--at",
            "2:12",
            "--json",
            "--model",
            str(tiny_checkpoint),
            "--steps",
            "4",
            "--no-fallback",  # the tiny engine's own fill (the offline default behind it would only load)
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout.strip().splitlines()[-1])
    for key in ("middle", "latency_ms", "steps", "tokens_per_forward", "cut_short", "model"):
        assert key in out
    assert out["model"] == str(tiny_checkpoint) and 1 <= out["steps"] <= 4
    bad = subprocess.run(
        [sys.executable, "-m", "server.cli", "fill", str(source), "--at", "9:1", "--model", str(tiny_checkpoint)]
        + ["--no-fallback"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "past the end of the file" in bad.stderr


def test_fill_positions_count_lines_as_an_editor_does():
    from infill.fill_cli import offset_of

    text = 's = "a\u2028b"\x0c\ny = 2\r\nz = 3\rw'  # U+2028 and a form feed inside lines; CRLF and CR endings
    assert text[offset_of(text, 2, 1) :].startswith("y = 2")
    assert text[offset_of(text, 3, 1) :].startswith("z = 3") and text[offset_of(text, 4, 2) :] == ""
    with pytest.raises(InfillError, match="past the end"):
        offset_of(text, 5, 1)
