"""vLLM's DiffusionGemma protocol, spoken natively: the suffix is held in the canvas, not guessed from a prompt.

One request per candidate middle length, each with its own canvas (`vllm_xargs`):

    [gap 0: L free] [between[0] pinned] [gap 1: L free] ... [gap G-1: L free] [suffix anchor pinned]

as the in-process engine lays out its rows (infill/engine/layout.py), with `diffusion_read_only` (the one canvas is
the whole answer). The candidate whose canvas best joins the fixed text wins: the mean log-probability of the
anchor tokens at their positions (infill/engine/denoise.py's join score; vLLM reports it at temperature 1 through
`logprob_token_ids`). Middles are read from the returned token ids, each cut at its first end/pad token, so the
suffix never leaks into the answer.

Pins are exact only on a server running the infill-vllm plugin (vllm-plugin/): stock vLLM holds them as denoiser
input but commits its own prediction there. Every answer is checked: `held` says whether each pinned position came
back as sent, which is how a server without the plugin is detected.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from infill.backends.remote.http import json_object
from infill.engine.layout import RowLayout, choose_lengths, lay_out
from infill.types import InfillError

STOP_TEXTS = ("<eos>", "<pad>")  # Gemma's end and padding tokens: a middle ends at the first of either
DROP_TEXTS = ("<bos>",)  # special tokens dropped from a middle (the in-process engine skips special tokens)
TOKEN_KEY = "token_id:"  # how vLLM names tokens with return_tokens_as_token_ids
# vLLM serves DiffusionGemma on a GPU: a request to it is planned as the in-process engine plans one on CUDA
SERVER_DEVICE = "cuda"


@dataclass(frozen=True)
class CanvasPlan:
    """One candidate canvas: every gap gets `length` free slots."""

    length: int
    seed: tuple[int, ...]  # the starting canvas (noise at free slots, fixed text at pinned ones)
    pinned: tuple[int, ...]  # positions held at the seed
    gaps: tuple[tuple[int, int], ...]  # [start, end) of each gap
    anchor: tuple[int, ...]  # positions of the suffix anchor (scored)

    @property
    def width(self) -> int:
        return len(self.seed)


def plan_canvases(
    between: list[list[int]],
    anchor: list[int],
    candidates: tuple[int, ...],
    max_middle: int,
    width: int,
    noise: Callable[[], int],
) -> list[CanvasPlan]:
    """One plan per candidate middle length that fits the server's canvas, chosen and laid out as the in-process
    engine does (infill/engine/layout.py). `between[g]` is the fixed text after gap g (g < G-1), `anchor` the head
    of the suffix; `noise()` draws the id a free slot starts from."""
    try:
        lengths, kept = choose_lengths(candidates, max_middle, [len(b) for b in between], len(anchor), width)
    except InfillError as exc:
        raise InfillError(str(exc).replace("the canvas", "the server's canvas")) from None
    return [_plan(lay_out(n, [*map(len, between), kept]), [*between, anchor[:kept]], noise) for n in lengths]


def _plan(row: RowLayout, fixed: list[list[int]], noise: Callable[[], int]) -> CanvasPlan:
    seed = [0] * row.width
    for (gap_start, gap_end), (start, end), clamp in zip(row.gaps, row.fixed, fixed):
        seed[gap_start:gap_end] = [noise() for _ in range(gap_end - gap_start)]
        seed[start:end] = clamp
    pinned = [p for start, end in row.fixed for p in range(start, end)]
    start, end = row.anchor
    return CanvasPlan(row.length, tuple(seed), tuple(pinned), row.gaps, tuple(range(start, end)))


def completion_body(plan: CanvasPlan, prompt: str, model: str | None, prompt_budget: int) -> dict[str, Any]:
    """Only fields a diffusion server accepts: no `suffix`, `temperature`, `seed`, `stop` (vLLM refuses the first
    three; a stop string would cut the canvas before the suffix comes back)."""
    body: dict[str, Any] = {
        "prompt": prompt,
        "max_tokens": plan.width,
        "n": 1,
        "stream": False,
        "return_token_ids": True,
        "skip_special_tokens": False,
        "truncate_prompt_tokens": prompt_budget,
        "truncation_side": "left",
        "vllm_xargs": {
            "diffusion_canvas_length": plan.width,
            "diffusion_seed_canvas": list(plan.seed),
            "diffusion_read_only": 1,
        },
    }
    if plan.pinned:
        body["vllm_xargs"]["diffusion_pinned"] = list(plan.pinned)
    if plan.anchor:
        body.update(
            logprobs=1, return_tokens_as_token_ids=True, logprob_token_ids=sorted({plan.seed[p] for p in plan.anchor})
        )
    if model:
        body["model"] = model
    return body


@dataclass(frozen=True)
class CanvasAnswer:
    plan: CanvasPlan
    tokens: tuple[int, ...]
    join_score: float  # mean log-prob of the anchor tokens (0.0 without an anchor)
    held_count: int  # pinned positions that came back as sent
    prompt_tokens: int

    @property
    def held(self) -> bool:
        return self.held_count == len(self.plan.pinned)


def read_answer(plan: CanvasPlan, data: dict[str, Any], where: str) -> CanvasAnswer:
    """The canvas, join score and pin check from one vLLM completion response; raises ValueError on a malformed
    one (the caller reports it as the server's failure)."""
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ValueError(f"response from {where} has no choices")
    tokens = choices[0].get("token_ids")
    if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
        raise ValueError(f"response from {where} has no token_ids (is this vLLM?)")
    if len(tokens) < plan.width:
        raise ValueError(f"response from {where} holds {len(tokens)} canvas tokens, expected {plan.width}")
    tokens = tokens[: plan.width]
    held = sum(tokens[p] == plan.seed[p] for p in plan.pinned)
    score = _join_score(plan, choices[0].get("logprobs")) if plan.anchor else 0.0
    usage = json_object(data.get("usage"))
    prompt_tokens = usage["prompt_tokens"] if isinstance(usage.get("prompt_tokens"), int) else 0
    return CanvasAnswer(plan, tuple(tokens), score, held, prompt_tokens)


def _join_score(plan: CanvasPlan, logprobs: Any) -> float:
    top = logprobs.get("top_logprobs") if isinstance(logprobs, dict) else None
    if not isinstance(top, list) or len(top) < plan.width:
        raise ValueError("response has no per-position logprobs for the anchor")
    total = 0.0
    for p in plan.anchor:
        entry = top[p] if isinstance(top[p], dict) else {}
        value = entry.get(f"{TOKEN_KEY}{plan.seed[p]}")
        total += float(value) if isinstance(value, (int, float)) else -1e4  # absent: as unlikely as it gets
    return total / len(plan.anchor)


def best_answer(answers: list[CanvasAnswer]) -> CanvasAnswer:
    """The in-process rule: highest join score; without an anchor, the longest canvas (its end token bounds it)."""
    if not answers[0].plan.anchor:
        return max(answers, key=lambda a: a.plan.length)
    return max(answers, key=lambda a: a.join_score)


def middle_ids(answer: CanvasAnswer, gap: int, stop_ids: frozenset[int]) -> list[int]:
    start, end = answer.plan.gaps[gap]
    picked = list(answer.tokens[start:end])
    for i, token in enumerate(picked):
        if token in stop_ids:
            return picked[:i]
    return picked


# -- talking to the server ------------------------------------------------------------------------------------------

_CANVAS_SAYS = re.compile(r"diffusion_seed_canvas must hold exactly (\d+) ids")
_VOCAB_SAYS = re.compile(r"diffusion_seed_canvas ids must be in \[0, (\d+)\)")
DIFFUSION_REFUSALS = ("not yet supported with diffusion models", "suffix is only supported for models with FIM")


@dataclass(frozen=True)
class ServerFacts:
    """What a DiffusionGemma server on vLLM is serving, learnt from its own validation messages (no model run)."""

    canvas_length: int
    vocab_size: int | None


UNSEEN = 2**31 - 1  # an id no vocabulary has: vLLM's validation refuses it, naming its vocabulary size
UNCONFIGURED_CANVAS = 32  # what vLLM 0.32's DiffusionGemma uses when the server has no --diffusion-config
_WIDTH_SAYS = "diffusion_canvas_length must be a positive integer no larger than the served canvas"


def probe_body(model: str | None, xargs: dict[str, Any]) -> dict[str, Any]:
    """A request vLLM's diffusion validation refuses at admission (vllm/utils/diffusion.py), so no model runs; a
    server that is not serving a diffusion model runs one token instead."""
    return {"prompt": "\n", "max_tokens": 1, "vllm_xargs": xargs, **({"model": model} if model else {})}


# Asked in order; each answer decides the next (see RemoteBackend._detect_diffusion). Never a request that passes
# validation with a seed canvas of the wrong width: vLLM's engine (not its validation) would fail on it.
PROBE_WIDTH = {"diffusion_canvas_length": 2**20, "diffusion_seed_canvas": [UNSEEN]}
PROBE_CANVAS: dict[str, Any] = {"diffusion_seed_canvas": []}
PROBE_VOCAB = {"diffusion_seed_canvas": [UNSEEN]}


def width_is_served(message: str) -> bool:
    """The probe's huge width was refused: the server was started with a canvas (--diffusion-config)."""
    return _WIDTH_SAYS in message


def canvas_named(message: str) -> int | None:
    found = _CANVAS_SAYS.search(message)
    return int(found.group(1)) if found else None


def vocab_named(message: str) -> int | None:
    found = _VOCAB_SAYS.search(message)
    return int(found.group(1)) if found else None


class TokenCache:
    """Token ids of short texts (gap separators, suffix heads, stop tokens) from the server's /tokenize, kept: the
    same texts come back keystroke after keystroke."""

    def __init__(self, limit: int = 256) -> None:
        self.limit = limit
        self._ids: dict[str, list[int]] = {}

    def missing(self, texts: list[str]) -> list[str]:
        return sorted({t for t in texts if t and t not in self._ids})

    def put(self, text: str, ids: list[int]) -> None:
        if len(self._ids) >= self.limit:
            self._ids.pop(next(iter(self._ids)))
        self._ids[text] = ids

    def get(self, text: str) -> list[int]:
        return self._ids.get(text, []) if text else []


def tokenize_body(text: str, model: str | None) -> dict[str, Any]:
    return {"prompt": text, "add_special_tokens": False, **({"model": model} if model else {})}


def suffix_head(suffix: str, tokens: int) -> str:
    """A bounded piece of the suffix that holds at least `tokens` tokens (no token is shorter than a character)."""
    return suffix[: max(1, tokens) * 12]
