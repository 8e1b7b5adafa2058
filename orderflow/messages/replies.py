"""The status reply a client receives on its reply queue, and its message id."""

from __future__ import annotations

from enum import StrEnum

from pydantic import (
    Field,
)

from orderflow.messages.envelope import Envelope
from orderflow.messages.fields import (
    SchemaVersion,
)
from orderflow.messages.message_ids import bounded_message_id
from orderflow.records import UtcDatetime


class OrderStatus(StrEnum):
    """Status values a client sees on its reply queue."""

    RECEIVED = "Received"
    REJECTED = "Rejected"
    PROCESSED = "Processed"
    FAILED = "Failed"
    AWAITING_REVIEW = "AwaitingReview"
    COMPENSATED = "Compensated"
    COMPENSATION_FAILED = "CompensationFailed"
    CANCELLED = "Cancelled"
    CANCEL_REFUSED = "CancelRefused"


class StatusReply(Envelope):
    """A status message on the client's private reply queue; ``order_id`` correlates it."""

    schema_version: SchemaVersion = 1
    order_id: str
    status: OrderStatus
    reason: str | None = None
    detail: str | None = Field(default=None, max_length=500)
    retry_after_s: float | None = None
    at: UtcDatetime


def reply_message_id(order_id: str, status: OrderStatus) -> str:
    """Stable message id of a status reply, so a re-sent reply is recognisably the same."""
    return bounded_message_id(f"{order_id}:{status.value}")
