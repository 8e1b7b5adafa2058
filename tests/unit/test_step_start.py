"""The one step-start decision (``orderflow.protocol.step_start``), every outcome through the pure function.

The claim (``orderflow.protocol.transitions.forward.start_first_step``) and the ``start_step`` activity
both call it; their own tests (``test_protocol``, ``test_protocol_machine``, ``test_review``,
``test_cancellation``) show the decision applied in their writes.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from orderflow.clock import FakeClock
from orderflow.contracts import StepResult
from orderflow.errors import IllegalTransition
from orderflow.protocol.step_start import (
    AlreadyStarted,
    AwaitReview,
    NotProcessing,
    OutOfBudget,
    RejectedByReview,
    ReviewNeed,
    ReviewUnknown,
    Start,
    StopRequested,
    Suspended,
    decide_step_start,
)
from orderflow.protocol.transitions import forward
from orderflow.records import ProcessState, ReviewDecision, ReviewState, StateRecord, StepStatus
from orderflow.workflows import WORKFLOWS, StepDefinition, WorkflowDefinition
from tests.unit.fakes import memory_deps, submit_and_claim

pytestmark = pytest.mark.unit

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
INSTANCE = "a:o-1:1"


def workflow_with(predicate: str) -> WorkflowDefinition:
    """A deployed workflow version with a step that reviews (``review``) or has a fallback (``fallback``)."""
    for definition in WORKFLOWS.values():
        for step in definition.steps:
            if (predicate == "review" and step.review) or (predicate == "fallback" and step.fallback_agent):
                return definition
    raise AssertionError(f"no workflow version has a {predicate} step")


def claimed(definition: WorkflowDefinition) -> StateRecord:
    """A record of ``definition`` just claimed by attempt 1 (nothing started)."""
    deps = memory_deps(FakeClock(NOW), AGENT_MAX_CALLS_PER_STEP=4)
    record = submit_and_claim(deps, definition=definition)
    for state in record.steps.values():
        state.status = StepStatus.NOT_STARTED
        state.last_instance = None
        state.reserved_calls = 0
    record.complete_by = NOW + timedelta(seconds=30)
    return record


def step_named(definition: WorkflowDefinition, predicate: str) -> StepDefinition:
    return next(
        step
        for step in definition.steps
        if (predicate == "review" and step.review)
        or (predicate == "fallback" and step.fallback_agent)
        or predicate == "first"
    )


def decide(record: StateRecord, step: StepDefinition, **options: object) -> object:
    arguments: dict[str, object] = {
        "instance_id": INSTANCE,
        "review": ReviewNeed.NOT_NEEDED,
        "max_calls_per_step": 4,
    }
    arguments.update(options)
    return decide_step_start(record, step, **arguments)  # type: ignore[arg-type]


def test_a_fresh_step_starts_with_a_reservation_from_the_budget() -> None:
    definition = WORKFLOWS[max(WORKFLOWS)]
    record = claimed(definition)
    record.retry_budget.spent = record.retry_budget.limit - 3

    assert decide(record, definition.steps[0]) == Start(grant=3, to_fallback=False)


def test_a_step_this_attempt_started_is_already_started() -> None:
    definition = WORKFLOWS[max(WORKFLOWS)]
    record = claimed(definition)
    forward.run_step(
        record, definition.steps[0].name, INSTANCE, at=NOW, complete_by=NOW + timedelta(seconds=8), grant=4
    )

    assert decide(record, definition.steps[0]) == AlreadyStarted()
    # The same attempt, but the previous step's completion is not in the record yet: start again, keeping
    # the reservation it holds.
    record.steps[definition.steps[1].name].status = StepStatus.RUNNING
    assert decide(
        record, definition.steps[0], completed=StepResult(step=definition.steps[1].name, result={}, calls=1)
    ) == Start(grant=None, to_fallback=False)


def test_a_step_another_attempt_started_starts_again_with_a_new_reservation() -> None:
    definition = WORKFLOWS[max(WORKFLOWS)]
    record = claimed(definition)
    forward.run_step(record, definition.steps[0].name, "a:o-1:0", at=NOW, complete_by=NOW, grant=4)

    assert decide(record, definition.steps[0]) == Start(grant=4, to_fallback=False)


def test_no_calls_left_is_budget_exhausted() -> None:
    definition = WORKFLOWS[max(WORKFLOWS)]
    record = claimed(definition)
    record.retry_budget.spent = record.retry_budget.limit

    assert decide(record, definition.steps[0]) == OutOfBudget(to_fallback=False)


@pytest.mark.parametrize("state", [ProcessState.PROCESSING, ProcessState.AWAITING_REVIEW])
def test_a_requested_stop_stops_a_live_order(state: ProcessState) -> None:
    definition = WORKFLOWS[max(WORKFLOWS)]
    record = claimed(definition)
    record.process_state = state
    record.cancel_requested_at = NOW

    assert decide(record, definition.steps[0]) == StopRequested()


@pytest.mark.parametrize(
    "state", [ProcessState.PENDING, ProcessState.COMPENSATING, ProcessState.PROCESSED, ProcessState.ERROR]
)
def test_a_record_in_no_state_to_start_is_not_processing(state: ProcessState) -> None:
    definition = WORKFLOWS[max(WORKFLOWS)]
    record = claimed(definition)
    record.process_state = state
    record.cancel_requested_at = NOW  # a stop asked of a record that is not live changes nothing

    assert decide(record, definition.steps[0]) == NotProcessing(state)


def test_a_suspended_order_starts_nothing_and_a_stop_waits_for_its_resume() -> None:
    definition = WORKFLOWS[max(WORKFLOWS)]
    record = claimed(definition)
    record.suspended_at = NOW

    assert decide(record, definition.steps[0]) == Suspended()
    record.cancel_requested_at = NOW
    assert decide(record, definition.steps[0]) == Suspended()


@pytest.mark.parametrize(
    ("decision", "expected"),
    [(None, "await review"), (ReviewDecision.APPROVE, "suspended"), (ReviewDecision.REJECT, "suspended")],
)
def test_an_attempt_waiting_for_review_waits_on_when_suspended_and_hands_back_once_decided(
    decision: ReviewDecision | None, expected: str
) -> None:
    # A re-run of the waiting attempt's activity (a reply it could not deliver) finds the suspend: it
    # keeps waiting, as the suspend left it, rather than ending an attempt nobody asked to end.
    definition = workflow_with("review")
    step = step_named(definition, "review")
    record = claimed(definition)
    pending = ReviewState(
        step=step.name,
        requested_at=NOW,
        deadline=NOW + timedelta(hours=1),
        response_queue="r",
        decision=decision,
    )
    record.process_state, record.review, record.suspended_at = ProcessState.AWAITING_REVIEW, pending, NOW

    decided = decide(record, step, review=ReviewNeed.NEEDED)

    assert decided == (AwaitReview(pending) if expected == "await review" else Suspended())
    # Another step's review, or one not yet asked for, is no waiting: the order is handed back.
    record.review = pending.model_copy(update={"step": "another"})
    assert decide(record, step, review=ReviewNeed.NEEDED) == Suspended()


def test_a_step_that_reviews_waits_until_a_decision_and_a_caller_without_the_amount_cannot_tell() -> None:
    definition = workflow_with("review")
    step = step_named(definition, "review")
    record = claimed(definition)

    assert decide(record, step, review=ReviewNeed.UNKNOWN) == ReviewUnknown()
    assert decide(record, step, review=ReviewNeed.NEEDED) == AwaitReview(None)
    pending = ReviewState(
        step=step.name, requested_at=NOW, deadline=NOW + timedelta(hours=1), response_queue="r"
    )
    record.review = pending
    assert decide(record, step, review=ReviewNeed.NEEDED) == AwaitReview(pending)
    record.review = pending.model_copy(update={"decision": ReviewDecision.REJECT})
    assert decide(record, step, review=ReviewNeed.NEEDED) == RejectedByReview()
    record.review = pending.model_copy(update={"decision": ReviewDecision.APPROVE})
    assert decide(record, step, review=ReviewNeed.NEEDED) == Start(grant=4, to_fallback=False)
    # An approval found while still AwaitingReview: record_review moves the order back first.
    record.process_state = ProcessState.AWAITING_REVIEW
    assert decide(record, step, review=ReviewNeed.NEEDED) == NotProcessing(ProcessState.AWAITING_REVIEW)


def test_a_fallback_asked_for_moves_the_step_and_reserves_again() -> None:
    definition = workflow_with("fallback")
    step = step_named(definition, "fallback")
    record = claimed(definition)
    forward.run_step(record, step.name, INSTANCE, at=NOW, complete_by=NOW + timedelta(seconds=8), grant=4)

    assert decide(record, step, fallback=True) == Start(grant=4, to_fallback=True)
    record.retry_budget.spent = record.retry_budget.limit
    assert decide(record, step, fallback=True) == OutOfBudget(to_fallback=True)
    # Once on its fallback, asking again is an ordinary start of that provider.
    record.retry_budget.spent = 0
    record.steps[step.name].fallback = True
    assert decide(record, step, fallback=True) == AlreadyStarted()


def test_a_fallback_for_a_step_without_one_is_an_illegal_transition() -> None:
    definition = WORKFLOWS[max(WORKFLOWS)]
    step = next(step for step in definition.steps if step.fallback_agent is None)
    record = claimed(definition)

    with pytest.raises(IllegalTransition, match="has no fallback provider"):
        decide(record, step, fallback=True)


def test_the_previous_steps_unused_reservation_goes_back_before_the_next_reserves() -> None:
    # All of a budget of 4 reserved for the first step, which made 1 call: 3 come back for the second.
    definition = WORKFLOWS[max(WORKFLOWS)]
    first, second = definition.steps[0], definition.steps[1]
    record = claimed(definition)
    record.retry_budget.limit, record.retry_budget.spent = 4, 0
    forward.run_step(record, first.name, INSTANCE, at=NOW, complete_by=NOW + timedelta(seconds=8), grant=4)
    done = StepResult(step=first.name, result={}, calls=1)

    assert decide(record, second, completed=done) == Start(grant=3, to_fallback=False)
    done_all = StepResult(step=first.name, result={}, calls=4)
    assert decide(record, second, completed=done_all) == OutOfBudget(to_fallback=False)
