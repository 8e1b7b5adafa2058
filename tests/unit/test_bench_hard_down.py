"""The hard-down run's settings: one order alone on a dead service runs to its give-up, as the run needs.

The run counts the calls an order makes to a service that answers every call 503 until the supervisor
gives the order up. It may run a single order: its attempts all fail at the same step with
``transient_exhausted``, which the poison guard must not take for a poison order (it would hold the order
for an operator, and the run would wait out its timeout).
"""

from __future__ import annotations

import pytest

from activities.sections import ActivitySections
from activities.steps import record_step_failure
from bench.orderflow_runs import HARD_DOWN_SETTINGS
from demo.config import DEMO_SETTINGS
from devhost.settings import LocalSettings
from intake.submission import handle_intake_message
from orderflow.attempts import claim
from orderflow.clock import FakeClock
from orderflow.contracts import RecordStepFailureInput, StepError
from orderflow.records import ProcessState
from orderflow.workflows import ORDER_V1
from supervisor.sweep import SweepCursor, SweepReport
from tests.host_deps import HostDeps
from tests.unit.fakes import TEST_CLIENT, memory_deps, order_body, sweep_once

pytestmark = pytest.mark.unit

ORDER = "a:o-1"
STEP = ORDER_V1.steps[0].name
WAIT_S = 120.0  # past every backoff of the hard-down settings and the tolerated clock skew


def fail_and_sweep(deps: HostDeps, clock: FakeClock, cursor: SweepCursor) -> SweepReport:
    """Claim the order's next attempt, fail its step as an agent does on a dead service, sweep."""
    won = claim(
        deps.states,
        deps.states.get(ORDER),
        deps.clock,
        deps.settings.starter,
        deps.settings.steps,
        host_id=deps.settings.queues.HOST_ID,
    )
    assert won is not None, f"{ORDER} was not claimable: {deps.states.get(ORDER).item.last_error}"
    record_step_failure(
        RecordStepFailureInput(
            order_id=ORDER,
            instance_id=str(won.item.locked_by),
            error=StepError(step=STEP, kind="transient", code="transient_exhausted", message="503", calls=4),
            at=clock.now(),
        ),
        deps,
        ActivitySections.of(deps.settings),
    )
    clock.advance(deps.settings.alerts.CLOCK_SKEW_TOLERANCE_S + 1)
    report = sweep_once(deps, clock, cursor=cursor)
    clock.advance(WAIT_S)
    return report


def test_one_order_on_a_dead_service_without_breakers_is_given_up_not_held() -> None:
    clock = FakeClock()
    given = {**DEMO_SETTINGS, **HARD_DOWN_SETTINGS, "BREAKER_ENABLED": "false"}
    # The devhost's own cadences are not orderflow's settings: this test drives the roles by hand.
    deps = memory_deps(clock, **{k: v for k, v in given.items() if k not in LocalSettings.model_fields})
    handle_intake_message(
        order_body(ORDER),
        client=TEST_CLIENT,
        orders=deps.orders,
        states=deps.states,
        queues=deps.queues,
        clock=deps.clock,
        steps=deps.settings.steps,
        starter=deps.settings.starter,
        queue_names=deps.settings.queues,
        definition=ORDER_V1,
    )
    cursor = SweepCursor()  # one supervisor loop, as in the run's DevHost
    reports = [
        fail_and_sweep(deps, clock, cursor) for _ in range(deps.settings.supervisor.SUPERVISOR_MAX_FAILURES)
    ]

    assert [r.held for r in reports] == [[]] * len(reports)
    assert reports[-1].gave_up == [ORDER]
    record = deps.states.get(ORDER).item
    assert (record.process_state, record.suspended_by) == (ProcessState.COMPENSATING, None)
    assert record.failure_count == deps.settings.supervisor.SUPERVISOR_MAX_FAILURES
