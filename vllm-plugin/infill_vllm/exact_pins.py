"""The hook: two small wrappers around module-level functions of vLLM 0.32's DiffusionGemma sampler.

`DiffusionSampler.__call__` (vllm/model_executor/models/diffusion_gemma.py) computes per-position statistics of a
tile (argmax, sample, entropy, softmax), then calls the module global `_compiled_sample_step` with them and the
state tensors, including `pin_mask` and `seed_canvas`. Wrapping that global, before the step runs:
- argmax and sample at pinned positions become the seed token: the committed canvas, the stability history and
  the accepted canvas all hold it;
- entropy there becomes 0: a pin never spends the entropy budget nor keeps a canvas from converging. A zero
  entropy sorts first and is always accepted by the entropy bound (cumsum - cummax = 0 <= bound, bound > 0), so
  the accepted canvas holds the seed there without vLLM's own hold;
- the softmax there becomes one-hot on the seed, and the step gets an all-False pin mask, so self-conditioning
  sees the token's embedding (vLLM's own step zeroes self-conditioning at a pin). In a constrained step (softmax
  over an allowed subset) the softmax is left alone and vLLM's pin mask is kept (self-conditioning zeroed).

The logprob stash of a converged canvas is computed from the same tile with `compute_topk_scores(rows,
num_logprobs, argmax[row])`; the second wrapper passes the seed token instead of the model's argmax at pinned
positions, so the reported token is the one emitted and its logprob is the model's own log-probability of it (what
a client scores a candidate canvas by). It finds the row's pins through the tile the first wrapper saw last.
"""

from __future__ import annotations

import inspect
import threading

import torch

_STEP_NEEDS = (
    "new_tokens",
    "argmax_tokens",
    "token_entropy",
    "probs",
    "decode_slots",
    "pin_mask",
    "seed_canvas",
    "vocab_size",
)
_state = threading.local()  # the last tile's pins and seeds ([n, W] each), for the logprob stash of that tile


def install() -> bool:
    """Wrap the two globals once per process. Returns False when already installed."""
    from vllm.model_executor.models import diffusion_gemma as dg

    if getattr(dg, "_infill_exact_pins", False):
        return False
    step = dg._compiled_sample_step
    names = list(inspect.signature(step).parameters)
    missing = [n for n in _STEP_NEEDS if n not in names]
    if missing or not hasattr(dg, "compute_topk_scores"):
        raise RuntimeError(f"vLLM's DiffusionGemma sampler has changed (missing {missing or 'compute_topk_scores'})")
    dg._compiled_sample_step = _wrap_step(step, inspect.signature(step))
    dg.compute_topk_scores = _wrap_topk(dg.compute_topk_scores)
    dg._infill_exact_pins = True
    return True


def hold_pins(args: dict) -> dict:
    """The step's arguments with pinned positions exact (see the module docstring). Pure tensor ops, no host sync."""
    slots = args["decode_slots"]
    width = args["new_tokens"].shape[-1]
    pins = args["pin_mask"][slots][:, :width]  # [n, W]
    seeds = args["seed_canvas"][slots][:, :width]
    _state.tile = (pins, seeds, width)
    out = dict(args)
    out["new_tokens"] = torch.where(pins, seeds.to(args["new_tokens"].dtype), args["new_tokens"])
    out["argmax_tokens"] = torch.where(pins, seeds.to(args["argmax_tokens"].dtype), args["argmax_tokens"])
    out["token_entropy"] = args["token_entropy"].masked_fill(pins, 0.0)
    probs = args["probs"]
    if probs is not None and probs.shape[-1] == args["vocab_size"]:
        index = seeds[..., None]
        kept = probs.gather(-1, index).squeeze(-1)
        probs.masked_fill_(pins[..., None], 0.0)
        probs.scatter_(-1, index, torch.where(pins, torch.ones_like(kept), kept)[..., None])
        out["pin_mask"] = torch.zeros_like(args["pin_mask"])
    return out


def _wrap_step(step, signature: inspect.Signature):
    def exact_pins_sample_step(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        return step(**hold_pins(bound.arguments))

    return exact_pins_sample_step


def _wrap_topk(compute_topk_scores):
    def exact_pins_topk_scores(logits, num_logprobs, sampled_token_ids, *args, **kwargs):
        tile = getattr(_state, "tile", None)
        if tile is not None and sampled_token_ids.dim() == 1:
            pins, seeds, width = tile
            row = sampled_token_ids.storage_offset() // width  # the stash passes argmax[row][:k], a view
            if row < pins.shape[0]:
                k = sampled_token_ids.shape[0]
                sampled_token_ids = torch.where(
                    pins[row, :k], seeds[row, :k].to(sampled_token_ids.dtype), sampled_token_ids
                )
        return compute_topk_scores(logits, num_logprobs, sampled_token_ids, *args, **kwargs)

    return exact_pins_topk_scores
