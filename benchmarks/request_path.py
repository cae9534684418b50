"""Where one request goes: the real server (the offline default, as a user without a checkpoint runs it) is started
with a call recorder, then one inline completion and one Fill gap (the code action listed, then resolved) are
asked; for each, every call into the project's own code while it was answered is read back.

For each request: the files whose code ran (the "stays", in first-visit order), the threads it ran on, the calls
that climb back up a floor (a lower floor calling into a higher one: a callback), and the floors visited in order.
Floors, highest first: the server (4); the front door, the worker, the loader, the gateway and the pilot (3); the
stages: context, backends, engine, cache, checks (2); the ground floor every stage may import (1).

    python benchmarks/request_path.py [--model DIR]      # last stdout line: one JSON object
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FRONT = (
    "infill/pipeline.py",
    "infill/worker.py",
    "infill/loader.py",
    "infill/completion.py",
    "infill/claims.py",
    "infill/prepared.py",
    "infill/gateway/",
    "infill/pilot/",
    "infill/cli.py",
    "infill/fill_cli.py",
)
STAGES = ("infill/context/", "infill/backends/", "infill/engine/", "infill/cache/", "infill/checks/")


def floor(path: str) -> int:
    if path.startswith("server/"):
        return 4
    if path.startswith(FRONT):
        return 3
    if path.startswith(STAGES):
        return 2
    return 1


def record_calls(trace_file: str) -> None:
    """In the server process: append (wall time, thread, file, function, caller's file) for every call into infill/
    or server/."""
    out = open(trace_file, "a", buffering=1)  # noqa: SIM115 - open for the process's whole life
    root = str(ROOT) + os.sep

    def profile(frame, event, _arg):
        if event != "call":
            return
        path = frame.f_code.co_filename
        if not path.startswith(root) or not path[len(root) :].startswith(("infill/", "server/")):
            return
        caller = frame.f_back.f_code.co_filename if frame.f_back else ""
        caller = caller[len(root) :] if caller.startswith(root) else ""
        caller = caller if caller.startswith(("infill/", "server/")) else ""  # a library calling a handler: no climb
        out.write(
            json.dumps([time.time(), threading.current_thread().name, path[len(root) :], frame.f_code.co_name, caller])
            + "\n"
        )

    sys.setprofile(profile)
    threading.setprofile(profile)


def summary(records: list[list]) -> dict:
    files: list[str] = []
    threads: list[str] = []
    climbs = []
    floors: list[int] = []
    for _, thread, path, function, caller in records:
        if path not in files:
            files.append(path)
        if thread not in threads:
            threads.append(thread)
        if caller and floor(caller) < floor(path):
            climbs.append(f"{caller} -> {path}:{function}")
        if not floors or floors[-1] != floor(path):
            floors.append(floor(path))
    return {
        "files": len(files),
        "threads": threads,
        "climbs_back_up": len(climbs),
        "climbs": sorted(set(climbs)),
        "floor_changes": len(floors) - 1,
        "stays": files,
    }


async def drive(args, trace_file: str) -> dict:
    from lsprotocol import types
    from pygls.lsp.client import LanguageClient

    client = LanguageClient("request-path", "1")
    for method in (types.WINDOW_LOG_MESSAGE, "infill/statusChanged", types.PROGRESS):
        client.feature(method)(lambda *a: None)
    client.feature(types.WORKSPACE_APPLY_EDIT)(lambda params: types.ApplyWorkspaceEditResult(applied=True))
    command = [sys.executable, __file__, "--serve", trace_file, "--", "--stdio"]
    if args.model:
        command += ["--model", args.model]
    await client.start_io(*command, cwd=str(ROOT))
    capabilities = types.ClientCapabilities(
        text_document=types.TextDocumentClientCapabilities(
            code_action=types.CodeActionClientCapabilities(
                resolve_support=types.ClientCodeActionResolveOptions(properties=["edit"])
            )
        )
    )
    await client.initialize_async(
        types.InitializeParams(
            capabilities=capabilities, process_id=os.getpid(), initialization_options={"debounceMs": 0}
        )
    )
    client.initialized(types.InitializedParams())
    while (await client.workspace_execute_command_async(types.ExecuteCommandParams(command="infill.status")))[
        "state"
    ] == "loading":
        await asyncio.sleep(0.2)
    uri = "file:///request_path.py"
    text = (
        "def area(width, height):\n    return \n\n\n"
        "def volume(width, height, depth):\n    return width * height * depth\n"
    )
    client.text_document_did_open(
        types.DidOpenTextDocumentParams(types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text))
    )
    await asyncio.sleep(0.5)
    windows = {}
    t0 = time.time()
    await client.text_document_inline_completion_async(
        types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier(uri),
            position=types.Position(1, 11),
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked),
        )
    )
    windows["inline"] = (t0, time.time())
    await asyncio.sleep(0.5)
    t0 = time.time()
    gap = types.Range(types.Position(5, 11), types.Position(5, 33))  # the selected expression is the gap
    actions = await client.text_document_code_action_async(
        types.CodeActionParams(
            text_document=types.TextDocumentIdentifier(uri), range=gap, context=types.CodeActionContext(diagnostics=[])
        )
    )
    fill = next(a for a in actions or [] if isinstance(a, types.CodeAction) and "Fill gap" in a.title)
    await client.code_action_resolve_async(fill)
    windows["fill_gap"] = (t0, time.time())
    await asyncio.sleep(0.3)
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()
    return windows


def main() -> None:
    if "--serve" in sys.argv:
        at = sys.argv.index("--serve")
        record_calls(sys.argv[at + 1])
        sys.path.insert(0, str(ROOT))
        from server.main import main as serve

        sys.exit(serve(sys.argv[sys.argv.index("--") + 1 :]))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="a DiffusionGemma checkpoint (default: the offline default)")
    args = parser.parse_args()
    trace_file = tempfile.mktemp(suffix=".jsonl")
    windows = asyncio.run(drive(args, trace_file))
    records = [json.loads(line) for line in Path(trace_file).read_text().splitlines() if line.strip()]
    os.unlink(trace_file)
    out = {name: summary([r for r in records if start <= r[0] <= end]) for name, (start, end) in windows.items()}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
