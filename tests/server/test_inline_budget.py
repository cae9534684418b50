"""The inline budget is a runaway guard measured on this machine (server/scheduling.py), not a deadline shorter than
the model's honest time: a slow model still shows its suggestion with default settings, the status says when the
machine is too slow for automatic suggestions, and an explicit inlineBudgetMs still wins."""

from __future__ import annotations

import asyncio

import pytest
import pytest_asyncio
from lsp_helpers import log_text, open_doc, start, status, wait_ready
from lsprotocol import types

from server.budget import GUARD_CAP_MS, GUARD_FACTOR, GUARD_FLOOR_MS, MIN_SAMPLES, TOO_SLOW_P50_MS, BudgetPolicy
from server.settings import Settings, parse_settings

# -- the policy itself ------------------------------------------------------------------------------------------


def test_the_guard_is_the_cap_until_fills_were_timed_then_a_multiple_of_their_p95():
    policy = BudgetPolicy()
    assert policy.budget_ms(None) == GUARD_CAP_MS
    for ms in (800, 900, 1000):
        policy.record_fill(ms)
    assert policy.budget_ms(None) == pytest.approx(GUARD_FACTOR * 990)  # p95 of 800/900/1000 (interpolated)
    policy.record_fill(100_000)  # a runaway: the guard grows, but never past the cap
    assert policy.budget_ms(None) == GUARD_CAP_MS


def test_the_guard_has_a_floor_and_an_explicit_setting_wins():
    policy = BudgetPolicy()
    for _ in range(MIN_SAMPLES):
        policy.record_fill(50)  # a fast machine: a guard of 200 ms would cut a hiccup
    assert policy.budget_ms(None) == GUARD_FLOOR_MS
    assert policy.budget_ms(600) == 600


def test_too_slow_is_reported_once_the_median_fill_is_slow_and_flips_back():
    policy = BudgetPolicy()
    changes = [policy.record_fill(TOO_SLOW_P50_MS * 2) for _ in range(MIN_SAMPLES)]
    assert changes == [False] * (MIN_SAMPLES - 1) + [True] and policy.too_slow
    report = policy.status(None, None)
    assert report["tooSlowForTyping"] is True and "remoteEndpoint" in report["note"]
    assert report["source"] == {"inline": "measured", "invoked": "measured"}
    flips = [policy.record_fill(100) for _ in range(2 * MIN_SAMPLES)]
    assert flips.count(True) == 1 and not policy.too_slow
    policy.reset()
    assert policy.status(700, None)["source"] == {"inline": "setting", "invoked": "cap"}


def test_budget_settings_default_to_measured_and_accept_null_or_a_number():
    assert Settings().inline_budget_ms is None and Settings().invoked_budget_ms is None
    settings, problems = parse_settings({"inlineBudgetMs": 900, "invokedBudgetMs": None}, Settings())
    assert (settings.inline_budget_ms, settings.invoked_budget_ms, problems) == (900, None, [])
    settings, problems = parse_settings({"inlineBudgetMs": 0, "codeActionBudgetMs": None}, settings)
    assert settings.inline_budget_ms == 900 and settings.code_action_budget_ms == 10000 and len(problems) == 2


# -- through the real server ------------------------------------------------------------------------------------

# 256 denoising steps: a fill of the tiny engine takes about a second or more on a quiet 2-core machine, longer
# than the old 600 ms default; the tests measure it in the same run rather than assume it. The fallback is off: the
# guard's rules are about the model's own fill times, and with a fallback the slow engine gets 60% of each
# deadline, its cut fills answered by the offline default (docs/server.md, "Fallback").
SLOW_ARGS = ["--denoising-steps", "256"]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def slow_lsp(tiny_checkpoint):
    client, _ = await start(
        ["--model", str(tiny_checkpoint), *SLOW_ARGS],
        init_options={"enabledLanguages": ["plaintext"], "invokedBudgetMs": 120000, "fallback": False},
    )
    client.status_changes = []
    client.feature("infill/statusChanged")(lambda params: client.status_changes.append(params))
    ready = await wait_ready(client)
    assert ready["state"] == "ready", ready
    # One automatic fill first, under the cap: the first run's one-time costs are not what the tests are about, and
    # it is timed as a keystroke's fill is (an invoked fill waits for ranked candidates and is not: issue 49).
    open_doc(client, "file:///warm.txt", "Warm up ", language="plaintext")
    await _automatic(client, "file:///warm.txt", types.Position(0, 8))
    yield client
    await client.shutdown_session()
    await client.stop()


def _automatic(client, uri: str, position: types.Position):
    return client.text_document_inline_completion_async(
        types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri=uri),
            position=position,
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic),
        )
    )


@pytest.mark.asyncio(loop_scope="module")
async def test_a_slow_model_still_shows_its_suggestion_with_default_settings(slow_lsp):
    """What holds on any machine: the guard starts at its cap and then follows this machine's own fill times, so a
    fill that runs within the cap is shown (the warm-up fill, timed in this same run, says how long one takes here),
    and after MIN_SAMPLES fills the deadline is GUARD_FACTOR x their p95, clamped to [floor, cap]."""
    warm = (await status(slow_lsp))["budget"]
    assert warm["samples"] == 1 and warm["source"]["inline"] == "cap", warm  # the warm-up fill alone, timed
    fits_the_cap = warm["fillP50Ms"] < 0.5 * GUARD_CAP_MS  # (half: room for this machine's noise)
    texts = ["The meeting moved to ", "Bring the report and ", "Lunch is at "]
    shown = 0
    for index, text in enumerate(texts):
        uri = f"file:///slow-{index}.txt"
        open_doc(slow_lsp, uri, text, language="plaintext")
        reply = await _automatic(slow_lsp, uri, types.Position(0, len(text)))
        shown += bool(reply is not None and reply.items and reply.items[0].insert_text.strip())
        if index == 0:  # its deadline was the cap: only the warm-up fill was timed before it
            first = (await status(slow_lsp))["budget"]
            assert first["samples"] == 2 and first["source"]["inline"] == "cap", first
    if fits_the_cap:
        assert shown == len(texts), (warm, log_text(slow_lsp))
    after = await status(slow_lsp)
    budget = after["budget"]
    assert budget["samples"] == len(texts) + 1 and budget["source"]["inline"] == "measured", budget
    assert (
        budget["inlineMs"] == round(min(GUARD_CAP_MS, max(GUARD_FLOOR_MS, GUARD_FACTOR * budget["fillP95Ms"])))
        or abs(budget["inlineMs"] - GUARD_FACTOR * budget["fillP95Ms"]) <= GUARD_FACTOR
    ), budget
    if fits_the_cap:
        assert "cut_short" not in after["pipeline"]["rejected"], after["pipeline"]


@pytest.mark.asyncio(loop_scope="module")
async def test_status_says_when_the_machine_is_too_slow_for_automatic_suggestions(slow_lsp):
    current = (await status(slow_lsp))["budget"]
    assert current["samples"] >= MIN_SAMPLES, current  # the fills of the test before, each timed
    slow = current["fillP50Ms"] > TOO_SLOW_P50_MS
    assert current["tooSlowForTyping"] is slow
    if slow:  # the notification went out when the verdict flipped
        flags = [getattr(change, "budget", None) for change in slow_lsp.status_changes]
        assert any(
            getattr(flag, "tooSlowForTyping", None) or (isinstance(flag, dict) and flag["tooSlowForTyping"])
            for flag in flags
        ), flags


@pytest.mark.asyncio(loop_scope="module")
async def test_an_explicit_inline_budget_wins(slow_lsp):
    slow_lsp.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(
            settings={"infill": {"inlineBudgetMs": 200, "enabledLanguages": ["plaintext"]}}
        )
    )
    current = await status(slow_lsp)
    assert current["budget"]["source"]["inline"] == "setting" and current["budget"]["inlineMs"] == 200
    uri = "file:///explicit.txt"
    text = "Tomorrow we will "
    open_doc(slow_lsp, uri, text, language="plaintext")
    reply = await _automatic(slow_lsp, uri, types.Position(0, len(text)))
    assert reply is None  # cut short by the person's own budget: nothing shown
    await asyncio.sleep(0)
    assert (await status(slow_lsp))["pipeline"]["rejected"].get("cut_short", 0) >= 1


@pytest.mark.slow
@pytest.mark.asyncio(loop_scope="function")
async def test_the_default_model_shows_ghost_text_with_default_settings():
    """Issue 12's first report: `return ` after `def area(width, height):` showed nothing in VS Code with default
    settings (cut short at 600 ms) on a 2-core CPU. An automatic request now gets the default model's answer."""
    client, _ = await start([])
    client.feature("infill/statusChanged")(lambda params: None)
    try:
        assert (await wait_ready(client, timeout=600))["state"] == "ready"
        uri, text = "file:///area.py", "def area(width, height):\n    return \n"
        open_doc(client, uri, text)
        reply = await _automatic(client, uri, types.Position(1, 11))
        assert reply is not None and reply.items and reply.items[0].insert_text.strip(), log_text(client)
        filled = text[: len("def area(width, height):\n    return ")] + reply.items[0].insert_text + "\n"
        compile(filled, "area.py", "exec")
        assert (await status(client))["budget"]["source"]["inline"] == "cap"  # the first fill: nothing timed yet
    finally:
        await client.shutdown_session()
        await client.stop()
