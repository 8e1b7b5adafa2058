"""Activity results: each activity's tagged union, read back from the JSON form the runtime carries."""

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
    ResultModel,
    ReviewRecorded,
    ReviewRejected,
    StepStarted,
    Stopped,
    UndoStarted,
)

pytestmark = pytest.mark.unit

AT = datetime(2026, 5, 1, 12, 0, 30, tzinfo=UTC)
AT_TEXT = "2026-05-01T12:00:30.000000Z"
RESULTS: list[tuple[ActivityContract[Any, Any], ResultModel]] = [
    (START_STEP_ACTIVITY, StepStarted(complete_by=AT, remaining_calls=9)),
    (START_STEP_ACTIVITY, StepStarted(complete_by=AT, remaining_calls=9, fallback=True)),
    (START_STEP_ACTIVITY, Fenced(reason="lockedBy o-1:2")),
    (START_STEP_ACTIVITY, BudgetExhausted()),
    (START_STEP_ACTIVITY, Stopped(cause="cancelled_by_client")),
    (START_STEP_ACTIVITY, AwaitingReview(complete_by=AT, review_default="approve")),
    (START_STEP_ACTIVITY, ReviewRejected()),
    (RECORD_REVIEW_ACTIVITY, ReviewRecorded(decision="approve")),
    (RECORD_REVIEW_ACTIVITY, Fenced(reason="lockedBy o-1:2")),
    (FINISH_ORDER_ACTIVITY, OrderFinished(remaining_calls=4)),
    (FINISH_ORDER_ACTIVITY, Stopped(cause="operator_decision")),
    (FINISH_ORDER_ACTIVITY, Fenced(reason="lockedBy o-1:2")),
    (RECORD_STEP_FAILURE_ACTIVITY, FailureRecorded(remaining_calls=2)),
    (BEGIN_COMPENSATION_ACTIVITY, CompensationBegun(undo_stages=(("b", "c"), ("a",)))),
    (BEGIN_COMPENSATION_ACTIVITY, PastPointOfNoReturn()),
    (BEGIN_COMPENSATION_ACTIVITY, Fenced(reason="lockedBy o-1:2")),
    (START_UNDO_ACTIVITY, UndoStarted(complete_by=AT)),
    (FINISH_COMPENSATION_ACTIVITY, CompensationFinished(process_state="Cancelled")),
    (FINISH_COMPENSATION_ACTIVITY, Fenced(reason="not applied")),
]


@pytest.mark.parametrize(("contract", "expected"), RESULTS)
def test_every_case_round_trips_through_its_json_form(
    contract: ActivityContract[Any, Any], expected: ResultModel
) -> None:
    payload = contract.result_payload(expected)

    assert payload["outcome"] == expected.model_dump()["outcome"]
    assert contract.read_result(payload) == expected


def test_a_start_on_the_provider_says_nothing_of_a_fallback_so_an_older_version_reads_it() -> None:
    on_provider = START_STEP_ACTIVITY.result_payload(StepStarted(complete_by=AT, remaining_calls=9))
    on_fallback = START_STEP_ACTIVITY.result_payload(
        StepStarted(complete_by=AT, remaining_calls=9, fallback=True)
    )

    assert on_provider == {"outcome": "started", "completeBy": AT_TEXT, "remainingCalls": 9}
    assert on_fallback == {**on_provider, "fallback": True}


def test_a_result_without_its_outcome_tag_is_refused() -> None:
    with pytest.raises(ValidationError):
        START_STEP_ACTIVITY.read_result({"applied": True, "remainingCalls": 9})


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
