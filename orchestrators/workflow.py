"""The order workflow body: one generator that runs any :class:`WorkflowDefinition`.

For each step not yet completed it starts the step through a fenced activity (which writes the step's
``completeBy`` and sends the agent request), then races a durable timer at that ``completeBy`` against the
agent's response event (Scheduler–Agent–Supervisor). The protocol rules it upholds (docs/design.md §3):

- every state write is an activity fenced on ``lockedBy``; a fenced-out write ends the instance;
- when the timer wins, the instance ends *without writing*: the record stays ``Processing`` with an
  expired ``completeBy`` and the supervisor recovers it, exactly as after a crash;
- the losing timer is cancelled so the instance completes at once;
- a response whose request id is not the one awaited cannot advance the step: the attempt waits for
  its deadline and is recovered like any timed-out attempt.
"""

from __future__ import annotations

import logging
from collections.abc import Generator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar, assert_never

from orchestrators.context import (
    ActivityFailed,
    ActivityRetry,
    WorkflowContext,
    WorkflowGenerator,
    WorkflowTask,
)
from orderflow import custom_status
from orderflow.compensation_trigger import CANCELLED_KIND, Seen, awaits_correction, compensation_cause
from orderflow.contracts import (
    BEGIN_COMPENSATION_ACTIVITY,
    FINISH_COMPENSATION_ACTIVITY,
    FINISH_ORDER_ACTIVITY,
    RECORD_REVIEW_ACTIVITY,
    RECORD_STEP_FAILURE_ACTIVITY,
    REVIEW_EVENT,
    START_STEP_ACTIVITY,
    START_UNDO_ACTIVITY,
    ActivityContract,
    BeginCompensationInput,
    ContractModel,
    FinishCompensationInput,
    FinishOrderInput,
    OrchestrationInput,
    Outcome,
    RecordReviewInput,
    RecordStepFailureInput,
    StartStepInput,
    StartUndoInput,
    StepError,
    StepResult,
    UndoResult,
    fallback_step_name,
    undo_step_name,
)
from orderflow.errors import WORKFLOW_ERROR, ErrorKind, IllegalTransition
from orderflow.messages import AgentOutcome, AgentResponse, request_id_for, step_event_name
from orderflow.records import ReviewDecision, instance_id_for
from orderflow.results import (
    AwaitingDependency,
    AwaitingReview,
    BudgetExhausted,
    CompensationFinished,
    Fenced,
    OrderFinished,
    PastPointOfNoReturn,
    RecordReviewResult,
    ReviewRecorded,
    ReviewRejected,
    StepStarted,
    Stopped,
    UndoStarted,
    WriteFailed,
)
from orderflow.workflows import StepDefinition, WorkflowDefinition, workflow_for

ResultT = TypeVar("ResultT")

logger = logging.getLogger(__name__)

ORDER_WORKFLOW = "order_workflow"
"""Registered name of the order orchestrator."""

STATE_WRITE_RETRY = ActivityRetry(first_interval_s=1.0, max_attempts=4, backoff=2.0, max_interval_s=4.0)
"""Retries of a state write that raised (store unavailable). Small: past them the record simply stays
``Processing`` and the supervisor recovers it, which is the slow path, not a loss."""


def order_workflow(ctx: WorkflowContext, payload: dict[str, Any]) -> WorkflowGenerator:
    """Run one attempt of an order.

    Args:
        ctx: The runtime adapter.
        payload: An :class:`OrchestrationInput` as JSON.

    Returns:
        A small summary ``{"outcome": ..., "step": ...}``: ``Processed``, ``Compensated``,
        ``CompensationFailed``, ``Error``, ``timeout``, ``retryable``, ``awaiting_dependency`` or
        ``fenced``. The state store, not this value, is the truth.
    """
    start = OrchestrationInput.model_validate(payload)
    run = _Attempt(ctx, start, workflow_for(start.workflow_version))
    try:
        return (yield from _run_attempt(run))
    except Exception as failure:
        # The workflow itself failed (a poison input, a bug of this version): recorded as the step's
        # failure so that the supervisor recovers the order now, and its poison guard sees the same
        # failure again on the next attempt (docs/operations.md#the-poison-guard). Deterministic: a
        # replay fails at the same point and schedules the same write.
        yield from run.record_failure(_workflow_error(run, failure))
        raise


def _workflow_error(run: _Attempt, failure: Exception) -> StepError:
    """The error recorded for a failure of the workflow itself, at the step it was running."""
    return StepError(
        step=run.step or run.definition.steps[0].name,
        kind=ErrorKind.WORKFLOW.value,
        code=WORKFLOW_ERROR,
        message=f"{type(failure).__name__}: {failure}"[:500],
        calls=0,
    )


def _run_attempt(run: _Attempt) -> WorkflowGenerator:
    """:func:`order_workflow`'s body: the attempt's steps, or the undo it resumes."""
    start = run.start
    if start.compensate:
        # The record is Compensating: this attempt resumes the undo where the last one stopped.
        return (yield from _compensate(run))
    previous: StepResult | None = None
    for step in run.definition.steps:
        if step.name in start.completed_steps:
            continue
        done = yield from _run_step(run, step, previous)
        if isinstance(done, _Ended):
            return done.summary()
        if isinstance(done, _Compensate):
            return (yield from _compensate(run, error=done.cause, completed=previous))
        previous = done

    finished = yield from run.call(FINISH_ORDER_ACTIVITY, run.finish_input(Outcome.PROCESSED, previous))
    match finished:
        case Stopped():
            # Cancelled while the last (reversible) step ran: it is undone with the others.
            last = run.definition.steps[-1].name
            run.log.note("order.cancel", None, None)
            return (yield from _compensate(run, error=compensation_cause(last, finished), completed=previous))
        case OrderFinished():
            run.log.note("order.processed", None, None)
            return _Ended("Processed").summary()
    return _Ended("fenced").summary()


def _run_step(
    run: _Attempt, step: StepDefinition, previous: StepResult | None
) -> Generator[WorkflowTask, Any, StepResult | _Compensate | _Ended]:
    """Run ``step`` to its end in this attempt: on its provider, then on its fallback provider if the
    provider refuses it and the step has one.

    Returns:
        The step's result when it succeeded; :class:`_Compensate` when what happened triggers
        compensation (:func:`orderflow.compensation_trigger.compensation_cause`); :class:`_Ended` when
        the attempt ends here (fenced, timed out, or handed to the supervisor).
    """
    timeout_s = step.timeout_s or run.start.step_timeout_s
    fallback = False
    run.step = step.name
    while True:
        # The fallback provider answers as its own pseudo-step ``{step}:fallback``.
        request_step = fallback_step_name(step.name) if fallback else step.name
        started = yield from _start_step(run, step.name, request_step, timeout_s, previous, fallback=fallback)
        match started:
            case StepStarted(complete_by=complete_by):
                # The timer fires at the completeBy the activity wrote (its clock, when the step really
                # started), not at the time the activity was scheduled.
                deadline = complete_by
            case Fenced(reason=reason) | WriteFailed(reason=reason):
                run.log.note("step.fenced", step.name, reason)
                return _Ended("fenced", step.name)
            case AwaitingDependency(dependency=dependency):
                # The record went back to Pending (or on to Compensating) in the activity's own write.
                run.log.note("step.awaiting_dependency", step.name, dependency)
                return _Ended("awaiting_dependency", step.name)
            case ReviewRejected() | ReviewRecorded() | Stopped() | BudgetExhausted():
                stopped = run.compensate_for(step.name, started)
                if stopped is None:  # a bug, not a protocol outcome: fail the orchestration loudly
                    raise IllegalTransition(f"{type(started).__name__} at {step.name} triggers nothing")
                return stopped
            case _:
                assert_never(started)

        response = yield from _await_response(run.ctx, request_step, run.instance_id, deadline)
        if response is None:
            # §3.4: the timer won. End without writing; the supervisor owns what happens next.
            run.log.note("step.timeout", step.name, deadline.isoformat())
            return _Ended("timeout", step.name)
        if response.outcome is AgentOutcome.SUCCEEDED:
            return StepResult(step=step.name, result=response.result, calls=response.calls)

        error = _step_error(step.name, response)
        fallback_left = step.fallback_agent is not None and not fallback
        correctable = bool(step.correctable)
        compensate = run.compensate_for(
            step.name, error, fallback_left=fallback_left, correctable=correctable
        )
        if compensate is not None:
            return compensate
        if awaits_correction(error, correctable=correctable, fallback_left=fallback_left):
            return (yield from _await_correction(run, error, previous))
        if error.kind == ErrorKind.PERMANENT.value:
            # The provider refused: an alternative provider is tried before any compensation.
            run.log.note("step.fallback", step.name, error.code)
            fallback = True
            continue
        # Transient faults outlasted the agent's retries within the deadline, or its calls ran out:
        # hand the order to the supervisor now rather than at the old deadline.
        yield from run.record_failure(error)
        run.log.note("step.retryable", step.name, error.code)
        return _Ended("retryable", step.name)


def _await_correction(
    run: _Attempt, error: StepError, previous: StepResult | None
) -> Generator[WorkflowTask, Any, _Ended | _Compensate]:
    """Finish the order in ``Error`` at the refused step, whose input an operator may correct
    (:func:`orderflow.compensation_trigger.awaits_correction`): the client is told ``Failed``, an
    operator resubmits it with corrected input or compensates it. An order asked to stop meanwhile (a
    client's cancel, an operator's compensate) is compensated instead, the refusal its cause: the refused
    step applied nothing, so no point of no return was passed."""
    run.log.note("step.awaits_correction", error.step, error.code)
    finish = FinishOrderInput(
        order_id=run.start.order_id,
        instance_id=run.instance_id,
        workflow_version=run.start.workflow_version,
        outcome=Outcome.ERROR,
        completed=previous,
        error=error,
    )
    finished = yield from run.call(FINISH_ORDER_ACTIVITY, finish)
    if isinstance(finished, Stopped):
        return _Compensate(error)
    return _Ended("Error" if isinstance(finished, OrderFinished) else "fenced", error.step)


def _start_step(
    run: _Attempt,
    step: str,
    request_step: str,
    timeout_s: float,
    previous: StepResult | None,
    *,
    fallback: bool,
) -> Generator[
    WorkflowTask,
    Any,
    StepStarted
    | AwaitingDependency
    | ReviewRejected
    | BudgetExhausted
    | Stopped
    | Fenced
    | ReviewRecorded
    | WriteFailed,
]:
    """Start ``step`` through :data:`START_STEP`; while the order awaits a person's review before it,
    wait for the decision and, once approved, start again. A step the claim started (and whose request
    the starter sent) is not started again: :meth:`_Attempt.started_by_claim`.

    Returns:
        The last start's result, or :data:`RECORD_REVIEW`'s when the decision did not approve the step
        (rejected, or the record was fenced meanwhile).
    """
    claimed = None if fallback else run.started_by_claim(step)
    if claimed is not None:
        return claimed
    start_input = StartStepInput(
        order_id=run.start.order_id,
        instance_id=run.instance_id,
        workflow_version=run.definition.version,
        step=step,
        timeout_s=timeout_s,
        completed=previous,
        response_queue=run.start.response_queue,
        fallback=fallback,
    )
    run.ctx.set_custom_status(custom_status.waiting(request_step))
    started = yield from run.call(START_STEP_ACTIVITY, start_input)
    while isinstance(started, AwaitingReview):
        decided = yield from _review(run, step, started)
        if not isinstance(decided, ReviewRecorded):
            run.log.note("review.fenced", step, decided.reason)
            return Fenced(reason=decided.reason)
        if decided.decision != ReviewDecision.APPROVE.value:
            return decided
        run.ctx.set_custom_status(custom_status.waiting(step))
        started = yield from run.call(START_STEP_ACTIVITY, start_input)
    return started


def _review(
    run: _Attempt, step: str, awaiting: AwaitingReview
) -> Generator[WorkflowTask, Any, RecordReviewResult | WriteFailed]:
    """Wait for the ``ReviewDecision`` external event until the review deadline, then record the
    decision: the reviewer's, or the configured default when the durable timer fires first.

    Returns:
        :data:`RECORD_REVIEW`'s result: the decision in force (the first recorded wins).
    """
    ctx = run.ctx
    ctx.set_custom_status(custom_status.awaiting_review(step))
    timer = ctx.create_timer(awaiting.complete_by or ctx.current_utc_datetime)
    event = ctx.wait_for_external_event(REVIEW_EVENT)
    winner = yield ctx.when_any([event, timer])
    decision: str = awaiting.review_default
    decided_by = "deadline"
    if winner is not timer:
        ctx.cancel_timer(timer)
        raw = ctx.task_result(event)
        if isinstance(raw, dict) and raw.get("decision") in {d.value for d in ReviewDecision}:
            decision, decided_by = str(raw["decision"]), str(raw.get("reviewer") or "reviewer")[:100]
    run.log.note("review.decision", step, f"{decision} by {decided_by}")
    decided = RecordReviewInput(
        order_id=run.start.order_id,
        instance_id=run.instance_id,
        step=step,
        decision=decision,
        decided_by=decided_by,
    )
    return (yield from run.call(RECORD_REVIEW_ACTIVITY, decided))


def _compensate(
    run: _Attempt, *, error: StepError | None = None, completed: StepResult | None = None
) -> WorkflowGenerator:
    """Undo the order's completed steps (docs/design.md §4), stage by stage as the begin write returns.

    The undos of a stage run in parallel: each is started by a fenced write, then one durable timer at
    the latest of their deadlines races all of their answers, as a forward step's timer races its one.
    A timeout ends the instance without writing and a retryable failure hands the record to the
    supervisor: either way the record stays ``Compensating`` and the next attempt resumes from the first
    entry not yet undone. A permanent undo failure ends the compensation ``CompensationFailed``.
    """
    run.ctx.set_custom_status(custom_status.COMPENSATING)
    begin = BeginCompensationInput(
        order_id=run.start.order_id,
        instance_id=run.instance_id,
        workflow_version=run.definition.version,
        timeout_s=run.start.step_timeout_s,
        error=error,
        completed=completed,
    )
    begun = yield from run.call(BEGIN_COMPENSATION_ACTIVITY, begin)
    match begun:
        case PastPointOfNoReturn():
            # A point of no return was passed: an operator completes the order.
            run.log.note("order.error", None, "past_point_of_no_return")
            return _Ended("Error").summary()
        case Fenced(reason=reason) | WriteFailed(reason=reason):
            run.log.note("compensation.fenced", None, reason)
            return _Ended("fenced").summary()

    undone: tuple[UndoResult, ...] = ()
    for stage in begun.undo_stages:
        stage_done = yield from _undo_stage(run, stage, undone)
        if isinstance(stage_done, _Ended):
            return stage_done.summary()
        undone = stage_done

    finished = yield from run.call(FINISH_COMPENSATION_ACTIVITY, run.finish_compensation_input(undone))
    if not isinstance(finished, CompensationFinished):
        return _Ended("fenced").summary()
    run.log.note("order.compensated", None, None)
    return _Ended("Compensated").summary()


def _undo_stage(
    run: _Attempt, stage: tuple[str, ...], undone: tuple[UndoResult, ...]
) -> Generator[WorkflowTask, Any, tuple[UndoResult, ...] | _Ended]:
    """Undo the steps of one stage in parallel; ``undone`` is the previous stage's results, recorded by
    this stage's first start.

    Returns:
        The stage's undo results, or :class:`_Ended` when the attempt ends here.
    """
    names = tuple(undo_step_name(step) for step in stage)
    label = ",".join(names)
    # Set before any request exists, so the listener delivers every answer of the stage.
    run.ctx.set_custom_status(custom_status.waiting(*names))
    deadline: datetime | None = None
    for index, step in enumerate(stage):
        start = StartUndoInput(
            order_id=run.start.order_id,
            instance_id=run.instance_id,
            workflow_version=run.definition.version,
            step=step,
            timeout_s=run.start.step_timeout_s,
            undone=undone if index == 0 else (),  # the previous stage, recorded once
            response_queue=run.start.response_queue,
        )
        started = yield from run.call(START_UNDO_ACTIVITY, start)
        if not isinstance(started, UndoStarted):
            run.log.note("undo.fenced", step, started.reason)
            return _Ended("fenced", undo_step_name(step))
        deadline = started.complete_by if deadline is None else max(deadline, started.complete_by)
    assert deadline is not None  # a stage is never empty
    answers = yield from _await_responses(run.ctx, names, run.instance_id, deadline)
    if answers is None:
        run.log.note("undo.timeout", label, deadline.isoformat())
        return _Ended("timeout", label)
    # In the stage's order, not the order the answers came in: what is recorded does not depend on which
    # answer arrived first.
    ordered = [(name, answers[name]) for name in names]
    results = [
        UndoResult(step=name.removesuffix(":undo"), result=answer.result, calls=answer.calls)
        for name, answer in ordered
        if answer.outcome is AgentOutcome.SUCCEEDED
    ]
    failures = [
        _step_error(name, answer) for name, answer in ordered if answer.outcome is not AgentOutcome.SUCCEEDED
    ]
    refused = [f for f in failures if f.kind == ErrorKind.PERMANENT.value]
    if refused:
        finish = run.finish_compensation_input(
            tuple(results), failed=refused[0], also_failed=tuple(refused[1:])
        )
        yield from run.call(FINISH_COMPENSATION_ACTIVITY, finish)
        run.log.note("order.compensation_failed", refused[0].step, refused[0].code)
        return _Ended("CompensationFailed", refused[0].step)
    if failures:
        # Retryable: the supervisor resumes the stage; undos already answered are asked again under
        # their undo keys, which replay their stored result.
        yield from run.record_failure(failures[0])
        run.log.note("undo.retryable", failures[0].step, failures[0].code)
        return _Ended("retryable", failures[0].step)
    return tuple(results)


def _step_error(step: str, response: AgentResponse) -> StepError:
    """A failed answer as the error recorded for ``step`` (short: it lives in history)."""
    return StepError(
        step=step,
        kind=response.error_kind or ErrorKind.TRANSIENT.value,
        code=response.error_code,
        message=(response.error_message or "agent reported a failure")[:500],
        calls=response.calls,
    )


@dataclass(frozen=True)
class _Ended:
    """The attempt ends here with this summary (the workflow's return value)."""

    outcome: str
    step: str | None = None

    def summary(self) -> dict[str, Any]:
        return {"outcome": self.outcome, "step": self.step}


@dataclass(frozen=True)
class _Compensate:
    """Forward progress stopped: undo what was done, recording ``cause``."""

    cause: StepError


class _Attempt:
    """One attempt's context: its input, definition and instance id, with the calls it makes."""

    def __init__(
        self, ctx: WorkflowContext, start: OrchestrationInput, definition: WorkflowDefinition
    ) -> None:
        self.ctx = ctx
        self.start = start
        self.definition = definition
        self.instance_id = instance_id_for(start.order_id, start.attempt)
        self.log = _ReplaySafeLog(ctx, start.order_id, self.instance_id)
        self.step: str | None = None
        """The forward step the attempt runs (None before the first, and in an undo)."""
        self._claimed = start.first_step

    def started_by_claim(self, step: str) -> StepStarted | None:
        """The start of ``step`` when the claim started it and the starter sent its request
        (:attr:`OrchestrationInput.first_step`), once: the attempt then only waits for the answer.
        The status says ``waiting`` as it does before the activity would run. An answer that came back
        before this first episode is held back by the listener until the status says so on Azure, and is
        buffered until the wait by durabletask locally (docs/design.md §7)."""
        claimed, self._claimed = self._claimed, None
        if claimed is None or claimed.step != step:
            return None
        self.ctx.set_custom_status(custom_status.waiting(step))
        return StepStarted(complete_by=claimed.complete_by)

    def call(
        self, activity: ActivityContract[Any, ResultT], data: ContractModel
    ) -> Generator[WorkflowTask, Any, ResultT | WriteFailed]:
        """Call a fenced-write activity; a write that still raises after its retries is
        :class:`WriteFailed`, which ends the attempt: the record keeps its ``completeBy`` and the
        supervisor recovers it."""
        try:
            raw = yield self.ctx.call_activity(activity.name, data.to_payload(), retry=STATE_WRITE_RETRY)
        except ActivityFailed as exc:
            return WriteFailed(reason=f"activity failed: {str(exc)[:200]}")
        return activity.read_result(raw)

    def compensate_for(
        self, step: str, seen: Seen, *, fallback_left: bool = False, correctable: bool = False
    ) -> _Compensate | None:
        """Compensation for what was seen at ``step`` (a refusal to go on, or the step's error), or None
        when it is no reason to compensate (:func:`compensation_cause`, applied once here)."""
        cause = compensation_cause(step, seen, fallback_left=fallback_left, correctable=correctable)
        if cause is None:
            return None
        if cause.kind == CANCELLED_KIND:
            # The client (or an operator) stopped the order: start nothing more, undo what was done.
            self.log.note("order.cancel", step, None)
        else:
            self.log.note("order.compensate", step, cause.code)
        return _Compensate(cause)

    def record_failure(self, error: StepError) -> Generator[WorkflowTask, Any, None]:
        """Hand the order to the supervisor now: :data:`RECORD_STEP_FAILURE` sets ``completeBy`` to now."""
        failure = RecordStepFailureInput(
            order_id=self.start.order_id,
            instance_id=self.instance_id,
            error=error,
            at=self.ctx.current_utc_datetime,
        )
        yield from self.call(RECORD_STEP_FAILURE_ACTIVITY, failure)

    def finish_input(self, outcome: Outcome, completed: StepResult | None) -> FinishOrderInput:
        """:data:`FINISH_ORDER`'s input for this attempt."""
        return FinishOrderInput(
            order_id=self.start.order_id,
            instance_id=self.instance_id,
            workflow_version=self.start.workflow_version,
            outcome=outcome,
            completed=completed,
        )

    def finish_compensation_input(
        self,
        undone: tuple[UndoResult, ...],
        *,
        failed: StepError | None = None,
        also_failed: tuple[StepError, ...] = (),
    ) -> FinishCompensationInput:
        """:data:`FINISH_COMPENSATION`'s input for this attempt."""
        return FinishCompensationInput(
            order_id=self.start.order_id,
            instance_id=self.instance_id,
            workflow_version=self.definition.version,
            undone=undone,
            failed=failed,
            also_failed=also_failed,
        )


def _await_response(
    ctx: WorkflowContext, step: str, instance_id: str, deadline: datetime
) -> Generator[WorkflowTask, Any, AgentResponse | None]:
    """Race the durable timer of ``step`` (a step, or its fallback's ``{step}:fallback``) against its
    response.

    Returns:
        The agent response, or None when the timer fired first.
    """
    expected = request_id_for(instance_id, step)
    timer = ctx.create_timer(deadline)
    event = ctx.wait_for_external_event(step_event_name(step))
    winner = yield ctx.when_any([event, timer])
    if winner is timer:
        return None
    response = _parse_response(ctx.task_result(event))
    if response is not None and response.request_id == expected:
        ctx.cancel_timer(timer)
        return response
    # Not the response awaited (the listener filters these, so it is a forged or corrupt event).
    # Waiting again on the same event name is unsafe: Durable Functions re-delivers a buffered
    # event to every later wait of that name. Let the deadline pass instead; the supervisor
    # recovers the attempt and the step's idempotency key makes the retry safe.
    yield timer
    return None


def _await_responses(
    ctx: WorkflowContext, steps: tuple[str, ...], instance_id: str, deadline: datetime
) -> Generator[WorkflowTask, Any, dict[str, AgentResponse] | None]:
    """Race one durable timer against the response events of ``steps`` (a stage of undos, in parallel).

    For a single step the actions are exactly those of :func:`_await_response`.

    Returns:
        Every step's response, or None when the timer fired first (or a response was not the one
        awaited: as for a forward step, the attempt then waits for its deadline).
    """
    timer = ctx.create_timer(deadline)
    waiting = {step: ctx.wait_for_external_event(step_event_name(step)) for step in steps}
    answers: dict[str, AgentResponse] = {}
    while waiting:
        winner = yield ctx.when_any([*waiting.values(), timer])
        if winner is timer:
            return None
        step = next(name for name, task in waiting.items() if task is winner)
        del waiting[step]
        response = _parse_response(ctx.task_result(winner))
        if response is None or response.request_id != request_id_for(instance_id, step):
            yield timer
            return None
        answers[step] = response
    ctx.cancel_timer(timer)
    return answers


def _parse_response(raw: Any) -> AgentResponse | None:
    try:
        return AgentResponse.model_validate(raw)
    except ValueError:
        return None


class _ReplaySafeLog:
    """Logs workflow events only when not replaying, with the correlation ids as fields."""

    def __init__(self, ctx: WorkflowContext, order_id: str, instance_id: str) -> None:
        self._ctx = ctx
        self._order_id = order_id
        self._instance_id = instance_id

    def note(self, event: str, step: str | None, detail: Any) -> None:
        if not self._ctx.is_replaying:
            logger.info(
                "%s order_id=%s instance_id=%s step=%s detail=%s",
                event,
                self._order_id,
                self._instance_id,
                step,
                detail,
            )
