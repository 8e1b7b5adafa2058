"""The orchestration's activities: fenced step writes, agent requests and the client's status replies.

Each function here is a plain function of (input, dependencies); the hosts register thin wrappers.
Activities run at least once (docs/design.md §7), so each is idempotent: a re-run finds its write already
made (same instance, same step) and writes nothing, and re-sends messages under the same stable
message id.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from decimal import Decimal

from activities.fencing import Mutation, WriteOutcome, fenced_write
from orderflow import telemetry
from orderflow.breaker import HalfOpen, Open, hold_for_dependency
from orderflow.contracts import (
    CANCELLED_BY_CLIENT,
    FinishOrderInput,
    Outcome,
    RecordReviewInput,
    RecordStepFailureInput,
    StartStepInput,
    StepError,
    StepResult,
)
from orderflow.dependencies import Dependencies
from orderflow.errors import ErrorKind
from orderflow.messages import OrderStatus
from orderflow.records import (
    CompensationEntry,
    LastError,
    OrderDocument,
    PendingReply,
    ProcessState,
    ReviewDecision,
    ReviewState,
    StateRecord,
    StepStatus,
    corrected_key,
    format_utc,
    undo_key,
)
from orderflow.replies import deliver_reply
from orderflow.results import (
    AwaitingDependency,
    AwaitingReview,
    BudgetExhausted,
    FailureRecorded,
    Fenced,
    FinishOrderResult,
    OrderFinished,
    RecordReviewResult,
    RecordStepFailureResult,
    ReviewRecorded,
    ReviewRejected,
    StartStepResult,
    StepStarted,
    Stopped,
)
from orderflow.settings import Settings
from orderflow.step_requests import send_step_request
from orderflow.step_start import (
    AwaitDependency,
    AwaitReview,
    NotProcessing,
    OutOfBudget,
    RejectedByReview,
    ReviewNeed,
    Start,
    StepStartDecision,
    StopRequested,
    Suspended,
    decide_step_start,
    step_dependency,
)
from orderflow.workflows import StepDefinition, WorkflowDefinition, workflow_for

logger = logging.getLogger(__name__)


def fallback_key(order_id: str, step: str, correction: int | None = None) -> str:
    """Idempotency key of a step run on its fallback provider (another provider: another key):
    ``{orderId}:{step}:fallback``, or ``{orderId}:{step}:correction-{n}:fallback`` once an operator
    corrected the step's input (correction ``n``: another input, another call)."""
    base = f"{order_id}:{step}" if correction is None else corrected_key(order_id, step, correction)
    return f"{base}:fallback"


def _record_completion(
    record: StateRecord, definition: WorkflowDefinition, done: StepResult, now: datetime
) -> None:
    """Mark ``done.step`` Completed and append its compensation entry, once (idempotent)."""
    step = record.steps[done.step]
    if step.status is StepStatus.COMPLETED:
        return
    step.status = StepStatus.COMPLETED
    step.result = dict(done.result)
    step.completed_at = now
    record.settle_reservation(done.step, done.calls)
    record.dependency_wait_since = None  # its dependency answered: a later wait starts afresh
    step_def = definition.step(done.step)
    if not any(entry.step == done.step for entry in record.compensation_log):
        record.compensation_log.append(
            CompensationEntry(
                step=done.step,
                action=step_def.operation,
                undo=None if step_def.irreversible else step_def.undo,
                undo_key=undo_key(record.order_id, done.step),
                data=dict(done.result),
                recorded_at=now,
            )
        )


def _fenced(deps: Dependencies, order_id: str, instance_id: str, mutate: Mutation) -> WriteOutcome:
    """:func:`activities.fencing.fenced_write` with this host's store, record cache and clock."""
    return fenced_write(
        deps.states, deps.cache, deps.clock, order_id=order_id, instance_id=instance_id, mutate=mutate
    )


def start_step(data: StartStepInput, deps: Dependencies) -> StartStepResult:
    """Activity :data:`orderflow.contracts.START_STEP`.

    In one fenced write: record the previous step's completion (with its compensation entry), mark this
    step Running, reserve its calls from the retry budget and set the record's ``completeBy`` to now plus
    the step's timeout. Then send the agent request, whose deadline is a little earlier (the margin
    leaves time for the answer to travel back). An attempt's first step is usually started by its claim
    (:func:`orchestrators.starter.start_first_step`): the activity finds it so on a read and only sends
    the request. What may start is decided by :func:`orderflow.step_start.decide_step_start`.

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
    reviewable = step_def.review and deps.settings.REVIEW_AMOUNT_ABOVE > 0
    order = deps.order_cache.get(deps.orders, data.order_id) if reviewable else None
    needs_review = order is not None and order.amount > Decimal(str(deps.settings.REVIEW_AMOUNT_ABOVE))
    held = _dependency_held(deps, step_def, data)
    # Set by each run of mutate; read only when the write applied, so mutate ran.
    decision: StepStartDecision = NotProcessing(ProcessState.PENDING)

    def mutate(record: StateRecord) -> StateRecord | None:
        nonlocal decision
        decision = decide_step_start(
            record,
            step_def,
            instance_id=data.instance_id,
            review=ReviewNeed.NEEDED if needs_review else ReviewNeed.NOT_NEEDED,
            max_calls_per_step=deps.settings.AGENT_MAX_CALLS_PER_STEP,
            fallback=data.fallback,
            completed=data.completed,
            dependency_held=held,
        )
        return _apply_start(decision, record, definition, data, settings=deps.settings, now=now)

    outcome = _fenced(deps, data.order_id, data.instance_id, mutate)
    record = outcome.record
    if outcome.applied:
        refused = _refused_start(decision, record, data, deps, etag=outcome.etag)
        if refused is not None:
            return refused
    if not outcome.applied or record.process_state is not ProcessState.PROCESSING:
        telemetry.event("step.fenced", order_id=data.order_id, instance_id=data.instance_id, step=data.step)
        return Fenced(reason=outcome.reason or f"processState is {record.process_state.value}")
    complete_by = _send_request(deps, data, step_def, record, order, now=now)
    telemetry.event(
        "step.start",
        order_id=data.order_id,
        instance_id=data.instance_id,
        step=data.step,
        complete_by=complete_by.isoformat(),
    )
    return StepStarted(complete_by=complete_by, remaining_calls=record.retry_budget.remaining)


def _apply_start(
    decision: StepStartDecision,
    record: StateRecord,
    definition: WorkflowDefinition,
    data: StartStepInput,
    *,
    settings: Settings,
    now: datetime,
) -> StateRecord | None:
    """The write ``decision`` makes to ``record`` (a private copy), or None when it writes nothing."""
    match decision:
        case AwaitReview(review=review):
            return _await_review(record, definition, data, review, settings=settings, now=now)
        case AwaitDependency(dependency=dependency, retry_at=retry_at):
            _prepare_start(record, definition, data, to_fallback=False, now=now)
            hold_for_dependency(
                record, step=data.step, dependency=dependency, retry_at=retry_at, now=now, settings=settings
            )
            return record
        case OutOfBudget(to_fallback=to_fallback):
            _prepare_start(record, definition, data, to_fallback=to_fallback, now=now)
            # An earlier attempt's reservation stays spent; nothing is left to give back later.
            record.steps[data.step].reserved_calls = 0
            return record
        case Suspended():
            _prepare_start(record, definition, data, to_fallback=False, now=now)
            release_suspended(record, now)
            return record
        case Start(grant=grant, to_fallback=to_fallback):
            _prepare_start(record, definition, data, to_fallback=to_fallback, now=now)
            # The deadline starts now, when the step really starts, not when the orchestration asked.
            record.run_step(
                data.step, data.instance_id, at=now, complete_by=data.complete_by(now), grant=grant
            )
            return record
    return None


def release_suspended(record: StateRecord, now: datetime) -> None:
    """Hand a suspended order's record back, in place: the attempt's tenure ends (``suspended``), the
    record is ``Pending``, unlocked and without a deadline, for the starter to claim once resumed."""
    record.end_attempt(now, "suspended")
    record.process_state = ProcessState.PENDING
    record.locked_by = None
    record.complete_by = None
    record.next_attempt_at = None


def _send_request(
    deps: Dependencies,
    data: StartStepInput,
    step_def: StepDefinition,
    record: StateRecord,
    order: OrderDocument | None,
    *,
    now: datetime,
) -> datetime:
    """Send the agent request of the step ``record`` runs; returns the step's completeBy (UTC)."""
    return send_step_request(
        deps.queues,
        deps.settings,
        record=record,
        step_def=step_def,
        order=order or deps.order_cache.get(deps.orders, data.order_id),
        instance_id=data.instance_id,
        response_queue=data.response_queue,
        fallback=data.fallback,
        now=now,
    )


def _prepare_start(
    record: StateRecord,
    definition: WorkflowDefinition,
    data: StartStepInput,
    *,
    to_fallback: bool,
    now: datetime,
) -> None:
    """What every write that starts (or refuses for budget) ``data.step`` does first: move the step to
    its fallback provider if asked, and record the previous step's completion."""
    if to_fallback:
        step = record.steps[data.step]
        # The primary refused: the fallback is another provider, so another key; the primary's
        # reservation is spent (it reported no calls) and the fallback reserves its own.
        step.fallback = True
        corrections = [c.number for c in record.corrections if c.step == data.step]
        step.idempotency_key = fallback_key(record.order_id, data.step, max(corrections, default=None))
        step.reserved_calls = 0
        step.last_instance = None
    if data.completed is not None:
        _record_completion(record, definition, data.completed, now)


def _refused_start(
    decision: StepStartDecision,
    record: StateRecord,
    data: StartStepInput,
    deps: Dependencies,
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
            return AwaitingReview(
                complete_by=record.review.deadline, review_default=deps.settings.REVIEW_DEFAULT
            )
        case RejectedByReview():
            # A decision recorded while no attempt waited (the next attempt finds it here).
            return ReviewRejected()
        case OutOfBudget():
            telemetry.event("budget.exhausted", **fields)
            return BudgetExhausted()
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


def _await_review(
    record: StateRecord,
    definition: WorkflowDefinition,
    data: StartStepInput,
    review: ReviewState | None,
    *,
    settings: Settings,
    now: datetime,
) -> StateRecord | None:
    """Pause ``record`` in ``AwaitingReview`` before ``data.step`` (or keep it there), owing the client an
    ``AwaitingReview`` reply. Nothing to write when a re-run finds it exactly so."""
    if data.completed is not None:
        _record_completion(record, definition, data.completed, now)
    if review is None:
        review = ReviewState(
            step=data.step,
            requested_at=now,
            deadline=now + timedelta(seconds=settings.REVIEW_TIMEOUT_S),
            response_queue=data.response_queue,
        )
        record.review = review
        record.pending_reply = PendingReply(
            status=OrderStatus.AWAITING_REVIEW.value,
            reason="amount_above_review_threshold",
            detail=f"a person must approve {data.step} by {format_utc(review.deadline)}",
        )
    elif (
        record.process_state is ProcessState.AWAITING_REVIEW
        and review.response_queue == data.response_queue
        and (data.completed is None or record.steps[data.completed.step].status is StepStatus.COMPLETED)
    ):
        return None  # a re-run: already waiting, and the decision is forwarded to this attempt's host
    review.response_queue = data.response_queue
    record.process_state = ProcessState.AWAITING_REVIEW
    # The waiting attempt's timer fires at the deadline; a supervisor acts only if it died meanwhile.
    record.complete_by = max(review.deadline, now) + timedelta(seconds=settings.CLAIM_TIMEOUT_S)
    return record


def record_review(data: RecordReviewInput, deps: Dependencies) -> RecordReviewResult:
    """Activity :data:`orderflow.contracts.RECORD_REVIEW`: the decision, then back to ``Processing``.

    The first decision recorded wins: a reviewer's decision the submission path already recorded is kept
    over the default the orchestration applies at the deadline, and the result says which is in force.

    Returns:
        :class:`ReviewRecorded` with the decision in force, or :class:`Fenced`.
    """
    now = deps.clock.now()

    def mutate(record: StateRecord) -> StateRecord | None:
        review = record.review
        if review is None or review.step != data.step:
            return None
        if review.decision is None:
            review.decision = ReviewDecision(data.decision)
            review.decided_by = data.decided_by
            review.decided_at = now
        elif record.process_state is not ProcessState.AWAITING_REVIEW:
            return None
        if record.process_state is ProcessState.AWAITING_REVIEW:
            record.process_state = ProcessState.PROCESSING
            record.complete_by = now + timedelta(seconds=deps.settings.CLAIM_TIMEOUT_S)
        return record

    outcome = _fenced(deps, data.order_id, data.instance_id, mutate)
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

    cancelled = False

    def mutate(record: StateRecord) -> StateRecord | None:
        nonlocal cancelled
        cancelled = record.cancel_requested_at is not None
        if record.process_state is target:
            return None
        if record.process_state is not ProcessState.PROCESSING or cancelled:
            return None
        if data.completed is not None:
            _record_completion(record, definition, data.completed, now)
        if data.error is not None:
            _record_error(record, data.error, now, fail_step=True)
        record.process_state = target
        record.complete_by = None
        record.end_attempt(now, target.value)
        # The reply is owed in the same write as the outcome (an outbox entry): see orderflow.replies.
        record.pending_reply = owed
        return record

    outcome = _fenced(deps, data.order_id, data.instance_id, mutate)
    record = outcome.record
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


def record_step_failure(data: RecordStepFailureInput, deps: Dependencies) -> RecordStepFailureResult:
    """Activity :data:`orderflow.contracts.RECORD_STEP_FAILURE`.

    Records a retryable failure in ``lastError`` (``compensationError`` for an undo), spends the calls
    made (undos spend none), and sets ``completeBy`` to now so the supervisor's next sweep recovers the
    order (re-queue with backoff, or give up).

    Returns:
        :class:`FailureRecorded` (also when a re-run finds it recorded), or :class:`Fenced`.
    """

    def mutate(record: StateRecord) -> StateRecord | None:
        if record.process_state is ProcessState.COMPENSATING:
            # An undo that failed for now: keep the forward cause in lastError; undos spend no budget.
            recorded = record.compensation_error
            if recorded is not None and recorded.at == data.at and record.complete_by == data.at:
                return None
            error = data.error
            record.compensation_error = LastError(
                kind=error.kind, message=error.message, step=error.step, code=error.code, at=data.at
            )
            record.complete_by = data.at
            return record
        if record.process_state is not ProcessState.PROCESSING:
            return None
        if (
            record.last_error is not None
            and record.last_error.at == data.at
            and record.complete_by == data.at
        ):
            return None
        _record_error(record, data.error, data.at, fail_step=False)
        record.settle_reservation(data.error.step, data.error.calls)
        record.complete_by = data.at
        if held:
            # The agent found the dependency's breaker open: wait for it, not for the supervisor.
            dependency = _failed_dependency(record, data.error.step)
            retry_at = _retry_at(deps, dependency, data.at)
            hold_for_dependency(
                record,
                step=data.error.step,
                dependency=dependency,
                retry_at=retry_at,
                now=data.at,
                settings=deps.settings,
            )
        return record

    held = data.error.kind == ErrorKind.UNAVAILABLE.value
    outcome = _fenced(deps, data.order_id, data.instance_id, mutate)
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


def _retry_at(deps: Dependencies, dependency: str, now: datetime) -> datetime:
    """When an order held by ``dependency``'s breaker tries again: when the breaker lets a probe
    through, as this host sees it, or ``BREAKER_OPEN_S`` from ``now``."""
    view = None if deps.breakers is None else deps.breakers.view(dependency)
    match view:
        case Open(retry_at=retry_at):
            return retry_at
        case HalfOpen(probe_until=probe_until) if probe_until is not None:
            return probe_until
    return now + timedelta(seconds=deps.settings.BREAKER_OPEN_S)


def _record_error(record: StateRecord, error: StepError, at: datetime, *, fail_step: bool) -> None:
    record.last_error = LastError(
        kind=error.kind, message=error.message, step=error.step, code=error.code, at=at
    )
    if fail_step and error.step in record.steps:
        step = record.steps[error.step]
        if step.status is StepStatus.RUNNING:
            step.status = StepStatus.FAILED
        record.settle_reservation(error.step, error.calls)
