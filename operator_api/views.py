"""What the operator API shows of an order: the public view of its state record."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from operator_api.deadletters import linked_order
from operator_api.schemas import DeadLetterAnswer, TimelinePage
from orderflow.queues.base import DeadLetter
from orderflow.records import (
    AttemptEntry,
    CompensationEntry,
    LastError,
    RetryBudget,
    ReviewState,
    StateRecord,
    StepState,
    TimelineChunk,
    TimelineEntry,
)
from orderflow.settings import Clients
from orderflow.stores.base import Page

PLUMBING = frozenset({"id", "reply_to", "pending_reply"})
"""State record fields the view leaves out: the order id again, the client's private reply queue, the
reply outbox. ``review.responseQueue`` (a host's queue) is left out too."""


def _fields(model: type[BaseModel], *, leave_out: frozenset[str] = frozenset()) -> set[str]:
    return set(model.model_fields) - leave_out


_NESTED: dict[str, Any] = {
    "steps": {"__all__": _fields(StepState)},
    "compensation_log": {"__all__": _fields(CompensationEntry)},
    "attempt_history": {"__all__": _fields(AttemptEntry)},
    "timeline": {"__all__": _fields(TimelineEntry)},
    "retry_budget": _fields(RetryBudget),
    "last_error": _fields(LastError),
    "compensation_error": _fields(LastError),
    "review": _fields(ReviewState, leave_out=frozenset({"response_queue"})),
}
_INCLUDE: dict[str, Any] = {
    **{name: True for name in StateRecord.model_fields if name not in PLUMBING},
    **_NESTED,
}


def order_view(record: StateRecord) -> dict[str, Any]:
    """The state record as an operator reads it: its stored form (camelCase, JSON values) with the
    fields of this schema version only (a newer version's fields, unknown here, are left out, as is
    :data:`PLUMBING`)."""
    view: dict[str, Any] = record.model_dump(mode="json", by_alias=True, include=_INCLUDE)
    return view


def timeline_page(record: StateRecord, page: Page[TimelineChunk]) -> TimelinePage:
    """A page of the order's timeline: the entries of a page of its history, and on the last page the
    entries the record holds (each ``seq`` once: a chunk a writer moved before losing its race may repeat
    some of the record's)."""
    entries = [entry for chunk in page.items for entry in chunk.entries]
    if page.continuation is None:
        after = max((entry.seq for entry in entries), default=0)
        entries += [entry for entry in record.timeline if entry.seq > after]
    return TimelinePage(order_id=record.order_id, entries=entries, continuation=page.continuation)


def dead_letter_answer(dead: DeadLetter, queue: str, clients: Clients) -> DeadLetterAnswer:
    """What the API shows of a dead letter of ``queue`` (the queue asked for, whatever its record says),
    with the order it is linked to (:func:`operator_api.deadletters.linked_order`; null: not linked)."""
    return DeadLetterAnswer(
        dead_letter_id=dead.dead_letter_id,
        message_id=dead.message_id,
        queue=queue,
        reason=dead.reason,
        description=dead.description,
        delivery_count=dead.delivery_count,
        dead_lettered_at=dead.dead_lettered_at,
        correlation_id=dead.correlation_id,
        order_id=linked_order(dead, clients),
        body=dead.body,
    )


def entity_tag(etag: str | None) -> str:
    """``etag`` as an HTTP entity tag: quoted once (the stores' ETags may carry their quotes already)."""
    return f'"{(etag or "").strip(chr(34))}"'
