"""Forward transitions: the claim, a step started, completed or failed, a review awaited and recorded,
an order held for its dependency or handed back while suspended, the order finished.

Each is a pure function of (a private copy of the record, the inputs): it changes the copy and returns
it to write, or returns None when the change is already there (an activity re-run) or not to be made.
The caller hands it to :func:`orderflow.protocol.conditional.update`, which checks it against the state
machine and writes it conditionally.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from orderflow.breaker import DEPENDENCY_UNAVAILABLE
from orderflow.contracts import StartStepInput, StepError, StepResult
from orderflow.errors import ErrorKind
from orderflow.messages import OrderStatus
from orderflow.protocol.holds import ReacquireHold
from orderflow.protocol.keys import fallback_key, undo_key
from orderflow.protocol.step_start import (
    AwaitDependency,
    AwaitReview,
    OutOfBudget,
    ReviewNeed,
    Start,
    StepStartDecision,
    Suspended,
    decide_step_start,
)
from orderflow.protocol.transitions.holds import record_hold, start_reacquire
from orderflow.records import (
    CompensationEntry,
    LastError,
    PendingReply,
    ProcessState,
    ReviewDecision,
    ReviewState,
    StateRecord,
    StepStatus,
    format_utc,
    instance_id_for,
)
from orderflow.settings import Breakers, Starter, Steps
from orderflow.workflows import UnknownWorkflowVersion, WorkflowDefinition, workflow_for


def claim(record: StateRecord, *, now: datetime, claim_timeout_s: float) -> StateRecord:
    """A new attempt owns ``record``: ``Pending`` becomes ``Processing`` (a ``Compensating`` record stays
    ``Compensating``: the attempt resumes the undo), ``attempt`` + 1, ``lockedBy`` the attempt's instance
    id, ``completeBy`` ``claim_timeout_s`` from ``now`` (UTC). The caller appends the tenure
    (:meth:`StateRecord.begin_attempt`)."""
    if record.process_state is ProcessState.PENDING:
        record.process_state = ProcessState.PROCESSING
    record.attempt += 1
    record.locked_by = instance_id_for(record.order_id, record.attempt)
    record.complete_by = now + timedelta(seconds=claim_timeout_s)
    record.next_attempt_at = None
    return record


def run_step(
    record: StateRecord,
    name: str,
    instance_id: str,
    *,
    at: datetime,
    complete_by: datetime,
    grant: int | None,
) -> None:
    """Mark step ``name`` Running for attempt ``instance_id`` from ``at`` until ``complete_by`` (UTC), in
    place: the record's ``completeBy`` is the step's deadline.

    Args:
        grant: Calls this attempt of the step reserves from the retry budget (the step's attempts
            grow by one); None when the attempt keeps the reservation it holds (a restart of the
            same attempt, after a review say).

    Raises:
        KeyError: the record has no step ``name``.
    """
    step = record.steps[name]
    if grant is not None:
        record.retry_budget.spent += grant
        step.reserved_calls = grant
        step.attempts += 1
    step.status = StepStatus.RUNNING
    step.last_instance = instance_id
    step.started_at = at
    record.complete_by = complete_by


def start_first_step(record: StateRecord, now: datetime, steps: Steps, starter: Starter) -> str | None:
    """The first-step seam: start the claimed attempt's first step still to run, in the claim's own write.

    The protocol is correct without this seam: the ``start_step`` activity starts any step the claim did
    not, with the same decision and transition (:func:`run_step`).

    The step becomes Running for the new instance with its calls reserved from the retry budget, exactly
    as the orchestration's ``start_step`` activity would mark it; ``completeBy`` becomes its deadline, the
    step's timeout plus ``START_LATENCY_S`` for the orchestration to be scheduled. The starter then sends
    the step's request (``STARTER_SENDS_FIRST_REQUEST``; without, that activity finds the step started by
    its own attempt and only sends the request). The decision is the activity's own
    (:func:`orderflow.protocol.step_start.decide_step_start`); what it does not decide to start here is left
    to the orchestration: a step that may pause for review (the claim has not read the order), one moved
    to its fallback provider or failed before, one with no calls left in the budget, one the hold rule
    guards (:mod:`orderflow.protocol.holds`), and any step of an order whose stop was requested.

    Args:
        record: The claimed record (``lockedBy`` set), changed in place.
        now: The claim's time (UTC).
        steps / starter: ``STEP_TIMEOUT_S``, ``START_LATENCY_S``, ``AGENT_MAX_CALLS_PER_STEP``,
            ``REVIEW_AMOUNT_ABOVE``.

    Returns:
        The name of the step started, or None when the claim starts none.
    """
    assert record.locked_by is not None
    try:
        definition = workflow_for(record.workflow_version)
    except UnknownWorkflowVersion:
        return None  # the orchestration meets it and fails; the supervisor then has the order
    done = set(record.completed_steps())
    step_def = next((s for s in definition.steps if s.name not in done), None)
    step = None if step_def is None else record.steps.get(step_def.name)
    # The claim starts only a fresh step on its primary provider; every other case is the activity's.
    if step_def is None or step is None or step.fallback:
        return None
    # The hold rule is the activity's: it re-acquires a lapsing hold, which the claim cannot send.
    if definition.guarded_by_holds(step_def):
        return None
    if step.status not in (StepStatus.NOT_STARTED, StepStatus.RUNNING):
        return None
    # The claim has not read the order, so a step that reviews large amounts is left to the activity.
    review = (
        ReviewNeed.UNKNOWN if step_def.review and steps.REVIEW_AMOUNT_ABOVE > 0 else ReviewNeed.NOT_NEEDED
    )
    decision = decide_step_start(
        record,
        step_def,
        instance_id=record.locked_by,
        review=review,
        max_calls_per_step=steps.AGENT_MAX_CALLS_PER_STEP,
    )
    if not isinstance(decision, Start) or decision.grant is None:
        return None
    timeout_s = (step_def.timeout_s or steps.STEP_TIMEOUT_S) + starter.START_LATENCY_S
    run_step(
        record,
        step_def.name,
        record.locked_by,
        at=now,
        complete_by=now + timedelta(seconds=timeout_s),
        grant=decision.grant,
    )
    return step_def.name


def record_completion(
    record: StateRecord, definition: WorkflowDefinition, done: StepResult, now: datetime
) -> None:
    """Mark ``done.step`` Completed and append its compensation entry, once (idempotent), in place."""
    step = record.steps[done.step]
    if step.status is StepStatus.COMPLETED:
        return
    step.status = StepStatus.COMPLETED
    step.result = dict(done.result)
    step.completed_at = now
    record.settle_reservation(done.step, done.calls)
    record.dependency_wait_since = None  # its dependency answered: a later wait starts afresh
    step_def = definition.step(done.step)
    record_hold(record, step_def, done, now)
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


def record_error(record: StateRecord, error: StepError, at: datetime, *, fail_step: bool) -> None:
    """Record ``error`` in ``lastError``, in place; with ``fail_step``, a Running step becomes Failed and
    its reservation is settled."""
    record.last_error = LastError(
        kind=error.kind, message=error.message, step=error.step, code=error.code, at=at
    )
    if fail_step and error.step in record.steps:
        step = record.steps[error.step]
        if step.status is StepStatus.RUNNING:
            step.status = StepStatus.FAILED
        record.settle_reservation(error.step, error.calls)


def hold_for_dependency(
    record: StateRecord, *, step: str, dependency: str, retry_at: datetime, now: datetime, breakers: Breakers
) -> bool:
    """Make ``record`` wait for ``dependency``'s breaker, in place (the breaker trips the order).

    The order is not started, not charged and not counted as a failure: it goes (or stays) ``Pending``,
    unlocked, with ``nextAttemptAt`` = ``retry_at``, so the starter claims it again then and the
    supervisor, which sweeps only live attempts, never sees it. ``dependencyWaitSince`` remembers the
    first wait; once the order has waited ``BREAKER_MAX_WAIT_S`` it waits no more: it becomes
    ``Compensating`` (unlocked, ready) with ``lastError`` ``unavailable`` / ``dependency_unavailable``,
    exactly as the supervisor gives up an order, and the caller raises the alert.

    Args:
        record: A ``Processing`` record owned by the attempt that holds it (its tenure ends here), or an
            unlocked ``Pending`` record being claimed.
        step: The step that would start.
        dependency: The dependency it needs.
        retry_at: When the breaker next lets a probe through (UTC).
        now: The time of the write (UTC).
        breakers: ``BREAKER_MAX_WAIT_S``.

    Returns:
        True when the order was given up (compensated), False when it waits.
    """
    since = record.dependency_wait_since or now
    give_up = (now - since).total_seconds() >= breakers.BREAKER_MAX_WAIT_S
    if record.locked_by is not None:
        record.end_attempt(now, "gave_up" if give_up else "dependency_wait")
    record.locked_by = None
    record.complete_by = None
    record.updated_at = now
    record.dependency_wait_since = since
    if give_up:
        record.process_state = ProcessState.COMPENSATING
        record.next_attempt_at = now
        record.last_error = LastError(
            kind=ErrorKind.UNAVAILABLE.value,
            code=DEPENDENCY_UNAVAILABLE,
            message=(f"{dependency} was unavailable (circuit open) for {breakers.BREAKER_MAX_WAIT_S:g} s"),
            step=step,
            at=now,
        )
    else:
        record.process_state = ProcessState.PENDING
        record.next_attempt_at = max(retry_at, now)
    return give_up


def release_suspended(record: StateRecord, now: datetime) -> None:
    """Hand a suspended order's record back, in place: the attempt's tenure ends (``suspended``), the
    record is ``Pending``, unlocked and without a deadline, for the starter to claim once resumed."""
    record.end_attempt(now, "suspended")
    record.process_state = ProcessState.PENDING
    record.locked_by = None
    record.complete_by = None
    record.next_attempt_at = None


def start_step(
    decision: StepStartDecision,
    record: StateRecord,
    definition: WorkflowDefinition,
    data: StartStepInput,
    *,
    steps: Steps,
    starter: Starter,
    breakers: Breakers,
    now: datetime,
) -> StateRecord | None:
    """The write the start decision (:func:`orderflow.protocol.step_start.decide_step_start`) makes to
    ``record`` (a private copy), or None when it writes nothing."""
    match decision:
        case AwaitReview(review=review):
            return await_review(record, definition, data, review, steps=steps, starter=starter, now=now)
        case AwaitDependency(dependency=dependency, retry_at=retry_at):
            _prepare_start(record, definition, data, to_fallback=False, now=now)
            hold_for_dependency(
                record, step=data.step, dependency=dependency, retry_at=retry_at, now=now, breakers=breakers
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
        case ReacquireHold(step=held, started=False, grant=grant):
            _prepare_start(record, definition, data, to_fallback=False, now=now)
            start_reacquire(record, held, data.instance_id, grant=grant, complete_by=data.complete_by(now))
            return record
        case Start(grant=grant, to_fallback=to_fallback):
            _prepare_start(record, definition, data, to_fallback=to_fallback, now=now)
            # The deadline starts now, when the step really starts, not when the orchestration asked.
            run_step(
                record, data.step, data.instance_id, at=now, complete_by=data.complete_by(now), grant=grant
            )
            return record
    return None


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
        record_completion(record, definition, data.completed, now)


def await_review(
    record: StateRecord,
    definition: WorkflowDefinition,
    data: StartStepInput,
    review: ReviewState | None,
    *,
    steps: Steps,
    starter: Starter,
    now: datetime,
) -> StateRecord | None:
    """Pause ``record`` in ``AwaitingReview`` before ``data.step`` (or keep it there), owing the client an
    ``AwaitingReview`` reply. Nothing to write when a re-run finds it exactly so."""
    if data.completed is not None:
        record_completion(record, definition, data.completed, now)
    if review is None:
        review = ReviewState(
            step=data.step,
            requested_at=now,
            deadline=now + timedelta(seconds=steps.REVIEW_TIMEOUT_S),
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
    record.complete_by = max(review.deadline, now) + timedelta(seconds=starter.CLAIM_TIMEOUT_S)
    return record


def record_review(
    record: StateRecord,
    *,
    step: str,
    decision: str,
    decided_by: str | None,
    now: datetime,
    claim_timeout_s: float,
) -> StateRecord | None:
    """The review decision on ``step`` (the first recorded wins), then back to ``Processing`` with
    ``completeBy`` ``claim_timeout_s`` from ``now``; None when there is nothing to write."""
    review = record.review
    if review is None or review.step != step:
        return None
    if review.decision is None:
        review.decision = ReviewDecision(decision)
        review.decided_by = decided_by
        review.decided_at = now
    elif record.process_state is not ProcessState.AWAITING_REVIEW:
        return None
    if record.process_state is ProcessState.AWAITING_REVIEW:
        record.process_state = ProcessState.PROCESSING
        record.complete_by = now + timedelta(seconds=claim_timeout_s)
    return record


def finish_order(
    record: StateRecord,
    definition: WorkflowDefinition,
    *,
    target: ProcessState,
    completed: StepResult | None,
    error: StepError | None,
    owed: PendingReply,
    now: datetime,
) -> StateRecord | None:
    """``Processed`` or ``Error`` (``target``) with the last completion or the failed step recorded and
    the client's reply owed in the same write (an outbox entry: :mod:`orderflow.replies`); None when it
    is already so, the order is not ``Processing``, or a stop was asked for (the orchestration then
    compensates)."""
    if record.process_state is target:
        return None
    if record.process_state is not ProcessState.PROCESSING or record.cancel_requested_at is not None:
        return None
    if completed is not None:
        record_completion(record, definition, completed, now)
    if error is not None:
        record_error(record, error, now, fail_step=True)
    record.process_state = target
    record.complete_by = None
    record.end_attempt(now, target.value)
    record.pending_reply = owed
    return record


def record_step_failure(
    record: StateRecord,
    error: StepError,
    *,
    at: datetime,
    held: Callable[[StateRecord], tuple[str, datetime]] | None,
    breakers: Breakers,
) -> StateRecord | None:
    """A retryable failure recorded at ``at``: ``lastError`` (``compensationError`` for an undo, which
    spends no budget), the calls made spent, and ``completeBy`` = ``at`` so the supervisor's next sweep
    recovers the order. ``held`` (the dependency the failed step needs and when its breaker lets a probe
    through) makes a forward step wait for the breaker instead (:func:`hold_for_dependency`). None when
    a re-run finds it recorded or the order is not live."""
    if record.process_state is ProcessState.COMPENSATING:
        recorded = record.compensation_error
        if recorded is not None and recorded.at == at and record.complete_by == at:
            return None
        record.compensation_error = LastError(
            kind=error.kind, message=error.message, step=error.step, code=error.code, at=at
        )
        record.complete_by = at
        return record
    if record.process_state is not ProcessState.PROCESSING:
        return None
    if record.last_error is not None and record.last_error.at == at and record.complete_by == at:
        return None
    record_error(record, error, at, fail_step=False)
    record.settle_reservation(error.step, error.calls)
    record.complete_by = at
    if held is not None:
        # The agent found the dependency's breaker open: wait for it, not for the supervisor.
        dependency, retry_at = held(record)
        hold_for_dependency(
            record, step=error.step, dependency=dependency, retry_at=retry_at, now=at, breakers=breakers
        )
    return record
