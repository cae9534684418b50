"""The offline default's output head over ASCII-text tokens (infill/backends/head.py): which tokens it keeps, that
it computes exactly their logits, and that the real model's fills of ASCII code do not change with it."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from infill.backends.head import OutputHead, ascii_token_ids
from infill.backends.int8 import quantize_linears
from infill.device import int8_kernels
from infill.types import InfillRequest

TEXTS = ["", " def", "café", "\n", "<0x41>", "return", "ß", " ", "\t\t", "x = 1"]


def test_it_keeps_the_tokens_of_ascii_text():
    assert ascii_token_ids(TEXTS) == [1, 3, 4, 5, 7, 8, 9]  # "<0x41>" here is just text: the backend blanks them


def _head(int8: bool):
    torch.manual_seed(3)
    holder = torch.nn.Sequential(torch.nn.Linear(32, len(TEXTS), bias=False).to(torch.bfloat16))
    if int8:
        quantize_linears(holder, keep_dense=False)
    return holder[0]


@pytest.mark.parametrize("int8", [False, pytest.param(True, marks=pytest.mark.skipif(
    not int8_kernels(), reason="no CPU int8 weight kernels"))])
def test_the_short_head_gives_the_full_head_s_logits_on_its_rows(int8):
    module = _head(int8)
    head = OutputHead(module, TEXTS, always=[2], vocab_size=len(TEXTS))  # "café" kept, as a stop token would be
    hidden = torch.randn(3, 32).to(torch.bfloat16)
    full, short = head(hidden, ascii_only=False), head(hidden, ascii_only=True)
    assert torch.equal(full, module(hidden))
    kept = [1, 2, 3, 4, 5, 7, 8, 9]
    assert torch.allclose(short[:, kept].float(), full[:, kept].float(), atol=1e-2, rtol=1e-2)
    assert torch.isinf(short[:, [0, 6]]).all() and (short[:, [0, 6]] < 0).all()


def test_it_knows_which_prompts_it_covers():
    head = OutputHead(_head(False), TEXTS, always=[], vocab_size=len(TEXTS))
    assert head.covers([1, 3, 5]) and head.covers([])
    assert not head.covers([1, 2]) and not head.covers([0]) and not head.covers([99]) and not head.covers([-1])


@pytest.mark.slow
def test_ascii_code_fills_the_same_with_the_short_head(ar_backend):
    source = torch.nn.modules.module.__file__
    text = open(source, encoding="utf-8").read()
    requests = []
    for needle in ("        return ", "self._", "    def "):
        at = text.index(needle, len(text) // 2) + len(needle)
        requests.append(InfillRequest(prefix=text[at - 1200:at], suffix=text[at:], single_line=True,
                                      language="python", max_middle_tokens=16))
    original = ar_backend.settings
    try:
        fills, heads = {}, {}
        for short in (False, True):
            ar_backend.settings = replace(original, ascii_head=short)
            ar_backend.kv_store.clear()
            results = [ar_backend.infill(r) for r in requests]
            fills[short] = [r.middles for r in results]
            heads[short] = {r.versions["output_head"] for r in results}
        german = ar_backend.infill(InfillRequest(prefix="# Größe in Millimetern\nwidth = ", suffix="",
                                                 single_line=True, language="python", max_middle_tokens=4))
        head = ar_backend._output_head()
        assert 100_000 < len(head.rows) < 200_000  # Gemma 3: ~144,000 of 262,144 tokens are ASCII text
    finally:
        ar_backend.settings = original
    # The prompts the backend builds (BOS first) did use the short head, and a non-ASCII one did not.
    assert heads == {False: {"full"}, True: {"ascii-text"}} and german.versions["output_head"] == "full"
    assert fills[True] == fills[False] and any(m[0].strip() for m in fills[True])
