"""What the code actions "Fill gap" / "Fill all gaps" and the commands infill.fillGap / infill.fillAllGaps do
(server/handlers_actions.py routes to them). Listing never runs the model: the fill runs in codeAction/resolve, or,
for a client that cannot resolve `edit`, when it executes the command the action carries, or that is listed in its
place for a client without code-action literal support (infill.fillGap / infill.fillAllGaps, which apply the edit
with workspace/applyEdit). Resolve data the server did not produce is refused: the action comes back without an
edit. Numbers in action data and command arguments are read by the one rule of server/jsonrpc.py."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from lsprotocol import types
from pygls.exceptions import JsonRpcException

from .documents import text_fingerprint
from .fills import LIST_LIMIT, FillDeps, compute_fill, gap_spans, is_markdown, off_loop, selection_outside
from .gate import refusal
from .json_values import json_integer, plain_json
from .jsonrpc import public_message
from .replies import ClientSilent

# The client's workspace/applyEdit request (pygls' workspace_apply_edit_async), and an edit sent with a label,
# answered (applied, why not).
ApplyEditRequest = Callable[[types.ApplyWorkspaceEditParams], Awaitable[types.ApplyWorkspaceEditResult]]
EditSender = Callable[[types.WorkspaceEdit, str], Awaitable[tuple[bool, str]]]

Target = tuple[str, "dict[str, Any]", types.Range]  # uri, the text identity it names, range

KIND = types.CodeActionKind.RefactorRewrite
TITLES = {"gap": "Fill gap", "gaps": "Fill all gaps"}
COMMANDS = {"gap": "infill.fillGap", "gaps": "infill.fillAllGaps"}


async def code_actions(
    deps: FillDeps, capabilities: types.ClientCapabilities, params: types.CodeActionParams
) -> list[types.CodeAction | types.Command]:
    """The listing in the form this client (`capabilities`) takes: actions resolved later, actions carrying their
    command, or the commands alone."""
    actions = await list_actions(deps, params)
    if actions and not _client_resolves_edit(capabilities):  # the fill runs when the client executes the command
        if not _client_takes_literals(capabilities):
            return [_fill_command(action) for action in actions]  # LSP: commands only, without literal support
        for action in actions:
            action.command = _fill_command(action)
    return list(actions)


def _client_resolves_edit(capabilities: types.ClientCapabilities) -> bool:
    caps = capabilities.text_document
    resolve_support = caps.code_action.resolve_support if caps and caps.code_action else None
    return bool(resolve_support and "edit" in resolve_support.properties)


def _client_takes_literals(capabilities: types.ClientCapabilities) -> bool:
    caps = capabilities.text_document
    return bool(caps and caps.code_action and caps.code_action.code_action_literal_support)


async def list_actions(deps: FillDeps, params: types.CodeActionParams) -> list[types.CodeAction]:
    """The actions that apply here; no model work (resolve does it), and a large text is scanned off the loop."""
    only = [getattr(kind, "value", kind) for kind in params.context.only or ()]
    if only and not any(KIND.value == kind or KIND.value.startswith(f"{kind}.") for kind in only):
        return []  # the client asked for other kinds (e.g. quickfix, source.organizeImports)
    uri = params.text_document.uri
    document = deps.documents.get(uri)
    if refusal(document, uri, deps.settings, deps.host) is not None or document is None:
        return []  # why is logged when a fill is asked for; listing stays quiet and instant
    text = document.text
    start, end = sorted((document.offset_at(params.range.start), document.offset_at(params.range.end)))
    gap, spans = await off_loop(len(text), _scan, text, start, end, is_markdown(uri, document.language_id))
    if deps.documents.get(uri) is not document or document.text is not text:
        return []  # edited while scanning: the editor asks again for the new text
    # O(1): _scan hashed this text, and a str keeps its hash; "span" is the selection in offsets of this exact text,
    # so the fill converts no position again (the text fingerprint beside it is checked first)
    identity = {**document.identity(), "span": [start, end]}
    if spans:
        document.placeholders = (text, start, end, tuple(spans))  # the fill of "Fill all gaps" reads them
    actions = []
    if gap and not selection_outside(document, params.range):  # a clamped selection would fill another span
        actions.append(_action("gap", uri, identity, params.range))
    if spans:
        count = f"{len(spans)}+" if len(spans) >= LIST_LIMIT else str(len(spans))
        actions.append(_action("gaps", uri, identity, params.range, count=count))
    return actions


def _fill_command(action: types.CodeAction) -> types.Command:
    """The command that fills what `action` names, with the same text identity (run_fill_command's object form)."""
    data: dict[str, Any] = action.data or {}
    line, character, end_line, end_character = data["range"]
    target: dict[str, Any] = {k: data[k] for k in ("uri", "generation", "version", "text", "span") if k in data}
    target["range"] = {
        "start": {"line": line, "character": character},
        "end": {"line": end_line, "character": end_character},
    }
    return types.Command(title=action.title, command=COMMANDS[data["infill"]], arguments=[target])


def _scan(text: str, start: int, end: int, markdown: bool) -> tuple[bool, list[tuple[int, int]]]:
    """What listing needs from the text: whether "Fill gap" applies and the placeholders (up to LIST_LIMIT) for
    "Fill all gaps". It also fingerprints the text, since hashing a large str is scan work too."""
    text_fingerprint(text)
    gap = start < end and bool(gap_spans(text, start, end, "gap")[0])
    spans = gap_spans(text, start, end, "gaps", LIST_LIMIT)[0] if markdown else []
    return gap, spans


def _action(mode: str, uri: str, identity: dict[str, Any], rng: types.Range, count: str = "") -> types.CodeAction:
    title = TITLES[mode] + (f" ({count})" if count else "")
    data = {
        "infill": mode,
        "uri": uri,
        **identity,
        "range": [rng.start.line, rng.start.character, rng.end.line, rng.end.character],
    }
    return types.CodeAction(title=title, kind=KIND, data=data)


def _range_of(values: list[Any]) -> types.Range | None:
    """An LSP range from [line, character, end line, end character] (uintegers: 0..2^31-1)."""
    numbers = [json_integer(v, 0, 2**31 - 1) for v in values]
    if len(numbers) != 4:
        return None
    line, character, end_line, end_character = numbers
    if line is None or character is None or end_line is None or end_character is None:
        return None
    return types.Range(types.Position(line, character), types.Position(end_line, end_character))


def _expected(data: dict[str, Any]) -> dict[str, Any] | None:
    """The text identity an action or command names (generation, version, fingerprint, and the selection's span in
    offsets of that text), checked for type."""
    expected: dict[str, Any] = {key: data[key] for key in ("generation", "version", "text", "span") if key in data}
    version = expected.get("version")
    if version is not None and json_integer(version, -(2**31), 2**31 - 1) is None:
        return None
    if any(not isinstance(expected.get(key, ""), str) for key in ("generation", "text")):
        return None
    if "span" in expected:
        span = expected["span"]
        offsets = [json_integer(v, 0, 2**53) for v in span] if isinstance(span, list) and len(span) == 2 else [None]
        if None in offsets:
            return None
        expected["span"] = offsets
    return expected


def _parse_data(data: Any) -> tuple[str, str, dict[str, Any], types.Range] | None:
    if not isinstance(data, dict):
        return None
    mode, uri, r = data.get("infill"), data.get("uri"), data.get("range")
    if not isinstance(mode, str) or mode not in TITLES or not isinstance(uri, str) or not isinstance(r, list):
        return None
    rng, expected = _range_of(r), _expected(data)
    if rng is None or expected is None:
        return None
    return mode, uri, expected, rng


async def resolve(deps: FillDeps, action: types.CodeAction) -> types.CodeAction:
    parsed = _parse_data(plain_json(action.data))
    if parsed is None:  # not data this server listed: refused inside the result (no edit), with one log line
        deps.log(
            f"codeAction/resolve: not an action this server listed (data {action.data!r:.200}); no edit",
            types.MessageType.Warning,
        )
        return action
    mode, uri, expected, rng = parsed
    outcome = await compute_fill(deps, uri, rng, mode, expected)
    if outcome.edit is None:
        deps.log(f"{TITLES[mode]}: no edit: {outcome.reason}", types.MessageType.Warning)
    action.edit = outcome.edit
    return action


async def run_fill_command(deps: FillDeps, send: EditSender, args: tuple[Any, ...], mode: str) -> dict[str, Any]:
    """Arguments: (uri, range) or ({uri, range}); range may be omitted for infill.fillAllGaps (whole document).
    The object form may also name the text it means ("version", and "generation"/"text" as code-action data
    carries them): the fill is refused for any other text. The edit goes to the client with `send` (apply_edit)."""
    uri, rng, expected = _command_target(args)
    if uri is None:
        reason = "arguments must be (uri, range) or ({uri, range})"
        deps.log(f"{TITLES[mode]} command: {reason}; got {args!r}", types.MessageType.Warning)
        return {"applied": False, "reason": reason}
    if rng is None:
        if mode == "gap":
            return {"applied": False, "reason": "infill.fillGap needs a range"}
        rng = types.Range(types.Position(0, 0), types.Position(0, 0))
    outcome = await compute_fill(deps, uri, rng, mode, expected)
    if outcome.edit is None:
        deps.log(f"{TITLES[mode]}: no edit: {outcome.reason}", types.MessageType.Warning)
        return {"applied": False, "reason": outcome.reason}
    applied, reason = await send(outcome.edit, TITLES[mode])
    if not applied:
        deps.log(f"{TITLES[mode]}: the edit was not applied: {reason}", types.MessageType.Warning)
    return {"applied": applied, "reason": reason}


async def apply_edit(
    workspace: types.WorkspaceClientCapabilities | None,
    request: ApplyEditRequest,
    edit: types.WorkspaceEdit,
    label: str,
) -> tuple[bool, str]:
    """Send `edit` with workspace/applyEdit (`request`): (True, "") only when it was sent and the client answered
    applied: true; else (False, why), also when the client did not answer in time (server/replies.py). A client
    without the applyEdit capability (`workspace`: its workspace capabilities) is not sent one."""
    if not (workspace and workspace.apply_edit):
        return False, "the client cannot apply edits the server sends (no workspace.applyEdit capability)"
    try:
        response = await request(types.ApplyWorkspaceEditParams(edit=edit, label=label))
    except JsonRpcException as exc:  # the client answered with an error, or with a reply that cannot be read
        return False, f"the client answered workspace/applyEdit with an error: {public_message(exc.message)}"
    except ClientSilent as exc:  # no answer in time: whatever the client did, it did not confirm the edit
        return False, str(exc)
    if response is not None and response.applied is True:
        return True, ""
    return False, (response.failure_reason if response else None) or "the client did not apply the edit"


def _command_target(args: tuple[Any, ...]) -> tuple[str | None, types.Range | None, dict[str, Any] | None]:
    expected: dict[str, Any] | None = {}
    if len(args) == 1 and isinstance(plain_json(args[0]), dict):
        target = plain_json(args[0])
        uri, raw_range = target.get("uri"), target.get("range")
        expected = _expected(target)
    elif args:
        uri, raw_range = args[0], (args[1] if len(args) > 1 else None)
    else:
        return None, None, None
    if not isinstance(uri, str) or expected is None:
        return None, None, None
    if raw_range is None:
        return uri, None, expected
    r = plain_json(raw_range)
    start = plain_json(r.get("start")) if isinstance(r, dict) else None
    end = plain_json(r.get("end")) if isinstance(r, dict) else None
    if not isinstance(start, dict) or not isinstance(end, dict):
        return None, None, None
    rng = _range_of([start.get("line"), start.get("character"), end.get("line"), end.get("character")])
    return (uri, rng, expected) if rng is not None else (None, None, None)
