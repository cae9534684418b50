"""Code actions "Fill gap" / "Fill all gaps" and the commands infill.fillGap / infill.fillAllGaps / infill.status /
infill.toggle: each handler reads its request and asks server/actions.py (fills) or the server (status, toggle)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from lsprotocol import types

from .actions import KIND, EditSender, apply_edit, code_actions, resolve, run_fill_command
from .fills import FillDeps

if TYPE_CHECKING:
    from .server import InfillServer


def fill_deps(ls: InfillServer) -> FillDeps:
    """What a fill uses, unpacked from the server once per request (its settings as they are now)."""
    return FillDeps(ls.documents, ls.host, ls.telemetry, ls.log, ls.settings)


def edit_sender(ls: InfillServer) -> EditSender:
    """workspace/applyEdit to this client, as far as its capabilities allow (actions.apply_edit)."""
    return functools.partial(apply_edit, ls.client_capabilities.workspace, ls.workspace_apply_edit_async)


def register(server: InfillServer) -> None:
    @server.feature(
        types.TEXT_DOCUMENT_CODE_ACTION, types.CodeActionOptions(code_action_kinds=[KIND], resolve_provider=True)
    )
    async def code_action(
        ls: InfillServer, params: types.CodeActionParams
    ) -> list[types.CodeAction | types.Command] | None:
        return await code_actions(fill_deps(ls), ls.client_capabilities, params) or None

    @server.feature(types.CODE_ACTION_RESOLVE)
    async def code_action_resolve(ls: InfillServer, action: types.CodeAction) -> types.CodeAction:
        return await resolve(fill_deps(ls), action)

    @server.command("infill.status")
    def status_command(ls: InfillServer, *args: Any) -> dict[str, Any]:
        return ls.status()

    @server.command("infill.toggle")
    def toggle_command(ls: InfillServer, *args: Any) -> dict[str, Any]:
        ls.set_enabled(args[0] if args and isinstance(args[0], bool) else not ls.settings.enabled)
        return ls.status()

    @server.command("infill.fillGap")
    async def fill_gap_command(ls: InfillServer, *args: Any) -> dict[str, Any]:
        return await run_fill_command(fill_deps(ls), edit_sender(ls), args, "gap")

    @server.command("infill.fillAllGaps")
    async def fill_all_gaps_command(ls: InfillServer, *args: Any) -> dict[str, Any]:
        return await run_fill_command(fill_deps(ls), edit_sender(ls), args, "gaps")
