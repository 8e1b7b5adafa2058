"""The scheduler's state record for one order."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field

from orderflow.records.history import (
    ATTEMPT_HISTORY_MAX,
    AttemptEntry,
    TimelineEntry,
)
from orderflow.records.model import (
    DATA_PURGE_VERSION,
    REDACTED,
    SCHEMA_VERSION,
    Model,
    ProcessState,
    StepStatus,
)
from orderflow.records.steps import (
    CompensationEntry,
    Hold,
    InputCorrection,
    LastError,
    PendingReply,
    RetryBudget,
    ReviewState,
    StepState,
)
from orderflow.records.times import (
    UtcDatetime,
)


class StateRecord(Model):
    """The scheduler's state record for one order (``orderstate`` container, partition key ``/orderId``).

    Field meanings are those of docs/design.md §2; what each holds and how long it is kept, docs/data.md
    (``data_purged_at`` / ``data_purge_version``: when and by which :data:`DATA_PURGE_VERSION` the
    retention purge ran). ``etag``
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
    client_id: str
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
    holds: dict[str, Hold] = Field(default_factory=dict, exclude_if=lambda value: not value)
    """The short-term holds the order's steps acquired, by step name (workflows with holds only)."""
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
