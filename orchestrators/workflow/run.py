"""The workflow's entry point: one attempt of an order, its forward steps then, if they stop, the undo."""

from __future__ import annotations

from typing import Any

from orchestrators.context import WorkflowContext, WorkflowGenerator
from orchestrators.workflow.attempt import Attempt, Compensate, Ended
from orchestrators.workflow.compensation import compensate
from orchestrators.workflow.forward import run_step
from orderflow.compensation_trigger import compensation_cause
from orderflow.contracts import FINISH_ORDER_ACTIVITY, OrchestrationInput, Outcome, StepError, StepResult
from orderflow.errors import WORKFLOW_ERROR, ErrorKind
from orderflow.results import OrderFinished, Stopped
from orderflow.workflows import workflow_for


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
    run = Attempt(ctx, start, workflow_for(start.workflow_version))
    try:
        return (yield from _run_attempt(run))
    except Exception as failure:
        # The workflow itself failed (a poison input, a bug of this version): recorded as the step's
        # failure so that the supervisor recovers the order now, and its poison guard sees the same
        # failure again on the next attempt (docs/operations.md#the-poison-guard). Deterministic: a
        # replay fails at the same point and schedules the same write.
        yield from run.record_failure(_workflow_error(run, failure))
        raise


def _workflow_error(run: Attempt, failure: Exception) -> StepError:
    """The error recorded for a failure of the workflow itself, at the step it was running."""
    return StepError(
        step=run.step or run.definition.steps[0].name,
        kind=ErrorKind.WORKFLOW.value,
        code=WORKFLOW_ERROR,
        message=f"{type(failure).__name__}: {failure}"[:500],
        calls=0,
    )


def _run_attempt(run: Attempt) -> WorkflowGenerator:
    """:func:`order_workflow`'s body: the attempt's steps, or the undo it resumes."""
    start = run.start
    if start.compensate:
        # The record is Compensating: this attempt resumes the undo where the last one stopped.
        return (yield from compensate(run))
    previous: StepResult | None = None
    for step in run.definition.steps:
        if step.name in start.completed_steps:
            continue
        done = yield from run_step(run, step, previous)
        if isinstance(done, Ended):
            return done.summary()
        if isinstance(done, Compensate):
            return (yield from compensate(run, error=done.cause, completed=previous))
        previous = done

    finished = yield from run.call(FINISH_ORDER_ACTIVITY, run.finish_input(Outcome.PROCESSED, previous))
    match finished:
        case Stopped():
            # Cancelled while the last (reversible) step ran: it is undone with the others.
            last = run.definition.steps[-1].name
            run.log.note("order.cancel", None, None)
            return (yield from compensate(run, error=compensation_cause(last, finished), completed=previous))
        case OrderFinished():
            run.log.note("order.processed", None, None)
            return Ended("Processed").summary()
    return Ended("fenced").summary()
