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
from datetime import datetime

from activities.fenced import fenced
from activities.sections import ActivitySections
from orderflow import telemetry, tracing
from orderflow.contracts import (
    BeginCompensationInput,
    FinishCompensationInput,
    StartUndoInput,
    undo_step_name,
)
from orderflow.dependencies import Dependencies
from orderflow.effects import PAST_POINT_OF_NO_RETURN
from orderflow.errors import IllegalTransition
from orderflow.messages import AgentRequest, bounded_message_id, request_id_for
from orderflow.protocol.transitions import compensation
from orderflow.records import (
    CompensationEntry,
    ProcessState,
    StateRecord,
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
from orderflow.workflows import workflow_for

logger = logging.getLogger(__name__)


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
        return compensation.begin_compensation(
            record, definition, completed=data.completed, error=data.error, timeout_s=data.timeout_s, now=now
        )

    outcome = fenced(deps, data.order_id, data.instance_id, mutate)
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
    stages = compensation.stages_to_undo(record, definition)
    telemetry.event("compensation.begin", stages="|".join(",".join(stage) for stage in stages), **fields)
    return CompensationBegun(undo_stages=stages)


def start_undo(data: StartUndoInput, deps: Dependencies, sections: ActivitySections) -> StartUndoResult:
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
        return compensation.start_undo(
            record,
            step_name=data.step,
            undone=data.undone,
            instance_id=data.instance_id,
            timeout_s=data.timeout_s,
            now=now,
        )

    outcome = fenced(deps, data.order_id, data.instance_id, mutate)
    record = outcome.record
    if not outcome.applied or record.process_state is not ProcessState.COMPENSATING:
        return Fenced(reason=outcome.reason or f"processState is {record.process_state.value}")
    complete_by = record.complete_by
    if complete_by is None:  # pragma: no cover - every applied start writes one
        raise IllegalTransition(f"order {data.order_id} is Compensating without a completeBy")
    entry = _send_undo_request(deps, sections, data, record, complete_by, now=now)
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
    deps: Dependencies,
    sections: ActivitySections,
    data: StartUndoInput,
    record: StateRecord,
    complete_by: datetime,
    *,
    now: datetime,
) -> CompensationEntry:
    """Send the undo request of ``data.step`` to the agent that performed the step; returns its entry."""
    step_def = workflow_for(data.workflow_version).step(data.step)
    entry = compensation.entry_of(record, data.step)
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
        max_calls=sections.steps.AGENT_MAX_CALLS_PER_STEP,
        traceparent=tracing.current_traceparent(),
    )
    # A step a fallback provider performed is undone by that provider.
    on_fallback = record.steps[data.step].fallback
    agent = step_def.fallback_agent if on_fallback and step_def.fallback_agent else step_def.agent
    deps.queues.queue(sections.queues.agent_queue(agent)).send(
        request.to_json(), message_id=bounded_message_id(request.request_id), correlation_id=data.order_id
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
    now = deps.clock.now()

    def mutate(record: StateRecord) -> StateRecord | None:
        return compensation.finish_compensation(
            record, definition, undone=data.undone, failed=data.failed, also_failed=data.also_failed, now=now
        )

    outcome = fenced(deps, data.order_id, data.instance_id, mutate)
    record = outcome.record
    # The state written; a write not made is checked against the state the input names.
    named = ProcessState.COMPENSATION_FAILED if data.failed is not None else ProcessState.COMPENSATED
    target = record.process_state if outcome.written else named
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
