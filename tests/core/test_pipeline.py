"""The whole path: context → real backend → post-processing → watchdog → fallback routing.

Backends are real (the tiny random DiffusionGemma engine, a real RemoteBackend whose endpoint refuses
connections, the offline Gemma 3 270M in the slow test) except `StutterBackend`, a test double for a *model output*:
it returns a fixed stuttering middle so a watchdog rejection can be triggered deterministically.
"""

from __future__ import annotations

import json
import socket
import time

import pytest

from infill.checks.postprocess import postprocess
from infill.context.syntax import ParsedDocument, error_nodes
from infill.pipeline import CompletionRequest, Pipeline, PipelineSettings, find_placeholders
from infill.types import UNSTEERED, BackendInfo, CancelToken, FillControl, InfillError, InfillResult

NOTES = "Shopping list for the weekend trip and other things to remember:\nbring the "


class StutterBackend:
    """Test double for a model output: always answers with the same stuttering middle."""

    def __init__(self, middle: str = "tent tent tent tent") -> None:
        self.middle = middle
        self.calls = 0
        self.requests: list = []  # (request, deadline) of every call

    @property
    def info(self) -> BackendInfo:
        return BackendInfo(name="stutter", kind="remote", model="fixed-output")

    def infill(self, request, control=UNSTEERED) -> InfillResult:
        self.calls += 1
        self.requests.append((request, control.deadline))
        return InfillResult(middles=(self.middle,) * request.gap_count, outcome="ok", backend="stutter")

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def warm_engine(tiny_engine):
    # One warm-up call so the first timed budget in these tests does not pay for lazy initialisation.
    Pipeline(tiny_engine).complete(CompletionRequest(NOTES, len(NOTES), document_id="warmup.txt"))
    return tiny_engine


@pytest.fixture
def refused_endpoint():
    """A real RemoteBackend aimed at a local port nothing listens on: every request fails with an error."""
    from infill.backends.remote import RemoteBackend

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    backend = RemoteBackend(f"http://127.0.0.1:{port}/v1", model="none", timeout_s=2.0, connect_timeout_s=1.0)
    yield backend
    backend.close()


def notes_request(**kw) -> CompletionRequest:
    return CompletionRequest(NOTES, len(NOTES), document_id="file:///notes.txt", version=3, **kw)


def test_primary_answer_is_shown_with_costs_and_a_log_record(warm_engine):
    pipeline = Pipeline(warm_engine)
    out = pipeline.complete(notes_request())
    assert out.route == "primary" and out.rejections == []
    assert len(out.fills) == 1 and out.fills[0].start == out.fills[0].end == len(NOTES)
    assert out.fills[0].text and "\n" not in out.fills[0].text  # the cursor is after text: one line
    assert out.version == 3 and out.single_line
    record = out.to_log()
    json.dumps(record)
    assert record["route"] == "primary" and record["backend"] == warm_engine.info.name
    assert record["costs_ms"][warm_engine.info.name] > 0 and record["context_ms"] >= 0
    assert pipeline.stats()["routes"] == {"primary": 1}


def test_watchdog_rejection_routes_to_the_fallback(warm_engine):
    primary = StutterBackend()
    pipeline = Pipeline(primary, fallback=warm_engine)
    out = pipeline.complete(notes_request())
    assert out.route == "fallback" and out.fills and "tent tent" not in out.fills[0].text
    assert out.rejections == [("stutter", "repetition")]
    assert set(out.costs) == {"stutter", warm_engine.info.name}
    assert pipeline.watchdog.counts["repetition"] == 1


def test_primary_cut_short_routes_to_the_fallback(warm_engine):
    # The primary gets 0.05% of a 20 s budget (10 ms): too short for 8 denoising steps, so it is cut short.
    settings = PipelineSettings(primary_share=0.0005)
    pipeline = Pipeline(warm_engine, fallback=warm_engine, settings=settings)
    out = pipeline.complete(notes_request(), FillControl(deadline=time.monotonic() + 20))
    assert out.rejections[0] == (warm_engine.info.name, "cut_short")
    assert out.route == "fallback" and out.fills


def test_primary_error_routes_to_the_fallback(refused_endpoint, warm_engine):
    pipeline = Pipeline(refused_endpoint, fallback=warm_engine)
    out = pipeline.complete(notes_request())
    assert out.rejections == [(refused_endpoint.info.name, "backend_error")]
    assert out.route == "fallback" and out.fills


def test_fallback_that_fails_too_shows_nothing(refused_endpoint):
    pipeline = Pipeline(StutterBackend(), fallback=refused_endpoint)
    out = pipeline.complete(notes_request())
    assert out.route == "none" and out.fills == []
    assert [reason for _, reason in out.rejections] == ["repetition", "backend_error"]


def test_without_a_fallback_a_rejected_candidate_shows_nothing():
    out = Pipeline(StutterBackend()).complete(notes_request())
    assert out.route == "none" and out.fills == [] and out.result.middle == "tent tent tent tent"


def test_random_engine_code_that_breaks_the_parse_is_never_returned(warm_engine):
    source = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    \n"
    pipeline = Pipeline(warm_engine, settings=PipelineSettings(max_middle_tokens=16, single_line_tokens=8))
    for cursor in (source.index("    \n") + 4, source.index("a + b") + 4, len(source)):
        out = pipeline.complete(CompletionRequest(source, cursor, language="python", document_id="m.py"))
        for fill in out.fills:
            assert_no_new_errors("python", source, fill.start, fill.end, fill.text)
    assert sum(pipeline.watchdog.counts.values()) >= 1  # random weights: at least one garbage fill was refused


def assert_no_new_errors(language: str, text: str, start: int, end: int, middle: str) -> None:
    before, after = ParsedDocument(language), ParsedDocument(language)
    before.update(text)
    after.update(text[:start] + middle + text[end:])
    assert error_nodes(after.tree) <= error_nodes(before.tree), middle


def test_empty_prefix_asks_no_backend():
    primary = StutterBackend("anything")
    pipeline = Pipeline(primary)
    out = pipeline.complete(CompletionRequest("   \n", 0, document_id="e.txt"))
    assert out.route == "none" and primary.calls == 0
    assert out.rejections == [("pipeline", "empty_prefix")] and pipeline.watchdog.counts["empty_prefix"] == 1


def test_cancelled_request_does_not_try_the_fallback(warm_engine):
    fallback = StutterBackend("fine words here")
    token = CancelToken()
    token.cancel("user typed on")
    out = Pipeline(warm_engine, fallback=fallback).complete(notes_request(), FillControl(cancel=token))
    assert out.route == "none" and fallback.calls == 0


def test_no_budget_left_skips_the_fallback():
    fallback = StutterBackend("fine words here")
    pipeline = Pipeline(StutterBackend(), fallback=fallback, settings=PipelineSettings(min_fallback_ms=60_000))
    out = pipeline.complete(notes_request(), FillControl(deadline=time.monotonic() + 5))
    assert out.route == "none" and fallback.calls == 0 and out.rejections[-1] == ("stutter", "no_budget")


def test_markdown_gaps_fill_every_placeholder_span(warm_engine):
    text = "# Contract\n\nThe buyer [[name]] pays {{amount}} by the date ____ below.\n"
    spans = tuple(find_placeholders(text))
    out = Pipeline(warm_engine).complete(
        CompletionRequest(text, 0, mode="gaps", spans=spans, language="markdown", document_id="c.md")
    )
    assert out.result is not None and len(out.result.middles) == 3
    if out.fills:  # random weights may be refused; when shown, every placeholder is replaced as a whole
        assert [(f.start, f.end) for f in out.fills] == list(spans)
        assert all("|" not in f.text and "\n" not in f.text for f in out.fills)


def test_table_placeholders_are_cleaned_cell_by_cell():
    text = "# Kit\n\n| item | weight |\n|------|--------|\n| [[item]] | {{weight}} |\n"
    spans = tuple(find_placeholders(text))
    out = Pipeline(StutterBackend("tent | 2 kg")).complete(
        CompletionRequest(text, 0, mode="gaps", spans=spans, language="markdown", document_id="kit.md")
    )
    assert out.route == "primary" and [f.text for f in out.fills] == ["tent", "tent"]
    assert [(f.start, f.end) for f in out.fills] == list(spans)


def test_gap_selection_of_whole_lines_is_replaced_by_whole_lines():
    text = "def f(x):\n    y = x\n    return y\n"
    start, end = text.index("    y = x"), text.index("    return")
    out = Pipeline(StutterBackend("y = x * 2")).complete(
        CompletionRequest(text, start, end, mode="gap", language="python")
    )
    assert out.route == "primary" and out.fills[0].text == "    y = x * 2\n"


def test_drafts_are_cleaned_before_they_reach_the_caller(warm_engine):
    drafts = []
    Pipeline(warm_engine).complete(notes_request(), FillControl(on_draft=drafts.append))
    assert drafts and all("\n" not in m for d in drafts for m in d.middles)


def test_concurrent_requests_for_one_document_each_judge_their_own_version():
    from concurrent.futures import ThreadPoolExecutor

    base = "".join(f"def f{i}(x):\n    return x + {i}\n\n\n" for i in range(200))
    pipeline = Pipeline(StutterBackend("value = 1"))

    def one(n: int):
        text = base + "def g():\n" + "    y = 2\n" * n + "    "
        out = pipeline.complete(CompletionRequest(text, len(text), language="python", document_id="same.py", version=n))
        return n, len(text), out

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(one, range(24)))
    for n, size, out in results:
        assert out.version == n and out.route == "primary"
        assert out.fills == [type(out.fills[0])(size, size, "value = 1")]
    # Each backend request was built from its own version's text (its own number of `y = 2` lines before the gap).
    prompts = {request.version: request.prefix for request, _ in pipeline.backend.requests}
    assert sorted(prompts) == list(range(24))
    assert all(prefix.endswith("def g():\n" + "    y = 2\n" * n + "    ") for n, prefix in prompts.items())


def test_settings_replaced_after_construction_apply_to_the_next_request():
    from dataclasses import replace

    pipeline = Pipeline(StutterBackend("2"))
    text = "def f():\n    "
    assert pipeline.complete(CompletionRequest(text, len(text), language="python")).max_middle_tokens == 64
    pipeline.settings = replace(pipeline.settings, max_middle_tokens=20)
    assert pipeline.complete(CompletionRequest(text, len(text), language="python")).max_middle_tokens == 20


def test_request_max_middle_tokens_caps_the_context_budget():
    backend = StutterBackend("2")
    pipeline = Pipeline(backend)
    text = "def f():\n    "
    assert (
        pipeline.complete(CompletionRequest(text, len(text), language="python", max_middle_tokens=5)).max_middle_tokens
        == 5
    )
    assert backend.requests[-1][0].max_middle_tokens == 5  # what the backend was asked for
    # A cap above the context's own budget leaves that budget.
    assert (
        pipeline.complete(
            CompletionRequest(text, len(text), language="python", max_middle_tokens=1000)
        ).max_middle_tokens
        == 64
    )
    for bad in (0, -3, 2.5, True):
        with pytest.raises(InfillError):
            pipeline.complete(CompletionRequest(text, len(text), max_middle_tokens=bad))


def test_primary_gets_the_whole_budget_without_a_fallback_and_0_6_with_one():
    alone, first, second = StutterBackend("2"), StutterBackend("2"), StutterBackend("2")
    text = "x = 1\ny = "
    request = CompletionRequest(text, len(text), language="python")
    deadline = time.monotonic() + 10
    Pipeline(alone).complete(request, FillControl(deadline=deadline))
    assert alone.requests[0][1] == deadline
    Pipeline(first, fallback=second).complete(request, FillControl(deadline=deadline))
    share = (first.requests[0][1] - (deadline - 10)) / 10
    assert 0.59 < share < 0.62 and second.calls == 0  # the primary answered; the fallback was not needed
    assert PipelineSettings().primary_share == 0.6


def test_counters_carry_over_to_a_replacement_pipeline():
    old = Pipeline(StutterBackend())
    old.complete(notes_request())
    old.complete(CompletionRequest("   ", 1))  # nothing before the cursor: empty_prefix
    new = Pipeline(StutterBackend("2"))
    new.carry_counters_from(old)
    assert (
        new.stats()
        == old.stats()
        == {"routes": {"none": 2}, "checked": 1, "rejected": {"repetition": 1, "empty_prefix": 1}}
    )
    new.complete(CompletionRequest("x = 1\ny = ", 10, language="python"))
    assert new.stats()["routes"] == {"none": 2, "primary": 1} and new.stats()["checked"] == 2


def test_bad_requests_are_refused_clearly():
    pipeline = Pipeline(StutterBackend())
    with pytest.raises(InfillError):
        pipeline.complete(CompletionRequest("abc", 5))
    with pytest.raises(InfillError):
        pipeline.complete(CompletionRequest("abc", 0, mode="gaps"))
    with pytest.raises(InfillError):
        pipeline.complete(CompletionRequest("abcdef", 0, mode="gaps", spans=((3, 4), (1, 2))))
    with pytest.raises(InfillError):
        PipelineSettings(primary_share=0)
    # ... and the pipeline stays usable
    out = Pipeline(StutterBackend("2")).complete(CompletionRequest("x = 1\ny = ", 10, language="python"))
    assert out.route == "primary" and out.fills[0].text == "2"


@pytest.mark.slow
def test_real_offline_model_never_returns_a_fill_that_breaks_the_parse(ar_backend):
    source = (
        "import math\n\n\ndef area(radius):\n    \n\n\ndef perimeter(radius):\n    return 2 * math.pi * radius\n\n\n"
        "def describe(shape, size):\n    if shape == 'circle':\n        return f'circle of {size}'\n    \n"
    )
    cursors = [source.index("    \n\n\ndef perimeter") + 4, len(source) - 1, source.index("math.pi") + 4]
    pipeline = Pipeline(ar_backend)
    shown = 0
    for cursor in cursors:
        out = pipeline.complete(
            CompletionRequest(source, cursor, language="python", document_id="shapes.py"),
            FillControl(deadline=time.monotonic() + 60),
        )
        for fill in out.fills:
            assert_no_new_errors("python", source, fill.start, fill.end, fill.text)
            shown += 1
    assert shown >= 1  # the real model does fill these holes; every fill it shows parses
    assert shown + sum(pipeline.watchdog.counts.values()) >= len(cursors)


@pytest.mark.parametrize("language", ["python", "markdown"])
def test_a_lone_surrogate_in_the_document_or_the_fill_is_no_crash(warm_engine, language):
    """A client can send a lone surrogate (LSP text is UTF-16); the parser gets U+FFFD in its place (same length, so
    offsets hold), and a fill carrying one (a remote endpoint's JSON can) loses it in cleaning."""
    text = "s = '\udcff'\nnote = "
    pipeline = Pipeline(warm_engine)
    out = pipeline.complete(CompletionRequest(text, len(text), language=language, document_id=f"lone.{language}"))
    assert out.result is not None and out.result.outcome != "error", out.result
    assert all("\udcff" not in f.text and f.start == len(text) for f in out.fills)
    prep = pipeline.prepare(CompletionRequest(text, len(text), language=language, document_id=f"lone.{language}"))
    assert postprocess("a\ud800b", prep.ctx, text, "") == "ab"
