"""An order's history as its state record keeps it: the attempts' tenures and the timeline of writes,
and the timeline chunks moved out to the history container."""

from __future__ import annotations

from pydantic import Field

from orderflow.records.model import (
    Model,
    ProcessState,
    StepStatus,
)
from orderflow.records.times import (
    UtcDatetime,
)

ATTEMPT_HISTORY_MAX = 16
"""Attempts kept in a record's ``attemptHistory`` (the oldest are dropped; ``attempt`` keeps the count)."""


class AttemptEntry(Model):
    """One attempt's tenure as the record's owner (``attemptHistory``), for operators and audits.

    Ownership is exclusive by construction (every write is conditional on the ETag and fenced on
    ``lockedBy``); the history makes that checkable afterwards: an attempt's tenure ends, in the write that
    takes ``lockedBy`` away from it, before the next attempt's claim.

    Attributes:
        attempt: The attempt number.
        instance_id: Its orchestration instance id (``lockedBy`` while it owned the record).
        claimed_by: Host id of the starter that claimed it.
        claimed_at: UTC time of the claim.
        ended_at: UTC time its ownership ended (None while it owns the record).
        outcome: How it ended: ``Processed``, ``Error``, ``recovered`` (re-queued by the supervisor) or
            ``gave_up``.
        expired_complete_by: For a tenure the supervisor ended, the expired ``completeBy`` it acted on
            (UTC); None otherwise, and in records written before it was kept. The time from it to the next
            attempt's ``claimed_at`` is the order's recovery time.
        error_step / error_code: For a tenure the supervisor ended, how the attempt failed as the record
            said: the step and code of the failure it recorded, or ``complete_by_expired``. The poison
            guard compares them across attempts (supervisor.poison).
        traceparent: The W3C trace context of the attempt's claim span (:mod:`orderflow.tracing`): the
            parent of the attempt's activities' spans. None when tracing was off.
    """

    attempt: int
    instance_id: str
    claimed_by: str | None = None
    traceparent: str | None = Field(default=None, exclude_if=lambda value: value is None)
    claimed_at: UtcDatetime
    ended_at: UtcDatetime | None = None
    outcome: str | None = None
    expired_complete_by: UtcDatetime | None = None
    error_step: str | None = None
    error_code: str | None = None


class StepChange(Model):
    """One step's status change within a timeline entry: ``step`` went ``from_status`` → ``to_status``
    (``from_status`` None for a step the record did not hold before)."""

    step: str
    from_status: StepStatus | None = None
    to_status: StepStatus


class TimelineEntry(Model):
    """One write of an order's state record, as the timeline shows it (``timeline``; docs/operations.md).

    Attributes:
        seq: Position in the order's timeline, 1, 2, ... (``timelineSeq`` holds the last one given).
        at: When the write was made (UTC): the record's ``updatedAt``.
        role: Who wrote: ``intake``, ``starter``, ``orchestrator``, ``supervisor``, ``operator``,
            ``reviewer``, ``client``, ``replies``, ``retention``.
        by: The verified principal's audit id (``<tenant>/<object id>``), the attempt's instance id, the
            host id or the client id, as the role has one.
        by_name: A principal's display name, for people to read (never an identity).
        action: What was done, when the writer names it (``submit``, ``claim``, ``recover``, ``resubmit``
            ...); None for an orchestration's step writes, which the state and step changes describe.
        from_state / to_state: ``processState`` before (None for the record's creation) and after.
        steps: The steps whose status changed.
        outcome: How something ended: an attempt's tenure, the status of a reply sent, a review decision.
        attempt: The record's ``attempt`` after the write.
        error_code: The ``code`` of a ``lastError`` or ``compensationError`` this write recorded.
        corrected_fields: The fields of an input correction this write recorded (names, never values).
    """

    seq: int
    at: UtcDatetime
    role: str
    by: str | None = None
    by_name: str | None = None
    action: str | None = None
    from_state: ProcessState | None = None
    to_state: ProcessState
    steps: list[StepChange] = Field(default_factory=list)
    outcome: str | None = None
    attempt: int = 0
    error_code: str | None = None
    corrected_fields: list[str] = Field(default_factory=list)


class TimelineChunk(Model):
    """Timeline entries moved out of a state record into the history container, oldest first.

    ``id`` is ``{orderId}:{firstSeq:08d}-{lastSeq:08d}``: the same entries always make the same
    document, so a writer that moved them and then lost its ETag race leaves nothing a later mover
    would write differently (docs/operations.md#the-timeline).
    """

    id: str
    order_id: str
    first_seq: int
    last_seq: int
    entries: list[TimelineEntry]
    moved_at: UtcDatetime
