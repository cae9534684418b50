"""Numbers that Python's JSON reads as infinity or NaN (1e400, -1e400, NaN) in every place settings and request
data arrive: each is reported as that one bad key, the other keys still apply, and no request fails or stalls."""

from __future__ import annotations

import math

import pytest
from fuzz.rpc import RawServer

from server.settings import Settings, clean_layer, parse_settings

BAD_NUMBERS = [math.inf, -math.inf, math.nan]


@pytest.mark.parametrize("bad", BAD_NUMBERS, ids=["inf", "-inf", "nan"])
@pytest.mark.parametrize("key", ["debounceMs", "inlineBudgetMs", "maxDocumentChars", "denoisingSteps"])
def test_non_finite_number_is_one_bad_key_and_the_rest_apply(key, bad):
    settings, problems = parse_settings({key: bad, "enabled": False, "maxMiddleTokens": 32}, Settings())
    assert settings.enabled is False and settings.max_middle_tokens == 32
    assert len(problems) == 1 and f"infill.{key}" in problems[0]
    accepted, problems = clean_layer({key: bad}, Settings())
    assert accepted == {} and len(problems) == 1


@pytest.fixture(scope="module")
def raw_server(tiny_checkpoint, tmp_path_factory):
    # The workspace/configuration reply carries NaN: the server must still load its model.
    server = RawServer(
        ["--model", str(tiny_checkpoint), "--denoising-steps", "4"],
        configuration={"debounceMs": math.nan, "codeActionBudgetMs": 30000, "fallback": False},  # the tiny engine alone
        stderr_path=str(tmp_path_factory.mktemp("stderr") / "server.log"),
    )
    reply = server.initialize(raw_init_options='{"debounceMs": 1e400, "inlineBudgetMs": -1e400, "maxMiddleTokens": 16}')
    server.init_reply = reply
    yield server
    server.kill()


def test_infinite_initialization_options_do_not_fail_initialize(raw_server):
    reply = raw_server.init_reply
    assert reply is not None and "error" not in reply, reply
    assert "capabilities" in reply["result"]


def test_nan_in_configuration_reply_still_loads_the_model(raw_server):
    status = raw_server.wait_ready(timeout=240)
    assert status["state"] == "ready", status
    logs = raw_server.logs()
    assert "infill.debounceMs" in logs and "infill.inlineBudgetMs" in logs


def test_infinity_in_did_change_configuration_keeps_the_other_keys(raw_server):
    raw_server.notify(
        "workspace/didChangeConfiguration",
        raw_params='{"settings": {"infill": {"enabled": false, "debounceMs": -1e400}}}',
    )
    assert raw_server.status()["enabled"] is False
    raw_server.notify("workspace/didChangeConfiguration", raw_params='{"settings": {"infill": {"enabled": true}}}')
    assert raw_server.status()["enabled"] is True


@pytest.mark.parametrize(
    "raw_data",
    [
        '{"infill": "gap", "uri": "file:///x.txt", "version": 1, "range": [1e400, 0, 0, 1]}',
        '{"infill": "gap", "uri": "file:///x.txt", "version": NaN, "range": [0, 0, 0, 1]}',
        '{"infill": "gap", "uri": "file:///x.txt", "version": 1, "range": [-1e400, 0, "1", 1]}',
    ],
)
def test_infinite_numbers_in_code_action_data_are_refused_with_a_message(raw_server, raw_data):
    msg_id = raw_server.request("codeAction/resolve", raw_params=f'{{"title": "Fill gap", "data": {raw_data}}}')
    reply = raw_server.wait(msg_id, 30)
    assert reply is not None, "no answer"
    assert "error" not in reply, reply  # malformed data: the action comes back without an edit
    assert reply["result"].get("edit") is None


@pytest.mark.parametrize(
    "raw_args",
    [
        '["file:///x.txt", {"start": {"line": 1e400, "character": 0}, "end": {"line": 0, "character": 1}}]',
        '[{"uri": "file:///x.txt", "range": {"start": {"line": 0, "character": NaN}, '
        '"end": {"line": 0, "character": -1e400}}}]',
    ],
)
def test_infinite_numbers_in_command_arguments_are_refused_with_a_message(raw_server, raw_args):
    msg_id = raw_server.request(
        "workspace/executeCommand", raw_params=f'{{"command": "infill.fillGap", "arguments": {raw_args}}}'
    )
    reply = raw_server.wait(msg_id, 30)
    assert reply is not None, "no answer"
    assert "error" not in reply, reply
    assert reply["result"]["applied"] is False and "arguments must be" in reply["result"]["reason"]
