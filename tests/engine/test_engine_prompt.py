"""Where the DiffusionGemma engine's prompt starts, on the tiny checkpoint: once a document's prefix outgrows
max_prompt_tokens, the engine cuts its far end where cache/tokens.py's `fit_prompt` says (the cut of the document's
last prompt while that still fits, else a new one with headroom), so typing at the cursor keeps the prompt's start
and its cached keys and values; and other files' code keeps the one extra-context budget."""

from __future__ import annotations

from infill.backends.offline.settings import ARSettings
from infill.cache.tokens import EXTRA_CONTEXT_TOKENS
from infill.engine.config import EngineConfig
from infill.engine.diffusion import DiffusionEngine
from infill.types import InfillRequest

LINES = "".join(f"x{i} = {i}\n" for i in range(100))  # ~750 tokens of the tiny tokenizer, ~7 a line


def test_typing_past_the_prompt_budget_keeps_the_prompt_start(tiny_engine):
    """max_prompt_tokens 128 under a ~750-token prefix: each keystroke at the end encodes only the typed tail. (With
    the start recomputed to fill the budget, it moved every line's worth of typing: all but BOS encoded again.)"""
    engine = DiffusionEngine(tiny_engine.loaded, EngineConfig(max_denoising_steps=1, max_prompt_tokens=128))
    text = LINES
    first = engine.infill(InfillRequest(prefix=text, document_id="doc"))
    assert first.prompt_tokens < len(engine.tokens.encode(LINES))  # the budget binds
    encoded_again = []
    for char in "total = x1 + x2 + x3 + x4":
        text += char
        result = engine.infill(InfillRequest(prefix=text, document_id="doc"))
        assert result.outcome in ("ok", "empty"), result.error
        encoded_again.append(result.prompt_tokens - result.reused_tokens)
    assert max(encoded_again) <= 2, encoded_again


def test_a_forgotten_document_starts_its_prompt_afresh(tiny_engine):
    engine = DiffusionEngine(tiny_engine.loaded, EngineConfig(max_denoising_steps=1, max_prompt_tokens=128))
    engine.prompt_ids(LINES, document_id="doc")
    assert engine.prompts.anchor("doc")  # cut: the first kept lines
    engine.forget("doc")
    assert engine.prompts.anchor("doc") == ""


def test_other_files_code_keeps_the_one_extra_context_budget(tiny_engine):
    """The engine keeps the last whole lines of other files' code within EXTRA_CONTEXT_TOKENS, the offline
    default's budget too."""
    extra = "".join(f"# pkg/m{i}.py\ndef helper_{i}(value):\n    return value + {i}\n" for i in range(40))
    assert len(tiny_engine.tokens.encode(extra)) > 2 * EXTRA_CONTEXT_TOKENS
    plain = tiny_engine.prompt_ids("x = compute(")
    with_extra = tiny_engine.prompt_ids("x = compute(", "", extra)
    kept = len(with_extra) - len(plain)
    assert EXTRA_CONTEXT_TOKENS - 20 <= kept <= EXTRA_CONTEXT_TOKENS
    assert with_extra[1 : 1 + kept] == tiny_engine.tokens.encode_tail(extra, EXTRA_CONTEXT_TOKENS)
    assert ARSettings().extra_context_tokens == EXTRA_CONTEXT_TOKENS
