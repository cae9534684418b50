"""int8 weights for the offline default (infill/backends/int8.py): what the layer computes, that each row of a
forward is computed alone (a fill must not depend on how its prompt was cut into forwards), and that a real Gemma 3
model keeps its predictions."""

from __future__ import annotations

import pytest
import torch

from infill.backends.int8 import DENSE_ROWS, quantize_linears
from infill.device import int8_kernels

pytestmark = pytest.mark.skipif(not int8_kernels(), reason="this torch has no CPU int8 weight kernels")


def _linear(rows: int = 96, cols: int = 64, bias: bool = False) -> torch.nn.Linear:
    torch.manual_seed(0)
    layer = torch.nn.Linear(cols, rows, bias=bias)
    layer.weight.data = (torch.randn(rows, cols) * 0.05).to(torch.bfloat16)
    if bias:
        layer.bias.data = torch.randn(rows).to(torch.bfloat16)
    return layer


@pytest.mark.parametrize("bias", [False, True])
def test_an_int8_layer_multiplies_by_its_rounded_weights(bias):
    holder = torch.nn.Sequential(_linear(bias=bias))
    original = holder[0]
    assert quantize_linears(holder) == 1 and type(holder[0]).__name__ == "Int8Linear"
    layer = holder[0]
    assert layer.weight_int8.dtype == torch.int8 and layer.scale.shape == (96,)
    x = torch.randn(5, 64).to(torch.bfloat16)
    rounded = layer.weight_int8.float() * layer.scale.float()[:, None]  # what the layer holds, dequantized
    want = x.float() @ rounded.T + (original.bias.float() if bias else 0)
    assert torch.allclose(layer(x).float(), want, rtol=2e-2, atol=2e-2)
    # rounding to int8 loses at most half a step per weight, plus the bf16 rounding of the scale (2^-8 x 127 steps)
    error = (rounded - original.weight.float()).abs().amax(dim=1)
    assert (error <= layer.scale.float() * (0.5 + 127 / 256)).all()


def test_each_row_is_computed_alone_whatever_else_is_in_the_forward():
    """With activations quantized per call (fbgemm's dynamic int8), a token's output depended on the others."""
    holder = torch.nn.Sequential(_linear(rows=4096, cols=640))
    quantize_linears(holder)
    x = torch.randn(DENSE_ROWS, 640).to(torch.bfloat16)
    together = holder(x)
    alone = torch.cat([holder(x[i:i + 1]) for i in range(DENSE_ROWS)])
    assert torch.equal(together, alone)
    assert torch.equal(holder(x[None])[0], together)  # batch dimensions are kept


def test_long_forwards_use_the_same_weights_dequantized():
    """Past DENSE_ROWS rows (a prefill) the layer multiplies by its int8 weights dequantized to bf16: the same
    numbers up to one more bf16 rounding, so a prompt's keys and values barely depend on how it was chunked."""
    holder = torch.nn.Sequential(_linear(rows=512, cols=640))
    quantize_linears(holder)
    layer = holder[0]
    x = torch.randn(DENSE_ROWS + 8, 640).to(torch.bfloat16)
    long = holder(x).float()
    short = torch.cat([holder(x[i:i + 1]) for i in range(len(x))]).float()
    assert not torch.equal(long, short)  # two kernels
    assert torch.allclose(long, short, rtol=2e-2, atol=2e-2)
    assert torch.equal(layer.dense, (layer.weight_int8.float() * layer.scale.float()[:, None]).to(torch.bfloat16))


def test_the_output_head_keeps_no_dense_copy():
    from transformers import Gemma3ForCausalLM

    model = Gemma3ForCausalLM(_tiny_config())
    quantize_linears(model)
    assert model.lm_head.dense is None and model.model.layers[0].mlp.up_proj.dense is not None


def _tiny_config():
    from transformers import Gemma3TextConfig

    return Gemma3TextConfig(vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                            num_attention_heads=2, num_key_value_heads=1, head_dim=64, sliding_window=16)


def test_a_gemma3_model_keeps_its_predictions():
    from transformers import Gemma3ForCausalLM

    torch.manual_seed(1)
    model = Gemma3ForCausalLM(_tiny_config()).to(torch.bfloat16).eval()
    ids = torch.randint(0, 512, (1, 24))
    with torch.inference_mode():
        before = model(input_ids=ids).logits.float()
        assert quantize_linears(model) == 7 * 2 + 1  # q, k, v, o, gate, up, down per layer, and the head
        after = model(input_ids=ids).logits.float()
    assert type(model.lm_head).__name__ == "Int8Linear"
    assert type(model.get_input_embeddings()).__name__ != "Int8Linear"  # lookups keep the float table
    cosine = torch.nn.functional.cosine_similarity(before, after, dim=-1)
    assert cosine.min() > 0.99, cosine.min()
    assert (before.argmax(-1) == after.argmax(-1)).float().mean() >= 0.9
