"""Code actions "Fill gap" / "Fill all gaps" (listing is instant; the fill runs in codeAction/resolve, or at once
for clients that cannot resolve `edit`) and the commands infill.fillGap / infill.fillAllGaps / infill.status /
infill.toggle."""

from __future__ import annotations

from typing import Any

from lsprotocol import types

from .fills import compute_fill, gap_spans, is_markdown
from .gate import refusal
from .settings import plain_json

KIND = types.CodeActionKind.RefactorRewrite
TITLES = {"gap": "Fill gap", "gaps": "Fill all gaps"}


def register(server) -> None:
    @server.feature(types.TEXT_DOCUMENT_CODE_ACTION,
                    types.CodeActionOptions(code_action_kinds=[KIND], resolve_provider=True))
    async def code_action(ls, params: types.CodeActionParams) -> list[types.CodeAction] | None:
        actions = list_actions(ls, params)
        if actions and not _client_resolves_edit(ls):
            for action in actions:
                await resolve(ls, action)
        return actions or None

    @server.feature(types.CODE_ACTION_RESOLVE)
    async def code_action_resolve(ls, action: types.CodeAction) -> types.CodeAction:
        return await resolve(ls, action)

    @server.command("infill.status")
    def status_command(ls, *args) -> dict:
        return ls.status()

    @server.command("infill.toggle")
    def toggle_command(ls, *args) -> dict:
        wanted = args[0] if args and isinstance(args[0], bool) else not ls.settings.enabled
        ls.set_enabled(wanted)
        ls.log(f"completions {'enabled' if wanted else 'disabled'} (infill.toggle)")
        return ls.status()

    @server.command("infill.fillGap")
    async def fill_gap_command(ls, *args) -> dict:
        return await run_fill_command(ls, args, "gap")

    @server.command("infill.fillAllGaps")
    async def fill_all_gaps_command(ls, *args) -> dict:
        return await run_fill_command(ls, args, "gaps")


def _client_resolves_edit(ls) -> bool:
    caps = ls.client_capabilities.text_document
    resolve_support = caps.code_action.resolve_support if caps and caps.code_action else None
    return bool(resolve_support and "edit" in resolve_support.properties)


def list_actions(ls, params: types.CodeActionParams) -> list[types.CodeAction]:
    """The actions that apply here; no model work (resolve does it)."""
    only = [getattr(kind, "value", kind) for kind in params.context.only or ()]
    if only and not any(KIND.value == kind or KIND.value.startswith(f"{kind}.") for kind in only):
        return []  # the client asked for other kinds (e.g. quickfix, source.organizeImports)
    uri = params.text_document.uri
    document = ls.documents.get(uri)
    if refusal(ls, document, uri) is not None:
        return []  # why is logged when a fill is asked for; listing stays quiet and instant
    text = document.text
    start, end = sorted((document.offset_at(params.range.start), document.offset_at(params.range.end)))
    actions = []
    if start < end and gap_spans(text, start, end, "gap")[0]:
        actions.append(_action("gap", uri, document.version, params.range))
    if is_markdown(uri, document.language_id):
        spans, _ = gap_spans(text, start, end, "gaps")
        if spans:
            actions.append(_action("gaps", uri, document.version, params.range, count=len(spans)))
    return actions


def _action(mode: str, uri: str, version: int | None, rng: types.Range, count: int = 0) -> types.CodeAction:
    title = TITLES[mode] + (f" ({count})" if count else "")
    data = {"infill": mode, "uri": uri, "version": version,
            "range": [rng.start.line, rng.start.character, rng.end.line, rng.end.character]}
    return types.CodeAction(title=title, kind=KIND, data=data)


def _parse_data(data: Any) -> tuple[str, str, int | None, types.Range] | None:
    try:
        mode, uri, version, r = data["infill"], data["uri"], data.get("version"), data["range"]
        if mode not in TITLES or not isinstance(uri, str) or len(r) != 4:
            return None
        rng = types.Range(types.Position(int(r[0]), int(r[1])), types.Position(int(r[2]), int(r[3])))
        return mode, uri, (int(version) if version is not None else None), rng
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


async def resolve(ls, action: types.CodeAction) -> types.CodeAction:
    parsed = _parse_data(action.data if isinstance(action.data, dict) else plain_json(action.data))
    if parsed is None:
        ls.log(f"codeAction/resolve: not an infill action or malformed data: {action.data!r}",
               types.MessageType.Warning)
        return action
    mode, uri, version, rng = parsed
    outcome = await compute_fill(ls, uri, rng, mode, version)
    if outcome.edit is None:
        ls.log(f"{TITLES[mode]}: no edit: {outcome.reason}", types.MessageType.Warning)
    action.edit = outcome.edit
    return action


async def run_fill_command(ls, args: tuple, mode: str) -> dict:
    """Arguments: (uri, range) or ({uri, range}); range may be omitted for infill.fillAllGaps (whole document)."""
    uri, rng = _command_target(args)
    if uri is None:
        reason = "arguments must be (uri, range) or ({uri, range})"
        ls.log(f"{TITLES[mode]} command: {reason}; got {args!r}", types.MessageType.Warning)
        return {"applied": False, "reason": reason}
    if rng is None:
        if mode == "gap":
            return {"applied": False, "reason": "infill.fillGap needs a range"}
        rng = types.Range(types.Position(0, 0), types.Position(0, 0))
    outcome = await compute_fill(ls, uri, rng, mode, None)
    if outcome.edit is None:
        ls.log(f"{TITLES[mode]}: no edit: {outcome.reason}", types.MessageType.Warning)
        return {"applied": False, "reason": outcome.reason}
    response = await ls.workspace_apply_edit_async(types.ApplyWorkspaceEditParams(edit=outcome.edit,
                                                                                  label=TITLES[mode]))
    applied = bool(getattr(response, "applied", False))
    reason = "" if applied else (getattr(response, "failure_reason", None) or "the client did not apply the edit")
    if not applied:
        ls.log(f"{TITLES[mode]}: client refused the edit: {reason}", types.MessageType.Warning)
    return {"applied": applied, "reason": reason}


def _command_target(args: tuple) -> tuple[str | None, types.Range | None]:
    if len(args) == 1 and isinstance(plain_json(args[0]), dict):
        target = plain_json(args[0])
        uri, raw_range = target.get("uri"), target.get("range")
    elif args:
        uri, raw_range = args[0], (args[1] if len(args) > 1 else None)
    else:
        return None, None
    if not isinstance(uri, str):
        return None, None
    if raw_range is None:
        return uri, None
    r = plain_json(raw_range)
    try:
        start, end = plain_json(r["start"]), plain_json(r["end"])
        return uri, types.Range(types.Position(int(start["line"]), int(start["character"])),
                                types.Position(int(end["line"]), int(end["character"])))
    except (KeyError, TypeError, ValueError):
        return None, None
