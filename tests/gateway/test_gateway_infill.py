"""llama.cpp's `/infill` on the gateway, as llama.vim and llama.vscode call it: the real HTTP server on 127.0.0.1
over the real pipeline and the real tiny DiffusionGemma engine. The requests are llama.vim's own (field for field,
from its autoload/llama.vim); the text is prose, so that no grammar is detected and the tiny model's words are
shown rather than rejected as broken code (the comparisons then compare real text)."""

from __future__ import annotations

import json
import socket
import time

import httpx
import pytest
from recording import Recording

from infill.gateway.language import detect_language
from infill.gateway.llama_infill import ExtraChunk, InfillParams, build_document, cut_at_dedent, parse_infill_params
from infill.gateway.openai_api import GatewaySettings
from infill.pipeline import CompletionRequest, Pipeline

PREFIX = (
    "Dear colleagues,\n\nThank you all for the work on the autumn release. It went out on time, and the "
    "customers noticed.\n"
)
LINE = "The meeting on Thursday"  # llama.vim's `prompt`: the cursor line before the cursor
SUFFIX = "\nWe will meet in the big room upstairs, and lunch is on me.\n\nBest wishes,\nAnna\n"
TIMINGS = [
    "prompt_n",
    "prompt_ms",
    "prompt_per_token_ms",
    "prompt_per_second",
    "predicted_n",
    "predicted_ms",
    "predicted_per_token_ms",
    "predicted_per_second",
]
TOKEN = "team-token"
CODE = (
    "import math\n\n\ndef circle_area(radius):\n    return math.pi * radius ** 2\n\n\n"
    'def describe_circle(radius):\n    """Print the radius, the diameter and the area of a circle."""\n'
)


def llama_vim_request(**fields) -> dict:
    """The body llama.vim's llama#fim sends (its defaults; `prompt` is the current line's text before the cursor)."""
    return {
        "id_slot": 0,
        "input_prefix": PREFIX,
        "input_suffix": SUFFIX,
        "input_extra": [],
        "prompt": LINE,
        "n_predict": 16,
        "stop": [],
        "n_indent": 0,
        "top_k": 40,
        "top_p": 0.90,
        "samplers": ["top_k", "top_p", "infill"],
        "stream": False,
        "cache_prompt": True,
        "t_max_prompt_ms": 20000,
        "t_max_predict_ms": 20000,
        "response_fields": ["content", *(f"timings/{name}" for name in TIMINGS), "truncated", "tokens_cached"],
        **fields,
    }


@pytest.fixture(scope="module")
def backend(tiny_engine):
    return Recording(tiny_engine)


@pytest.fixture(scope="module")
def pipeline(backend):
    return Pipeline(backend)


@pytest.fixture(scope="module")
def server(pipeline, gateway_running):
    with gateway_running(pipeline) as server:
        yield server


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server.url, timeout=120) as http:
        yield http


def pipeline_fill(pipeline, text: str, cursor: int, tokens: int = 16) -> str:
    result = pipeline.complete(
        CompletionRequest(
            text=text,
            start=cursor,
            end=cursor,
            max_middle_tokens=tokens,
            language=detect_language(text[:cursor], text[cursor:]),
        )
    )
    return result.fills[0].text if result.fills else ""


def test_llama_vims_request_gets_the_pipelines_fill_and_the_fields_it_reads(client, pipeline):
    assert detect_language(PREFIX + LINE, SUFFIX) is None  # prose: no grammar to reject the tiny model's words
    response = client.post("/infill", json=llama_vim_request())  # the first of this text: its prompt is new
    assert response.status_code == 200, response.text
    assert '"content":"' in response.text  # llama.vim's check before it decodes: no space after the colon
    answer = response.json()
    # response_fields: exactly the named fields, a path's value under the path itself (llama.cpp's flattening)
    assert set(answer) == {"content", "truncated", "tokens_cached", *(f"timings/{name}" for name in TIMINGS)}
    expected = pipeline_fill(pipeline, PREFIX + LINE + SUFFIX, len(PREFIX + LINE))
    assert expected.strip(), "the tiny model wrote nothing: the comparison would be empty"
    assert answer["content"] == expected
    assert answer["timings/prompt_n"] > 0 and answer["timings/prompt_ms"] > 0
    assert answer["timings/predicted_n"] > 0 and answer["timings/predicted_ms"] > 0
    assert answer["timings/predicted_per_second"] == pytest.approx(
        answer["timings/predicted_n"] * 1000 / answer["timings/predicted_ms"], rel=1e-2
    )
    assert answer["truncated"] is False and answer["tokens_cached"] >= answer["timings/prompt_n"]


def test_the_whole_answer_has_llama_cpps_fields(client):
    body = llama_vim_request()
    del body["response_fields"]
    answer = client.post("/infill", json=body).json()
    assert set(TIMINGS) <= set(answer["timings"])
    for name in (
        "content",
        "tokens_cached",
        "truncated",
        "stop",
        "stop_type",
        "stopping_word",
        "stopped_eos",
        "stopped_word",
        "stopped_limit",
        "tokens_predicted",
        "tokens_evaluated",
        "model",
    ):
        assert name in answer, name
    assert answer["stop_type"] in ("eos", "limit") and answer["infill"]["backend"].startswith("diffusiongemma")


def test_input_extra_reaches_the_model_ahead_of_the_prefix(client, backend):
    chunk = "    def greet(name):\n        return 'Hello ' + name\n"
    backend.infills.clear()
    response = client.post(
        "/infill", json=llama_vim_request(input_extra=[{"filename": "greet.py", "text": chunk, "time": [1, 2]}])
    )
    assert response.status_code == 200, response.text
    seen = backend.infills[-1].prefix
    assert "def greet(name):\n    return 'Hello ' + name\n" in seen  # dedented, whole
    assert seen.index("def greet") < seen.index(PREFIX.splitlines()[0]) and seen.endswith(LINE)
    assert backend.infills[-1].suffix.startswith(SUFFIX[:20])


def test_extra_context_is_bounded_newest_first(pipeline):
    s = pipeline.settings
    window = int(min(s.prefix_chars, s.prefix_tokens * s.chars_per_token))
    big = ExtraChunk("big.txt", "x" * window)  # more than the extra context's share: left out
    old, new = ExtraChunk("a.txt", "oldest chunk\n"), ExtraChunk("b.txt", "newest chunk\n")
    params = InfillParams(
        prefix="y\n" * window,
        suffix="",
        extra=(old, big, new),
        n_predict=None,
        budget_ms=None,
        n_indent=0,
        stop=(),
        response_fields=None,
        id_slot=0,
        document=None,
    )
    doc = build_document(params, pipeline)
    assert doc.truncated and "x" * 100 not in doc.text
    assert doc.text.index("oldest chunk") < doc.text.index("newest chunk") < doc.cursor
    assert doc.cursor <= window and doc.text[: doc.cursor].endswith("y\n")  # the local prefix made room, at a line


def test_n_predict_0_warms_the_cache_and_generates_nothing(client, backend):
    extra = [{"filename": "notes.txt", "text": "Minutes of the last meeting: budgets were approved.\n"}]
    backend.infills.clear(), backend.warms.clear()
    # llama.vim's ring-buffer warm-up: empty local context, only the extra chunks, 1 ms limits
    warm = {
        "id_slot": 0,
        "input_prefix": "",
        "input_suffix": "",
        "input_extra": extra,
        "prompt": "",
        "n_predict": 0,
        "temperature": 0.0,
        "samplers": [],
        "stream": False,
        "cache_prompt": True,
        "t_max_prompt_ms": 1,
        "t_max_predict_ms": 1,
        "response_fields": [""],
    }
    response = client.post("/infill", json=warm)
    assert response.status_code == 200 and response.json() == {}  # response_fields [""] picks nothing
    assert not backend.infills and len(backend.warms) == 1
    assert "budgets were approved" in backend.warms[0].prefix
    full = client.post("/infill", json={**warm, "response_fields": None}).json()
    assert full["content"] == "" and full["tokens_cached"] > 0 and full["timings"]["predicted_n"] == 0
    assert not backend.infills


@pytest.mark.slow
def test_past_its_time_limit_the_answer_is_the_best_drafts_whole_lines(ar_backend, gateway_running):
    """llama.cpp ends generation at the first line end past t_max_predict_ms; so does /infill, with the real
    offline default (greedy: the cut answer is the start of the whole one)."""
    body = {"input_prefix": CODE, "prompt": "", "input_suffix": "\n", "n_predict": 48, "stream": False}
    with gateway_running(Pipeline(ar_backend)) as server:
        with httpx.Client(base_url=server.url, timeout=120) as http:
            whole = http.post("/infill", json={**body, "t_max_predict_ms": 0}).json()  # 0: no limit
            cut = http.post("/infill", json={**body, "t_max_prompt_ms": 0, "t_max_predict_ms": 1}).json()
    assert whole["content"].count("\n") >= 1 and whole["stop_type"] == "eos", whole  # two lines or more
    assert cut["stop_type"] == "limit" and cut["infill"]["time_limit_reached"], cut
    assert cut["content"].strip() and whole["content"].startswith(cut["content"] + "\n")
    assert cut["content"].count("\n") < whole["content"].count("\n")


@pytest.mark.slow
def test_both_apis_count_the_offline_defaults_tokens_one_per_step_with_drafts_on(ar_backend, gateway_running):
    """An autoregressive step is one generated token however many drafted tokens a forward confirmed: usage
    (/v1/completions) and tokens_predicted (/infill) say so, on code whose repeats the drafts continue."""
    from dataclasses import replace

    lines = "".join(f"    total_{i} = compute_total(items_{i}, rate=rates[{i}], discount=None)\n" for i in range(8))
    prompt, suffix = "def totals(items, rates):\n" + lines + "    total_8 = compute_total(", "\n    return total_8\n"
    original = ar_backend.settings
    ar_backend.reconfigure(replace(original, draft_tokens=3))
    try:
        with gateway_running(Pipeline(ar_backend)) as server, httpx.Client(base_url=server.url, timeout=120) as http:
            openai = http.post("/v1/completions", json={"prompt": prompt, "suffix": suffix, "max_tokens": 32}).json()
            llama = http.post(
                "/infill",
                json={
                    "input_prefix": prompt,
                    "input_suffix": suffix,
                    "prompt": "",
                    "n_predict": 32,
                    "response_fields": ["tokens_predicted"],
                },
            ).json()
    finally:
        ar_backend.reconfigure(original)
    steps = openai["infill"]["steps"]
    assert openai["infill"]["tokens_per_forward"] > 1  # drafts were confirmed: fewer forwards than tokens
    assert 0 < steps <= 32 and openai["usage"]["completion_tokens"] == steps, openai
    assert openai["usage"]["total_tokens"] == openai["usage"]["prompt_tokens"] + steps
    assert llama["tokens_predicted"] == steps, llama


def test_n_indent_ends_the_middle_at_the_first_line_indented_less():
    assert cut_at_dedent("x = 1\n    y = 2\n  z\n    w", 4) == ("x = 1\n    y = 2", True)
    assert cut_at_dedent("x = 1\n\n    y", 4) == ("x = 1\n\n    y", False)  # blank lines do not end it
    assert cut_at_dedent("a\nb", 0) == ("a\nb", False)


def test_stop_strings_cut_the_content(client):
    answer = client.post("/infill", json=llama_vim_request(response_fields=None)).json()
    content = answer["content"]
    assert len(content) > 2
    stop = content[1:3]
    cut = client.post("/infill", json=llama_vim_request(response_fields=None, stop=[stop])).json()
    assert cut["content"] == content[: content.find(stop)] and cut["stop_type"] == "word"
    assert cut["stopping_word"] == stop


@pytest.mark.parametrize(
    "body, fragment",
    [
        ([1, 2], "JSON object"),
        ({"input_prefix": 3}, "input_prefix must be a string"),
        ({"input_extra": "text"}, "input_extra must be a list"),
        ({"input_extra": [{"filename": "a"}]}, "input_extra[0]"),
        ({"n_predict": -2}, "n_predict"),
        ({"n_predict": 10**6}, "n_predict"),
        ({"t_max_predict_ms": -1}, "t_max_predict_ms"),
        ({"n_indent": "4"}, "n_indent must be an integer"),
        ({"stop": ["s"] * 17}, "up to 16"),
        ({"stream": True}, "stream is not supported"),
        ({"response_fields": "content"}, "response_fields"),
        ({"samplers": "top_k"}, "samplers must be a list"),
    ],
)
def test_bad_requests_get_400_and_the_gateway_keeps_working(client, body, fragment):
    if isinstance(body, dict):
        body = {**llama_vim_request(), **body}
    response = client.post("/infill", json=body)
    assert response.status_code == 400, response.text
    assert fragment.lower() in response.json()["error"]["message"].lower()
    assert client.post("/infill", json=llama_vim_request()).status_code == 200


def test_params_join_the_line_to_the_prefix_and_sum_the_time_limits():
    params = parse_infill_params(llama_vim_request(), GatewaySettings())
    assert (params.prefix, params.suffix) == (PREFIX + LINE, SUFFIX)
    assert params.budget_ms == 40000 and params.n_predict == 16 and not params.warm_only
    assert parse_infill_params({"n_predict": -1, "t_max_predict_ms": 0}, GatewaySettings()).budget_ms is None


def test_token_is_required_when_configured(pipeline, gateway_running):
    with gateway_running(pipeline, token=TOKEN) as server:
        with httpx.Client(base_url=server.url, timeout=120) as http:
            assert http.post("/infill", json=llama_vim_request()).status_code == 401
            ok = http.post("/infill", json=llama_vim_request(), headers={"Authorization": f"Bearer {TOKEN}"})
            assert ok.status_code == 200 and "content" in ok.json()


def test_a_request_whose_client_hung_up_is_cancelled(tiny_engine, gateway_running):
    """llama.vim stops its curl job for a stale request: the run is cancelled within a step, not run to its end."""
    from infill.engine.config import EngineConfig
    from infill.engine.diffusion import DiffusionEngine

    slow = Recording(
        DiffusionEngine(tiny_engine.loaded, EngineConfig(max_denoising_steps=256, confidence_threshold=1e-9))
    )
    with gateway_running(Pipeline(slow)) as server:
        body = json.dumps(llama_vim_request()).encode()
        with httpx.Client(base_url=server.url, timeout=120) as http:
            started = time.monotonic()
            assert http.post("/infill", json=llama_vim_request(prompt="The meeting on Friday")).status_code == 200
            alone_s = time.monotonic() - started  # one whole slow run here, now
        assert slow.results[-1].outcome == "ok"
        slow.started.clear()
        with socket.create_connection((server.server_name, server.server_port)) as sock:
            sock.sendall(
                b"POST /infill HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
            )
            assert slow.started.wait(alone_s * 10 + 30) is True  # the run is on the model
        hung_up = time.monotonic()
        deadline = hung_up + alone_s * 10 + 30
        while len(slow.results) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(slow.results) == 2 and slow.results[-1].outcome == "cancelled", slow.results[-1:]
        assert time.monotonic() - hung_up < alone_s + 5  # (and not after a whole run's worth of steps)
