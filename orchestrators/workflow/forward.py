"""The forward path: run one step to its end, on its provider and then its fallback provider."""

from __future__ import annotations

from collections.abc import Generator
from datetime import datetime
from typing import Any, TypeAlias, assert_never

from orchestrators.context import WorkflowTask
from orchestrators.workflow.attempt import Attempt, Compensate, Ended, step_error
from orchestrators.workflow.responses import await_response
from orchestrators.workflow.review import await_correction, review
from orderflow import custom_status
from orderflow.compensation_trigger import awaits_correction
from orderflow.contracts import (
    START_STEP_ACTIVITY,
    StartStepInput,
    StepResult,
    fallback_step_name,
    reacquire_step_name,
)
from orderflow.errors import ErrorKind, IllegalTransition
from orderflow.messages import AgentOutcome
from orderflow.records import ReviewDecision
from orderflow.results import (
    AwaitingDependency,
    AwaitingReview,
    BudgetExhausted,
    Fenced,
    HoldExpired,
    ReacquiringHold,
    ReviewRecorded,
    ReviewRejected,
    StepStarted,
    Stopped,
    WriteFailed,
)
from orderflow.workflows import StepDefinition

StartSettled: TypeAlias = (
    StepStarted
    | AwaitingDependency
    | ReviewRejected
    | BudgetExhausted
    | Stopped
    | Fenced
    | ReviewRecorded
    | WriteFailed
    | HoldExpired
)
"""How a step's start settles, once no hold is being re-acquired: what the attempt goes on from."""


def run_step(
    run: Attempt, step: StepDefinition, previous: StepResult | None
) -> Generator[WorkflowTask, Any, StepResult | Compensate | Ended]:
    """Run ``step`` to its end in this attempt: on its provider, then on its fallback provider if the
    provider refuses it and the step has one.

    Returns:
        The step's result when it succeeded; :class:`Compensate` when what happened triggers
        compensation (:func:`orderflow.compensation_trigger.compensation_cause`); :class:`Ended` when
        the attempt ends here (fenced, timed out, or handed to the supervisor).
    """
    timeout_s = step.timeout_s or run.start.step_timeout_s
    fallback = False
    run.step = step.name
    while True:
        # The fallback provider answers as its own pseudo-step ``{step}:fallback``.
        request_step = fallback_step_name(step.name) if fallback else step.name
        started = yield from _start_with_holds(
            run, step.name, request_step, timeout_s, previous, fallback=fallback
        )
        if isinstance(started, StepStarted) and started.fallback and not fallback:
            # An earlier attempt moved the step to its fallback provider, where the record keeps it:
            # the request went there, and the answer comes from there. Only ever towards the fallback:
            # a start recorded before the field existed reads as false, and must replay as it ran.
            run.log.note("step.fallback", step.name, "kept")
            fallback = True
            request_step = fallback_step_name(step.name)
        deadline = started if isinstance(started, Compensate | Ended) else _deadline(run, step.name, started)
        if not isinstance(deadline, datetime):
            return deadline

        response = yield from await_response(run.ctx, request_step, run.instance_id, deadline)
        if response is None:
            # §3.4: the timer won. End without writing; the supervisor owns what happens next.
            run.log.note("step.timeout", step.name, deadline.isoformat())
            return Ended("timeout", step.name)
        if response.outcome is AgentOutcome.SUCCEEDED:
            return StepResult(step=step.name, result=response.result, calls=response.calls)

        error = step_error(step.name, response)
        fallback_left = step.fallback_agent is not None and not fallback
        correctable = bool(step.correctable)
        compensate = run.compensate_for(
            step.name, error, fallback_left=fallback_left, correctable=correctable
        )
        if compensate is not None:
            return compensate
        if awaits_correction(error, correctable=correctable, fallback_left=fallback_left):
            return (yield from await_correction(run, error, previous))
        if error.kind == ErrorKind.PERMANENT.value:
            # The provider refused: an alternative provider is tried before any compensation.
            run.log.note("step.fallback", step.name, error.code)
            fallback = True
            continue
        # Transient faults outlasted the agent's retries within the deadline, or its calls ran out:
        # hand the order to the supervisor now rather than at the old deadline.
        yield from run.record_failure(error)
        run.log.note("step.retryable", step.name, error.code)
        return Ended("retryable", step.name)


def _deadline(
    run: Attempt,
    step: str,
    started: StartSettled,
) -> datetime | Compensate | Ended:
    """Where the step's timer fires once it started, or how the attempt goes on when it did not."""
    match started:
        case StepStarted(complete_by=complete_by):
            # The timer fires at the completeBy the activity wrote (its clock, when the step really
            # started), not at the time the activity was scheduled.
            return complete_by
        case Fenced(reason=reason) | WriteFailed(reason=reason):
            run.log.note("step.fenced", step, reason)
            return Ended("fenced", step)
        case AwaitingDependency(dependency=dependency):
            # The record went back to Pending (or on to Compensating) in the activity's own write.
            run.log.note("step.awaiting_dependency", step, dependency)
            return Ended("awaiting_dependency", step)
        case ReviewRejected() | ReviewRecorded() | Stopped() | BudgetExhausted() | HoldExpired():
            stopped = run.compensate_for(step, started)
            if stopped is None:  # a bug, not a protocol outcome: fail the orchestration loudly
                raise IllegalTransition(f"{type(started).__name__} at {step} triggers nothing")
            return stopped
        case _:
            assert_never(started)


def _start_with_holds(
    run: Attempt,
    step: str,
    request_step: str,
    timeout_s: float,
    previous: StepResult | None,
    *,
    fallback: bool,
) -> Generator[WorkflowTask, Any, StartSettled | Compensate | Ended]:
    """Start ``step`` (:func:`_start_step`); while a hold would lapse before it could finish, wait for
    the hold's re-acquisition the start sent, and start again with its answer."""
    reacquired: StepResult | None = None
    while True:
        started = yield from _start_step(
            run, step, request_step, timeout_s, previous, fallback=fallback, reacquired=reacquired
        )
        if not isinstance(started, ReacquiringHold):
            return started
        renewed = yield from _await_reacquired(run, started.step, started.complete_by)
        if not isinstance(renewed, StepResult):
            return renewed
        reacquired = renewed


def _await_reacquired(
    run: Attempt, held: str, complete_by: datetime
) -> Generator[WorkflowTask, Any, StepResult | Compensate | Ended]:
    """Wait for the answer of ``held``'s hold re-acquisition.

    Returns:
        The new hold as ``held``'s result; :class:`Compensate` when the service refused it (the order
        cannot keep what it holds); :class:`Ended` on a timeout or a retryable failure (the supervisor
        recovers the order, and the next attempt finds the hold lapsed).
    """
    response = yield from await_response(run.ctx, reacquire_step_name(held), run.instance_id, complete_by)
    if response is None:
        run.log.note("hold.reacquire_timeout", held, complete_by.isoformat())
        return Ended("timeout", held)
    if response.outcome is AgentOutcome.SUCCEEDED:
        run.log.note("hold.reacquired", held, None)
        return StepResult(step=held, result=response.result, calls=response.calls)
    error = step_error(held, response)
    compensate = run.compensate_for(held, error)
    if compensate is not None:
        return compensate
    yield from run.record_failure(error)
    return Ended("retryable", held)


def _start_step(
    run: Attempt,
    step: str,
    request_step: str,
    timeout_s: float,
    previous: StepResult | None,
    *,
    fallback: bool,
    reacquired: StepResult | None = None,
) -> Generator[WorkflowTask, Any, StartSettled | ReacquiringHold]:
    """Start ``step`` through :data:`START_STEP`; while the order awaits a person's review before it,
    wait for the decision and, once approved, start again. A step the claim started (and whose request
    the starter sent) is not started again: :meth:`Attempt.started_by_claim`.

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
        reacquired=reacquired,
    )
    run.ctx.set_custom_status(custom_status.waiting(request_step))
    started = yield from run.call(START_STEP_ACTIVITY, start_input)
    while isinstance(started, AwaitingReview):
        decided = yield from review(run, step, started)
        if not isinstance(decided, ReviewRecorded):
            run.log.note("review.fenced", step, decided.reason)
            return Fenced(reason=decided.reason)
        if decided.decision != ReviewDecision.APPROVE.value:
            return decided
        run.ctx.set_custom_status(custom_status.waiting(step))
        started = yield from run.call(START_STEP_ACTIVITY, start_input)
    return started
