"""The waits for a person: a reviewer's decision before a step, an operator's correction after a refusal."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from orchestrators.context import WorkflowTask
from orchestrators.workflow.attempt import Attempt, Compensate, Ended
from orderflow import custom_status
from orderflow.contracts import (
    FINISH_ORDER_ACTIVITY,
    RECORD_REVIEW_ACTIVITY,
    REVIEW_EVENT,
    FinishOrderInput,
    Outcome,
    RecordReviewInput,
    StepError,
    StepResult,
)
from orderflow.records import ReviewDecision
from orderflow.results import AwaitingReview, OrderFinished, RecordReviewResult, Stopped, WriteFailed


def await_correction(
    run: Attempt, error: StepError, previous: StepResult | None
) -> Generator[WorkflowTask, Any, Ended | Compensate]:
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
        return Compensate(error)
    return Ended("Error" if isinstance(finished, OrderFinished) else "fenced", error.step)


def review(
    run: Attempt, step: str, awaiting: AwaitingReview
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
