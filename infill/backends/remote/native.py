"""RemoteBackend's native route to vLLM serving DiffusionGemma: detection, canvases, tokens (a mixin, so the HTTP
plumbing, deadlines and cancellation stay in backend.py). The canvas layout and scoring live in vllm_diffusion.py."""

from __future__ import annotations

import logging
import random
from typing import Any

import infill.backends.remote.vllm_diffusion as vd
from infill import languages
from infill.backends.remote.exchange import Call, Exchanges
from infill.backends.remote.http import RemoteCall, RemoteFailure, RemoteHTTPError, _GapAnswer
from infill.engine.config import EngineConfig
from infill.types import CancelToken, Draft, InfillError

log = logging.getLogger("infill.backends.remote")


class NativeDiffusionRoute:
    """Methods of RemoteBackend for the "vllm-diffusion" protocol, over the state RemoteBackend sets up."""

    endpoint: str
    protocol: str
    fim_template: str | None
    engine: EngineConfig
    http: Exchanges
    _route: str | None
    _facts: vd.ServerFacts | None
    _max_model_len: int | None
    _pins_exact: bool | None
    _tokens: vd.TokenCache
    _stop_ids: frozenset[int] | None
    _drop_ids: frozenset[int]

    def _say_once(self, level: int, message: str) -> None:
        raise NotImplementedError  # RemoteBackend's

    def _native_unusable(self) -> bool:
        """A server without the infill-vllm plugin does not hold the suffix: use the FIM template route when
        there is one (else keep the native route, whose answers are still checked and flagged)."""
        return self._pins_exact is False and self.fim_template is not None

    def _detect_diffusion(self, model: str | None, cancel: CancelToken | None, end: float) -> bool:
        """Ask vLLM's own validation what it serves: up to three requests refused at admission, no model run."""
        first = self._probe(model, vd.PROBE_WIDTH, cancel, end)
        if vd.width_is_served(first):  # started with --diffusion-config: it names its canvas and vocabulary
            canvas = vd.canvas_named(self._probe(model, vd.PROBE_CANVAS, cancel, end))
            vocab = vd.vocab_named(self._probe(model, vd.PROBE_VOCAB, cancel, end))
        else:  # no configured canvas: the width passed, the unseen id did not (or this is no diffusion server)
            vocab = vd.vocab_named(first)
            canvas = vd.UNCONFIGURED_CANVAS if vocab is not None else None
        if canvas is None:
            if self.protocol == "vllm-diffusion":
                raise RemoteFailure(
                    f"{self.endpoint} does not answer like vLLM serving a diffusion model "
                    f"(protocol vllm-diffusion): {first[:200] or 'it ran the probe'}"
                )
            self._route = "openai"
            return False
        self._facts, self._route = vd.ServerFacts(canvas, vocab), "vllm-diffusion"
        log.info(
            "remote endpoint %s is vLLM serving DiffusionGemma (canvas %d, vocabulary %s): native protocol",
            self.endpoint,
            canvas,
            vocab,
        )
        return True

    def _probe(self, model: str | None, xargs: dict[str, Any], cancel: CancelToken | None, end: float) -> str:
        """The server's refusal message ("" when it served the probe)."""
        try:
            self.http.one("POST", "/v1/completions", vd.probe_body(model, xargs), cancel, end)
            return ""
        except RemoteHTTPError as exc:
            return exc.detail

    def _native_fill(self, call: RemoteCall) -> list[_GapAnswer]:
        """Every gap in one canvas, one canvas per candidate middle length, sent together; the best join wins."""
        request, model, end = call.request, call.model, call.end
        cancel, on_draft = call.control.cancel, call.control.on_draft
        if self._facts is None:
            self._detect_diffusion(model, cancel, end)
        facts = self._facts
        assert facts is not None
        candidates, anchor_size = self.engine.canvas_plan(request.single_line, vd.SERVER_DEVICE)
        head = vd.suffix_head(request.suffix, anchor_size)
        self._tokenize([*request.between, head, *vd.STOP_TEXTS, *vd.DROP_TEXTS], model, cancel, end)
        anchor = self._tokens.get(head)
        if head != request.suffix and len(anchor) > 1:
            anchor = anchor[:-1]  # the piece may end inside a token that the whole suffix spells differently
        between = [self._tokens.get(text) for text in request.between]
        # Free slots start as uniform noise over the vocabulary, as the model was trained (vLLM names its size).
        rng = random.Random(request.seed)
        known = sorted({*anchor, *sum(between, [])}) or [0]
        vocab = facts.vocab_size
        noise = (lambda: rng.randrange(vocab)) if vocab else (lambda: rng.choice(known))
        try:
            plans = vd.plan_canvases(
                between, anchor[:anchor_size], candidates, request.max_middle_tokens, facts.canvas_length, noise
            )
        except InfillError as exc:
            raise RemoteFailure(str(exc)) from None
        budget = (self._max_model_len or 0) - max(p.width for p in plans) - 1
        if budget < 1:
            budget = -1  # unknown model length: vLLM's own check applies
        bodies = [vd.completion_body(p, request.prefix, model, budget) for p in plans]
        try:
            replies = self.http.many([("POST", "/v1/completions", b) for b in bodies], cancel, end, hang_up=True)
        except RemoteHTTPError as exc:
            if "diffusion" in exc.detail:  # restarted with another canvas? the next request asks again
                self._facts = None
            raise
        try:
            answers = [vd.read_answer(p, r, self.endpoint) for p, r in zip(plans, replies)]
        except ValueError as exc:
            raise RemoteFailure(str(exc)) from None
        best = vd.best_answer(answers)
        self._note_pins(all(a.held for a in answers))
        middles = self._detokenize(
            [vd.middle_ids(best, g, self._stop_ids or frozenset()) for g in range(request.gap_count)],
            model,
            cancel,
            end,
        )
        if request.single_line:
            middles = [languages.one_line_fill(m, wraps=request.wraps_lines) for m in middles]
        extension = {
            "middle_length": best.plan.length,
            "candidate_lengths": [p.length for p in plans],
            "join_score": round(best.join_score, 4),
            "suffix_held": best.held,
            "pins_exact": bool(self._pins_exact),
            "canvas_width": best.plan.width,
            "canvases": len(answers),
            "canvases_held": sum(a.held for a in answers),
            "pinned": len(best.plan.pinned),
            "pinned_held": best.held_count,
        }
        out = [_GapAnswer(text=m, finish_reason="stop", extension=extension) for m in middles]
        out[0].prompt_tokens = best.prompt_tokens
        out[0].completion_tokens = sum(
            len(vd.middle_ids(best, g, self._stop_ids or frozenset())) for g in range(request.gap_count)
        )
        if on_draft is not None:
            on_draft(Draft(step=1, middles=tuple(middles), confidence=()))
        return out

    def _tokenize(self, texts: list[str], model: str | None, cancel: CancelToken | None, end: float) -> None:
        missing = self._tokens.missing(texts)
        if not missing:
            return
        replies = self.http.many([("POST", "/tokenize", vd.tokenize_body(t, model)) for t in missing], cancel, end)
        for text, reply in zip(missing, replies):
            if self._max_model_len is None and isinstance(reply.get("max_model_len"), int):
                self._max_model_len = reply["max_model_len"]  # (no discovery ran when the model was configured)
            ids = reply.get("tokens")
            if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
                raise RemoteFailure(f"{self.endpoint}/tokenize answered without tokens")
            self._tokens.put(text, ids)
        if self._stop_ids is None:
            self._stop_ids = self._single_ids(vd.STOP_TEXTS)
            self._drop_ids = self._single_ids(vd.DROP_TEXTS)

    def _single_ids(self, texts: tuple[str, ...]) -> frozenset[int]:
        """The ids of special tokens the server's tokenizer has (a text that is not one splits into several)."""
        singles = [self._tokens.get(t) for t in texts]
        return frozenset(ids[0] for ids in singles if len(ids) == 1)

    def _detokenize(
        self, pieces: list[list[int]], model: str | None, cancel: CancelToken | None, end: float
    ) -> list[str]:
        pieces = [[i for i in ids if i not in self._drop_ids] for ids in pieces]
        calls: list[Call] = [
            ("POST", "/detokenize", {"tokens": ids, **({"model": model} if model else {})}) for ids in pieces if ids
        ]
        texts = iter(self.http.many(calls, cancel, end)) if calls else iter(())
        out = []
        for ids in pieces:
            text = next(texts).get("prompt") if ids else ""
            if not isinstance(text, str):
                raise RemoteFailure(f"{self.endpoint}/detokenize answered without text")
            out.append(text)
        return out

    def _note_pins(self, held: bool) -> None:
        if held:
            self._pins_exact = True if self._pins_exact is None else self._pins_exact
            return
        self._pins_exact = False
        then = (
            "the FIM template route is used from now on"
            if self.fim_template is not None
            else "answers are still used, flagged suffix_held=false; set a FIM template to use that route"
        )
        self._say_once(
            logging.WARNING,
            f"{self.endpoint} does not hold pinned canvas positions exactly: the "
            f"server lacks the infill-vllm plugin or runs without "
            f"INFILL_VLLM_EXACT_PINS=1 (see docs/vllm.md); {then}",
        )
