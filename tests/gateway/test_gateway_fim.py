"""FIM-token prompts on `/v1/completions`: a prompt built by the client out of a model family's FIM markers (as
Zed's `open_ai_compatible_api` edit-prediction provider builds it, crates/edit_prediction/src/fim.rs) and no
`suffix` field is split into the text before and after the gap and filled like a `suffix` request. The real
gateway over the real pipeline and the tiny random DiffusionGemma; the text is prose (no language is detected,
so the watchdog has no grammar to reject the tiny model's words by and the comparisons compare real text)."""

from __future__ import annotations

import httpx
import pytest

from infill.gateway.fim_prompts import FORMATS, split_fim_prompt
from infill.gateway.language import detect_language
from infill.gateway.openai_api import GatewaySettings, parse_completion_params
from infill.pipeline import CompletionRequest

PREFIX = (
    "Dear team,\n\nThank you all for the work on the spring release. It went out on time, and the customers "
    "noticed.\nThe meeting on Thursday"
)
SUFFIX = (
    " so please bring your notes and one idea for the summer.\nWe will meet in the big room upstairs, and lunch "
    "is on me.\n\nBest wishes,\nAnna\n"
)

# (Zed's model name, the prompt exactly as fim.rs's format_fim_prompt writes it, fim.rs's stop tokens)
ZED_REQUESTS = {
    "qwen": (
        "qwen2.5-coder:7b",
        f"<|fim_prefix|>{PREFIX}<|fim_suffix|>{SUFFIX}<|fim_middle|>",
        ["<|endoftext|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>"],
    ),
    "codegemma": (
        "codegemma",
        f"<|fim_prefix|>{PREFIX}<|fim_suffix|>{SUFFIX}<|fim_middle|>",
        ["<|file_separator|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>"],
    ),
    "starcoder": (
        "starcoder2:3b",
        f"<fim_prefix>{PREFIX}<fim_suffix>{SUFFIX}<fim_middle>",
        ["<|endoftext|>", "<fim_prefix>", "<fim_middle>", "<fim_suffix>"],
    ),
    "codellama": ("codellama:7b", f"<PRE> {PREFIX} <SUF>{SUFFIX} <MID>", ["<PRE>", "<SUF>", "<MID>"]),
    "deepseek": (
        "deepseek-coder-v2:16b",
        f"<｜fim▁begin｜>{PREFIX}<｜fim▁hole｜>{SUFFIX}<｜fim▁end｜>",
        ["<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"],
    ),
    "codestral": ("codestral:latest", f"[SUFFIX]{SUFFIX}[PREFIX]{PREFIX}", ["[PREFIX]", "[SUFFIX]"]),
    "glm": (
        "glm-4:9b",
        f"<|code_prefix|>{PREFIX}<|code_suffix|>{SUFFIX}<|code_middle|>",
        ["<|endoftext|>", "<|code_prefix|>", "<|code_suffix|>", "<|code_middle|>"],
    ),
    # SantaCoder's hyphenated spelling (not one of Zed's): the same shape
    "santacoder": ("santacoder", f"<fim-prefix>{PREFIX}<fim-suffix>{SUFFIX}<fim-middle>", []),
}


@pytest.fixture(scope="module")
def client(pipeline, gateway_running):
    with gateway_running(pipeline) as server, httpx.Client(base_url=server.url, timeout=60) as http:
        yield http


@pytest.fixture(scope="module")
def expected(pipeline) -> str:
    """The pipeline's own fill of PREFIX|SUFFIX: what an editor would be shown."""
    result = pipeline.complete(
        CompletionRequest(text=PREFIX + SUFFIX, start=len(PREFIX), end=len(PREFIX), max_middle_tokens=16)
    )
    return result.fills[0].text if result.fills else ""


@pytest.fixture(scope="module")
def suffix_answer(client) -> str:
    """A generic `suffix` request for the same gap."""
    response = client.post("/v1/completions", json={"prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 16})
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]["text"]


def test_a_generic_suffix_request_gives_the_pipelines_fill_as_before(suffix_answer, expected):
    assert detect_language(PREFIX, SUFFIX) is None  # prose: what the pipeline is given below
    assert expected.strip(), "the tiny model wrote nothing for the prose gap: the comparisons below would be empty"
    assert suffix_answer == expected


@pytest.mark.parametrize("family", sorted(ZED_REQUESTS))
def test_each_fim_format_fills_the_middle_only(client, family, suffix_answer):
    model, prompt, stops = ZED_REQUESTS[family]
    body = {"model": model, "prompt": prompt, "max_tokens": 16, "stop": stops}  # Zed's RawCompletionRequest
    response = client.post("/v1/completions", json=body)
    assert response.status_code == 200, response.text
    answer = response.json()
    text = answer["choices"][0]["text"]
    assert text == suffix_answer  # the same gap as the suffix request: the markers were read, not continued
    assert not any(marker in text for fmt in FORMATS for marker in (fmt.prefix, fmt.suffix, fmt.closing) if marker)
    assert answer["infill"]["replace"] == [len(PREFIX), len(PREFIX)]  # offsets into the split prefix + suffix


@pytest.mark.parametrize("family", sorted(ZED_REQUESTS))
def test_split_gives_back_the_exact_prefix_and_suffix(family):
    split = split_fim_prompt(ZED_REQUESTS[family][1])
    assert split is not None and (split.prefix, split.suffix) == (PREFIX, SUFFIX)


def test_codellama_keeps_the_codes_own_spaces():
    split = split_fim_prompt("<PRE> x = 1 \n  <SUF> y\n <MID>")  # prefix "x = 1 \n ", suffix " y\n"
    assert split is not None and (split.prefix, split.suffix) == ("x = 1 \n ", " y\n")


@pytest.mark.parametrize(
    "prompt",
    [
        "def add(a, b):\n    return",  # a plain prompt
        "<|fim_prefix|>def f():<|fim_suffix|>\n",  # no closing marker: not the whole shape
        "<|fim_prefix|>def f():<|fim_middle|>",  # no separating marker
        "# <fim_prefix>x<fim_suffix>y<fim_middle>",  # markers not at the start
        "[PREFIX]a[SUFFIX]b",  # Codestral's markers in the wrong order
    ],
)
def test_prompts_that_are_not_a_whole_fim_prompt_stay_plain(prompt):
    assert split_fim_prompt(prompt) is None
    params = parse_completion_params({"prompt": prompt}, GatewaySettings())
    assert (params.prompt, params.suffix, params.fim_format) == (prompt, "", None)


def test_a_suffix_field_turns_fim_reading_off():
    prompt = ZED_REQUESTS["qwen"][1]
    params = parse_completion_params({"prompt": prompt, "suffix": ""}, GatewaySettings())
    assert (params.prompt, params.suffix, params.fim_format) == (prompt, "", None)
    params = parse_completion_params({"prompt": prompt}, GatewaySettings())
    assert (params.prompt, params.suffix, params.fim_format) == (PREFIX, SUFFIX, "qwen")
