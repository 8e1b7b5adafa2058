"""Hold transitions: a hold recorded when its step completes, committed by the step that commits it,
and re-acquired once when it would lapse before its commit (:mod:`orderflow.protocol.holds`).

Pure functions changing a private copy of the record in place, as in
:mod:`orderflow.protocol.transitions.forward`, whose writes call them.
"""

from __future__ import annotations

from datetime import datetime

from orderflow.contracts import StepResult
from orderflow.protocol.holds import hold_acquired
from orderflow.protocol.keys import reacquire_key
from orderflow.records import StateRecord
from orderflow.workflows import StepDefinition, WorkflowDefinition


def record_hold(record: StateRecord, step_def: StepDefinition, done: StepResult, now: datetime) -> None:
    """What a completed step did to the order's holds, in place: a step that acquires one records it
    (``holdId``, ``expiresAt`` from its result), a step that commits one marks it committed.

    (:func:`orderflow.protocol.holds.hold_acquired`).
    """
    if step_def.hold is not None:
        key = record.steps[step_def.name].idempotency_key
        record.holds[step_def.name] = hold_acquired(step_def, done.result, key, now)
        return
    if step_def.commits is not None and step_def.commits in record.holds:
        committed = record.holds[step_def.commits]
        committed.committed_at = committed.committed_at or now


def start_reacquire(
    record: StateRecord, step: str, instance_id: str, *, grant: int, complete_by: datetime
) -> None:
    """Start re-acquiring ``step``'s hold for attempt ``instance_id``, in place: the hold's next key
    becomes the step's (its undo addresses the newest hold), ``grant`` calls are reserved on the step,
    and ``completeBy`` is the re-acquisition's deadline. The hold itself is replaced once the answer is
    recorded (:func:`record_reacquired`).

    Raises:
        KeyError: ``step`` has no hold.
    """
    hold = record.holds[step]
    hold.reacquired += 1
    hold.reacquiring_by = instance_id
    state = record.steps[step]
    state.idempotency_key = reacquire_key(record.order_id, step, hold.reacquired)
    record.retry_budget.spent += grant
    state.reserved_calls = grant
    record.complete_by = complete_by


def record_reacquired(
    record: StateRecord, definition: WorkflowDefinition, done: StepResult, instance_id: str, now: datetime
) -> None:
    """Record the answer of the re-acquisition attempt ``instance_id`` started, in place (once): the new
    hold replaces the old, its calls are settled, and the step's result and compensation entry name it."""
    previous = record.holds.get(done.step)
    if previous is None or previous.reacquiring_by != instance_id:
        return
    record_hold(record, definition.step(done.step), done, now)
    record.holds[done.step].reacquired = previous.reacquired
    record.settle_reservation(done.step, done.calls)
    record.steps[done.step].result = dict(done.result)
    for entry in record.compensation_log:
        if entry.step == done.step:
            entry.data = dict(done.result)
