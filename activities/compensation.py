"""The compensation activities: begin, undo one entry at a time, finish (docs/design.md §4).

Compensation is the Compensating Transaction pattern over the record's compensation log. Every write is
fenced like the forward steps' (docs/design.md §3.3), and every activity is idempotent, so a compensation
interrupted anywhere resumes from the first entry not yet undone:

- :func:`begin_compensation` records why forward progress stopped, moves the order to ``Compensating``
  and makes sure every step that may have had an effect has an entry. A step whose attempt died before
  recording its outcome gets an entry too (``outcomeKnown`` false): its undo is addressed by the step's
  idempotency key, which the remote service either undoes or tombstones so a late forward call cannot
  apply afterwards. A step the remote service refused (a permanent error) had no effect and gets none.
  Past a point of no return (an irreversible step that completed, or whose outcome is unknown), the
  order is not compensated: it moves to ``Error`` with an operator alert, for a person to complete.
- :func:`start_undo` records the previous undo and starts the next: the entry becomes ``Compensating``,
  the record's ``completeBy`` is the undo's deadline, and the undo request goes to the step's agent under
  the undo key ``{orderId}:{step}:undo``. Undo calls do not spend the order's retry budget (a spent budget
  is one reason to compensate); each request may make ``AGENT_MAX_CALLS_PER_STEP`` calls, and the
  supervisor's threshold bounds the attempts.
- :func:`finish_compensation` ends in ``Compensated`` (reply ``Compensated`` with the original cause)
  or, when an undo failed for good, ``CompensationFailed`` with an operator alert and a
  ``CompensationFailed`` reply.

Undo order is the definition's undo plan (:meth:`WorkflowDefinition.undo_stages`): stages in order, the
steps of a stage in parallel; by default each step alone, in reverse order of the workflow's steps, which
for a sequential workflow is the reverse order of completion.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from activities.steps import (
    _fenced,
    _record_completion,
    _record_error,
)
from orderflow import telemetry, tracing
from orderflow.contracts import (
    BeginCompensationInput,
    FinishCompensationInput,
    StartUndoInput,
    StepError,
    UndoResult,
    undo_step_name,
)
from orderflow.dependencies import Dependencies
from orderflow.effects import PAST_POINT_OF_NO_RETURN, irreversible_effects
from orderflow.effects import may_have_effect as _may_have_effect
from orderflow.errors import ErrorKind, IllegalTransition
from orderflow.messages import AgentRequest, OrderStatus, request_id_for
from orderflow.records import (
    CompensationEntry,
    LastError,
    PendingReply,
    ProcessState,
    StateRecord,
    StepStatus,
    UndoStatus,
    undo_key,
)
from orderflow.replies import deliver_reply
from orderflow.results import (
    BeginCompensationResult,
    CompensationBegun,
    CompensationFinished,
    Fenced,
    FinishCompensationResult,
    PastPointOfNoReturn,
    StartUndoResult,
    UndoStarted,
)
from orderflow.step_requests import agent_deadline
from orderflow.workflows import WorkflowDefinition, workflow_for

logger = logging.getLogger(__name__)


def _ensure_entries(record: StateRecord, definition: WorkflowDefinition, now: datetime) -> None:
    """Append an entry for every reversible step that may have had an effect and has none yet."""
    logged = {entry.step for entry in record.compensation_log}
    for step in definition.steps:
        if step.name in logged or step.undo is None or step.irreversible:
            continue
        if step.name in record.steps and _may_have_effect(record, step.name):
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


def _entry(record: StateRecord, step: str) -> CompensationEntry:
    for entry in record.compensation_log:
        if entry.step == step:
            return entry
    raise IllegalTransition(f"order {record.order_id} has no compensation entry for {step}")


def _record_undone(record: StateRecord, undone: UndoResult, now: datetime) -> None:
    """Mark ``undone.step``'s entry and step Compensated (idempotent)."""
    entry = _entry(record, undone.step)
    if entry.status == UndoStatus.COMPENSATED:
        return
    entry.status = UndoStatus.COMPENSATED
    entry.undo_result = dict(undone.result)
    entry.undone_at = now
    record.steps[undone.step].status = StepStatus.COMPENSATED


def begin_compensation(data: BeginCompensationInput, deps: Dependencies) -> BeginCompensationResult:
    """Activity :data:`orderflow.contracts.BEGIN_COMPENSATION`.

    From ``Processing`` (the attempt that hit the failure) or ``Compensating`` (an attempt resuming a
    compensation), in one fenced write: record the last completion and the error, add the entries of
    steps whose outcome is unknown, and set ``processState=Compensating`` with a ``completeBy``. Past a
    point of no return it writes ``Error`` instead, with a ``Failed`` reply owed and an operator alert.

    Returns:
        :class:`CompensationBegun` with the ``undo_stages`` (stages in order; the steps of a stage are
        undone in parallel); :class:`PastPointOfNoReturn` when the order moved to ``Error`` instead;
        :class:`Fenced`.
    """
    definition = workflow_for(data.workflow_version)
    now = deps.clock.now()

    def mutate(record: StateRecord) -> StateRecord | None:
        if record.process_state is ProcessState.PROCESSING:
            if data.completed is not None:
                _record_completion(record, definition, data.completed, now)
            if data.error is not None:
                _record_error(record, data.error, now, fail_step=True)
        elif record.process_state is not ProcessState.COMPENSATING:
            return None
        passed = irreversible_effects(record, definition)
        if passed:
            cause = record.last_error
            record.last_error = LastError(
                kind=ErrorKind.PERMANENT.value,
                code=PAST_POINT_OF_NO_RETURN,
                step=passed[0],
                message=(
                    f"{passed[0]} is irreversible and may have taken effect; "
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
        _ensure_entries(record, definition, now)
        record.process_state = ProcessState.COMPENSATING
        record.complete_by = now + timedelta(seconds=data.timeout_s)
        return record

    outcome = _fenced(deps, data.order_id, data.instance_id, mutate)
    record = outcome.record
    state = record.process_state
    if not outcome.applied or state not in (ProcessState.COMPENSATING, ProcessState.ERROR):
        return Fenced(reason=outcome.reason or f"processState is {state.value}")
    fields = {"order_id": data.order_id, "instance_id": data.instance_id}
    if state is ProcessState.ERROR:
        if record.pending_reply is not None:
            deliver_reply(
                deps.states, deps.queues, deps.clock, record, record.pending_reply, etag=outcome.etag
            )
        error = record.last_error
        telemetry.alert(PAST_POINT_OF_NO_RETURN, step=error.step if error else None, **fields)
        return PastPointOfNoReturn()
    stages = stages_to_undo(record, definition)
    telemetry.event("compensation.begin", stages="|".join(",".join(stage) for stage in stages), **fields)
    return CompensationBegun(undo_stages=stages)


def start_undo(data: StartUndoInput, deps: Dependencies) -> StartUndoResult:
    """Activity :data:`orderflow.contracts.START_UNDO`.

    In one fenced write: record the previous stage's undos (entries and steps ``Compensated``), mark
    ``step``'s entry and the step ``Compensating`` and set ``completeBy`` to now plus the undo's timeout
    (the steps of one stage share the record's ``completeBy``: the latest start sets it). Then send the
    undo request (``{requestId}`` = ``{instanceId}:{step}:undo``) to the step's agent.

    Returns:
        :class:`UndoStarted` with the ``complete_by`` (UTC) where the stage's timer must fire, or
        :class:`Fenced`.

    Raises:
        IllegalTransition: the record has no compensation entry for ``step``.
    """
    workflow_for(data.workflow_version).step(data.step)  # an unknown step fails before any write
    now = deps.clock.now()

    def mutate(record: StateRecord) -> StateRecord | None:
        if record.process_state is not ProcessState.COMPENSATING:
            return None
        for undone in data.undone:
            _record_undone(record, undone, now)
        entry = _entry(record, data.step)
        step = record.steps[data.step]
        already = (
            entry.status == UndoStatus.COMPENSATING
            and step.status is StepStatus.COMPENSATING
            and step.last_instance == data.instance_id
            and record.complete_by is not None
            and all(_entry(record, undone.step).status == UndoStatus.COMPENSATED for undone in data.undone)
        )
        if already:
            return None
        entry.status = UndoStatus.COMPENSATING
        step.status = StepStatus.COMPENSATING
        step.last_instance = data.instance_id
        step.started_at = now
        record.complete_by = now + timedelta(seconds=data.timeout_s)
        return record

    outcome = _fenced(deps, data.order_id, data.instance_id, mutate)
    record = outcome.record
    if not outcome.applied or record.process_state is not ProcessState.COMPENSATING:
        return Fenced(reason=outcome.reason or f"processState is {record.process_state.value}")
    complete_by = record.complete_by
    if complete_by is None:  # pragma: no cover - every applied start writes one
        raise IllegalTransition(f"order {data.order_id} is Compensating without a completeBy")
    entry = _send_undo_request(deps, data, record, complete_by, now=now)
    telemetry.event(
        "undo.start",
        order_id=data.order_id,
        instance_id=data.instance_id,
        step=data.step,
        outcome_known=entry.outcome_known,
        complete_by=complete_by.isoformat(),
    )
    return UndoStarted(complete_by=complete_by)


def _send_undo_request(
    deps: Dependencies, data: StartUndoInput, record: StateRecord, complete_by: datetime, *, now: datetime
) -> CompensationEntry:
    """Send the undo request of ``data.step`` to the agent that performed the step; returns its entry."""
    step_def = workflow_for(data.workflow_version).step(data.step)
    entry = _entry(record, data.step)
    undo_name = undo_step_name(data.step)
    request = AgentRequest(
        request_id=request_id_for(data.instance_id, undo_name),
        order_id=data.order_id,
        instance_id=data.instance_id,
        step=undo_name,
        operation=entry.undo or "",
        idempotency_key=entry.undo_key,
        deadline=agent_deadline(complete_by, now),
        reply_to=data.response_queue,
        # The forward key lets the service undo an effect whose id no attempt recorded, and refuse a
        # forward call that arrives after the undo.
        payload={"forwardKey": record.steps[data.step].idempotency_key, **entry.data},
        max_calls=deps.settings.AGENT_MAX_CALLS_PER_STEP,
        traceparent=tracing.current_traceparent(),
    )
    # A step a fallback provider performed is undone by that provider.
    on_fallback = record.steps[data.step].fallback
    agent = step_def.fallback_agent if on_fallback and step_def.fallback_agent else step_def.agent
    deps.queues.queue(deps.settings.agent_queue(agent)).send(
        request.to_json(), message_id=request.request_id, correlation_id=data.order_id
    )
    return entry


def finish_compensation(data: FinishCompensationInput, deps: Dependencies) -> FinishCompensationResult:
    """Activity :data:`orderflow.contracts.FINISH_COMPENSATION`: the compensation's outcome, then the reply.

    ``Compensated``: the last stage's undos recorded, every entry undone; the reply carries the original
    cause (``lastError.code``). ``Cancelled`` instead when the client asked for it
    (``cancelRequestedAt``). ``CompensationFailed`` (``failed`` given): the entry and the step
    ``CompensationFailed``, ``compensationError`` set, an operator alert naming the cause and a
    ``CompensationFailed`` reply. The reply is owed in the same write (orderflow.replies).

    Returns:
        :class:`CompensationFinished` with the state written, or :class:`Fenced`.
    """
    definition = workflow_for(data.workflow_version)
    target = ProcessState.COMPENSATION_FAILED if data.failed is not None else ProcessState.COMPENSATED
    now = deps.clock.now()

    def mutate(record: StateRecord) -> StateRecord | None:
        nonlocal target
        if record.process_state is not ProcessState.COMPENSATING:
            return None
        by_client = (record.stop_requested_by or "client") == "client"
        if data.failed is None and record.cancel_requested_at is not None and by_client:
            target = ProcessState.CANCELLED  # the client asked for it: the undo is its cancellation
        for undone in data.undone:
            _record_undone(record, undone, now)
        if data.failed is not None:
            owed = _record_undo_failures(record, data.failed, data.also_failed, now)
        else:
            owed = _owed_after_undo(record, definition, cancelled=target is ProcessState.CANCELLED)
        record.process_state = target
        record.complete_by = None
        record.pending_reply = owed
        record.end_attempt(now, target.value)
        return record

    outcome = _fenced(deps, data.order_id, data.instance_id, mutate)
    record = outcome.record
    if not outcome.applied or record.process_state is not target:
        return Fenced(reason=outcome.reason or f"processState is {record.process_state.value}")
    if record.pending_reply is not None:
        deliver_reply(deps.states, deps.queues, deps.clock, record, record.pending_reply, etag=outcome.etag)
    fields = {"order_id": data.order_id, "instance_id": data.instance_id}
    if data.failed is None:
        telemetry.event(f"order.{target.value.lower()}", **fields)
    else:
        telemetry.alert(
            "compensation_failed",
            step=",".join(f.step for f in (data.failed, *data.also_failed)),
            code=data.failed.code,
            cause=record.last_error.code if record.last_error else None,
            **fields,
        )
    return CompensationFinished(process_state=target.value)


def _record_undo_failures(
    record: StateRecord, failed: StepError, also_failed: tuple[StepError, ...], now: datetime
) -> PendingReply:
    """Mark every undo of the stage that failed for good (they ran in parallel, so not only the first)
    ``CompensationFailed`` with ``compensationError`` naming them; returns the reply owed."""
    for failure in (failed, *also_failed):
        failed_step = failure.step.removesuffix(":undo")
        _entry(record, failed_step).status = UndoStatus.FAILED
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
