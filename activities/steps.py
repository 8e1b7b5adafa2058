"""The orchestration's activities: fenced step writes, agent requests and the client's status replies.

Each function here is a plain function of (input, dependencies), and of the activities' settings sections
when it reads any; the hosts register thin wrappers.
Activities run at least once (docs/design.md §7), so each is idempotent: a re-run finds its write already
made (same instance, same step) and writes nothing, and re-sends messages under the same stable
message id.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from decimal import Decimal

from activities.fenced import fenced
from activities.sections import ActivitySections
from orderflow import telemetry
from orderflow.breaker import HalfOpen, Open
from orderflow.contracts import (
    CANCELLED_BY_CLIENT,
    FinishOrderInput,
    Outcome,
    RecordReviewInput,
    RecordStepFailureInput,
    StartStepInput,
)
from orderflow.dependencies import Dependencies
from orderflow.errors import ErrorKind
from orderflow.messages import OrderStatus
from orderflow.protocol.holds import HoldLapsed, HoldRule, ReacquireHold
from orderflow.protocol.step_start import (
    AwaitDependency,
    AwaitReview,
    NotProcessing,
    OutOfBudget,
    RejectedByReview,
    ReviewNeed,
    StepStartDecision,
    StopRequested,
    decide_step_start,
    step_dependency,
)
from orderflow.protocol.transitions import forward, holds
from orderflow.records import (
    OrderDocument,
    PendingReply,
    ProcessState,
    StateRecord,
)
from orderflow.replies import deliver_reply
from orderflow.results import (
    AwaitingDependency,
    AwaitingReview,
    BudgetExhausted,
    FailureRecorded,
    Fenced,
    FinishOrderResult,
    HoldExpired,
    OrderFinished,
    ReacquiringHold,
    RecordReviewResult,
    RecordStepFailureResult,
    ReviewRecorded,
    ReviewRejected,
    StartStepResult,
    StepStarted,
    Stopped,
)
from orderflow.settings import Breakers, Queues, Steps
from orderflow.step_requests import send_step_request
from orderflow.workflows import StepDefinition, WorkflowDefinition, workflow_for

logger = logging.getLogger(__name__)


def start_step(data: StartStepInput, deps: Dependencies, sections: ActivitySections) -> StartStepResult:
    """Activity :data:`orderflow.contracts.START_STEP`.

    In one fenced write: record the previous step's completion (with its compensation entry), mark this
    step Running, reserve its calls from the retry budget and set the record's ``completeBy`` to now plus
    the step's timeout. Then send the agent request, whose deadline is a little earlier (the margin
    leaves time for the answer to travel back). An attempt's first step is usually started by its claim
    (:func:`orderflow.protocol.transitions.forward.start_first_step`): the activity finds it so on a read
    and only sends the request. What may start is decided by
    :func:`orderflow.protocol.step_start.decide_step_start`.

    Returns:
        :class:`StepStarted` with the ``complete_by`` (UTC) where the orchestration's timer must fire;
        :class:`AwaitingReview`, :class:`ReviewRejected`, :class:`BudgetExhausted` or :class:`Stopped`
        when the step did not start (nothing is sent); :class:`AwaitingDependency` when the step's
        dependency is held by its open circuit breaker (the record went back to ``Pending`` in the same
        write, nothing reserved, nothing sent); :class:`Fenced` when the record is not this attempt's.

    Raises:
        ConcurrencyConflict, TransientError: the store or queue failed; the runtime retries.
    """
    definition = workflow_for(data.workflow_version)
    step_def = definition.step(data.step)
    now = deps.clock.now()

    # Only a step that asks for review reads the order here; the others read it after the write.
    reviewable = step_def.review and sections.steps.REVIEW_AMOUNT_ABOVE > 0
    order = deps.order_cache.get(deps.orders, data.order_id) if reviewable else None
    needs_review = order is not None and order.amount > Decimal(str(sections.steps.REVIEW_AMOUNT_ABOVE))
    held = _dependency_held(deps, step_def, data)
    # Set by each run of mutate; read only when the write applied, so mutate ran.
    decision: StepStartDecision = NotProcessing(ProcessState.PENDING)

    rule = _hold_rule(definition, step_def, data, sections.steps, now)

    def mutate(record: StateRecord) -> StateRecord | None:
        nonlocal decision
        if data.reacquired is not None:
            holds.record_reacquired(record, definition, data.reacquired, data.instance_id, now)
        decision = decide_step_start(
            record,
            step_def,
            instance_id=data.instance_id,
            review=ReviewNeed.NEEDED if needs_review else ReviewNeed.NOT_NEEDED,
            max_calls_per_step=sections.steps.AGENT_MAX_CALLS_PER_STEP,
            fallback=data.fallback,
            completed=data.completed,
            dependency_held=held,
            holds=rule,
        )
        return forward.start_step(
            decision,
            record,
            definition,
            data,
            steps=sections.steps,
            starter=sections.starter,
            breakers=sections.breakers,
            now=now,
        )

    outcome = fenced(deps, data.order_id, data.instance_id, mutate)
    record = outcome.record
    if outcome.applied:
        refused = _refused_start(decision, record, data, deps, sections.steps, etag=outcome.etag)
        if refused is not None:
            return refused
    if not outcome.applied or record.process_state is not ProcessState.PROCESSING:
        telemetry.event("step.fenced", order_id=data.order_id, instance_id=data.instance_id, step=data.step)
        return Fenced(reason=outcome.reason or f"processState is {record.process_state.value}")
    if isinstance(decision, ReacquireHold):
        held_step = definition.step(decision.step)
        return _reacquire(deps, data, held_step, record, queue_names=sections.queues, now=now)
    complete_by = _send_request(deps, data, step_def, record, order, queue_names=sections.queues, now=now)
    telemetry.event(
        "step.start",
        order_id=data.order_id,
        instance_id=data.instance_id,
        step=data.step,
        complete_by=complete_by.isoformat(),
    )
    return StepStarted(
        complete_by=complete_by,
        remaining_calls=record.retry_budget.remaining,
        fallback=record.steps[data.step].fallback,
    )


def _send_request(
    deps: Dependencies,
    data: StartStepInput,
    step_def: StepDefinition,
    record: StateRecord,
    order: OrderDocument | None,
    *,
    queue_names: Queues,
    now: datetime,
) -> datetime:
    """Send the agent request of the step ``record`` runs; returns the step's completeBy (UTC)."""
    return send_step_request(
        deps.queues,
        queue_names,
        record=record,
        step_def=step_def,
        order=order or deps.order_cache.get(deps.orders, data.order_id),
        instance_id=data.instance_id,
        response_queue=data.response_queue,
        now=now,
    )


def _hold_rule(
    definition: WorkflowDefinition,
    step_def: StepDefinition,
    data: StartStepInput,
    steps: Steps,
    now: datetime,
) -> HoldRule | None:
    """The hold rule's inputs for a step it guards (None for the others)."""
    if not definition.guarded_by_holds(step_def):
        return None
    return HoldRule(definition, now=now, deadline_s=data.timeout_s, margin_s=steps.HOLD_SKEW_MARGIN_S)


def _reacquire(
    deps: Dependencies,
    data: StartStepInput,
    held: StepDefinition,
    record: StateRecord,
    *,
    queue_names: Queues,
    now: datetime,
) -> ReacquiringHold:
    """Send the request re-acquiring ``held``'s hold, which ``record`` shows under way for this attempt."""
    complete_by = send_step_request(
        deps.queues,
        queue_names,
        record=record,
        step_def=held,
        order=deps.order_cache.get(deps.orders, data.order_id),
        instance_id=data.instance_id,
        response_queue=data.response_queue,
        now=now,
        reacquire=True,
    )
    hold = record.holds[held.name]
    telemetry.event(
        "hold.reacquiring",
        order_id=data.order_id,
        instance_id=data.instance_id,
        step=held.name,
        expires_at=hold.expires_at.isoformat(),
    )
    return ReacquiringHold(step=held.name, complete_by=complete_by)


def _refused_start(
    decision: StepStartDecision,
    record: StateRecord,
    data: StartStepInput,
    deps: Dependencies,
    steps: Steps,
    *,
    etag: str | None,
) -> StartStepResult | None:
    """The activity's result when the decision, applied, started nothing; None when it started the step
    (or found it started)."""
    fields = {"order_id": data.order_id, "instance_id": data.instance_id, "step": data.step}
    match decision:
        case StopRequested() if record.process_state in (
            ProcessState.PROCESSING,
            ProcessState.AWAITING_REVIEW,
        ):
            telemetry.event("step.cancelled", **fields)
            return _stopped(record)
        case AwaitReview() if record.process_state is ProcessState.AWAITING_REVIEW:
            assert record.review is not None
            if record.pending_reply is not None:
                deliver_reply(deps.states, deps.queues, deps.clock, record, record.pending_reply, etag=etag)
            telemetry.event("review.awaiting", **fields, deadline=record.review.deadline.isoformat())
            return AwaitingReview(complete_by=record.review.deadline, review_default=steps.REVIEW_DEFAULT)
        case RejectedByReview():
            # A decision recorded while no attempt waited (the next attempt finds it here).
            return ReviewRejected()
        case OutOfBudget():
            telemetry.event("budget.exhausted", **fields)
            return BudgetExhausted()
        case HoldLapsed(step=held, expires_at=expires_at):
            at = None if expires_at is None else expires_at.isoformat()
            telemetry.event("hold.expired", **fields, hold_step=held, expires_at=at)
            return HoldExpired(step=held)
        case AwaitDependency(dependency=dependency) if record.locked_by is None:
            return _awaiting(record, dependency, fields)
    return None


def _awaiting(record: StateRecord, dependency: str, fields: dict[str, str]) -> AwaitingDependency:
    """The result of a write that gave the record back to wait for ``dependency`` (an alert when the
    order waited too long and is compensated instead)."""
    gave_up = record.process_state is ProcessState.COMPENSATING
    retry_at = record.next_attempt_at or record.updated_at
    if gave_up:
        telemetry.alert("dependency_wait_exhausted", **fields, dependency=dependency)
    else:
        telemetry.event(
            "step.awaiting_dependency", **fields, dependency=dependency, retry_at=retry_at.isoformat()
        )
    return AwaitingDependency(dependency=dependency, retry_at=retry_at, gave_up=gave_up)


def _dependency_held(
    deps: Dependencies, step_def: StepDefinition, data: StartStepInput
) -> AwaitDependency | None:
    """Whether the breaker of the dependency ``data`` would call holds the step (None: it may start)."""
    if deps.breakers is None:
        return None
    dependency = step_dependency(step_def, fallback=data.fallback)
    retry_at = deps.breakers.admit(dependency, holder=data.instance_id)
    return None if retry_at is None else AwaitDependency(dependency, retry_at)


def _stopped(record: StateRecord) -> Stopped:
    """The result of a write refused because someone asked the order to stop, with the stop's cause
    (``lastError.code``): a client's cancel, or an operator's decision."""
    stop = record.last_error.code if record.last_error and record.last_error.code else CANCELLED_BY_CLIENT
    return Stopped(cause=stop)


def record_review(
    data: RecordReviewInput, deps: Dependencies, sections: ActivitySections
) -> RecordReviewResult:
    """Activity :data:`orderflow.contracts.RECORD_REVIEW`: the decision, then back to ``Processing``.

    The first decision recorded wins: a reviewer's decision the submission path already recorded is kept
    over the default the orchestration applies at the deadline, and the result says which is in force.

    Returns:
        :class:`ReviewRecorded` with the decision in force, or :class:`Fenced`.
    """
    now = deps.clock.now()

    def mutate(record: StateRecord) -> StateRecord | None:
        return forward.record_review(
            record,
            step=data.step,
            decision=data.decision,
            decided_by=data.decided_by,
            now=now,
            claim_timeout_s=sections.starter.CLAIM_TIMEOUT_S,
        )

    outcome = fenced(deps, data.order_id, data.instance_id, mutate)
    record = outcome.record
    review = record.review
    if not outcome.applied or review is None or review.decision is None or review.step != data.step:
        return Fenced(reason=outcome.reason or "no review of this step to decide")
    telemetry.event(
        "review.decided",
        order_id=data.order_id,
        instance_id=data.instance_id,
        step=data.step,
        decision=review.decision.value,
        decided_by=review.decided_by,
    )
    return ReviewRecorded(decision=review.decision.value)


def finish_order(data: FinishOrderInput, deps: Dependencies) -> FinishOrderResult:
    """Activity :data:`orderflow.contracts.FINISH_ORDER`: the outcome, then the client's reply.

    ``Processed``: the last step's completion and ``processState=Processed`` in one fenced write, then a
    ``Processed`` reply. ``Error``: the failed step, ``lastError`` and ``processState=Error``, then a
    ``Failed`` reply and an operator alert. The reply is recorded as owed in the same write and
    cleared once sent (orderflow.replies); a re-run sends it if it is still owed.

    Returns:
        :class:`OrderFinished`; :class:`Stopped` when the order was asked to stop while its last step
        ran, or while the step whose refusal would leave it ``Error`` for a correction ran (nothing is
        written: the orchestration compensates); :class:`Fenced`.
    """
    definition = workflow_for(data.workflow_version)
    target = ProcessState.PROCESSED if data.outcome is Outcome.PROCESSED else ProcessState.ERROR
    now = deps.clock.now()

    if target is ProcessState.PROCESSED:
        owed = PendingReply(status=OrderStatus.PROCESSED.value)
    else:
        error = data.error
        owed = PendingReply(
            status=OrderStatus.FAILED.value,
            reason=error.code if error else None,
            detail=error.message if error else None,
        )

    def mutate(record: StateRecord) -> StateRecord | None:
        return forward.finish_order(
            record, definition, target=target, completed=data.completed, error=data.error, owed=owed, now=now
        )

    outcome = fenced(deps, data.order_id, data.instance_id, mutate)
    record = outcome.record
    # Asked to stop while its last step ran: nothing written, the orchestration compensates.
    cancelled = record.cancel_requested_at is not None
    if outcome.applied and cancelled and record.process_state is ProcessState.PROCESSING:
        return _stopped(record)
    if not outcome.applied or record.process_state is not target:
        return Fenced(reason=outcome.reason or f"processState is {record.process_state.value}")

    if record.pending_reply is not None:
        # A failure here leaves the entry for the supervisor's relay (and the activity is retried).
        deliver_reply(deps.states, deps.queues, deps.clock, record, record.pending_reply, etag=outcome.etag)
    if target is ProcessState.PROCESSED:
        telemetry.event("order.processed", order_id=data.order_id, instance_id=data.instance_id)
    else:
        error = data.error
        telemetry.alert(
            "order_failed",
            order_id=data.order_id,
            instance_id=data.instance_id,
            step=error.step if error else None,
            code=error.code if error else None,
        )
    return OrderFinished(remaining_calls=record.retry_budget.remaining)


def record_step_failure(
    data: RecordStepFailureInput, deps: Dependencies, sections: ActivitySections
) -> RecordStepFailureResult:
    """Activity :data:`orderflow.contracts.RECORD_STEP_FAILURE`.

    Records a retryable failure in ``lastError`` (``compensationError`` for an undo), spends the calls
    made (undos spend none), and sets ``completeBy`` to now so the supervisor's next sweep recovers the
    order (re-queue with backoff, or give up).

    Returns:
        :class:`FailureRecorded` (also when a re-run finds it recorded), or :class:`Fenced`.
    """

    def held_by(record: StateRecord) -> tuple[str, datetime]:
        dependency = _failed_dependency(record, data.error.step)
        return dependency, _retry_at(deps, sections.breakers, dependency, data.at)

    def mutate(record: StateRecord) -> StateRecord | None:
        return forward.record_step_failure(
            record, data.error, at=data.at, held=held_by if held else None, breakers=sections.breakers
        )

    held = data.error.kind == ErrorKind.UNAVAILABLE.value
    outcome = fenced(deps, data.order_id, data.instance_id, mutate)
    telemetry.event(
        "step.failed",
        order_id=data.order_id,
        instance_id=data.instance_id,
        step=data.error.step,
        kind=data.error.kind,
        code=data.error.code,
    )
    state = outcome.record.process_state
    live = (ProcessState.PROCESSING, ProcessState.COMPENSATING, *((ProcessState.PENDING,) if held else ()))
    if not outcome.applied or state not in live:
        return Fenced(reason=outcome.reason or f"processState is {state.value}")
    if held and outcome.record.locked_by is None:
        _awaiting(
            outcome.record,
            _failed_dependency(outcome.record, data.error.step),
            {
                "order_id": data.order_id,
                "instance_id": data.instance_id,
                "step": data.error.step,
            },
        )
    return FailureRecorded(remaining_calls=outcome.record.retry_budget.remaining)


def _failed_dependency(record: StateRecord, step: str) -> str:
    """The dependency (agent) of ``step`` in ``record``: its fallback provider's once it moved there."""
    step_def = workflow_for(record.workflow_version).step(step)
    return step_dependency(step_def, fallback=record.steps[step].fallback)


def _retry_at(deps: Dependencies, breakers: Breakers, dependency: str, now: datetime) -> datetime:
    """When an order held by ``dependency``'s breaker tries again: when the breaker lets a probe
    through, as this host sees it, or ``BREAKER_OPEN_S`` from ``now``."""
    view = None if deps.breakers is None else deps.breakers.view(dependency)
    match view:
        case Open(retry_at=retry_at):
            return retry_at
        case HalfOpen(probe_until=probe_until) if probe_until is not None:
            return probe_until
    return now + timedelta(seconds=breakers.BREAKER_OPEN_S)
