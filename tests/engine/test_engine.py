"""The DiffusionGemma infill engine on a real (tiny, random-weight) DiffusionGemmaForBlockDiffusion."""

from __future__ import annotations

import time

import pytest
import torch
from counting_tokenizer import CountingTokenizer
from reference_sampler import reference_denoiser

from infill.cache.tokens import ChunkedTokenizer
from infill.engine.canvas import build_canvas
from infill.engine.config import EngineConfig
from infill.engine.denoise import CanvasFill, denoise, sample_step, sample_step_for
from infill.engine.diffusion import DiffusionEngine
from infill.engine.runner import PREFILL_CHUNK_TOKENS
from infill.types import CancelToken, FillControl, InfillRequest

PREFIX = "class Point:\n    def __init__(self, x, y):\n        self.x = x\n        self.y = "
SUFFIX = "\n\n    def norm(self):\n        return (self.x ** 2 + self.y ** 2) ** 0.5\n"


@pytest.fixture(scope="module")
def loaded(tiny_engine):
    return tiny_engine.loaded


def engine_with(loaded, sampler: str = "fast", **config) -> DiffusionEngine:
    denoiser = denoise if sampler == "fast" else reference_denoiser(loaded.model)
    return DiffusionEngine(loaded, EngineConfig(**{"max_denoising_steps": 8, **config}), denoiser=denoiser)


def until_stop(ids: list[int], stop: set[int]) -> list[int]:
    for i, token in enumerate(ids):
        if token in stop:
            return ids[:i]
    return ids


def test_reference_loop_reproduces_generate(loaded):
    """With an empty suffix, one canvas-wide row and a fixed seed, the engine with transformers' ops (the reference
    sampler of tests/reference_sampler.py) yields exactly the tokens of transformers' own model.generate() for a
    plain continuation. The prompt is longer than the sliding window, so the decoder's trimmed view of the
    full-history cache is what is compared."""
    engine = engine_with(loaded, sampler="reference", candidate_lengths=(64,), seed=1234)
    prefix = PREFIX * 8
    assert len(engine.prompt_ids(prefix)) > loaded.model.config.text_config.sliding_window
    request = InfillRequest(prefix=prefix, max_middle_tokens=64)
    result = engine.infill(request)
    assert result.outcome in ("ok", "empty") and result.steps >= 1

    prompt = torch.tensor([engine.prompt_ids(prefix)])
    torch.manual_seed(1234)
    out = loaded.model.generate(prompt, max_new_tokens=64, max_denoising_steps=8)
    theirs = until_stop(out.sequences[0, prompt.shape[1] :].tolist(), engine.stop_ids)
    assert result.middle == engine._decode(theirs, single_line=False)
    assert len(theirs) > 0  # a random model still writes something: the comparison is not vacuous


def test_both_samplers_run_the_clamped_candidate_batch(loaded):
    """Both samplers run the same infill path (candidate rows that fit beside the anchor, stopping within the step
    budget) and produce text ("ok" means a non-empty middle). Their token-level equivalence is tested in
    test_sampler.py and by the generate() reproduction above."""
    fast = engine_with(loaded, sampler="fast").infill(InfillRequest(prefix=PREFIX, suffix=SUFFIX))
    ref = engine_with(loaded, sampler="reference").infill(InfillRequest(prefix=PREFIX, suffix=SUFFIX))
    for result in (fast, ref):
        assert result.outcome == "ok", result.error
        assert 1 <= result.steps <= 8
        assert result.versions["candidate_lengths"] == [4, 8, 16, 32]  # 64 does not fit beside the 16-token anchor


def run_denoise(engine, prefix, fixed, lengths, on_step=None, cancel=None, deadline=None, seed=0):
    """The engine's denoiser (fast or reference) on a canvas built by hand."""
    ids = torch.tensor(engine.prompt_ids(prefix))
    gen = torch.Generator().manual_seed(seed)
    with torch.inference_mode():
        engine._encode_prompt("test-direct", ids)
        canvas = build_canvas(lengths, fixed, ids.numel(), engine.pad_id, engine.device)
        return canvas, engine.denoiser(
            CanvasFill(canvas, ids, engine.runner),
            engine.config,
            gen,
            cancel=cancel,
            deadline=deadline,
            on_step=on_step,
        )


@pytest.mark.parametrize("sampler", ["fast", "reference"])
def test_suffix_and_fixed_text_stay_clamped_every_step(loaded, sampler):
    engine = engine_with(loaded, sampler=sampler)
    between = engine.tokens.encode(", 'b': ")
    anchor = engine.tokens.encode("}\nprint(x)\n")
    seen = []
    canvas, out = run_denoise(
        engine,
        "x = {'a': ",
        [between, anchor],
        [3, 6],
        on_step=lambda step, argmax, conf, score, finished: seen.append(argmax.clone()),
    )
    assert seen, "no step ran"
    clamped = canvas.anchor
    for argmax in seen + [out.tokens]:
        assert torch.equal(argmax[clamped], canvas.fixed_tokens[clamped])
    # row 0 (length 3) is padded to row 1's width; its pad slots hold pad, its free slots sit before the anchors
    assert not bool(canvas.valid.all()) and not bool(canvas.valid[0, -3:].any())
    assert canvas.gap_of[0].tolist()[:3] == [0, 0, 0] and canvas.gap_of[1].tolist()[:6] == [0] * 6


def test_padded_row_computes_what_it_would_alone(loaded):
    """Per-row key masks make a short row in a batch equal to the same row run unbatched (float tolerance)."""
    engine = engine_with(loaded, max_denoising_steps=1)
    anchor = engine.tokens.encode(" + 1\n")
    captured = {}

    def grab(name):
        return lambda step, argmax, conf, score, finished: captured.setdefault(name, (argmax.clone(), score.clone()))

    run_denoise(engine, PREFIX, [anchor], [4, 12], on_step=grab("batched"))
    run_denoise(engine, PREFIX, [anchor], [4], on_step=grab("alone"))
    batched_score, alone_score = captured["batched"][1][0], captured["alone"][1][0]
    assert torch.allclose(batched_score, alone_score, atol=1e-4)
    width = 4 + len(anchor)  # the 4 free slots and the clamped anchor after them
    assert torch.equal(captured["batched"][0][0, :width], captured["alone"][0][0, :width])


def test_cancellation_stops_within_one_step(loaded):
    engine = engine_with(loaded, max_denoising_steps=8, confidence_threshold=1e-9)
    token = CancelToken()
    steps = []

    def on_draft(draft):
        steps.append(draft.step)
        if draft.step == 2:
            token.cancel("user typed")

    result = engine.infill(InfillRequest(prefix=PREFIX, suffix=SUFFIX), FillControl(cancel=token, on_draft=on_draft))
    assert result.outcome == "cancelled"
    assert steps == [1, 2]


def test_cancelled_before_start_runs_no_step(loaded):
    engine = engine_with(loaded)
    token = CancelToken()
    token.cancel()
    calls = []
    result = engine.infill(InfillRequest(prefix=PREFIX), FillControl(cancel=token, on_draft=calls.append))
    assert result.outcome == "cancelled" and calls == [] and result.steps == 0


def test_deadline_returns_draft_flagged_cut_short(loaded):
    engine = engine_with(loaded, max_denoising_steps=8, confidence_threshold=1e-9)
    deadline = time.monotonic() + 0.05
    drafts = []

    def slow_reader(draft):  # the step overruns the deadline
        drafts.append(draft)
        time.sleep(max(0.0, deadline - time.monotonic()) + 0.01)

    result = engine.infill(
        InfillRequest(prefix=PREFIX, suffix=SUFFIX), FillControl(deadline=deadline, on_draft=slow_reader)
    )
    assert result.outcome == "cut_short" and result.cut_short
    assert result.steps == 1 and len(drafts) == 1
    assert result.middle == drafts[0].middles[0]
    assert len(drafts[0].confidence) > 0 and all(0.0 <= c <= 1.0 for c in drafts[0].confidence)


def test_kv_reuse_matches_fresh_prefill_and_encodes_only_the_tail(loaded):
    engine = engine_with(loaded)
    fresh = engine_with(loaded)
    text = PREFIX * 20
    counting = CountingTokenizer(engine.tokenizer)
    engine.tokens = ChunkedTokenizer(counting)
    engine.infill(InfillRequest(prefix=text, suffix=SUFFIX, document_id="doc"))
    before = len(counting.texts)
    edited = text + "x"
    reused_result = engine.infill(InfillRequest(prefix=edited, suffix=SUFFIX, document_id="doc", seed=7))
    of_the_prefix = [t for t in counting.texts[before:] if t in edited]  # (the suffix anchor is tokenised anew)
    assert of_the_prefix == [edited.rsplit("\n", 1)[1]]  # only the edited line was tokenised again
    assert reused_result.prompt_tokens - reused_result.reused_tokens <= 6
    assert reused_result.reused_tokens > 200

    ids = torch.tensor(engine.prompt_ids(edited))
    assert engine.prompts.claim("doc", ids) == ids.numel()
    with torch.inference_mode():
        fresh_reused, _ = fresh._encode_prompt("other", ids)
    assert fresh_reused == 0
    n = ids.numel()
    mine, theirs = engine.runner.kv, fresh.runner.kv
    for a, b in zip(mine.keys + mine.values, theirs.keys + theirs.values):
        assert torch.allclose(a[:, :n], b[:, :n], atol=1e-5)
    fresh_result = fresh.infill(InfillRequest(prefix=edited, suffix=SUFFIX, seed=7))
    assert fresh_result.middle == reused_result.middle


def test_warm_encodes_the_prompt_ahead_so_the_infill_only_denoises(loaded):
    engine, fresh = engine_with(loaded), engine_with(loaded)
    request = InfillRequest(prefix=PREFIX * 20, suffix=SUFFIX, document_id="doc", seed=3)
    held = engine.warm(request)
    assert held == len(engine.prompt_ids(request.prefix)) > 200
    warmed = engine.infill(request)
    assert warmed.reused_tokens == warmed.prompt_tokens == held  # nothing left to encode
    assert warmed.middle == fresh.infill(request).middle  # and the same fill as without warming
    # A cancelled warm encodes nothing more and leaves the cache usable.
    token = CancelToken()
    token.cancel()
    edited = InfillRequest(prefix=request.prefix + "z = 1\n", suffix=SUFFIX, document_id="doc", seed=3)
    assert engine.warm(edited, cancel=token) == 0
    assert engine.infill(edited).reused_tokens >= held - 8
    # Cancelled between prefill chunks: it stops after the first chunk and keeps it for the next request.
    long = InfillRequest(prefix=PREFIX * 40, suffix=SUFFIX, document_id="long", seed=3)
    assert engine.warm(long, cancel=CancelAfterChecks(1)) == PREFILL_CHUNK_TOKENS < len(engine.prompt_ids(long.prefix))
    assert engine.infill(long).reused_tokens == PREFILL_CHUNK_TOKENS


class CancelAfterChecks(CancelToken):
    """A token that reads as cancelled from its (n+1)-th check on: the moment a client's cancel would land."""

    __slots__ = ("_left",)

    def __init__(self, checks: int) -> None:
        super().__init__()
        self._left = checks

    @property
    def cancelled(self) -> bool:
        self._left -= 1
        return self._left < 0


def test_other_documents_are_kept_within_the_kv_store_bound(loaded):
    """The live buffers hold one document; the others are stashed beside them, least recently used evicted beyond
    kv_store_bytes, and a document that comes back is copied back, not encoded again."""
    probe = engine_with(loaded)
    probe.infill(InfillRequest(prefix=PREFIX * 10 + "0", document_id="probe"))
    probe.infill(InfillRequest(prefix="x = 1\n", document_id="other"))
    one_entry = probe.prompts.stashed_bytes
    assert one_entry > 0
    engine = engine_with(loaded, kv_store_bytes=int(one_entry * 2.5))
    for doc in range(6):
        engine.infill(InfillRequest(prefix=PREFIX * 10 + str(doc), document_id=f"doc{doc}"))
    assert engine.prompts.stashed_bytes <= one_entry * 2.5
    assert len(engine.prompts) == 3  # the live one and the two most recent before it; older ones evicted
    back = engine.infill(InfillRequest(prefix=PREFIX * 10 + "4", document_id="doc4"))
    assert back.reused_tokens == back.prompt_tokens  # copied back whole
    evicted = engine.infill(InfillRequest(prefix=PREFIX * 10 + "0", document_id="doc0"))
    assert evicted.reused_tokens == 0


def test_a_closed_document_is_forgotten_live_or_stashed(loaded):
    """Forgetting a document drops its keys and values whether the buffers hold it or it is stashed; the other
    documents keep theirs, and a forgotten one that comes back is encoded anew."""
    engine = engine_with(loaded)
    for key in ("stashed", "kept", "live"):
        engine.infill(InfillRequest(prefix=PREFIX * 4 + key, document_id=key))
    assert len(engine.prompts) == 3
    engine.forget("stashed")
    engine.forget("live")
    assert len(engine.prompts) == 1 and engine.prompts.owner is None  # "kept", stashed
    kept = engine.infill(InfillRequest(prefix=PREFIX * 4 + "kept", document_id="kept"))
    assert kept.reused_tokens == kept.prompt_tokens
    again = engine.infill(InfillRequest(prefix=PREFIX * 4 + "live", document_id="live"))
    assert again.reused_tokens == 0


def test_a_prompt_too_large_for_the_kv_store_is_said_once(loaded, caplog):
    probe = engine_with(loaded)
    probe.infill(InfillRequest(prefix=PREFIX * 10, document_id="probe"))
    probe.infill(InfillRequest(prefix="x", document_id="other"))
    engine = engine_with(loaded, kv_store_bytes=probe.prompts.stashed_bytes // 2)
    with caplog.at_level("WARNING", logger="infill.engine.kv"):
        for key in ("big", "small", "big", "small", "big"):
            engine.infill(InfillRequest(prefix=PREFIX * 10 if key == "big" else "x", document_id=key))
    assert len(engine.prompts) == 2  # the live "big" and the stashed "small" only
    assert [r.getMessage().startswith("prompt cache for big not kept") for r in caplog.records] == [True]


def test_multi_gap_fills_every_gap(loaded):
    engine = engine_with(loaded)
    request = InfillRequest(
        prefix="This Agreement is made between ",
        between=(" and ",),
        suffix=" on the first day of each month.\n",
        max_middle_tokens=8,
    )
    result = engine.infill(request)
    assert result.outcome == "ok", result.error
    assert len(result.middles) == 2 and all(result.middles)
    assert result.versions["middle_length"] in result.versions["candidate_lengths"]


@pytest.mark.parametrize("prefix,suffix", [("", "print(1)\n"), ("x = ", ""), ("", "")])
def test_empty_prefix_or_suffix(loaded, prefix, suffix):
    result = engine_with(loaded).infill(InfillRequest(prefix=prefix, suffix=suffix))
    assert result.outcome in ("ok", "empty") and result.error is None


def test_prompt_longer_than_context_keeps_the_near_end(loaded):
    engine = engine_with(loaded, max_prompt_tokens=64)
    lines = "".join(f"value_{i} = {i}\n" for i in range(200))
    ids = engine.prompt_ids(lines)
    assert len(ids) <= 64
    near = engine.tokens.encode("value_199 = 199\n")
    assert ids[-len(near) :] == near
    assert engine.infill(InfillRequest(prefix=lines)).outcome in ("ok", "empty")


def test_lone_surrogates_do_not_break_the_engine(loaded):
    result = engine_with(loaded).infill(InfillRequest(prefix="s = '\udcff", suffix="'\n"))
    assert result.outcome in ("ok", "empty"), result.error


def test_fixed_text_that_cannot_fit_is_a_clear_error(loaded):
    engine = engine_with(loaded)
    result = engine.infill(InfillRequest(prefix="a", between=("word " * 200,), suffix="b"))
    assert result.outcome == "error" and "canvas holds" in result.error
    long_suffix = engine.infill(InfillRequest(prefix="a = ", suffix="b" * 5000))
    assert long_suffix.outcome in ("ok", "empty")  # the anchor is cut to fit, the rest of the suffix is ignored


def test_model_raising_mid_loop_leaves_engine_usable(loaded):
    engine = engine_with(loaded, confidence_threshold=1e-9)
    calls = {"n": 0}
    layer = engine.runner.layer_fn

    def explode(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == len(engine.weights.encoder) + 2:  # the first denoising step's second layer
            raise RuntimeError("simulated device failure")
        return layer(*args, **kwargs)

    engine.runner.layer_fn = explode
    try:
        failed = engine.infill(InfillRequest(prefix=PREFIX, document_id="boom"))
    finally:
        engine.runner.layer_fn = layer
    assert failed.outcome == "error" and "simulated device failure" in failed.error
    again = engine.infill(InfillRequest(prefix=PREFIX + "q", document_id="boom"))
    assert again.outcome == "ok" and again.reused_tokens > 0


def test_result_carries_versions_and_timings(loaded):
    result = engine_with(loaded).infill(InfillRequest(prefix=PREFIX, suffix=SUFFIX, version=42))
    assert result.version == 42
    for key in ("model", "revision", "dtype", "entropy_bound", "t_min", "t_max", "max_denoising_steps"):
        assert key in result.versions
    assert result.timings.total_ms >= result.timings.encode_ms + result.timings.denoise_ms - 1
    assert result.tokens_per_forward > 0


def test_suffix_in_prompt_goes_before_the_prefix_and_keeps_kv_reuse(loaded):
    engine = engine_with(loaded, suffix_in_prompt_tokens=24)
    ids = engine.prompt_ids(PREFIX, SUFFIX)
    framed = engine.tokens.encode(engine.config.suffix_frame[0]) + engine.tokens.encode_head(SUFFIX, 24)
    assert ids[1 : 1 + len(framed)] == framed
    assert ids[-len(engine.tokens.encode(PREFIX)) :] == engine.tokens.encode(PREFIX)
    engine.infill(InfillRequest(prefix=PREFIX, suffix=SUFFIX, document_id="framed"))
    typed = engine.infill(InfillRequest(prefix=PREFIX + "s", suffix=SUFFIX, document_id="framed"))
    assert typed.outcome == "ok" and typed.prompt_tokens - typed.reused_tokens <= 4


def test_long_prefill_stops_for_cancel_and_keeps_its_work(loaded):
    """A prefill is encoded in chunks: a cancel between chunks stops it, and what was encoded stays in the store
    so the next keystroke resumes instead of starting over."""
    engine = engine_with(loaded)
    text = "".join(f"value_{i} = {i}\n" for i in range(300))
    token = CancelToken()
    calls = {"n": 0}
    encode = engine.runner.encode

    def cancel_after_first_chunk(ids, start):
        encode(ids, start)
        calls["n"] += 1
        token.cancel("typed on")

    engine.runner.encode = cancel_after_first_chunk
    try:
        stopped = engine.infill(InfillRequest(prefix=text, document_id="long"), FillControl(cancel=token))
    finally:
        engine.runner.encode = encode
    assert stopped.outcome == "cancelled" and calls["n"] == 1
    resumed = engine.infill(InfillRequest(prefix=text, document_id="long"))
    assert resumed.outcome in ("ok", "empty")
    assert resumed.reused_tokens == PREFILL_CHUNK_TOKENS


def test_single_line_canvas_depends_on_the_device(loaded):
    assert EngineConfig().single_line_lengths_for("cpu") == (24,)
    assert EngineConfig().single_line_lengths_for("cuda:0") == (6, 12, 24)
    assert EngineConfig(single_line_lengths=(4, 8)).single_line_lengths_for("cpu") == (4, 8)
    result = engine_with(loaded).infill(InfillRequest(prefix="x = compute(", suffix=")\nprint(x)\n", single_line=True))
    assert result.versions["candidate_lengths"] == [24] and "\n" not in result.middle


def test_the_sampling_half_of_the_step_traces_as_one_graph(loaded, monkeypatch):
    """torch.compile(fullgraph=True) refuses a host sync or a branch on a tensor value; the eager backend traces
    without compiling anything, and the traced step gives what the plain one gives."""
    import torch._dynamo

    engine = engine_with(loaded)
    args = []
    capture = lambda *a: args.append(a) or sample_step(*a)  # noqa: E731
    anchor = engine.tokens.encode(" + 1\n")
    monkeypatch.setattr("infill.engine.runner.sample_step_for", lambda device_type: capture)
    run_denoise(engine, PREFIX, [anchor], [4, 12])
    assert args
    torch._dynamo.reset()
    traced = torch.compile(sample_step, backend="eager", fullgraph=True)
    with torch.inference_mode():
        a = args[0]
        plain = sample_step(a[0].clone(), *a[1:])
        graph = traced(a[0].clone(), *a[1:])
    for x, y in zip(plain.tensors(), graph.tensors()):
        assert torch.equal(x, y)


def test_the_step_compiles_only_for_cuda(monkeypatch):
    """No GPU here: torch.compile is recorded, not run (the one thing that cannot exist on this machine)."""
    calls = []

    def fake_compile(fn, **options):
        calls.append((fn, options))
        return fn

    sample_step_for.cache_clear()
    monkeypatch.setattr(torch, "compile", fake_compile)
    try:
        assert sample_step_for("cpu") is sample_step and calls == []
        assert sample_step_for("cuda") is not sample_step
        assert calls == [(sample_step, {"mode": "reduce-overhead", "fullgraph": True})]
        assert sample_step_for("cuda") is sample_step_for("cuda") and len(calls) == 1  # compiled once
    finally:
        sample_step_for.cache_clear()


def test_a_one_line_code_fill_keeps_the_call_it_wraps(loaded):
    # The engine cut every one-line fill at its first newline, so it handed the watchdog an open `f(a,`; it now
    # ends a one-line fill where every stage does (languages.one_line_fill): code keeps a call it wraps and closes.
    engine = engine_with(loaded)
    ids = engine.tokenizer.encode("f(a,\n    b)\nx = 1", add_special_tokens=False)
    code = InfillRequest(prefix="y = ", suffix="\nreturn y", single_line=True, language="python")
    prose = InfillRequest(prefix="See ", single_line=True, language="markdown")
    assert engine._decode(ids, True, code.wraps_lines) == "f(a,\n    b)"
    assert engine._decode(ids, True, prose.wraps_lines) == "f(a,"
