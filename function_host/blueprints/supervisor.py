"""Azure Functions trigger of the supervisor: a timer (timer triggers run as a singleton per app)."""

from __future__ import annotations

import asyncio

import azure.durable_functions as df
import azure.functions as func

from function_host.durable_client import DurableFunctionsClient
from function_host.wiring import app_settings, dependencies
from orderflow.dependencies import Dependencies
from orderflow.orchestration import OrchestrationHistories
from orderflow.replies import resend_pending_replies
from orderflow.settings import Settings
from orderflow.stores.paging import PageLimits
from supervisor.retention import dead_letter_sources, run_retention_pass
from supervisor.status import record_sweep, sweep_doc
from supervisor.sweep import run_sweep

bp = df.Blueprint()


@bp.function_name("supervisor")
@bp.timer_trigger(arg_name="timer", schedule="%SUPERVISOR_SCHEDULE%", run_on_startup=False)
@bp.durable_client_input(client_name="client")
async def supervisor(timer: func.TimerRequest, client: df.DurableOrchestrationClient) -> None:
    """One bounded sweep over expired completeBy records, the reply relay and a retention pass."""
    deps, settings = dependencies(), app_settings()
    # The roles are synchronous: run them in a thread; the history purge comes back to this loop.
    histories = DurableFunctionsClient(client, asyncio.get_running_loop())
    await asyncio.to_thread(supervise, deps, settings, histories)


def supervise(deps: Dependencies, settings: Settings, histories: OrchestrationHistories) -> None:
    """What one supervisor run does: sweep, relay owed replies, then retention (the stores, the dead
    letters of every queue orderflow consumes, and the task hub's history)."""
    started = deps.clock.now()
    report = run_sweep(
        states=deps.states,
        queues=deps.queues,
        clock=deps.clock,
        supervisor=settings.supervisor,
        scans=settings.scans,
        host_id=settings.queues.HOST_ID,
    )
    ended, host = deps.clock.now(), settings.queues.HOST_ID
    record_sweep(
        deps.alerts, sweep_doc(report, started=started, ended=ended, host_id=host, leadership="timer")
    )
    resend_pending_replies(
        states=deps.states,
        queues=deps.queues,
        clock=deps.clock,
        grace_s=settings.supervisor.REPLY_GRACE_S,
        limits=PageLimits.from_scans(settings.scans),
    )
    run_retention_pass(
        deps,
        supervisor=settings.supervisor,
        scans=settings.scans,
        dead_letter_queues=dead_letter_sources(settings.clients, settings.queues),
        histories=histories,
    )
