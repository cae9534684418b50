"""bf16 weights with float32 copies for prompts (infill/backends/prefill_weights.py), the offline default's format
on a CPU without native bf16: what the layer computes either way, and the real model loaded that way by a torch
held to AVX2 (as an AVX2-only laptop runs it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from infill.backends.int8 import DENSE_ROWS
from infill.backends.prefill_weights import add_float32_prefill_copies


def test_few_rows_multiply_the_bf16_weights_and_many_their_float32_copy():
    torch.manual_seed(4)
    head = torch.nn.Linear(64, 300, bias=False).to(torch.bfloat16)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64, bias=True).to(torch.bfloat16), head)
    model.get_output_embeddings = lambda: head  # the head keeps its plain bf16 layer
    assert add_float32_prefill_copies(model) == 1 and model[1] is head
    layer = model[0]
    assert layer.weight.dtype == torch.bfloat16 and layer.dense.dtype == torch.float32
    assert torch.equal(layer.dense, layer.weight.float())  # the same numbers
    x = torch.randn(DENSE_ROWS + 4, 64).to(torch.bfloat16)
    want = x.float() @ layer.weight.float().T + layer.bias.float()
    long, short = layer(x), torch.cat([layer(x[i:i + 1]) for i in range(len(x))])
    assert long.dtype == short.dtype == torch.bfloat16
    for got in (long, short):
        assert torch.allclose(got.float(), want, atol=3e-2, rtol=3e-2)


@pytest.mark.slow
def test_an_avx2_cpu_runs_the_offline_default_with_bf16_weights_and_float32_prompts():
    probe = """
import json
from infill.backends.gemma import load_default_backend
from infill.types import InfillRequest
backend = load_default_backend()
model = backend._model
layer = model.model.layers[0].mlp.up_proj
result = backend.infill(InfillRequest(prefix="def area(width, height):\\n    return ", single_line=True,
                                      language="python", max_middle_tokens=8))
print(json.dumps({"dtype": backend.info.dtype, "layer": type(layer).__name__, "dense": str(layer.dense.dtype),
                  "head": type(model.lm_head).__name__, "drafts": backend._default_drafts,
                  "middle": result.middle, "outcome": result.outcome}))
"""
    held = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=600,
                         env={**os.environ, **held})
    assert run.returncode == 0, run.stderr[-2000:]
    facts = json.loads(run.stdout.strip().splitlines()[-1])
    assert facts["dtype"] == "bfloat16" and facts["layer"] == "Bf16LinearWithFloat32Prefill"
    assert facts["dense"] == "torch.float32" and facts["head"] == "Linear" and facts["drafts"] == 0
    assert facts["outcome"] == "ok" and "width" in facts["middle"] and "height" in facts["middle"]
