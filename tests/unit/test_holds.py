"""The hold rule (``orderflow.protocol.holds``) through the step-start decision: a guarded step starts only
while every hold is live for its whole deadline plus the skew margin; a lapsing hold is re-acquired once,
then the order is compensated."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest

from operator_api.suspension import set_suspension
from orderflow import telemetry
from orderflow.clock import FakeClock
from orderflow.contracts import StepResult
from orderflow.operator_auth import Principal
from orderflow.protocol.holds import HOLD_EXPIRY_SKEW_S, HoldLapsed, HoldRule, ReacquireHold, hold_acquired
from orderflow.protocol.step_start import OutOfBudget, ReviewNeed, Start, StepStartDecision, decide_step_start
from orderflow.protocol.transitions import forward, holds
from orderflow.records import CompensationEntry, Hold, StateRecord, StepStatus, format_utc
from orderflow.workflows import (
    ORDER_V1,
    ORDER_V6,
    HoldDefinition,
    InvalidWorkflowDefinition,
    StepDefinition,
    WorkflowDefinition,
)
from tests.unit.fakes import memory_deps, submit_and_claim

pytestmark = pytest.mark.unit

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
INSTANCE = "a:o-1:1"
DEADLINE_S = 8.0
MARGIN_S = 2.0
CAPTURE = ORDER_V6.step("capture_payment")


def acquired(*, inventory_in_s: float = 120.0, payment_in_s: float = 120.0) -> StateRecord:
    """An order-v6 record of attempt 1 whose two holds were acquired and expire in the seconds given."""
    deps = memory_deps(FakeClock(NOW))
    record = submit_and_claim(deps, definition=ORDER_V6)
    for state in record.steps.values():
        state.status, state.last_instance, state.reserved_calls = StepStatus.NOT_STARTED, None, 0
    for step, expires_in in (("reserve_inventory", inventory_in_s), ("authorize_payment", payment_in_s)):
        record.steps[step].status = StepStatus.COMPLETED
        record.steps[step].attempts = 1
        hold = ORDER_V6.step(step).hold
        assert hold is not None
        record.holds[step] = Hold(
            hold_id=f"h-{step}",
            expires_at=NOW + timedelta(seconds=expires_in),
            commit=hold.commit,
            idempotency_key=record.steps[step].idempotency_key,
            acquired_at=NOW - timedelta(seconds=1),
        )
    return record


def decide(
    record: StateRecord,
    step: StepDefinition = CAPTURE,
    *,
    now: datetime = NOW,
    completed: StepResult | None = None,
) -> StepStartDecision:
    rule = HoldRule(ORDER_V6, now=now, deadline_s=DEADLINE_S, margin_s=MARGIN_S)
    return decide_step_start(
        record,
        step,
        instance_id=INSTANCE,
        review=ReviewNeed.NOT_NEEDED,
        max_calls_per_step=4,
        holds=rule,
        completed=completed,
    )


def test_every_hold_live_for_the_deadline_and_the_margin_starts_the_commit() -> None:
    assert decide(acquired()) == Start(grant=4, to_fallback=False)


def test_one_expired_hold_is_reacquired_once_then_the_order_is_compensated() -> None:
    record = acquired(payment_in_s=-5.0)
    assert decide(record) == ReacquireHold("authorize_payment", grant=4)
    record.holds["authorize_payment"].reacquired = 1
    assert decide(record) == HoldLapsed("authorize_payment", NOW - timedelta(seconds=5))


def test_a_hold_expiring_within_the_margin_is_reacquired() -> None:
    # Live now, and for the step's deadline, but not for the deadline and the skew margin.
    just_short = DEADLINE_S + MARGIN_S - 0.5
    assert decide(acquired(inventory_in_s=just_short)) == ReacquireHold("reserve_inventory", grant=4)
    assert decide(acquired(inventory_in_s=DEADLINE_S + MARGIN_S + 0.5)) == Start(grant=4, to_fallback=False)


def test_the_earliest_expiry_is_reacquired_first() -> None:
    assert decide(acquired(inventory_in_s=3.0, payment_in_s=1.0)) == ReacquireHold(
        "authorize_payment", grant=4
    )


@pytest.mark.parametrize("skew_s", [-MARGIN_S, -1.0, 0.0, 1.0, MARGIN_S])
def test_clocks_skewed_within_the_margin_never_commit_after_the_service_expires_the_hold(
    skew_s: float,
) -> None:
    # The host's clock reads the service's time + skew_s. The service's expiresAt is on its own clock.
    for expires_in in (DEADLINE_S + MARGIN_S - 0.01, DEADLINE_S + MARGIN_S + 0.01, DEADLINE_S + 2 * MARGIN_S):
        record = acquired(inventory_in_s=expires_in)
        host_now = NOW + timedelta(seconds=skew_s)
        decision = decide(record, now=host_now)
        # The last moment the commit can reach the service, on the service's clock.
        commit_by = NOW + timedelta(seconds=DEADLINE_S)
        if isinstance(decision, Start):
            assert commit_by < record.holds["reserve_inventory"].expires_at
        else:
            assert decision == ReacquireHold("reserve_inventory", grant=4)
    # Within the tolerance, a hold live for the deadline and twice the margin is committed on any clock.
    assert decide(
        acquired(inventory_in_s=DEADLINE_S + 2 * MARGIN_S + 0.01), now=NOW + timedelta(seconds=skew_s)
    ) == Start(grant=4, to_fallback=False)


def test_a_commit_sent_before_is_never_restarted_against_a_lapsing_hold() -> None:
    # An earlier attempt sent the capture: it may have been applied, and a new hold cannot replace it.
    record = acquired(payment_in_s=1.0)
    record.steps["capture_payment"].attempts = 1
    assert decide(record) == HoldLapsed("authorize_payment", NOW + timedelta(seconds=1))


def test_a_committed_hold_no_longer_expires() -> None:
    record = acquired(payment_in_s=-60.0)
    record.holds["authorize_payment"].committed_at = NOW - timedelta(seconds=61)
    record.steps["capture_payment"].status = StepStatus.COMPLETED
    assert decide(record, ORDER_V6.step("commit_inventory")) == Start(grant=4, to_fallback=False)


def test_a_reacquisition_under_way_is_sent_again_and_another_attempts_lapses() -> None:
    record = acquired(payment_in_s=-5.0)
    record.holds["authorize_payment"].reacquired = 1
    record.holds["authorize_payment"].reacquiring_by = INSTANCE
    assert decide(record) == ReacquireHold("authorize_payment", started=True)
    record.holds["authorize_payment"].reacquiring_by = "a:o-1:0"
    assert isinstance(decide(record), HoldLapsed)


def test_a_hold_never_recorded_lapses_and_a_reacquisition_needs_calls_left() -> None:
    record = acquired()
    del record.holds["reserve_inventory"]
    assert decide(record) == HoldLapsed("reserve_inventory", None)
    record = acquired(payment_in_s=0.0)
    record.retry_budget.spent = record.retry_budget.limit
    assert decide(record) == OutOfBudget(to_fallback=False)


def test_steps_that_commit_nothing_are_not_guarded() -> None:
    record = acquired(payment_in_s=-5.0)
    assert decide(record, ORDER_V6.step("reserve_inventory")) == Start(grant=4, to_fallback=False)


def test_definitions_refuse_a_hold_after_a_commit_or_a_commit_of_another_operation() -> None:
    reserve = StepDefinition(
        "reserve_inventory",
        agent="inventory",
        operation="reserve",
        undo="release",
        hold=HoldDefinition(60, "commit"),
    )
    commit = StepDefinition(
        "commit_inventory", agent="inventory", operation="commit", commits="reserve_inventory"
    )
    with pytest.raises(InvalidWorkflowDefinition, match="commits 'reserve_inventory'"):
        WorkflowDefinition(
            "x",
            (
                reserve,
                StepDefinition("c", agent="inventory", operation="capture", commits="reserve_inventory"),
            ),
        )
    with pytest.raises(InvalidWorkflowDefinition, match="come before every step that commits"):
        WorkflowDefinition("x", (commit, reserve))
    with pytest.raises(InvalidWorkflowDefinition, match="come before"):
        WorkflowDefinition("x", (ORDER_V1.steps[2], reserve))
    assert ORDER_V6.hold_steps == ("reserve_inventory", "authorize_payment")
    assert [s.name for s in ORDER_V6.steps if ORDER_V6.guarded_by_holds(s)] == [
        "capture_payment",
        "commit_inventory",
        "create_shipment",
    ]


def test_the_previous_steps_hold_and_commit_count_in_the_write_that_records_them() -> None:
    record = acquired()
    del record.holds["authorize_payment"]
    record.steps["authorize_payment"].status = StepStatus.RUNNING
    answer = {"holdId": "auth-1", "expiresAt": format_utc(NOW + timedelta(seconds=120))}
    done = StepResult(step="authorize_payment", result=answer, calls=1)
    assert decide(record, completed=done) == Start(grant=4, to_fallback=False)
    # An answer without an expiry is a hold nobody may commit against.
    unknown = StepResult(step="authorize_payment", result={"holdId": "auth-1"}, calls=1)
    assert decide(record, completed=unknown) == ReacquireHold("authorize_payment", grant=4)
    # The capture completing in the same write commits the authorisation, even once expired.
    record = acquired(payment_in_s=-1.0)
    record.steps["capture_payment"].status = StepStatus.RUNNING
    captured = StepResult(step="capture_payment", result={"chargeId": "ch-1"}, calls=1)
    assert decide(record, ORDER_V6.step("commit_inventory"), completed=captured) == Start(
        grant=4, to_fallback=False
    )


def test_a_recovered_or_resubmitted_order_leaves_a_guarded_step_to_the_activity() -> None:
    # The claim (after a recovery or a resubmit) starts only the first step that is not guarded.
    record = acquired(payment_in_s=-5.0)
    steps, starter = memory_deps(FakeClock(NOW)).settings.steps, memory_deps(FakeClock(NOW)).settings.starter
    assert forward.start_first_step(record, NOW, steps, starter) is None
    assert record.steps["capture_payment"].status is StepStatus.NOT_STARTED
    assert decide(record) == ReacquireHold("authorize_payment", grant=4)


def test_a_reacquisition_started_leaves_the_undo_only_its_key_not_the_old_holds_id() -> None:
    # A service refuses an undo whose id is not its key's effect: the old id with the new key would
    # leave the order's compensation failed.
    record = acquired(inventory_in_s=1)
    old_key = record.steps["reserve_inventory"].idempotency_key
    entry = CompensationEntry(
        step="reserve_inventory",
        action="reserve",
        undo="release",
        undo_key=f"{record.order_id}:reserve_inventory:undo",
        data={"reservationId": "h-reserve_inventory"},
        recorded_at=NOW,
    )
    record.compensation_log.append(entry)
    holds.start_reacquire(record, "reserve_inventory", INSTANCE, grant=2, complete_by=NOW)
    new_key = record.steps["reserve_inventory"].idempotency_key
    assert new_key != old_key and new_key.endswith(":reacquire-1")
    assert record.compensation_log[-1].data == {}
    assert record.holds["reserve_inventory"].reacquiring_by == INSTANCE


def test_suspending_an_order_with_holds_not_committed_raises_an_alert_naming_the_earliest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    deps = memory_deps(FakeClock(NOW))
    record = submit_and_claim(deps, definition=ORDER_V6)
    for step, expires_in in (("reserve_inventory", 60), ("authorize_payment", 30)):
        record.holds[step] = Hold(
            hold_id=step,
            expires_at=NOW + timedelta(seconds=expires_in),
            commit="commit",
            idempotency_key=step,
            acquired_at=NOW,
        )
    deps.states.replace(record, etag=deps.states.get(record.order_id).etag)
    otto = Principal(
        object_id="oid-otto", tenant_id="t", subject="s", roles=frozenset({"orderflow.operator"})
    )

    def suspend() -> None:
        set_suspension(
            record.order_id,
            otto,
            suspend=True,
            if_match=None,
            states=deps.states,
            queues=deps.queues,
            clock=deps.clock,
        )

    with telemetry.recording() as seen, caplog.at_level(logging.ERROR, logger="orderflow.alerts"):
        suspend()
    assert seen["alert.holds_expire_while_suspended"] == 1
    expires = (NOW + timedelta(seconds=30)).isoformat()
    assert f"step=authorize_payment expires_at={expires}" in caplog.text


def test_an_expiry_later_than_the_lifetime_asked_for_is_not_believed() -> None:
    reserve = ORDER_V6.step("reserve_inventory")
    assert reserve.hold is not None
    within = NOW + timedelta(seconds=reserve.hold.lifetime_s + HOLD_EXPIRY_SKEW_S)
    kept = hold_acquired(reserve, {"holdId": "h-1", "expiresAt": format_utc(within)}, "k", NOW)
    assert kept.expires_at == within
    a_year = NOW + timedelta(days=365)
    refused = hold_acquired(reserve, {"holdId": "h-1", "expiresAt": format_utc(a_year)}, "k", NOW)
    assert refused.expires_at == NOW  # expired as recorded: nothing commits against it
