"""The compensation path: undo the completed steps, stage by stage, each stage's undos in parallel."""

from __future__ import annotations

from collections.abc import Generator
from datetime import datetime
from typing import Any

from orchestrators.context import WorkflowGenerator, WorkflowTask
from orchestrators.workflow.attempt import Attempt, Ended, step_error
from orchestrators.workflow.responses import await_responses
from orderflow import custom_status
from orderflow.contracts import (
    BEGIN_COMPENSATION_ACTIVITY,
    FINISH_COMPENSATION_ACTIVITY,
    START_UNDO_ACTIVITY,
    BeginCompensationInput,
    StartUndoInput,
    StepError,
    StepResult,
    UndoResult,
    undo_step_name,
)
from orderflow.errors import ErrorKind
from orderflow.messages import AgentOutcome
from orderflow.results import CompensationFinished, Fenced, PastPointOfNoReturn, UndoStarted, WriteFailed


def compensate(
    run: Attempt, *, error: StepError | None = None, completed: StepResult | None = None
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
            return Ended("Error").summary()
        case Fenced(reason=reason) | WriteFailed(reason=reason):
            run.log.note("compensation.fenced", None, reason)
            return Ended("fenced").summary()

    undone: tuple[UndoResult, ...] = ()
    for stage in begun.undo_stages:
        stage_done = yield from _undo_stage(run, stage, undone)
        if isinstance(stage_done, Ended):
            return stage_done.summary()
        undone = stage_done

    finished = yield from run.call(FINISH_COMPENSATION_ACTIVITY, run.finish_compensation_input(undone))
    if not isinstance(finished, CompensationFinished):
        return Ended("fenced").summary()
    run.log.note("order.compensated", None, None)
    return Ended("Compensated").summary()


def _undo_stage(
    run: Attempt, stage: tuple[str, ...], undone: tuple[UndoResult, ...]
) -> Generator[WorkflowTask, Any, tuple[UndoResult, ...] | Ended]:
    """Undo the steps of one stage in parallel; ``undone`` is the previous stage's results, recorded by
    this stage's first start.

    Returns:
        The stage's undo results, or :class:`Ended` when the attempt ends here.
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
            return Ended("fenced", undo_step_name(step))
        deadline = started.complete_by if deadline is None else max(deadline, started.complete_by)
    assert deadline is not None  # a stage is never empty
    answers = yield from await_responses(run.ctx, names, run.instance_id, deadline)
    if answers is None:
        run.log.note("undo.timeout", label, deadline.isoformat())
        return Ended("timeout", label)
    # In the stage's order, not the order the answers came in: what is recorded does not depend on which
    # answer arrived first.
    ordered = [(name, answers[name]) for name in names]
    results = [
        UndoResult(step=name.removesuffix(":undo"), result=answer.result, calls=answer.calls)
        for name, answer in ordered
        if answer.outcome is AgentOutcome.SUCCEEDED
    ]
    failures = [
        step_error(name, answer) for name, answer in ordered if answer.outcome is not AgentOutcome.SUCCEEDED
    ]
    refused = [f for f in failures if f.kind == ErrorKind.PERMANENT.value]
    if refused:
        finish = run.finish_compensation_input(
            tuple(results), failed=refused[0], also_failed=tuple(refused[1:])
        )
        yield from run.call(FINISH_COMPENSATION_ACTIVITY, finish)
        run.log.note("order.compensation_failed", refused[0].step, refused[0].code)
        return Ended("CompensationFailed", refused[0].step)
    if failures:
        # Retryable: the supervisor resumes the stage; undos already answered are asked again under
        # their undo keys, which replay their stored result.
        yield from run.record_failure(failures[0])
        run.log.note("undo.retryable", failures[0].step, failures[0].code)
        return Ended("retryable", failures[0].step)
    return tuple(results)
