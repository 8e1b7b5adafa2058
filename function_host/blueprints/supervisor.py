"""Azure Functions trigger of the supervisor: a timer (timer triggers run as a singleton per app)."""

from __future__ import annotations

import azure.durable_functions as df
import azure.functions as func

from function_host.wiring import dependencies
from orderflow.replies import resend_pending_replies
from orderflow.stores.paging import PageLimits
from supervisor.retention import purge_expired_logs
from supervisor.status import record_sweep, sweep_doc
from supervisor.sweep import run_sweep

bp = df.Blueprint()


@bp.function_name("supervisor")
@bp.timer_trigger(arg_name="timer", schedule="%SUPERVISOR_SCHEDULE%", run_on_startup=False)
def supervisor(timer: func.TimerRequest) -> None:
    """One bounded sweep over expired completeBy records, the reply relay and a retention pass."""
    deps = dependencies()
    started = deps.clock.now()
    report = run_sweep(states=deps.states, queues=deps.queues, clock=deps.clock, settings=deps.settings)
    ended, host = deps.clock.now(), deps.settings.HOST_ID
    record_sweep(
        deps.alerts, sweep_doc(report, started=started, ended=ended, host_id=host, leadership="timer")
    )
    resend_pending_replies(
        states=deps.states,
        queues=deps.queues,
        clock=deps.clock,
        grace_s=deps.settings.REPLY_GRACE_S,
        limits=PageLimits.from_settings(deps.settings),
    )
    purge_expired_logs(states=deps.states, orders=deps.orders, clock=deps.clock, settings=deps.settings)
