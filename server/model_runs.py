"""One request's model run, the same for an inline request and a Fill gap: run the request on the model thread
under the ticket it claimed, stop it when the client cancels, cost a failing backend this request only, close the
ticket, and say whether the run was superseded or edited meanwhile. Callers decide what to answer."""

from __future__ import annotations

import asyncio
from concurrent.futures import Future
from dataclasses import dataclass

from lsprotocol import types

from infill.pipeline import CompletionRequest, Pipeline, PipelineResult, Prepared
from infill.types import FillControl, deadline_in
from infill.worker import Ticket

from .backend_host import BackendHost
from .gate import ClientLog


@dataclass
class ModelRun:
    """What a request's run came to: `result` None when it failed (`failure` says why) or never ran (`failure`
    empty: cancelled by an edit or a newer request before the model thread got to it)."""

    result: PipelineResult | None
    stopped: bool  # superseded or edited while computing
    failure: str = ""
    unrun: str = ""  # why a run that never started did not (its deadline passed in the queue, or it was stopped)


async def run_on_model(
    host: BackendHost,
    log: ClientLog,
    ticket: Ticket,
    pipeline: Pipeline,
    request: CompletionRequest,
    *,
    budget_s: float,
    what: str,
    context: Future[Prepared] | None = None,
    queue_deadline: bool = False,
) -> ModelRun:
    """Run `request` on `host`'s model thread under `ticket` (closed here, whatever happens); `what` names the
    request in the line `log` gets for a failure. `queue_deadline`: the budget also bounds the wait in the queue
    (BackendHost.complete)."""
    failure = ""
    result: PipelineResult | None = None
    try:
        control = FillControl(cancel=ticket.token, deadline=deadline_in(budget_s))
        future = host.complete(pipeline, request, control, context, queue_deadline=queue_deadline)
        result = await asyncio.wrap_future(future)
    except asyncio.CancelledError:
        ticket.token.cancel("request cancelled by the client")  # the backend stops within one step
        raise
    except Exception as exc:  # noqa: BLE001 - a failing backend (OOM, bug) costs this request only
        failure = f"{type(exc).__name__}: {exc}"
        log(f"{what} failed: {failure}", types.MessageType.Error)
    finally:
        host.claims.close(ticket)
        stopped = ticket.stopped  # (read before the cancel below, which would set it)
        ticket.token.cancel("request ended")  # nothing queued for it (context, warm) may run on after it
    if result is not None and result.route == "not_run":
        why = result.result.error if result.result is not None else ""
        out_of_time = result.result is not None and result.result.outcome == "cut_short"
        return ModelRun(None, stopped or not out_of_time, unrun=why or "")
    return ModelRun(result, stopped, failure)
