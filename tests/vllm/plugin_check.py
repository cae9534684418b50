"""The infill-vllm plugin against vLLM's own DiffusionGemma step function (run with the vLLM venv's python by
scripts/test-vllm.sh; plain asserts, no pytest there).

One denoising step of one request whose canvas has 3 pinned positions, run through vLLM 0.32's
`_compiled_sample_step` (its eager body, so nothing compiles) twice from the same state: as vLLM has it, and with
the plugin's `hold_pins`. Where the model predicts something else at the pins, stock vLLM commits that prediction,
counts its entropy and zeroes self-conditioning; with the plugin the given token is committed and accepted, its
entropy is zero (the canvas converges) and self-conditioning sees the token's embedding.
"""

from __future__ import annotations

import inspect
import sys

import torch
from vllm.model_executor.models import diffusion_gemma as dg

from infill_vllm.exact_pins import hold_pins

VOCAB, WIDTH, HIDDEN, STEPS = 16, 6, 4, 48
PINS, SEED = [3, 4, 5], [0, 0, 0, 7, 8, 9]


def step_arguments() -> dict:
    torch.manual_seed(0)
    slots = torch.tensor([0])
    prediction = torch.tensor([[1, 2, 3, 4, 4, 4]])  # confident everywhere, but wrong at the pins
    probs = torch.nn.functional.one_hot(prediction, VOCAB).float()
    pin_mask = torch.zeros(1, WIDTH, dtype=torch.bool)
    pin_mask[0, PINS] = True
    entropy = torch.full((1, WIDTH), 1e-4)
    entropy[0, PINS] = 0.5  # the model is unsure at the pins: stock vLLM counts that
    state = {
        "new_tokens": prediction.clone(),
        "argmax_tokens": prediction.clone(),
        "token_entropy": entropy,
        "probs": probs,
        "decode_slots": slots,
        "decode_idx": torch.tensor([0]),
        "all_slots": slots,
        "valid_canvas_len": torch.tensor([WIDTH]),
        "canvas": torch.zeros(1, WIDTH, dtype=torch.long),
        "argmax_canvas": torch.zeros(1, WIDTH, dtype=torch.long),
        "step_tensor": torch.ones(1, dtype=torch.int32),
        "is_encoder_phase": torch.zeros(1, dtype=torch.bool),
        "confident_tensor": torch.zeros(1, dtype=torch.bool),
        "sc_embeds": torch.zeros(1, WIDTH, HIDDEN),
        "embed_weight": torch.randn(VOCAB, HIDDEN),
        "normalizer": torch.tensor(2.0),
        "history": torch.zeros(1, 2, WIDTH, dtype=torch.long),
        "history_len_tensor": torch.zeros(1, dtype=torch.int32),
        "max_steps_tensor": torch.full((1,), STEPS, dtype=torch.int32),
        "pin_mask": pin_mask,
        "seed_canvas": torch.tensor([SEED]),
        "read_only": torch.ones(1, dtype=torch.bool),
        "sampled": torch.zeros(1, WIDTH, dtype=torch.int32),
        "num_sampled": torch.zeros(1, dtype=torch.int32),
        "draft_tokens": torch.zeros(1, WIDTH, dtype=torch.long),
        "confidence_threshold": 0.1,
        "vocab_size": VOCAB,
        "CL": WIDTH,
        "ST": 2,
        "entropy_bound": 0.1,
        "sc_vocab_start": 0,
        "sc_vocab_end": VOCAB,
        "tp_size": 1,
        "tp_group_name": "",
        "compute_sc": True,
    }
    names = list(inspect.signature(eager_step()).parameters)
    assert set(state) == set(names), f"vLLM's step signature changed: {sorted(set(names) ^ set(state))}"
    return state


def eager_step():
    """vLLM's step body without torch.compile (the decorators keep it as __wrapped__ / the dynamo original)."""
    compiled = dg._compiled_sample_step
    while hasattr(compiled, "__wrapped__") and not hasattr(compiled, "_torchdynamo_orig_callable"):
        compiled = compiled.__wrapped__
    return getattr(compiled, "_torchdynamo_orig_callable", compiled)


def run(with_plugin: bool) -> dict:
    args = step_arguments()
    eager_step()(**(hold_pins(args) if with_plugin else args))
    return args  # the state tensors were updated in place


def refuses_other_versions() -> None:
    """On a vLLM it was not written for, the plugin logs one error line and changes nothing."""
    import logging
    import os

    import vllm

    import infill_vllm

    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    infill_vllm.log.addHandler(handler)
    real, before = vllm.__version__, dg._compiled_sample_step
    os.environ[infill_vllm.ENV] = "1"
    try:
        vllm.__version__ = "0.99.0"
        infill_vllm.register()
    finally:
        vllm.__version__ = real
        del os.environ[infill_vllm.ENV]
        infill_vllm.log.removeHandler(handler)
    assert dg._compiled_sample_step is before and not getattr(dg, "_infill_exact_pins", False)
    assert len(records) == 1 and records[0].levelno == logging.ERROR and "0.99.0" in records[0].getMessage()


def main() -> int:
    refuses_other_versions()
    stock, pinned = run(False), run(True)
    at = lambda t: t[0, PINS].tolist()  # noqa: E731
    # stock vLLM: the model's prediction is committed and its entropy keeps the canvas from converging
    assert at(stock["argmax_canvas"]) == [4, 4, 4] and at(stock["canvas"]) == [7, 8, 9]
    assert not bool(stock["confident_tensor"][0]) and at(stock["sc_embeds"].abs().sum(-1)) == [0.0, 0.0, 0.0]
    # with the plugin: the given tokens, zero entropy (confident), self-conditioning = the tokens' embeddings
    assert at(pinned["argmax_canvas"]) == [7, 8, 9] and at(pinned["canvas"]) == [7, 8, 9]
    assert bool(pinned["confident_tensor"][0])
    expected = pinned["embed_weight"][[7, 8, 9]] * 2.0
    assert torch.allclose(pinned["sc_embeds"][0, PINS], expected), "self-conditioning does not see the pins"
    free = [0, 1, 2]
    assert torch.equal(stock["sc_embeds"][0, free], pinned["sc_embeds"][0, free]), "free slots must not change"
    assert pinned["argmax_canvas"][0, free].tolist() == [1, 2, 3]
    print(
        "plugin check: refuses vLLM 0.99.0 in one line; stock vLLM commits the model's tokens at pins, the plugin "
        "the given ones; entropy 0 and "
        "self-conditioning on the pinned tokens: ok"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
