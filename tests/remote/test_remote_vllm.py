"""RemoteBackend's native vLLM DiffusionGemma route against a small stand-in of vLLM's HTTP surface (a real HTTP
server on 127.0.0.1 that validates `vllm_xargs` as vllm/utils/diffusion.py does and answers with a canvas). Fast
coverage of the protocol; the proof against the real engine is scripts/test-vllm.sh."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import pytest
from test_remote import ScriptedServer

from infill.backends.remote import RemoteBackend
from infill.types import FillControl, InfillRequest, deadline_in

VOCAB, CANVAS = 300, 32
PAD, EOS, BOS = 0, 1, 2


def ids_of(text: str) -> list[int]:
    """A toy tokenizer: one id per character (Gemma's special tokens as single ids)."""
    specials = {"<pad>": [PAD], "<eos>": [EOS], "<bos>": [BOS]}
    return specials.get(text) or [3 + ord(c) % (VOCAB - 3) for c in text]


def text_of(ids: list[int]) -> str:
    return "".join("<bos>" if i == BOS else chr(i - 3) if i >= 3 else "?" for i in ids)


class StandInVLLM:
    """vLLM serving DiffusionGemma, as far as RemoteBackend sees it. `exact_pins`: the infill-vllm plugin is on.
    `middle`: what the model writes into the gap (then EOS); `likes`: the canvas width whose anchor it scores
    best. `refused` collects every body vLLM would refuse."""

    def __init__(
        self, exact_pins: bool = True, middle: str = "x + 1", likes: int | None = None, canvas: int | None = CANVAS
    ) -> None:
        self.exact_pins, self.middle, self.likes = exact_pins, middle, likes
        self.served_canvas = canvas  # None: started without --diffusion-config (validation cannot check widths)
        self.completions: list[dict] = []
        self.down: str | None = None  # a message: every request answers 503 with it (vLLM restarting)
        self.server = ScriptedServer(self.reply)
        self.url = self.server.url

    def reply(self, server, method, path, body):
        if self.down:
            return 503, json.dumps({"error": {"message": self.down}}).encode()
        if path == "/v1/models":
            return 200, json.dumps({"data": [{"id": "dg", "owned_by": "vllm", "max_model_len": 512}]}).encode()
        if path == "/tokenize":
            return 200, json.dumps({"tokens": ids_of(body["prompt"]), "count": 1, "max_model_len": 512}).encode()
        if path == "/detokenize":
            return 200, json.dumps({"prompt": text_of(body["tokens"])}).encode()
        refusal = self.refusal(body)
        if refusal:
            return 400, json.dumps({"error": {"message": refusal, "type": "BadRequestError"}}).encode()
        self.completions.append(body)
        if "vllm_xargs" not in body:  # a plain completion: the model writes on after the prompt
            return 200, json.dumps({"choices": [{"text": self.middle, "finish_reason": "length"}]}).encode()
        return 200, json.dumps(self.canvas(body)).encode()

    def refusal(self, body: dict) -> str | None:
        if "suffix" in body:
            return "suffix is only supported for models with FIM completion rendering"
        if any(k in body for k in ("temperature", "seed", "min_tokens", "logit_bias")):
            return (
                "The temperature, min_p, seed, min_tokens, logit_bias, bad_words, and allowed_token_ids "
                "sampling parameters are not yet supported with diffusion models."
            )
        extra = body.get("vllm_xargs") or {}
        width = extra.get("diffusion_canvas_length")
        served = self.served_canvas
        if width is not None and not (0 < width and (served is None or width <= served)):
            return "diffusion_canvas_length must be a positive integer no larger than the served canvas."
        seed = extra.get("diffusion_seed_canvas")
        if seed is not None:
            if not all(0 <= t < VOCAB for t in seed):
                return f"diffusion_seed_canvas ids must be in [0, {VOCAB})."
            expected = width or served
            if expected is not None and len(seed) != expected:
                return f"diffusion_seed_canvas must hold exactly {expected} ids, got {len(seed)}."
            # (vLLM's engine, not its validation, fails on a seed whose width the server does not serve)
            assert len(seed) == expected, "a seed canvas of unchecked width reached the engine"
        return None

    def canvas(self, body: dict) -> dict:
        extra = body["vllm_xargs"]
        seed, pins = extra["diffusion_seed_canvas"], set(extra.get("diffusion_pinned", []))
        tokens = []
        for p in range(len(seed)):
            if p == 0 or (p - 1 in pins and p not in pins):  # each gap gets the middle, then end tokens
                written = iter(ids_of(self.middle) + [EOS] * CANVAS)
            tokens.append(seed[p] if p in pins else next(written))
        if pins and not self.exact_pins:  # stock vLLM: the model's own prediction comes back at a pin
            tokens[max(pins)] = 3
        score = -0.5 if len(seed) == self.likes else -3.0
        top = [{f"token_id:{seed[p] if p in pins else t}": score} for p, t in enumerate(tokens)]
        return {
            "choices": [
                {
                    "text": text_of(tokens),
                    "token_ids": tokens,
                    "finish_reason": "length",
                    "logprobs": {"top_logprobs": top},
                }
            ],
            "usage": {"prompt_tokens": 9},
        }

    def close(self) -> None:
        self.server.close()


@pytest.fixture
def vllm():
    servers: list[StandInVLLM] = []

    def start(**kwargs) -> StandInVLLM:
        servers.append(StandInVLLM(**kwargs))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def test_native_route_pins_the_suffix_and_sends_nothing_a_diffusion_server_refuses(vllm):
    server = vllm(likes=8 + 14)  # the 8-slot middle before the 14-token suffix
    backend = RemoteBackend(server.url)
    result = backend.infill(
        InfillRequest(prefix="def f(x):\n    return ", suffix="\n\nprint(f(2))\n", max_middle_tokens=16),
        FillControl(deadline=deadline_in(10)),
    )
    assert result.outcome == "ok", result.error
    assert result.middle == "x + 1"  # cut at the end token: the suffix never leaks into the answer
    assert result.versions["protocol"] == "vllm-diffusion" and result.versions["canvas"]["suffix_held"]
    bodies = server.completions
    assert len(bodies) == 3  # one canvas per candidate middle length (4, 8, 16)
    anchor = ids_of("\n\nprint(f(2))\n")
    for body in bodies:
        assert not {"suffix", "temperature", "seed", "stop"} & set(body)
        extra = body["vllm_xargs"]
        seed, pins = extra["diffusion_seed_canvas"], extra["diffusion_pinned"]
        assert extra["diffusion_read_only"] == 1 and extra["diffusion_canvas_length"] == len(seed) <= CANVAS
        assert [seed[p] for p in pins] == anchor[: len(pins)] and pins == list(range(len(seed) - len(pins), len(seed)))
        assert body["prompt"] == "def f(x):\n    return " and body["logprob_token_ids"] == sorted(set(anchor))
    assert sorted(
        len(b["vllm_xargs"]["diffusion_seed_canvas"]) - len(b["vllm_xargs"]["diffusion_pinned"]) for b in bodies
    ) == [4, 8, 16]
    # the prompt is cut from the left so prompt + the widest canvas fit the server's max_model_len
    assert {b["truncate_prompt_tokens"] for b in bodies} == {512 - (16 + 14) - 1}


def test_the_candidate_that_best_joins_the_suffix_wins(vllm):
    server = vllm(likes=12 + 8)  # the 12-slot middle before the 8-token single-line anchor
    result = RemoteBackend(server.url).infill(InfillRequest(prefix="y = ", suffix=" * 2  # doubled", single_line=True))
    chosen = result.versions["canvas"]
    assert result.outcome == "ok" and chosen["candidate_lengths"] == [6, 12, 24]
    assert chosen["middle_length"] == 12 and chosen["canvas_width"] == 20 and chosen["join_score"] == -0.5


def test_several_gaps_fill_jointly_in_one_canvas_with_the_text_between_pinned(vllm):
    server = vllm(middle="A")
    result = RemoteBackend(server.url).infill(
        InfillRequest(prefix="Pay ", between=(" on the ",), suffix=" day.", max_middle_tokens=4)
    )
    assert result.outcome == "ok" and result.middles == ("A", "A")
    body = server.completions[0]
    seed, pins = body["vllm_xargs"]["diffusion_seed_canvas"], body["vllm_xargs"]["diffusion_pinned"]
    assert len(server.completions) == 1  # one candidate length (4) fits: one canvas for both gaps
    assert [seed[p] for p in pins] == ids_of(" on the ") + ids_of(" day.")
    assert seed[4:12] == ids_of(" on the ") and len(seed) == 4 + 8 + 4 + 5


def test_a_server_without_the_plugin_is_detected_once_and_the_fim_template_route_takes_over(vllm, caplog):
    server = vllm(exact_pins=False)
    backend = RemoteBackend(server.url, fim_template="{prefix}<mid>{suffix}")
    with caplog.at_level(logging.WARNING, logger="infill.backends.remote"):
        first = backend.infill(InfillRequest(prefix="a = ", suffix="\nb = a\n"))
        assert first.versions["canvas"]["suffix_held"] is False
        second = backend.infill(InfillRequest(prefix="a = ", suffix="\nb = a\n"))
    assert [r.message for r in caplog.records].count(caplog.records[0].message) == 1
    assert "infill-vllm plugin" in caplog.records[0].message
    assert second.outcome in ("ok", "empty") and "canvas" not in second.versions, second.error
    fim = server.completions[-1]
    assert fim["prompt"] == "a = <mid>\nb = a\n" and "temperature" not in fim and "vllm_xargs" not in fim


def test_a_configured_model_name_still_finds_the_native_route_when_the_openai_route_is_refused(vllm):
    server = vllm()
    result = RemoteBackend(server.url, model="dg").infill(InfillRequest(prefix="f(", suffix=")"))
    assert result.outcome == "ok" and result.versions["protocol"] == "vllm-diffusion", result.error
    assert server.completions[-1]["truncate_prompt_tokens"] == 512 - (16 + 1) - 1  # max_model_len from /tokenize


def test_a_server_started_without_a_canvas_is_probed_safely_and_gets_vllms_default_width(vllm):
    server = vllm(canvas=None)
    result = RemoteBackend(server.url).infill(InfillRequest(prefix="x", suffix="y", max_middle_tokens=64))
    assert result.outcome == "ok", result.error
    assert max(len(b["vllm_xargs"]["diffusion_seed_canvas"]) for b in server.completions) <= 32


def test_long_gaps_and_long_suffixes_fit_the_servers_canvas(vllm):
    server = vllm()
    result = RemoteBackend(server.url).infill(InfillRequest(prefix="x", suffix="y" * 500, max_middle_tokens=64))
    assert result.outcome == "ok", result.error
    widths = [len(b["vllm_xargs"]["diffusion_seed_canvas"]) for b in server.completions]
    assert widths and max(widths) <= CANVAS
    too_much = RemoteBackend(server.url).infill(InfillRequest(prefix="x", between=("z" * 40,), suffix="y"))
    assert too_much.outcome == "error" and "canvas holds 32" in too_much.error


def test_an_explicit_protocol_against_a_server_that_is_not_diffusion_says_so(scripted=None):
    plain = ScriptedServer(
        lambda s, m, p, b: (
            (200, json.dumps({"data": [{"id": "m", "owned_by": "vllm"}]}).encode())
            if p == "/v1/models"
            else (200, json.dumps({"choices": [{"text": "x", "finish_reason": "length"}]}).encode())
        )
    )
    try:
        result = RemoteBackend(plain.url, protocol="vllm-diffusion").infill(InfillRequest(prefix="a", suffix="b"))
        assert result.outcome == "error" and "does not answer like vLLM serving a diffusion model" in result.error
        auto = RemoteBackend(plain.url).infill(InfillRequest(prefix="a", suffix="b"))
        assert auto.outcome == "ok" and auto.versions["protocol"] == "openai"
    finally:
        plain.close()


def test_a_refusal_is_logged_once_not_per_keystroke(caplog):
    refusing = ScriptedServer(lambda s, m, p, b: (400, b'{"error": {"message": "bad request: no"}}'))
    try:
        backend = RemoteBackend(refusing.url, model="m")
        with caplog.at_level(logging.WARNING, logger="infill.backends.remote"):
            results = [backend.infill(InfillRequest(prefix="a" * n)) for n in range(1, 4)]
        assert all(r.outcome == "error" and "bad request: no" in r.error for r in results)
        assert len([r for r in caplog.records if "bad request: no" in r.message]) == 1
    finally:
        refusing.close()


def test_bad_protocol_is_refused_up_front():
    with pytest.raises(Exception, match="remote protocol"):
        RemoteBackend("http://127.0.0.1:9", protocol="grpc")


def test_an_outage_is_logged_once_and_again_after_the_server_came_back_and_failed_anew(vllm, caplog):
    server = vllm()
    backend = RemoteBackend(server.url)
    request = InfillRequest(prefix="a = ", suffix="\n")
    with caplog.at_level(logging.WARNING, logger="infill.backends.remote"):
        assert backend.infill(request).outcome == "ok"
        server.down = "restarting"
        assert [backend.infill(request).outcome for _ in range(3)] == ["error"] * 3
        server.down = None
        assert backend.infill(request).outcome == "ok"
        server.down = "restarting"
        assert "restarting" in backend.infill(request).error
    assert len([r for r in caplog.records if "restarting" in r.message]) == 2


@pytest.mark.parametrize(
    ("between", "anchor", "candidates", "max_middle"),
    [
        ([], [7, 8, 9], (4, 8, 16), 64),
        ([[5, 6]], [7, 8], (4, 8), 6),
        ([[5], [6, 6]], [], (3, 5), 64),
        ([], [], (4, 8), 8),
    ],
)
def test_vllm_canvases_are_laid_out_as_the_engines_rows(between, anchor, candidates, max_middle):
    """The remote backend's canvases and the in-process engine's rows come from one layout: the same free slots per
    gap and the same fixed text at the same slots."""
    import torch

    from infill.backends.remote.vllm_diffusion import plan_canvases
    from infill.engine.canvas import build_canvas
    from infill.engine.layout import choose_lengths

    noise = iter(range(1000, 2000)).__next__
    plans = plan_canvases(between, anchor, candidates, max_middle, CANVAS, noise)
    lengths, kept = choose_lengths(candidates, max_middle, [len(b) for b in between], len(anchor), CANVAS)
    canvas = build_canvas(lengths, [*between, anchor[:kept]], 10, PAD, torch.device("cpu"))
    assert [p.length for p in plans] == list(canvas.lengths)
    for row, plan in enumerate(plans):
        free = [i for i in range(plan.width) if canvas.free[row, i]]
        assert free == [i for start, end in plan.gaps for i in range(start, end)]
        fixed = [i for i in range(plan.width) if canvas.anchor[row, i]]
        assert fixed == list(plan.pinned) and [plan.seed[i] for i in fixed] == canvas.fixed_tokens[row, fixed].tolist()
        assert all(plan.seed[i] >= 1000 for i in free)  # free slots start as noise


def test_the_remote_backend_does_not_import_torch():
    script = "import sys, infill.backends.remote.backend; print('torch' in sys.modules)"
    assert (
        subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout == "False\n"
    )


def test_a_one_line_code_fill_keeps_the_call_it_wraps(vllm):
    # The native route cut every one-line fill at its first newline (an open `f(a,`); it now follows
    # languages.one_line_fill, as the engine and the offline default do.
    server = vllm(middle="f(a,\n    b)\nx = 1", likes=24 + 8)
    backend = RemoteBackend(server.url)
    code = backend.infill(InfillRequest(prefix="y = ", suffix=" + 1  # next", single_line=True, language="python"))
    assert code.outcome == "ok" and code.versions["canvas"]["middle_length"] == 24
    assert code.middles == ("f(a,\n    b)",)
    prose = backend.infill(InfillRequest(prefix="See ", suffix=" for the rest.", single_line=True, language="markdown"))
    assert prose.middles == ("f(a,",)
