"""The poison guard (supervisor.poison), through the real claim, failure activity, sweep and operator API.

Each attempt is claimed by the starter's claim, fails its first step through ``record_step_failure`` (as
the orchestration records an agent's failure) and is recovered by ``run_sweep``; the next is claimed once
its backoff has passed.
"""

from __future__ import annotations

import pytest

from activities.sections import ActivitySections
from activities.steps import record_step_failure
from intake.submission import handle_intake_message
from operator_api.compensate import CompensateAccepted, CompensateAction, compensate_order
from orchestrators.starter import run_starter_pass
from orchestrators.workflow import forward
from orderflow import telemetry
from orderflow.attempts import claim
from orderflow.clock import FakeClock
from orderflow.contracts import RECORD_STEP_FAILURE, START_STEP, RecordStepFailureInput, StepError
from orderflow.errors import DEADLINE_EXCEEDED, TRANSIENT_EXHAUSTED, WORKFLOW_ERROR
from orderflow.messages import AgentOutcome, AgentResponse, request_id_for, step_event_name
from orderflow.operator_auth import Principal
from orderflow.records import ProcessState
from orderflow.workflows import ORDER_V1
from supervisor.poison import POISON_GUARD, REPEATED_FAILURE
from supervisor.sweep import SweepCursor, SweepReport
from tests.activity_json import record_step_failure as record_step_failure_json
from tests.activity_json import start_step
from tests.host_deps import HostDeps
from tests.unit.fakes import TEST_CLIENT, RecordingClient, memory_deps, order_body, sweep_once
from tests.unit.scripted_runtime import ScriptedClient

pytestmark = pytest.mark.unit

STEP = ORDER_V1.steps[0].name
WAIT_S = 120  # past any backoff of the first failures and the tolerated clock skew


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def deps(clock: FakeClock) -> HostDeps:
    return memory_deps(clock, POISON_FAILURES=3, POISON_VERSION_ORDERS=3, SUPERVISOR_MAX_FAILURES=6)


def advance(deps: HostDeps, seconds: float) -> None:
    assert isinstance(deps.clock, FakeClock)
    deps.clock.advance(seconds)


def submit(deps: HostDeps, order_id: str) -> None:
    handle_intake_message(
        order_body(order_id),
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


def fail_attempt(deps: HostDeps, order_id: str, code: str | None) -> None:
    """Claim the next attempt and fail its first step with ``code`` (None: the attempt dies silently)."""
    won = claim(
        deps.states,
        deps.states.get(order_id),
        deps.clock,
        deps.settings.starter,
        deps.settings.steps,
        host_id=deps.settings.queues.HOST_ID,
    )
    assert won is not None, f"{order_id} was claimable"
    if code is not None:
        record_step_failure(
            RecordStepFailureInput(
                order_id=order_id,
                instance_id=str(won.item.locked_by),
                error=StepError(
                    step=STEP, kind="transient", code=code, message=f"agent said {code}", calls=1
                ),
                at=deps.clock.now(),
            ),
            deps,
            ActivitySections.of(deps.settings),
        )
    else:
        advance(deps, deps.settings.steps.STEP_TIMEOUT_S + deps.settings.starter.START_LATENCY_S)


def sweep(deps: HostDeps, cursor: SweepCursor | None = None) -> SweepReport:
    advance(deps, deps.settings.alerts.CLOCK_SKEW_TOLERANCE_S + 1)
    report = sweep_once(deps, cursor=cursor)
    advance(deps, WAIT_S)
    return report


def test_an_order_failing_the_same_way_three_times_is_held_with_an_alert_not_retried(
    deps: HostDeps,
) -> None:
    submit(deps, "a:o-1")
    reports = []
    with telemetry.recording() as seen:
        for _ in range(3):
            fail_attempt(deps, "a:o-1", "http_500")
            reports.append(sweep(deps))

    assert [r.requeued for r in reports[:2]] == [["a:o-1"], ["a:o-1"]]
    assert reports[2].held == ["a:o-1"] and reports[2].requeued == []
    assert seen["alert.poison_order"] == 1
    record = deps.states.get("a:o-1").item
    assert (record.process_state, record.locked_by, record.suspended_by) == (
        ProcessState.PENDING,
        None,
        POISON_GUARD,
    )
    assert record.suspended_at is not None
    assert (
        record.failure_count == 3 < deps.settings.supervisor.SUPERVISOR_MAX_FAILURES
    )  # not run to the threshold
    assert record.last_error is not None
    assert (record.last_error.code, record.last_error.step) == (REPEATED_FAILURE, STEP)
    assert "http_500" in record.last_error.message
    assert [(e.error_step, e.error_code) for e in record.attempt_history] == [(STEP, "http_500")] * 3

    # Held: a day later no starter claims it and no sweep touches it.
    advance(deps, 86_400)
    client = RecordingClient()
    starter = run_starter_pass(
        states=deps.states,
        client=client,
        clock=deps.clock,
        starter=deps.settings.starter,
        steps=deps.settings.steps,
        scans=deps.settings.scans,
        queue_names=deps.settings.queues,
        response_queue="r",
        capacity=10,
    )
    assert starter.claimed == [] and client.started == []
    assert sweep(deps).scanned == 0
    assert deps.states.get("a:o-1").item.attempt == 3


def test_an_operator_moves_a_held_order_on_with_compensate(deps: HostDeps) -> None:
    submit(deps, "a:o-1")
    for _ in range(3):
        fail_attempt(deps, "a:o-1", "http_500")
        sweep(deps)
    operator = Principal(
        object_id="oid-1", tenant_id="t-1", subject="s", roles=frozenset({"orderflow.operator"})
    )

    outcome = compensate_order(
        "a:o-1",
        operator,
        reason="poison input",
        states=deps.states,
        queues=deps.queues,
        clock=deps.clock,
        grace_s=deps.settings.starter.CLAIM_TIMEOUT_S,
    )

    assert isinstance(outcome, CompensateAccepted) and outcome.action is CompensateAction.SCHEDULED
    assert outcome.record.suspended_at is None  # the decision to undo it lifts the guard's suspension
    resumed = claim(
        deps.states,
        deps.states.get("a:o-1"),
        deps.clock,
        deps.settings.starter,
        deps.settings.steps,
        host_id=deps.settings.queues.HOST_ID,
    )
    assert resumed is not None and resumed.item.process_state is ProcessState.COMPENSATING


@pytest.mark.parametrize(
    "codes",
    [
        ["http_500", "http_503", "http_500", "http_503", "http_500"],  # different codes
        [None, None, None, None, None],  # expiries say nothing of how an attempt failed
        ["http_500", None, "http_500", "http_500", None],  # an expiry breaks the run
        # A dependency down fails every order that calls it alike: the breaker and the budget bound those.
        [TRANSIENT_EXHAUSTED] * 5,
        [DEADLINE_EXCEEDED] * 5,
    ],
)
def test_failures_that_differ_are_retried_as_before(deps: HostDeps, codes: list[str | None]) -> None:
    submit(deps, "a:o-1")
    with telemetry.recording() as seen:
        for code in codes:
            fail_attempt(deps, "a:o-1", code)
            assert sweep(deps).requeued == ["a:o-1"]

    assert seen["alert.poison_order"] == 0
    record = deps.states.get("a:o-1").item
    assert record.process_state is ProcessState.PENDING and record.suspended_at is None


def test_a_version_failing_across_orders_is_flagged_once_and_its_orders_are_not_held(
    deps: HostDeps,
) -> None:
    orders = [f"a:o-{i}" for i in range(4)]
    for order_id in orders:
        submit(deps, order_id)
    cursor = SweepCursor()  # one supervisor loop: its window spans the sweeps
    with telemetry.recording() as seen:
        for _ in range(3):
            for order_id in orders:
                fail_attempt(deps, order_id, "http_500")
            report = sweep(deps, cursor)

    assert seen["alert.workflow_version_failing"] == 1  # raised on the first sweep, once per window
    assert seen["alert.poison_order"] == 0  # systemic: re-queued as before, not held one by one
    assert sorted(report.requeued) == orders and report.held == []


@pytest.mark.parametrize(("window_s", "flags"), [(60, 0), (600, 1)])
def test_the_version_flag_counts_orders_within_its_window_only(
    clock: FakeClock, window_s: float, flags: int
) -> None:
    deps = memory_deps(clock, POISON_VERSION_ORDERS=2, POISON_VERSION_WINDOW_S=window_s)
    cursor = SweepCursor()
    for order_id in ("a:o-1", "a:o-2"):
        submit(deps, order_id)
    with telemetry.recording() as seen:
        fail_attempt(deps, "a:o-1", "http_500")
        sweep(deps, cursor)  # then WAIT_S (120 s) passes
        fail_attempt(deps, "a:o-2", "http_500")
        sweep(deps, cursor)

    assert seen["alert.workflow_version_failing"] == flags


def _poisoned_attempt(deps: HostDeps, order_id: str, client: ScriptedClient) -> str:
    """Claim the next attempt of ``order_id`` and run its real workflow until the workflow's own code
    raises (the step's failed answer meets a bug of this version); returns the attempt's instance id."""
    run_starter_pass(
        states=deps.states,
        client=client,
        clock=deps.clock,
        starter=deps.settings.starter,
        steps=deps.settings.steps,
        scans=deps.settings.scans,
        queue_names=deps.settings.queues,
        response_queue="agent-responses",
        capacity=10,
    )
    instance_id = str(deps.states.get(order_id).item.locked_by)
    orchestration = client.instances[instance_id]
    started = orchestration.activity
    assert started is not None and started.name == START_STEP
    orchestration.complete_activity(start_step(started.payload, deps))
    failed = AgentResponse(
        request_id=request_id_for(instance_id, STEP),
        event_id=f"{instance_id}:{STEP}:1",
        event_name=step_event_name(STEP),
        order_id=order_id,
        instance_id=instance_id,
        step=STEP,
        outcome=AgentOutcome.FAILED,
        error_kind="transient",
        error_code=TRANSIENT_EXHAUSTED,
        calls=1,
        completed_at=deps.clock.now(),
    )
    orchestration.raise_event(step_event_name(STEP), failed.model_dump(mode="json"))
    recorded = orchestration.activity
    assert recorded is not None and recorded.name == RECORD_STEP_FAILURE
    with pytest.raises(RuntimeError, match="poison"):  # recorded, then the orchestration fails
        orchestration.complete_activity(record_step_failure_json(recorded.payload, deps))
    return instance_id


def test_an_orchestration_that_fails_in_its_own_code_is_recovered_at_once_then_held(
    deps: HostDeps, monkeypatch: pytest.MonkeyPatch
) -> None:
    def bug(step: str, response: AgentResponse) -> StepError:
        raise RuntimeError(f"poison: {step} answered {response.error_code}")

    monkeypatch.setattr(forward, "step_error", bug)
    submit(deps, "a:o-1")
    client = ScriptedClient(deps.clock)
    reports = []
    with telemetry.recording() as seen:
        for _ in range(3):
            _poisoned_attempt(deps, "a:o-1", client)
            failed = deps.states.get("a:o-1").item
            assert failed.last_error is not None and failed.complete_by == deps.clock.now()  # due now
            assert (failed.last_error.kind, failed.last_error.code) == ("workflow", WORKFLOW_ERROR)
            assert "RuntimeError: poison" in failed.last_error.message
            reports.append(sweep(deps))

    assert [r.requeued for r in reports] == [["a:o-1"], ["a:o-1"], []]
    assert reports[2].held == ["a:o-1"]
    assert seen["alert.poison_order"] == 1
    record = deps.states.get("a:o-1").item
    assert (record.process_state, record.suspended_by) == (ProcessState.PENDING, POISON_GUARD)
    assert [(e.error_step, e.error_code) for e in record.attempt_history] == [(STEP, WORKFLOW_ERROR)] * 3


@pytest.mark.parametrize("code", [None, TRANSIENT_EXHAUSTED, DEADLINE_EXCEEDED])
def test_expiries_and_dependency_failures_across_orders_flag_no_version(
    deps: HostDeps, code: str | None
) -> None:
    orders = [f"a:o-{i}" for i in range(4)]
    for order_id in orders:
        submit(deps, order_id)
    cursor = SweepCursor()
    with telemetry.recording() as seen:
        for _ in range(2):
            for order_id in orders:
                fail_attempt(deps, order_id, code)
            report = sweep(deps, cursor)

    assert seen["alert.workflow_version_failing"] == 0
    assert sorted(report.requeued) == orders and report.held == []
