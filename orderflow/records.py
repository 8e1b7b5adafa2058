"""The order document and the state record (docs/design.md §2), as typed models.

Python attributes are snake_case; the stored JSON is camelCase, the field names of the reference
Scheduler-Agent-Supervisor design (``processState``, ``lockedBy``, ``completeBy`` ...). Every time is
UTC and serialised in one fixed ISO 8601 form (``2026-11-29T18:00:00.000000Z``) so that the stores can
compare deadlines as strings.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import Decimal
from enum import StrEnum
from typing import Annotated, Any, Self

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PlainSerializer
from pydantic.alias_generators import to_camel

from orderflow.client_fields import PurgeAction, document_purge

SCHEMA_VERSION = 1
"""Version of the stored record and document shapes written by this code."""

REDACTED = "[redacted]"
"""What a text field holds once the retention purge removed its payment or customer data (docs/data.md)."""

DATA_PURGE_VERSION = 3
"""The retention purge this code applies (a state record's ``dataPurgeVersion``; docs/data.md).

0: never purged. 1: the compensation log's data and undo results only, marked ``compensationLogPurgedAt``
by earlier versions (such records hold version 0 here). 2: also step results, error and reply texts and
the order document. 3: also the order document's ``carrier`` (every field
:data:`orderflow.client_fields.CLIENT_FIELDS` marks). A record purged by an earlier version is purged
again by this one.
"""


def _ensure_utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        raise ValueError("datetimes must be timezone-aware (UTC)")
    try:
        return value.astimezone(UTC)
    except OverflowError:  # 0001-01-01T00:00+01:00 is before the first instant a datetime holds
        raise ValueError(f"{value.isoformat()} is out of range in UTC") from None


def format_utc(value: datetime) -> str:
    """Format an aware datetime as the fixed-width UTC string the stores compare lexicographically:
    ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` (a four-digit year even before 1000, where ``strftime`` drops the
    zeros)."""
    return _ensure_utc(value).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def parse_utc(text: str) -> datetime:
    """Parse an ISO 8601 time (``Z`` or offset) into an aware UTC datetime.

    Raises:
        ValueError: not such a time, one without a zone, or one whose UTC is off the calendar
            (``0001-01-01T00:00:00+23:59``).
    """
    return _ensure_utc(datetime.fromisoformat(text.replace("Z", "+00:00")))


EARLIEST_TIME = datetime(1970, 1, 1, tzinfo=UTC)
"""The earliest time a query parameter may name (:func:`parse_query_time`): the epoch."""
LATEST_TIME = datetime(9999, 1, 1, tzinfo=UTC)
"""The first time a query parameter may no longer name: a window or a day range a year long still ends
on the calendar (the last instant a datetime holds is in 9999)."""


QUERY_TIME_FORMAT = "an ISO 8601 time with a zone (2026-03-01T12:00:00Z), from 1970-01-01 up to 9999-01-01"
"""What :func:`parse_query_time` takes, in the words of a refusal."""


def parse_query_time(text: str) -> datetime:
    """:func:`parse_utc` of a time a caller gives to select by (``since``, ``failedSince``), from
    :data:`EARLIEST_TIME` up to (not including) :data:`LATEST_TIME`, so that what is computed from it
    (a window's end, the stores' fixed-width strings, the day partitions) stays on the calendar.

    Raises:
        ValueError: as :func:`parse_utc`, or out of that range.
    """
    moment = parse_utc(text)
    if not EARLIEST_TIME <= moment < LATEST_TIME:
        raise ValueError("out of range: from 1970-01-01T00:00:00Z up to 9999-01-01T00:00:00Z")
    return moment


UtcDatetime = Annotated[
    datetime,
    AfterValidator(_ensure_utc),
    PlainSerializer(format_utc, return_type=str, when_used="json"),
]
"""An aware UTC datetime that serialises as ``YYYY-MM-DDTHH:MM:SS.ffffffZ``."""


class Model(BaseModel):
    """Base of stored models: camelCase JSON, snake_case attributes, unknown fields kept.

    Unknown fields are kept (``extra="allow"``) so that a record written by a newer schema survives a
    read-modify-write by older code.
    """

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")

    def to_json_dict(self) -> dict[str, Any]:
        """The stored form: camelCase keys, JSON-native values."""
        return self.model_dump(mode="json", by_alias=True)

    @classmethod
    def from_stored(cls, doc: Mapping[str, Any]) -> Self:
        """Parse a stored document, dropping the store's system properties (``_etag``, ``_ts`` ...)."""
        return cls.model_validate({k: v for k, v in doc.items() if not k.startswith("_")})

    def copied(self) -> Self:
        """A deep copy that shares nothing with this model, unknown fields included.

        Built by pydantic-core (a dump, then a validation) instead of ``model_copy(deep=True)``, whose
        ``copy.deepcopy`` walk is about four times slower on a state record (the copy every fenced write
        hands its mutation). Every field counts as set in the copy.
        """
        return self.model_validate(self.model_dump())


class ProcessState(StrEnum):
    """Where an order is in its life (the state record's ``processState``)."""

    PENDING = "Pending"
    PROCESSING = "Processing"
    AWAITING_REVIEW = "AwaitingReview"
    PROCESSED = "Processed"
    ERROR = "Error"
    COMPENSATING = "Compensating"
    COMPENSATED = "Compensated"
    COMPENSATION_FAILED = "CompensationFailed"
    CANCELLED = "Cancelled"


class StepStatus(StrEnum):
    """Where one step of an order is (``steps[name].status``)."""

    NOT_STARTED = "NotStarted"
    RUNNING = "Running"
    COMPLETED = "Completed"
    FAILED = "Failed"
    COMPENSATING = "Compensating"
    COMPENSATED = "Compensated"
    COMPENSATION_FAILED = "CompensationFailed"


class OrderItem(Model):
    """One order line: a stock-keeping unit and a quantity (units)."""

    model_config = ConfigDict(frozen=True)

    sku: str
    quantity: int


class OrderDocument(Model):
    """The immutable order (``orders`` container, partition key ``/orderId``).

    ``content_hash`` is the SHA-256 of the canonical JSON of the immutable fields; a resubmission is
    accepted only when it matches (docs/design.md §2). The one change a document ever sees is its
    redaction once the order is finished and its retention period over (:meth:`redacted`), marked by
    ``redacted_at``.
    """

    id: str
    order_id: str
    customer_id: str
    customer_name: str
    currency: str
    amount: Decimal
    items: tuple[OrderItem, ...]
    carrier: str
    reply_to: str
    content_hash: str
    client_id: str | None = None
    received_at: UtcDatetime
    schema_version: int = SCHEMA_VERSION
    redacted_at: UtcDatetime | None = None

    def redacted(self, at: datetime) -> OrderDocument:
        """This document without its customer and payment data (docs/data.md), redacted at ``at`` (UTC).

        Each field :data:`orderflow.client_fields.CLIENT_FIELDS` marks is purged: text holds
        :data:`REDACTED` (``customerId``, ``customerName``, ``carrier``), ``amount`` is 0 and ``items`` is
        empty (values of their types, so code that reads a redacted document still runs: a late
        ``start_step`` reads it before its fenced write refuses); fields this version does not know (a
        newer schema's) are dropped. The keys, ``contentHash`` (a resubmission is still told a duplicate or
        a conflict), ``receivedAt``, ``currency``, ``replyTo`` and ``clientId`` stay. A redacted document
        (:meth:`is_redacted`) is returned as it is; one redacted by an earlier, narrower purge is redacted
        again and keeps its ``redactedAt``.
        """
        if self.is_redacted():
            return self
        known = {field.alias or name for name, field in OrderDocument.model_fields.items()}
        data = {key: value for key, value in self.to_json_dict().items() if key in known}
        for name, action in document_purge().items():
            data[name] = _PURGED[action]
        data["redactedAt"] = self.redacted_at or at
        return OrderDocument.model_validate(data)

    def is_redacted(self) -> bool:
        """Whether the document is redacted: marked, and every field the purge changes holds its purged
        value (a document an earlier, narrower purge redacted is marked but not redacted)."""
        if self.redacted_at is None:
            return False
        current = self.model_dump(by_alias=True)
        return all(current.get(name) == _PURGED[action] for name, action in document_purge().items())


_PURGED: dict[PurgeAction, Any] = {
    PurgeAction.REDACT: REDACTED,
    PurgeAction.ZERO: Decimal(0),
    PurgeAction.EMPTY: (),
}
"""What a purged field of the order document holds, by :class:`~orderflow.client_fields.PurgeAction`."""


def content_hash(content: dict[str, Any]) -> str:
    """SHA-256 (hex) of the canonical JSON form of ``content`` (sorted keys, no spaces)."""
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class LastError(Model):
    """The most recent failure recorded for an order: kind, short message, step, time (UTC)."""

    kind: str
    message: str
    step: str | None = None
    code: str | None = None
    at: UtcDatetime


class StepState(Model):
    """Progress of one workflow step.

    Attributes:
        status: The step's :class:`StepStatus`.
        attempts: Attempts (orchestration instances) that started this step.
        idempotency_key: ``{orderId}:{step}``, the same across attempts (docs/design.md §3.6);
            ``...:fallback`` on the fallback provider, ``...:correction-{n}`` once an operator corrected
            the step's input (:func:`orderflow.protocol.keys.corrected_key`).
        last_instance: Instance id of the attempt that last started the step (makes the start idempotent).
        result: Small summary of the remote service's answer (ids, amounts), never a document.
        reserved_calls: Calls reserved from the retry budget for the attempt running the step; the
            unused part is returned when its outcome is recorded, and kept if it never is.
        fallback: The step runs on its definition's fallback provider (the primary refused it); its
            ``idempotency_key`` is then ``{orderId}:{step}:fallback``.
        started_at / completed_at: UTC times of the last start and of completion.
    """

    status: StepStatus = StepStatus.NOT_STARTED
    attempts: int = 0
    idempotency_key: str
    last_instance: str | None = None
    reserved_calls: int = 0
    fallback: bool = False
    result: dict[str, str] | None = None
    started_at: UtcDatetime | None = None
    completed_at: UtcDatetime | None = None


class CompensationEntry(Model):
    """One entry of the compensation log: what a completed step did and how to undo it.

    Attributes:
        step: The step that completed.
        action: What the step did (``reserve``, ``charge`` ...).
        undo: The undo operation (``release``, ``refund`` ...), or None for an irreversible step.
        undo_key: Idempotency key of the undo, ``{orderId}:{step}:undo``.
        data: Only what the undo needs (a reservation id, a charge id and amount), never card data.
        recorded_at: UTC time the entry was appended.
        status: Progress of the undo: ``Pending``, ``Compensating`` (an attempt started it),
            ``Compensated`` or ``CompensationFailed``.
        outcome_known: False for an entry appended when compensation began for a step whose outcome
            no attempt recorded (it died mid-step): the effect may or may not exist, and the undo is
            addressed by the step's idempotency key alone.
        undo_result: The undo's result summary once ``Compensated`` (``undone`` true or false, ids).
        undone_at: UTC time the undo was recorded.
    """

    step: str
    action: str
    undo: str | None
    undo_key: str
    data: dict[str, str] = Field(default_factory=dict)
    recorded_at: UtcDatetime
    status: str = "Pending"
    outcome_known: bool = True
    undo_result: dict[str, str] | None = None
    undone_at: UtcDatetime | None = None


class UndoStatus:
    """Values of :attr:`CompensationEntry.status`."""

    PENDING = "Pending"
    COMPENSATING = "Compensating"
    COMPENSATED = "Compensated"
    FAILED = "CompensationFailed"


class RetryBudget(Model):
    """End-to-end budget of calls to remote services for one order, across every attempt.

    Attributes:
        limit: Calls the order may make in total.
        spent: Calls made so far.
    """

    limit: int
    spent: int = 0

    @property
    def remaining(self) -> int:
        """Calls left (never negative)."""
        return max(0, self.limit - self.spent)


class PendingReply(Model):
    """A final status reply recorded in the same write as the outcome (a transactional outbox entry).

    Cleared once the reply was sent; the supervisor re-sends replies still pending after a grace
    period, so the client hears the outcome even if the sender died between the write and the send.
    """

    status: str
    reason: str | None = None
    detail: str | None = None


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


class ReviewDecision(StrEnum):
    """A person's decision on an order awaiting review."""

    APPROVE = "approve"
    REJECT = "reject"


class ReviewState(Model):
    """A review the order paused for (``review``): which step, until when, and the decision.

    Attributes:
        step: The step waiting for the decision.
        requested_at / deadline: UTC times; at the deadline the configured default applies.
        response_queue: The queue of the host running the waiting attempt: a decision is forwarded there
            and raised as the ``ReviewDecision`` external event.
        decision: ``approve`` or ``reject`` once decided (the first decision wins).
        decided_by: Who decided: the verified reviewer's audit id, ``<tenant id>/<object id>``
            (:attr:`orderflow.operator_auth.Principal.audit_id`), or ``deadline``. Records written before
            the operator API hold the name a reviewer typed.
        decided_by_name: The reviewer's display name from the token, for people to read; never an
            identity (None for ``deadline``).
        decided_at: UTC time of the decision.
    """

    step: str
    requested_at: UtcDatetime
    deadline: UtcDatetime
    response_queue: str
    decision: ReviewDecision | None = None
    decided_by: str | None = None
    decided_by_name: str | None = None
    decided_at: UtcDatetime | None = None


class InputCorrection(Model):
    """An operator's correction of the order's input for one step (``corrections``; docs/operator-api.md).

    The order document stays as the client sent it (its content hash answers duplicates); the step's next
    call is built from the document with every correction of that step laid over it, in number order.

    Attributes:
        number: 1, 2, ... across the order's corrections; part of the corrected step's idempotency key
            (:func:`corrected_key`), so the corrected call is a new call to the remote service.
        step: The step corrected (the failed one).
        input: The corrected fields by their wire names (``carrier``), with their validated values.
        idempotency_key: The step's idempotency key from this correction on.
        by / by_name: The verified operator's audit id and display name.
        at: When it was recorded (UTC), in the resubmit's write.
    """

    number: int
    step: str
    input: dict[str, Any]
    idempotency_key: str
    by: str
    by_name: str | None = None
    at: UtcDatetime


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


class StateRecord(Model):
    """The scheduler's state record for one order (``orderstate`` container, partition key ``/orderId``).

    Field meanings are those of docs/design.md §2; what each holds and how long it is kept, docs/data.md
    (``data_purged_at`` / ``data_purge_version``: when and by which :data:`DATA_PURGE_VERSION` the
    retention purge ran; ``compensation_log_purged_at``: the narrower purge of earlier versions). ``etag``
    is not part of the record: the stores return it beside the record
    (:class:`orderflow.stores.base.Versioned`).
    """

    id: str
    order_id: str
    process_state: ProcessState = ProcessState.PENDING
    locked_by: str | None = None
    complete_by: UtcDatetime | None = None
    failure_count: int = 0
    attempt: int = 0
    next_attempt_at: UtcDatetime | None = None
    dependency_wait_since: UtcDatetime | None = None
    """When the order first waited for an open circuit breaker (orderflow.breaker), until a step completes."""
    reply_to: str
    client_id: str | None = None
    steps: dict[str, StepState] = Field(default_factory=dict)
    compensation_log: list[CompensationEntry] = Field(default_factory=list)
    retry_budget: RetryBudget
    workflow_version: str
    schema_version: int = SCHEMA_VERSION
    last_error: LastError | None = None
    compensation_error: LastError | None = None
    compensation_failures: int = 0
    cancel_requested_at: UtcDatetime | None = None
    stop_requested_by: str | None = None
    stop_requested_by_name: str | None = None
    stop_reason: str | None = None  # an operator's words on why: audit only, never in a reply
    review: ReviewState | None = None
    compensation_log_purged_at: UtcDatetime | None = None
    data_purged_at: UtcDatetime | None = None
    data_purge_version: int = 0
    pending_reply: PendingReply | None = None
    attempt_history: list[AttemptEntry] = Field(default_factory=list)
    timeline: list[TimelineEntry] = Field(default_factory=list)
    timeline_seq: int = 0
    suspended_at: UtcDatetime | None = None
    suspended_by: str | None = None
    suspended_by_name: str | None = None
    traceparent: str | None = Field(default=None, exclude_if=lambda value: value is None)
    """The submission span's W3C trace context (:mod:`orderflow.tracing`): every attempt's claim, and
    the supervisor's recoveries, join its trace. None when tracing was off at submission."""
    corrections: list[InputCorrection] = Field(default_factory=list)
    created_at: UtcDatetime
    updated_at: UtcDatetime

    def purge_data(self, at: datetime) -> None:
        """Purge the payment and customer data of a finished order, in place (docs/data.md).

        Clears each step's ``result`` and each compensation entry's ``data`` and ``undoResult``, and puts
        :data:`REDACTED` in the free text that may quote them (the ``message`` of ``lastError`` and
        ``compensationError``, the ``detail`` of ``pendingReply``) and in the values of input corrections
        (their fields, who and when stay). Statuses, keys, counts, error kinds, codes and steps, the audit
        fields and every time stay, ``updatedAt`` included. Marks the record
        ``dataPurgedAt`` = ``at`` (UTC), ``dataPurgeVersion`` = :data:`DATA_PURGE_VERSION`.
        """
        for step in self.steps.values():
            step.result = None
        for entry in self.compensation_log:
            entry.data = {}
            entry.undo_result = None
        for error in (self.last_error, self.compensation_error):
            if error is not None:
                error.message = REDACTED
        if self.pending_reply is not None and self.pending_reply.detail is not None:
            self.pending_reply.detail = REDACTED
        if self.stop_reason is not None:
            self.stop_reason = REDACTED
        for correction in self.corrections:
            correction.input = dict.fromkeys(correction.input, REDACTED)
        self.data_purged_at = at
        self.data_purge_version = DATA_PURGE_VERSION

    def corrected_input(self, step: str) -> dict[str, Any]:
        """The corrections of ``step``, later ones over earlier ones: field (wire name) -> value; empty
        when the step was never corrected."""
        corrected: dict[str, Any] = {}
        for correction in sorted(self.corrections, key=lambda c: c.number):
            if correction.step == step:
                corrected.update(correction.input)
        return corrected

    def completed_steps(self) -> list[str]:
        """Names of the steps whose status is ``Completed``, in workflow order."""
        return [name for name, step in self.steps.items() if step.status is StepStatus.COMPLETED]

    def spent_after_settling(self, name: str, calls: int) -> int:
        """The budget's ``spent`` once step ``name``'s reservation is turned into the ``calls`` really
        made: the unused part goes back (a step without a reservation spends its calls as they are)."""
        step = self.steps.get(name)
        reserved = step.reserved_calls if step is not None else 0
        return max(0, self.retry_budget.spent + calls - reserved)

    def settle_reservation(self, name: str, calls: int) -> None:
        """Settle step ``name``'s reservation against the ``calls`` it made (:meth:`spent_after_settling`)."""
        self.retry_budget.spent = self.spent_after_settling(name, calls)
        step = self.steps.get(name)
        if step is not None:
            step.reserved_calls = 0

    def begin_attempt(self, claimed_by: str | None, at: datetime, *, traceparent: str | None = None) -> None:
        """Append the tenure of the attempt just claimed (``attempt`` and ``locked_by`` already set),
        with its claim span's ``traceparent``, if traced.

        Keeps at most :data:`ATTEMPT_HISTORY_MAX` entries.
        """
        if self.locked_by is None:
            raise ValueError("begin_attempt needs the claimed lockedBy")
        self.attempt_history.append(
            AttemptEntry(
                attempt=self.attempt,
                instance_id=self.locked_by,
                claimed_by=claimed_by,
                claimed_at=at,
                traceparent=traceparent,
            )
        )
        del self.attempt_history[:-ATTEMPT_HISTORY_MAX]

    def end_attempt(
        self,
        at: datetime,
        outcome: str,
        *,
        expired_complete_by: datetime | None = None,
        error: LastError | None = None,
    ) -> None:
        """Close the tenure of the owning attempt (``locked_by``), in the write that ends it; idempotent.

        Args:
            at: When the tenure ends (UTC).
            outcome: How it ended (see :class:`AttemptEntry`).
            expired_complete_by: The expired ``completeBy`` the supervisor acted on, when it ends the tenure.
            error: How the attempt failed, when the supervisor ends the tenure (its step and code are kept).
        """
        for entry in reversed(self.attempt_history):
            if entry.instance_id == self.locked_by and entry.ended_at is None:
                entry.ended_at = at
                entry.outcome = outcome
                entry.expired_complete_by = expired_complete_by
                if error is not None:
                    entry.error_step, entry.error_code = error.step, error.code
                return

    def attempt_traceparent(self, instance_id: str) -> str | None:
        """The trace context an activity of attempt ``instance_id`` runs under: its claim span's, else
        the submission's (an attempt claimed while tracing was off, or no longer in the history)."""
        for entry in reversed(self.attempt_history):
            if entry.instance_id == instance_id and entry.traceparent is not None:
                return entry.traceparent
        return self.traceparent


def order_key(client_id: str, order_id: str) -> str:
    """The key an order is stored and run under, ``{clientId}:{orderId}``: the id of its state record
    and order document (and their partition key), and the base of its instance ids and idempotency keys.

    Order ids are the client's own, so two clients may use the same one (docs/clients.md). Client ids
    are slugs and order ids hold no ``:``, so the key splits back unambiguously
    (:func:`client_order_id`). Records written before order ids were scoped by client are keyed by the
    bare order id; every reader treats a key as opaque.
    """
    return f"{client_id}:{order_id}"


def client_order_id(key: str) -> str:
    """The client's own order id of the order stored under ``key``: what every reply to the client
    names (a bare key of an earlier version's record is the order id itself)."""
    _, sep, order_id = key.partition(":")
    return order_id if sep else key


def instance_id_for(order_id: str, attempt: int) -> str:
    """The attempt-specific orchestration instance id, ``{orderId}:{attempt}`` (docs/design.md §3.2)."""
    return f"{order_id}:{attempt}"


def parse_instance_id(instance_id: str) -> tuple[str, int]:
    """Split ``{orderId}:{attempt}`` into its parts.

    Raises:
        ValueError: the text is not an attempt-specific instance id.
    """
    order_id, sep, attempt = instance_id.rpartition(":")
    if not sep or not order_id or not attempt.isdigit():
        raise ValueError(f"not an orderflow instance id: {instance_id!r}")
    return order_id, int(attempt)
