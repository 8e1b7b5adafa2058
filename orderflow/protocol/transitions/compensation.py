"""Compensation transitions: begin (or stop past a point of no return), start an undo, finish
(``Compensated``, ``Cancelled`` or ``CompensationFailed``), over the record's compensation log
(docs/design.md §4).

Pure functions of (a private copy of the record, the inputs), as in
:mod:`orderflow.protocol.transitions.forward`: each returns the record to write, or None.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from orderflow.contracts import StepError, StepResult, UndoResult
from orderflow.effects import PAST_POINT_OF_NO_RETURN, irreversible_effects, may_have_effect
from orderflow.errors import ErrorKind, IllegalTransition
from orderflow.messages import OrderStatus
from orderflow.protocol.keys import undo_key
from orderflow.protocol.transitions.forward import record_completion, record_error
from orderflow.records import (
    CompensationEntry,
    LastError,
    PendingReply,
    ProcessState,
    StateRecord,
    StepStatus,
    UndoStatus,
)
from orderflow.workflows import WorkflowDefinition


def stages_to_undo(record: StateRecord, definition: WorkflowDefinition) -> tuple[tuple[str, ...], ...]:
    """The definition's undo stages (:meth:`WorkflowDefinition.undo_stages`) cut down to the entries not
    undone yet; stages left empty are dropped."""
    pending = {
        entry.step
        for entry in record.compensation_log
        if entry.undo is not None and entry.status != UndoStatus.COMPENSATED
    }
    stages = (tuple(step for step in stage if step in pending) for stage in definition.undo_stages())
    return tuple(stage for stage in stages if stage)


def entry_of(record: StateRecord, step: str) -> CompensationEntry:
    """The compensation entry of ``step``.

    Raises:
        IllegalTransition: the record has none.
    """
    for entry in record.compensation_log:
        if entry.step == step:
            return entry
    raise IllegalTransition(f"order {record.order_id} has no compensation entry for {step}")


def _ensure_entries(record: StateRecord, definition: WorkflowDefinition, now: datetime) -> None:
    """Append an entry for every reversible step that may have had an effect and has none yet."""
    logged = {entry.step for entry in record.compensation_log}
    for step in definition.steps:
        if step.name in logged or step.undo is None or step.irreversible:
            continue
        if step.name in record.steps and may_have_effect(record, step.name):
            record.compensation_log.append(
                CompensationEntry(
                    step=step.name,
                    action=step.operation,
                    undo=step.undo,
                    undo_key=undo_key(record.order_id, step.name),
                    data={},
                    recorded_at=now,
                    outcome_known=False,
                )
            )


def _record_undone(record: StateRecord, undone: UndoResult, now: datetime) -> None:
    """Mark ``undone.step``'s entry and step Compensated (idempotent)."""
    entry = entry_of(record, undone.step)
    if entry.status == UndoStatus.COMPENSATED:
        return
    entry.status = UndoStatus.COMPENSATED
    entry.undo_result = dict(undone.result)
    entry.undone_at = now
    record.steps[undone.step].status = StepStatus.COMPENSATED


def begin_compensation(
    record: StateRecord,
    definition: WorkflowDefinition,
    *,
    completed: StepResult | None,
    error: StepError | None,
    timeout_s: float,
    now: datetime,
) -> StateRecord | None:
    """From ``Processing`` (recording the last completion and the error) or ``Compensating``: add the
    entries of steps whose outcome is unknown and move to ``Compensating`` with ``completeBy``
    ``timeout_s`` from ``now``. Past a point of no return: ``Error`` with a ``Failed`` reply owed.
    None from any other state."""
    if record.process_state is ProcessState.PROCESSING:
        if completed is not None:
            record_completion(record, definition, completed, now)
        if error is not None:
            record_error(record, error, now, fail_step=True)
    elif record.process_state is not ProcessState.COMPENSATING:
        return None
    passed = irreversible_effects(record, definition)
    if passed:
        return _past_point_of_no_return(record, passed[0], now)
    _ensure_entries(record, definition, now)
    record.process_state = ProcessState.COMPENSATING
    record.complete_by = now + timedelta(seconds=timeout_s)
    return record


def _past_point_of_no_return(record: StateRecord, step: str, now: datetime) -> StateRecord:
    """``Error``, for a person to complete: ``step`` is irreversible and may have taken effect."""
    cause = record.last_error
    record.last_error = LastError(
        kind=ErrorKind.PERMANENT.value,
        code=PAST_POINT_OF_NO_RETURN,
        step=step,
        message=(
            f"{step} is irreversible and may have taken effect; "
            f"cause: {cause.code if cause else 'unknown'}: {cause.message if cause else ''}"
        )[:500],
        at=now,
    )
    record.process_state = ProcessState.ERROR
    record.complete_by = None
    record.pending_reply = PendingReply(
        status=OrderStatus.FAILED.value,
        reason=PAST_POINT_OF_NO_RETURN,
        detail=record.last_error.message,
    )
    record.end_attempt(now, ProcessState.ERROR.value)
    return record


def start_undo(
    record: StateRecord,
    *,
    step_name: str,
    undone: tuple[UndoResult, ...],
    instance_id: str,
    timeout_s: float,
    now: datetime,
) -> StateRecord | None:
    """The previous stage's undos recorded, ``step_name``'s entry and step ``Compensating`` for
    ``instance_id``, ``completeBy`` ``timeout_s`` from ``now``; None when a re-run finds it so or the
    order is not ``Compensating``.

    Raises:
        IllegalTransition: the record has no compensation entry for ``step_name``.
    """
    if record.process_state is not ProcessState.COMPENSATING:
        return None
    for done in undone:
        _record_undone(record, done, now)
    entry = entry_of(record, step_name)
    step = record.steps[step_name]
    already = (
        entry.status == UndoStatus.COMPENSATING
        and step.status is StepStatus.COMPENSATING
        and step.last_instance == instance_id
        and record.complete_by is not None
        and all(entry_of(record, done.step).status == UndoStatus.COMPENSATED for done in undone)
    )
    if already:
        return None
    entry.status = UndoStatus.COMPENSATING
    step.status = StepStatus.COMPENSATING
    step.last_instance = instance_id
    step.started_at = now
    record.complete_by = now + timedelta(seconds=timeout_s)
    return record


def finish_target(record: StateRecord, *, failed: bool) -> ProcessState:
    """Where a compensation ends: ``CompensationFailed`` when an undo failed for good, else
    ``Cancelled`` when the client asked for it (``cancelRequestedAt``, a client's stop), else
    ``Compensated``."""
    if failed:
        return ProcessState.COMPENSATION_FAILED
    by_client = (record.stop_requested_by or "client") == "client"
    if record.cancel_requested_at is not None and by_client:
        return ProcessState.CANCELLED  # the client asked for it: the undo is its cancellation
    return ProcessState.COMPENSATED


def finish_compensation(
    record: StateRecord,
    definition: WorkflowDefinition,
    *,
    undone: tuple[UndoResult, ...],
    failed: StepError | None,
    also_failed: tuple[StepError, ...],
    now: datetime,
) -> StateRecord | None:
    """The last stage's undos recorded and the outcome (:func:`finish_target`) written with its reply
    owed; None when the order is not ``Compensating``.

    Raises:
        IllegalTransition: an entry is still to undo (and no undo failed).
    """
    if record.process_state is not ProcessState.COMPENSATING:
        return None
    target = finish_target(record, failed=failed is not None)
    for done in undone:
        _record_undone(record, done, now)
    if failed is not None:
        owed = _record_undo_failures(record, failed, also_failed, now)
    else:
        owed = _owed_after_undo(record, definition, cancelled=target is ProcessState.CANCELLED)
    record.process_state = target
    record.complete_by = None
    record.pending_reply = owed
    record.end_attempt(now, target.value)
    return record


def _record_undo_failures(
    record: StateRecord, failed: StepError, also_failed: tuple[StepError, ...], now: datetime
) -> PendingReply:
    """Mark every undo of the stage that failed for good (they ran in parallel, so not only the first)
    ``CompensationFailed`` with ``compensationError`` naming them; returns the reply owed."""
    for failure in (failed, *also_failed):
        failed_step = failure.step.removesuffix(":undo")
        entry_of(record, failed_step).status = UndoStatus.FAILED
        record.steps[failed_step].status = StepStatus.COMPENSATION_FAILED
    others = ", ".join(f.step.removesuffix(":undo") for f in also_failed)
    record.compensation_error = LastError(
        kind=failed.kind,
        code=failed.code,
        message=(failed.message + (f" (also failed: {others})" if others else ""))[:500],
        step=failed.step.removesuffix(":undo"),
        at=now,
    )
    return PendingReply(
        status=OrderStatus.COMPENSATION_FAILED.value, reason=failed.code, detail=failed.message
    )


def _owed_after_undo(record: StateRecord, definition: WorkflowDefinition, *, cancelled: bool) -> PendingReply:
    """The reply owed once every entry is undone: ``Compensated`` (``Cancelled`` when the client asked)
    with the original cause.

    Raises:
        IllegalTransition: an entry is still to undo.
    """
    left = stages_to_undo(record, definition)
    if left:
        raise IllegalTransition(f"order {record.order_id} still has {left} to undo")
    cause = record.last_error
    return PendingReply(
        status=(OrderStatus.CANCELLED if cancelled else OrderStatus.COMPENSATED).value,
        reason=cause.code if cause else None,
        detail=cause.message if cause else None,
    )
