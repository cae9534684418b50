"""A GGUF the user has, on llama.cpp in-process (infill/backends/offline/user_model.py, fim.py, routed.py): tiny
random llama-architecture GGUFs written by the test (tests/tiny_gguf.py) run for real through llama.cpp."""

from __future__ import annotations

import pytest
from tiny_gguf import QWEN_FIM, write_tiny_gguf

from infill.backends.choose import BackendSpec, open_backend
from infill.backends.offline.fim import read_fim_tokens
from infill.backends.offline.routed import RoutedBackend, open_user_model, serves_keystrokes
from infill.backends.offline.settings import ARSettings
from infill.backends.offline.user_model import load_user_backend
from infill.loader import open_pipeline
from infill.types import InfillError, InfillRequest

SETTINGS = ARSettings(documents=2, max_prompt_tokens=256, fresh_prompt_tokens=128, num_threads=1, draft_tokens=0)
CUSTOM_FIM = {"pre": "<begin_hole>", "suf": "<after_hole>", "mid": "<fill_hole>", "pad": "<hole_done>"}


@pytest.fixture(scope="module")
def qwen_fim(tmp_path_factory):
    """FIM tokens named only by their texts (Qwen's), and a model that always writes "x"."""
    model = write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "qwen-fim.gguf", fim_texts=QWEN_FIM, favourite="x")
    backend = load_user_backend(model.path, SETTINGS)
    yield model, backend
    backend.close()


def test_fim_tokens_from_the_metadata_keys(tmp_path):
    model = write_tiny_gguf(tmp_path / "m.gguf", fim_texts=CUSTOM_FIM, fim_in_metadata=True, name="Keyed")
    backend = load_user_backend(model.path, SETTINGS)
    try:
        fim = backend.prompts.fim
        assert fim is not None and fim.source == "metadata"
        assert (fim.prefix, fim.suffix, fim.middle) == (
            model.fim_ids["pre"],
            model.fim_ids["suf"],
            model.fim_ids["mid"],
        )
        assert model.fim_ids["pad"] in fim.ends and fim.file_separator is None
        assert backend.info.label == "Keyed (fill-in-the-middle)" and backend.info.name == "gguf:Keyed"
    finally:
        backend.close()


def test_custom_texts_without_keys_are_no_fim(tmp_path):
    """Texts no family uses, and no keys: the model has no FIM as far as anyone can tell; prefix only."""
    model = write_tiny_gguf(tmp_path / "m.gguf", fim_texts=CUSTOM_FIM, name="Unkeyed")
    backend = load_user_backend(model.path, SETTINGS)
    try:
        assert backend.prompts.fim is None
        assert backend.info.label == "Unkeyed (prefix only: no FIM tokens)"
        assert backend.versions["prompt"] == "prefix-only"
        request = InfillRequest(prefix="def f(a):\n    return ", suffix="\n", single_line=True, document_id="d")
        assert backend.prompts.fit(request.prefix, request, request.suffix).ids[-1] != model.fim_ids["mid"]
    finally:
        backend.close()


def test_fim_tokens_from_known_texts(qwen_fim):
    model, backend = qwen_fim
    fim = backend.prompts.fim
    assert fim is not None and fim.source == "token texts"
    assert (fim.prefix, fim.suffix, fim.middle) == (model.fim_ids["pre"], model.fim_ids["suf"], model.fim_ids["mid"])
    assert fim.file_separator == model.fim_ids["sep"] and fim.repository == model.fim_ids["rep"]
    assert {model.fim_ids["pad"], model.fim_ids["sep"]} <= fim.ends
    assert backend.versions["prompt"] == "fim-psm (token texts)"


def test_read_fim_tokens_prefers_the_metadata():
    keys = {"tokenizer.ggml.fim_pre_token_id": "7", "tokenizer.ggml.fim_suf_token_id": "8"}
    texts = {"<|fim_prefix|>": 1, "<|fim_suffix|>": 2, "<|fim_middle|>": 3, "<PRE>": 4, "<SUF>": 5, "<MID>": 6}
    # an incomplete triple in the keys: the texts decide
    found = read_fim_tokens(keys.get, texts.get)
    assert found is not None and (found.prefix, found.suffix, found.middle, found.source) == (1, 2, 3, "token texts")
    keys["tokenizer.ggml.fim_mid_token_id"] = "9"
    found = read_fim_tokens(keys.get, texts.get)
    assert found is not None and (found.prefix, found.suffix, found.middle, found.source) == (7, 8, 9, "metadata")
    codellama = {k: v for k, v in texts.items() if not k.startswith("<|")}
    found = read_fim_tokens({}.get, codellama.get)
    assert found is not None and (found.prefix, found.suffix, found.middle) == (4, 5, 6)
    assert read_fim_tokens({}.get, {"<|fim_prefix|>": 1}.get) is None


def test_fim_prompt_is_prefix_suffix_middle(qwen_fim):
    model, backend = qwen_fim
    prefix, suffix = "def add(a, b):\n    return ", "\n\nprint(add(1, 2))\n"
    request = InfillRequest(prefix=prefix, suffix=suffix, single_line=True, document_id="order")
    ids = backend.prompts.fit(prefix, request, suffix).ids
    tokens = backend.runtime.tokenize
    bos, pre, suf, mid = model.ids["<s>"], model.fim_ids["pre"], model.fim_ids["suf"], model.fim_ids["mid"]
    assert ids == [bos, pre, *backend.tokens.encode(prefix), suf, *tokens(suffix), mid]


def test_other_files_stand_behind_file_separators(qwen_fim):
    model, backend = qwen_fim
    request = InfillRequest(
        prefix="x = ", suffix="\n", extra_context="# other.py\ndef helper(): ...\n", document_id="o"
    )
    ids = backend.prompts.fit(request.prefix, request, request.suffix).ids
    sep, pre = model.fim_ids["sep"], model.fim_ids["pre"]
    assert ids[1] == sep and ids.index(pre) > ids.index(sep, 2) > 1


def test_fim_fill_runs_through_llama_cpp_and_reuses_the_document(qwen_fim):
    _, backend = qwen_fim
    request = InfillRequest(prefix="value = ", suffix="\nprint(value)\n", single_line=True, document_id="doc")
    first = backend.infill(request)
    assert first.outcome == "ok" and first.middles[0].startswith("xxx"), first
    assert first.versions["prompt"] == "fim-psm (token texts)"
    again = backend.infill(
        InfillRequest(prefix="value = ", suffix="\nprint(value)\n", single_line=True, document_id="doc")
    )
    assert again.reused_tokens == again.prompt_tokens - 1  # all but the last token, fed again for its logits


def test_fill_ends_at_the_models_end_of_fill_token(tmp_path):
    """The same model that writes "x" forever, made to write its FIM pad instead: the fill ends there, empty."""
    for favourite, expect_text in (("x", True), (QWEN_FIM["pad"], False)):
        model = write_tiny_gguf(tmp_path / f"{expect_text}.gguf", fim_texts=QWEN_FIM, favourite=favourite)
        backend = load_user_backend(model.path, SETTINGS)
        try:
            result = backend.infill(
                InfillRequest(prefix="a = ", suffix="\n", max_middle_tokens=8, single_line=True, document_id="d")
            )
        finally:
            backend.close()
        assert bool(result.middles[0]) is expect_text, result
        assert result.steps == (8 if expect_text else 0)


def test_keystrokes_go_where_a_line_is_written_within_300_ms(qwen_fim, tmp_path):
    _, backend = qwen_fim
    measured = backend.token_s
    assert measured is not None and measured > 0  # measured at load
    try:
        backend.token_s = 0.020  # 12 tokens a line: 240 ms
        assert serves_keystrokes(backend, "auto") and not serves_keystrokes(backend, "no")
        backend.token_s = 0.030  # 360 ms
        assert not serves_keystrokes(backend, "auto") and serves_keystrokes(backend, "yes")
    finally:
        backend.token_s = measured
    model = write_tiny_gguf(tmp_path / "fast.gguf", fim_texts=QWEN_FIM)
    opened = open_user_model(str(model.path), "yes", SETTINGS)
    try:
        assert not isinstance(opened, RoutedBackend) and opened.info.name == "gguf:Tiny FIM Coder"
    finally:
        opened.close()
    with pytest.raises(InfillError, match="offlineModelKeystrokes"):
        open_user_model(str(model.path), "sometimes", SETTINGS)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p / "missing.gguf", "no file at"),
        (lambda p: p, "is not a file"),
        (lambda p: (p / "notes.gguf").write_text("# not a model\n") and p / "notes.gguf", "is not a GGUF file"),
        (
            lambda p: write_tiny_gguf(p / "odd.gguf", architecture="no-such-architecture").path,
            "could not load .*odd.gguf.*unknown model architecture",
        ),
    ],
)
def test_a_file_that_cannot_serve_is_a_clear_error(tmp_path, make, message):
    with pytest.raises(InfillError, match=message):
        load_user_backend(make(tmp_path), SETTINGS)


def test_spec_routes_a_gguf_model_path_to_llama_cpp(tmp_path):
    assert BackendSpec(model=str(tmp_path / "coder.GGUF")).kind == "autoregressive"
    assert BackendSpec(model=str(tmp_path / "coder.GGUF")).gguf == str(tmp_path / "coder.GGUF")
    assert BackendSpec(model="google/diffusiongemma").kind == "diffusion"
    assert BackendSpec(offline_model="/m.gguf").kind == "autoregressive"
    assert BackendSpec(offline_model="/m.gguf", endpoint="http://x").kind == "remote"
    model = write_tiny_gguf(tmp_path / "coder.gguf", fim_texts=QWEN_FIM, name="Spec Coder")
    backend = open_backend(BackendSpec(model=str(model.path)))
    try:
        assert backend.info.label == "Spec Coder (fill-in-the-middle)"
    finally:
        backend.close()


@pytest.mark.slow
def test_bad_offline_model_leaves_gemma_serving_with_the_error(tmp_path):
    opened = open_pipeline(BackendSpec(offline_model=str(tmp_path / "nowhere.gguf")), settings=None)
    try:
        assert opened.model_error is not None and "nowhere.gguf" in opened.model_error
        assert "no file at" in opened.model_error
        assert opened.pipeline.backend.info.name.startswith("gemma3-270m")
    finally:
        for backend in opened.backends:
            backend.close()


@pytest.mark.slow
def test_slow_model_leaves_keystrokes_to_gemma(qwen_fim):
    model, _ = qwen_fim
    routed = open_user_model(str(model.path), "no", SETTINGS)
    try:
        assert isinstance(routed, RoutedBackend)
        assert "explicit requests and Fill gap" in routed.info.label and "keystrokes" in routed.info.label
        typed = InfillRequest(prefix="total = ", suffix="\n", single_line=True, document_id="k", keystroke=True)
        asked = InfillRequest(prefix="total = ", suffix="\n", single_line=True, document_id="k")
        assert routed.infill(typed).backend.startswith("gemma3-270m")
        assert routed.infill(asked).backend == "gguf:Tiny FIM Coder"
        assert routed.warm(typed) > 0 and "k" in routed.keystrokes.sequences
        routed.forget("k")
        assert "k" not in routed.keystrokes.sequences and "k" not in routed.explicit.sequences
    finally:
        routed.close()
