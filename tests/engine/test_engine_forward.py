"""The engine's own forward (infill/engine/forward.py) over the checkpoint's weights and its KV buffers, against
transformers' DiffusionGemma forward (the arbiter, infill/testing/hf_reference.py), on CPU:
- a prompt encoded in chunks writes the keys and values transformers' prefill holds, past the sliding window too;
- canvas logits equal transformers' for padded rows, on exact slices of the buffers and on the whole buffer under
  the masks the CUDA graphs use, with every experts kernel, on a tiny model (the full size: test_full_size.py);
- the bucketed programs (padded canvas and encode buckets, the CUDA path's arithmetic run eagerly) give the tokens
  of the unpadded eager path;
- FP8: the scaled matmuls equal their float emulation; an FP8 model's logits stay close to its dequantized
  weights'; a compressed-tensors FP8 checkpoint loads to the weights quantization at load gives.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from reference_experts import loop

from infill.engine import forward
from infill.engine.config import EngineConfig
from infill.engine.diffusion import DiffusionEngine
from infill.engine.experts import KERNELS, grouped, route
from infill.engine.fp8 import quantize_rows_of
from infill.engine.loading import load_diffusion_model
from infill.engine.ops import activation, linear, quantize_rows
from infill.engine.weights import Linear
from infill.testing.hf_reference import engine_prefill, engine_weights, hf_canvas_logits, hf_prefill
from infill.testing.tiny_checkpoint import write_compressed_fp8_checkpoint, write_tiny_checkpoint
from infill.types import InfillError, InfillRequest

WINDOW = 16
# float32, the same weights, other kernels and reduction orders: up to 2.0e-5 seen (a 1-token chunked encode on an
# AVX2 Zen 3); a wrong mask, rotary table or expert route moves these values by 1e-2 and more
TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def small_window(tmp_path_factory):
    return load_diffusion_model(
        str(write_tiny_checkpoint(tmp_path_factory.mktemp("fwd"), sliding_window=WINDOW, canvas_length=24)),
        dtype="float32",
    )


@pytest.mark.parametrize("length,chunk", [(10, 10), (40, 40), (40, 7), (40, 1)])
def test_chunked_encode_writes_transformers_prefill(small_window, length, chunk):
    model = small_window.model
    prompt = torch.randint(3, 512, (length,), generator=torch.Generator().manual_seed(length))
    kv = engine_prefill(small_window.weights, prompt, chunk)
    cache = hf_prefill(model, prompt)
    for i, layer in enumerate(cache.layers):
        assert (layer.keys[0] - kv.keys[i][:, :length]).abs().max() <= TOLERANCE
        assert (layer.values[0] - kv.values[i][:, :length]).abs().max() <= TOLERANCE


@pytest.mark.parametrize("kernel", sorted(KERNELS))
def test_padded_canvas_logits_equal_transformers_on_exact_and_whole_buffers(small_window, kernel):
    weights, model = small_window.weights, small_window.model
    gen = torch.Generator().manual_seed(1)
    prompt = torch.randint(3, 512, (40,), generator=gen)  # past the window: sliding layers see its last W - 1
    kv = engine_prefill(weights, prompt, 40)
    tokens = torch.randint(3, 512, (3, 24), generator=gen)
    valid = torch.ones(3, 24, dtype=torch.bool)
    valid[0, 10:], valid[1, 20:] = False, False
    soft = torch.randn(3, 24, weights.hidden, generator=gen)
    theirs = hf_canvas_logits(model, prompt, tokens, soft, valid)
    with torch.inference_mode():
        exact = forward.decode(weights, kv, tokens, soft, 40, valid, forward.exact_spans(weights, 40 + 72, 40), kernel)
        whole = forward.decode(weights, kv, tokens, soft, kv.length_tensor, valid, forward.whole_spans(kv), kernel)
    assert (exact - theirs)[valid].abs().max() <= TOLERANCE
    assert (whole - theirs)[valid].abs().max() <= TOLERANCE


def test_experts_kernels_agree_and_route_as_transformers(small_window):
    layer = small_window.weights.decoder[0]
    x = torch.randn(37, small_window.weights.hidden, generator=torch.Generator().manual_seed(2))
    weights, ids = route(x, layer, small_window.weights.top_k, small_window.weights.eps)
    _, their_weights, their_ids = small_window.model.model.decoder.layers[0].router(x)
    assert torch.equal(ids, their_ids) and torch.allclose(weights, their_weights)
    act = activation(small_window.weights.activation)
    reference = loop(x, ids, weights, layer.experts, act)
    for name, kernel in KERNELS.items():
        assert (kernel(x, ids, weights, layer.experts, act) - reference).abs().max() <= TOLERANCE, name


@pytest.mark.parametrize(
    "request_",
    [
        InfillRequest(prefix="def area(w, h):\n    return " * 12, suffix="\n\nprint(area(2, 3))\n", single_line=True),
        InfillRequest(prefix="class Point:\n    def __init__(self, x, y):\n", suffix="\n    def norm(self):\n"),
        InfillRequest(
            prefix="This Agreement is made between ",
            between=(" and ",),
            suffix=" on the first day.\n",
            max_middle_tokens=8,
        ),
    ],
    ids=["single-line", "multi-line", "two-gaps"],
)
def test_bucketed_programs_give_the_unpadded_tokens(small_window, request_):
    """The CUDA path's programs (canvas padded to its bucket, prompt chunks to theirs, attention over the whole
    buffers under masks) run eagerly on CPU: the same tokens, steps and scores as the eager path."""
    config = EngineConfig(max_denoising_steps=6, single_line_lengths=(6, 12, 18))
    static = DiffusionEngine(small_window, replace(config, static_programs=True))
    eager = DiffusionEngine(small_window, replace(config, static_programs=False))
    ours, theirs = static.infill(request_), eager.infill(request_)
    assert ours.outcome == theirs.outcome == "ok", (ours.error, theirs.error)
    assert ours.middles == theirs.middles and ours.steps == theirs.steps
    assert abs(ours.versions["join_score"] - theirs.versions["join_score"]) <= 1e-4
    assert static.runner._steps and static.runner._encoders  # the bucketed programs did run
    ids = torch.tensor(eager.prompt_ids(request_.prefix, request_.suffix))
    n = ids.numel()
    for a, b in zip(static.runner.kv.keys, eager.runner.kv.keys):
        assert (a[:, :n] - b[:, :n]).abs().max() <= TOLERANCE


# ---- FP8 -------------------------------------------------------------------------------------------------------


def test_fp8_linear_is_the_scaled_matmul_of_quantized_rows():
    gen = torch.Generator().manual_seed(4)
    x, w = torch.randn(5, 64, generator=gen), torch.randn(32, 64, generator=gen)
    wq, ws = quantize_rows_of(w)
    xq, xs = quantize_rows(x)
    emulated = (xq.float() * xs) @ (wq.float() * ws[:, None]).T
    assert (linear(x, Linear(wq, ws)) - emulated).abs().max() <= 1e-5
    assert (linear(x, Linear(wq, ws)) - x @ w.T).abs().max() <= 0.1 * (x @ w.T).abs().max()  # FP8 is close


def test_fp8_experts_equal_their_float_emulation(small_window):
    weights = load_diffusion_model(str(small_window.checkpoint), dtype="float32", quantization="fp8").weights
    layer = weights.decoder[0]
    x = torch.randn(11, weights.hidden, generator=torch.Generator().manual_seed(5))
    route_weights, ids = route(x, layer, weights.top_k, weights.eps)
    act = activation(weights.activation)
    ours = grouped(x, ids, route_weights, layer.experts, act)
    # emulation: activations quantized per token as the kernel does, weights dequantized, the float loop
    total = torch.zeros_like(x)
    for t in range(x.shape[0]):
        xq, xs = quantize_rows(x[t : t + 1])
        for k in range(ids.shape[1]):
            e = int(ids[t, k])
            gate_up = layer.experts.gate_up.weight[e].float() * layer.experts.gate_up.scale[e, :, None]
            gate, up = ((xq.float() * xs) @ gate_up.T).chunk(2, dim=-1)
            hq, hs = quantize_rows(act(gate) * up)
            down = layer.experts.down.weight[e].float() * layer.experts.down.scale[e, :, None]
            total[t] += route_weights[t, k] * ((hq.float() * hs) @ down.T)[0]
    assert (ours - total).abs().max() <= 1e-4


def test_an_fp8_model_equals_its_float_emulation(small_window, tmp_path, monkeypatch):
    """Weights already on the FP8 grid (fake-quantized) survive quantization exactly; the FP8 model's logits, through
    the scaled matmuls, equal the same model run in float32 with those weights dequantized and every projection's
    input quantized per token and back, as the scaled matmuls read it."""
    import infill.engine.experts as experts_module

    grid = load_diffusion_model(
        str(write_tiny_checkpoint(tmp_path / "grid", sliding_window=WINDOW, canvas_length=24)), dtype="float32"
    )
    with torch.no_grad():
        for name, param in grid.model.named_parameters():
            if param.dim() >= 2 and "proj" in name and "router" not in name and "self_conditioning" not in name:
                q, s = quantize_rows_of(param)
                param.copy_(q.float() * s[..., None])
    fp8 = engine_weights(grid.model, quantize=True)
    assert torch.equal(
        fp8.decoder[0].q.weight.float() * fp8.decoder[0].q.scale[:, None],
        grid.model.model.decoder.layers[0].self_attn.q_proj.weight,
    )
    gen = torch.Generator().manual_seed(6)
    prompt, tokens = torch.randint(3, 512, (30,), generator=gen), torch.randint(3, 512, (2, 24), generator=gen)
    valid, soft = torch.ones(2, 24, dtype=torch.bool), torch.zeros(2, 24, fp8.hidden)

    def logits():
        kv = engine_prefill(fp8, prompt, 30)
        with torch.inference_mode():
            return forward.decode(fp8, kv, tokens, soft, 30, valid, forward.exact_spans(fp8, 78, 30), "grouped")

    def fake_quantized(x):
        xq, xs = quantize_rows(x.reshape(-1, x.shape[-1]))
        return (xq.float() * xs).view(x.shape)

    def emulated_linear(x, layer):
        return (
            x @ layer.weight.T if not layer.fp8 else fake_quantized(x) @ (layer.weight.float() * layer.scale[:, None]).T
        )

    def emulated_grouped(x, linear, offsets, out_dtype):
        weight, scale = linear.weight, linear.scale
        out, start = torch.empty(x.shape[0], weight.shape[1]), 0
        for group, end in enumerate(offsets.tolist()):
            out[start:end] = fake_quantized(x[start:end]) @ (weight[group].float() * scale[group][:, None]).T
            start = end
        return out

    ours = logits()
    monkeypatch.setattr(forward, "linear", emulated_linear)
    monkeypatch.setattr(experts_module, "_grouped_matmul", emulated_grouped)
    emulated = logits()
    assert (ours - emulated).abs().max() <= 1e-4 * emulated.abs().max()


def test_a_compressed_tensors_fp8_checkpoint_loads_to_the_at_load_quantization(tiny_checkpoint, tmp_path):
    published = write_compressed_fp8_checkpoint(tiny_checkpoint, tmp_path / "fp8")
    from_checkpoint = load_diffusion_model(str(published), dtype="float32")
    at_load = load_diffusion_model(str(tiny_checkpoint), dtype="float32", quantization="fp8")
    assert from_checkpoint.weights.weight_format.startswith("fp8 (compressed")
    for a, b in zip(from_checkpoint.weights.decoder, at_load.weights.decoder):
        assert torch.equal(a.q.weight.view(torch.uint8), b.q.weight.view(torch.uint8))
        assert torch.equal(a.experts.gate_up.weight.view(torch.uint8), b.experts.gate_up.weight.view(torch.uint8))
        assert torch.equal(a.experts.down.scale, b.experts.down.scale) and torch.equal(a.scalar, b.scalar)
    request = InfillRequest(prefix="def add(a, b):\n    return ", suffix="\n", single_line=True, seed=3)
    config = EngineConfig(max_denoising_steps=4)
    one = DiffusionEngine(from_checkpoint, config).infill(request)
    two = DiffusionEngine(at_load, config).infill(request)
    assert one.outcome == two.outcome == "ok" and one.middles == two.middles
    assert one.versions["weights"].startswith("fp8")


def test_other_quantized_checkpoints_are_refused_by_name(tiny_checkpoint, tmp_path):
    import json
    import shutil

    other = tmp_path / "awq"
    shutil.copytree(tiny_checkpoint, other)
    config = json.loads((other / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "awq", "bits": 4}
    (other / "config.json").write_text(json.dumps(config))
    with pytest.raises(InfillError, match="'awq'"):
        load_diffusion_model(str(other))
    with pytest.raises(InfillError, match="unknown quantization"):
        load_diffusion_model(str(tiny_checkpoint), quantization="int4")  # type: ignore[arg-type]
