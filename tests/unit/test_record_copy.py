"""A record's private copy (what every fenced write hands its mutation) shares nothing with it."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from orderflow.records import StateRecord, StepStatus

pytestmark = pytest.mark.unit

AT = "2026-12-01T12:00:00.123456Z"


def _record() -> StateRecord:
    return StateRecord.from_stored(
        {
            "id": "c1:o1",
            "orderId": "c1:o1",
            "processState": "Processing",
            "lockedBy": "c1:o1:1",
            "completeBy": AT,
            "replyTo": "replies-c1",
            "clientId": "c1",
            "steps": {
                "payment": {
                    "status": "Running",
                    "attempts": 1,
                    "idempotencyKey": "k1",
                    "result": {"authorization": "a1"},
                    "startedAt": AT,
                }
            },
            "retryBudget": {"limit": 24, "spent": 2},
            "workflowVersion": "v1",
            "timeline": [{"seq": 1, "at": AT, "role": "intake", "toState": "Pending"}],
            "timelineSeq": 1,
            "createdAt": AT,
            "updatedAt": AT,
            "writtenByANewerSchema": {"kept": [1, 2]},
            "_etag": "e1",
        }
    )


def test_the_copy_is_equal_to_the_record_to_the_microsecond_with_its_unknown_fields() -> None:
    record = _record()
    copy = record.copied()
    assert copy == record and copy is not record
    assert copy.complete_by == datetime(2026, 12, 1, 12, 0, 0, 123456, tzinfo=UTC)
    assert copy.to_json_dict() == record.to_json_dict()
    assert copy.to_json_dict()["writtenByANewerSchema"] == {"kept": [1, 2]}


def test_changing_the_copy_leaves_the_record_untouched() -> None:
    record = _record()
    copy = record.copied()
    copy.steps["payment"].status = StepStatus.COMPLETED
    assert copy.steps["payment"].result is not None
    copy.steps["payment"].result["authorization"] = "changed"
    copy.timeline[0].seq = 99
    copy.retry_budget.spent = 3
    assert copy.model_extra is not None and record.model_extra is not None
    copy.model_extra["writtenByANewerSchema"]["kept"].append(3)
    assert record.steps["payment"].status is StepStatus.RUNNING
    assert record.steps["payment"].result == {"authorization": "a1"}
    assert (record.timeline[0].seq, record.retry_budget.spent) == (1, 2)
    assert record.model_extra["writtenByANewerSchema"] == {"kept": [1, 2]}
