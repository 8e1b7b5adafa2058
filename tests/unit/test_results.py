"""Activity results: each activity's tagged union, and the flag form earlier versions wrote, which
in-flight histories still hold and a replay must read as it was meant."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from activities.table import ACTIVITIES
from orderflow.contracts import (
    ACTIVITY_CONTRACTS,
    BEGIN_COMPENSATION_ACTIVITY,
    FINISH_COMPENSATION_ACTIVITY,
    FINISH_ORDER_ACTIVITY,
    RECORD_REVIEW_ACTIVITY,
    RECORD_STEP_FAILURE_ACTIVITY,
    START_STEP_ACTIVITY,
    START_UNDO_ACTIVITY,
    ActivityContract,
)
from orderflow.results import (
    AwaitingReview,
    BudgetExhausted,
    CompensationBegun,
    CompensationFinished,
    FailureRecorded,
    Fenced,
    OrderFinished,
    PastPointOfNoReturn,
    ReviewRecorded,
    ReviewRejected,
    StepStarted,
    Stopped,
    UndoStarted,
)

pytestmark = pytest.mark.unit

AT = datetime(2026, 5, 1, 12, 0, 30, tzinfo=UTC)
AT_TEXT = "2026-05-01T12:00:30.000000Z"
FENCED_FLAGS = {"applied": False, "fenced": True, "reason": "lockedBy o-1:2", "remainingCalls": 9}

EARLIER_RESULTS: list[tuple[ActivityContract[Any, Any], dict[str, Any], object]] = [
    (
        START_STEP_ACTIVITY,
        {"applied": True, "fenced": False, "reason": None, "remainingCalls": 9, "completeBy": AT_TEXT},
        StepStarted(complete_by=AT, remaining_calls=9),
    ),
    (START_STEP_ACTIVITY, {"applied": True, "remainingCalls": 9}, StepStarted(remaining_calls=9)),
    (START_STEP_ACTIVITY, FENCED_FLAGS, Fenced(reason="lockedBy o-1:2")),
    (
        START_STEP_ACTIVITY,
        {"applied": False, "reason": "retry_budget_exhausted", "budgetExhausted": True},
        BudgetExhausted(),
    ),
    (
        START_STEP_ACTIVITY,
        {"applied": False, "reason": "cancelled_by_client", "cancelled": True},
        Stopped(cause="cancelled_by_client"),
    ),
    (
        START_STEP_ACTIVITY,
        {
            "applied": False,
            "reason": "awaiting_review",
            "reviewRequired": True,
            "reviewDefault": "approve",
            "completeBy": AT_TEXT,
        },
        AwaitingReview(complete_by=AT, review_default="approve"),
    ),
    (
        START_STEP_ACTIVITY,
        {"applied": True, "reviewRequired": True, "reviewDecision": "reject"},
        ReviewRejected(),
    ),
    (
        RECORD_REVIEW_ACTIVITY,
        {"applied": True, "reviewDecision": "approve"},
        ReviewRecorded(decision="approve"),
    ),
    (RECORD_REVIEW_ACTIVITY, FENCED_FLAGS, Fenced(reason="lockedBy o-1:2")),
    (FINISH_ORDER_ACTIVITY, {"applied": True, "remainingCalls": 4}, OrderFinished(remaining_calls=4)),
    (
        FINISH_ORDER_ACTIVITY,
        {"applied": False, "reason": "operator_decision", "cancelled": True},
        Stopped(cause="operator_decision"),
    ),
    (FINISH_ORDER_ACTIVITY, FENCED_FLAGS, Fenced(reason="lockedBy o-1:2")),
    (
        RECORD_STEP_FAILURE_ACTIVITY,
        {"applied": True, "remainingCalls": 2},
        FailureRecorded(remaining_calls=2),
    ),
    (
        BEGIN_COMPENSATION_ACTIVITY,
        {"applied": True, "processState": "Compensating", "undoStages": [["b", "c"], ["a"]]},
        CompensationBegun(undo_stages=(("b", "c"), ("a",))),
    ),
    (BEGIN_COMPENSATION_ACTIVITY, {"applied": True, "processState": "Error"}, PastPointOfNoReturn()),
    (BEGIN_COMPENSATION_ACTIVITY, FENCED_FLAGS, Fenced(reason="lockedBy o-1:2")),
    (START_UNDO_ACTIVITY, {"applied": True, "completeBy": AT_TEXT}, UndoStarted(complete_by=AT)),
    (
        FINISH_COMPENSATION_ACTIVITY,
        {"applied": True, "processState": "Cancelled"},
        CompensationFinished(process_state="Cancelled"),
    ),
    (FINISH_COMPENSATION_ACTIVITY, {"applied": False, "fenced": False}, Fenced(reason="not applied")),
]


@pytest.mark.parametrize(("contract", "flags", "expected"), EARLIER_RESULTS)
def test_a_result_of_an_earlier_version_reads_as_the_case_it_meant(
    contract: ActivityContract[Any, Any], flags: dict[str, Any], expected: object
) -> None:
    assert contract.read_result(flags) == expected


@pytest.mark.parametrize(("contract", "flags", "expected"), EARLIER_RESULTS)
def test_every_case_round_trips_through_its_json_form(
    contract: ActivityContract[Any, Any], flags: dict[str, Any], expected: object
) -> None:
    payload = contract.result_payload(expected)

    assert "applied" not in payload
    assert contract.read_result(payload) == expected


def test_a_result_of_another_activity_is_refused() -> None:
    with pytest.raises(ValidationError):
        START_UNDO_ACTIVITY.read_result({"outcome": "compensation_begun", "undoStages": []})
    with pytest.raises(ValidationError):
        START_STEP_ACTIVITY.read_result({"outcome": "started", "completeBy": AT_TEXT, "extra": 1})


def test_every_activity_has_one_contract_under_a_distinct_name() -> None:
    names = [contract.name for contract in ACTIVITY_CONTRACTS]

    assert len(set(names)) == len(names) == 7


def test_the_activities_table_implements_every_contract_once() -> None:
    assert [activity.contract for activity in ACTIVITIES] == list(ACTIVITY_CONTRACTS)
