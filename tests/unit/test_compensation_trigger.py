"""The one rule for what triggers compensation (orderflow.compensation_trigger)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from orderflow.compensation_trigger import awaits_correction, compensation_cause
from orderflow.contracts import StepError
from orderflow.results import (
    AwaitingReview,
    BudgetExhausted,
    Fenced,
    ReviewRecorded,
    ReviewRejected,
    StepStarted,
    Stopped,
)

pytestmark = pytest.mark.unit

AT = datetime(2026, 5, 1, 12, tzinfo=UTC)

STEP = "charge_payment"


def error(kind: str, code: str = "c") -> StepError:
    return StepError(step=STEP, kind=kind, code=code, message="m", calls=2)


@pytest.mark.parametrize(
    ("seen", "kind", "code"),
    [
        (ReviewRejected(), "rejected", "review_rejected"),
        (ReviewRecorded(decision="reject"), "rejected", "review_rejected"),
        (Stopped(cause="cancelled_by_client"), "cancelled", "cancelled_by_client"),
        (Stopped(cause="operator_decision"), "cancelled", "operator_decision"),
        (BudgetExhausted(), "budget_exhausted", "retry_budget_exhausted"),
        (error("permanent", "card_declined"), "permanent", "card_declined"),
    ],
    ids=["review-rejected", "review-recorded-reject", "client-cancel", "operator-stop", "budget", "refused"],
)
def test_what_triggers_compensation_names_its_cause(seen: object, kind: str, code: str) -> None:
    cause = compensation_cause(STEP, seen)  # type: ignore[arg-type]

    assert cause is not None
    assert (cause.step, cause.kind, cause.code) == (STEP, kind, code)


def test_the_cause_of_an_operator_stop_says_an_operator_stopped_it() -> None:
    client = compensation_cause(STEP, Stopped(cause="cancelled_by_client"))
    operator = compensation_cause(STEP, Stopped(cause="operator_decision"))

    assert client is not None and client.message == "the client cancelled the order"
    assert operator is not None and operator.message == "an operator stopped the order"


@pytest.mark.parametrize(
    "seen",
    [
        error("transient"),
        error("timeout"),
        error("budget_exhausted"),  # the agent's own calls ran out: the supervisor retries the order
        ReviewRecorded(decision="approve"),
    ],
    ids=["transient", "timeout", "agent-calls-spent", "review-approved"],
)
def test_what_the_supervisor_retries_is_no_reason_to_compensate(seen: object) -> None:
    assert compensation_cause(STEP, seen) is None  # type: ignore[arg-type]


def test_a_refusal_with_a_fallback_provider_left_moves_to_it_instead() -> None:
    assert compensation_cause(STEP, error("permanent"), fallback_left=True) is None
    assert compensation_cause(STEP, error("permanent"), fallback_left=False) is not None


def test_a_refusal_of_a_step_that_takes_corrections_waits_for_one_instead() -> None:
    refusal = error("permanent", "unknown_carrier")
    assert compensation_cause(STEP, refusal, correctable=True) is None
    assert awaits_correction(refusal, correctable=True)
    # A fallback left is tried first; anything but a refusal, and an uncorrectable step, wait for nothing.
    assert not awaits_correction(refusal, correctable=True, fallback_left=True)
    assert not awaits_correction(error("transient"), correctable=True)
    assert not awaits_correction(BudgetExhausted(), correctable=True)
    assert not awaits_correction(refusal, correctable=False)
    cancel = compensation_cause(STEP, Stopped(cause="cancelled_by_client"), correctable=True)
    assert cancel is not None and cancel.kind == "cancelled"


@pytest.mark.parametrize("seen", [StepStarted(complete_by=AT), AwaitingReview(), Fenced(reason="x")])
def test_going_on_waiting_or_being_fenced_out_is_no_reason_to_compensate(seen: object) -> None:
    assert compensation_cause(STEP, seen) is None  # type: ignore[arg-type]
