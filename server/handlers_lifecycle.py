"""initialize / initialized / configuration / shutdown."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from lsprotocol import types

from .json_values import plain_json

if TYPE_CHECKING:
    from .server import InfillServer


START_WAIT_S = 10.0  # how long start-up waits for the client's workspace/configuration answer


def register(server: InfillServer) -> None:
    @server.feature(types.INITIALIZE)
    def initialize(ls: InfillServer, params: types.InitializeParams) -> None:
        if params.initialization_options is not None:
            ls.apply_settings(plain_json(params.initialization_options), "initializationOptions", layer="init")

    @server.feature(types.INITIALIZED)
    async def initialized(ls: InfillServer, params: types.InitializedParams) -> None:
        # A client that never answers (or answers late, under load) must not keep the server loading forever: past
        # START_WAIT_S it loads with the settings it has; a late answer is applied when it comes (a reload if it
        # selects another backend).
        pull = asyncio.ensure_future(fetch_configuration(ls))
        await asyncio.wait({pull}, timeout=START_WAIT_S)
        if not pull.done():
            ls.log(
                f"no workspace/configuration answer within {START_WAIT_S:g} s; loading with the settings given so far"
            )
        ls.start_loading()

    @server.feature(types.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def did_change_configuration(ls: InfillServer, params: types.DidChangeConfigurationParams) -> None:
        settings = plain_json(params.settings)
        if isinstance(settings, dict) and isinstance(settings.get("infill"), dict):
            ls.apply_settings(settings["infill"], "didChangeConfiguration")
        elif _client_has_configuration(ls):
            await fetch_configuration(ls)  # the push carried nothing for us: pull (the usual pattern)
        elif settings not in (None, {}):
            ls.apply_settings(settings, "didChangeConfiguration")

    @server.feature(types.SHUTDOWN)
    def shutdown(ls: InfillServer, params: Any) -> None:
        ls.claims.cancel_all("server shutting down")
        ls.host.close()
        ls.telemetry.flush()  # the completion log's queued records reach the file before exit


def _client_has_configuration(ls: InfillServer) -> bool:
    workspace = ls.client_capabilities.workspace
    return bool(workspace and workspace.configuration)


async def fetch_configuration(ls: InfillServer) -> None:
    if not _client_has_configuration(ls):
        return
    try:
        items = await ls.workspace_configuration_async(
            types.ConfigurationParams(items=[types.ConfigurationItem(section="infill")])
        )
    except Exception as exc:  # noqa: BLE001 - a client failing this request keeps the settings we have
        ls.log(f"workspace/configuration failed: {exc}; keeping current settings", types.MessageType.Warning)
        return
    if items and items[0] is not None:
        ls.apply_settings(plain_json(items[0]), "workspace/configuration")
