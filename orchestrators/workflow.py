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
from datetime import datetime, timedelta
from typing import Any

from orchestrators.context import (
    ActivityFailed,
    ActivityRetry,
    WorkflowContext,
    WorkflowGenerator,
    WorkflowTask,
)
from orderflow import custom_status
from orderflow.contracts import (
    BEGIN_COMPENSATION,
    CANCELLED_BY_CLIENT,
    FINISH_COMPENSATION,
    FINISH_ORDER,
    RECORD_REVIEW,
    RECORD_STEP_FAILURE,
    REVIEW_EVENT,
    REVIEW_REJECTED,
    START_STEP,
    START_UNDO,
    BeginCompensationInput,
    FencedWriteResult,
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
from orderflow.errors import ErrorKind
from orderflow.messages import AgentOutcome, AgentResponse, request_id_for, step_event_name
from orderflow.records import ReviewDecision, instance_id_for
from orderflow.workflows import WorkflowDefinition, workflow_for

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
        ``CompensationFailed``, ``Error``, ``timeout``, ``retryable`` or ``fenced``. The state store, not
        this value, is the truth.
    """
    start = OrchestrationInput.model_validate(payload)
    definition = workflow_for(start.workflow_version)
    instance_id = instance_id_for(start.order_id, start.attempt)
    log = _ReplaySafeLog(ctx, start.order_id, instance_id)
    if start.compensate:
        # The record is Compensating: this attempt resumes the undo where the last one stopped.
        return (yield from _compensate(ctx, start, definition, log))
    previous: StepResult | None = None

    for step in definition.steps:
        if step.name in start.completed_steps:
            continue
        timeout_s = step.timeout_s or start.step_timeout_s
        fallback = False
        while True:  # the step's provider; then, if it refuses, its fallback provider
            scheduled_at = ctx.current_utc_datetime
            start_input = StartStepInput(
                order_id=start.order_id,
                instance_id=instance_id,
                workflow_version=definition.version,
                step=step.name,
                timeout_s=timeout_s,
                completed=previous,
                response_queue=start.response_queue,
                fallback=fallback,
            ).to_payload()
            # The fallback provider answers as its own pseudo-step ``{step}:fallback``.
            request_step = fallback_step_name(step.name) if fallback else step.name
            ctx.set_custom_status(custom_status.waiting(request_step))
            started = yield from _write(ctx, START_STEP, start_input)
            while started.review_required and started.review_decision is None:
                # The order awaits a person's decision before this step (AwaitingReview).
                decided = yield from _review(ctx, start, step.name, started, log)
                if not decided.applied:
                    log.note("review.fenced", step.name, decided.reason)
                    return {"outcome": "fenced", "step": step.name}
                if decided.review_decision != ReviewDecision.APPROVE.value:
                    started = decided
                    break
                scheduled_at = ctx.current_utc_datetime
                ctx.set_custom_status(custom_status.waiting(step.name))
                started = yield from _write(ctx, START_STEP, start_input)
            if started.review_decision == ReviewDecision.REJECT.value:
                rejection = StepError(
                    step=step.name,
                    kind="rejected",
                    code=REVIEW_REJECTED,
                    message="the review of this step was rejected",
                )
                log.note("order.compensate", step.name, REVIEW_REJECTED)
                return (
                    yield from _compensate(ctx, start, definition, log, error=rejection, completed=previous)
                )
            if started.cancelled:
                # The client cancelled: start nothing more, undo what was done; the order ends Cancelled.
                log.note("order.cancel", step.name, None)
                return (
                    yield from _compensate(
                        ctx,
                        start,
                        definition,
                        log,
                        error=_cancelled(step.name, started.reason),
                        completed=previous,
                    )
                )
            if started.budget_exhausted:
                # No calls left for this step: the order cannot go forward; undo what it did.
                spent = StepError(
                    step=step.name,
                    kind=ErrorKind.BUDGET.value,
                    code="retry_budget_exhausted",
                    message="the order's end-to-end retry budget is spent",
                )
                log.note("order.compensate", step.name, "retry_budget_exhausted")
                return (yield from _compensate(ctx, start, definition, log, error=spent, completed=previous))
            if not started.applied:
                log.note("step.fenced", step.name, started.reason)
                return {"outcome": "fenced", "step": step.name}
            # The timer fires at the completeBy the activity wrote (its clock, when the step really
            # started); a result of an earlier version carries none, so fall back to the scheduling time.
            deadline = started.complete_by or scheduled_at + timedelta(seconds=timeout_s)

            response = yield from _await_response(ctx, request_step, instance_id, deadline)
            if response is None:
                # §3.4: the timer won. End without writing; the supervisor owns what happens next.
                log.note("step.timeout", step.name, deadline.isoformat())
                return {"outcome": "timeout", "step": step.name}

            if response.outcome is AgentOutcome.SUCCEEDED:
                previous = StepResult(step=step.name, result=response.result, calls=response.calls)
                break

            error = StepError(
                step=step.name,
                kind=response.error_kind or ErrorKind.TRANSIENT.value,
                code=response.error_code,
                message=(response.error_message or "agent reported a failure")[:500],
                calls=response.calls,
            )
            if error.kind == ErrorKind.PERMANENT.value and step.fallback_agent and not fallback:
                # The provider refused: an alternative provider is tried before any compensation.
                log.note("step.fallback", step.name, error.code)
                fallback = True
                continue
            if error.kind == ErrorKind.PERMANENT.value:
                # No retry changes a refusal: undo what was done.
                log.note("order.compensate", step.name, error.code)
                return (yield from _compensate(ctx, start, definition, log, error=error, completed=previous))

            # Transient faults outlasted the agent's retries within the deadline, or the budget ran out:
            # hand the order to the supervisor now rather than at the old deadline.
            yield from _write(
                ctx,
                RECORD_STEP_FAILURE,
                RecordStepFailureInput(
                    order_id=start.order_id, instance_id=instance_id, error=error, at=ctx.current_utc_datetime
                ).to_payload(),
            )
            log.note("step.retryable", step.name, error.code)
            return {"outcome": "retryable", "step": step.name}

    finished = yield from _finish(ctx, start, Outcome.PROCESSED, completed=previous)
    if finished.cancelled:
        # Cancelled while the last (reversible) step ran: it is undone with the others.
        log.note("order.cancel", None, None)
        last = definition.steps[-1].name
        return (
            yield from _compensate(
                ctx, start, definition, log, error=_cancelled(last, finished.reason), completed=previous
            )
        )
    if not finished.applied:
        return {"outcome": "fenced", "step": None}
    log.note("order.processed", None, None)
    return {"outcome": "Processed", "step": None}


def _review(
    ctx: WorkflowContext,
    start: OrchestrationInput,
    step: str,
    started: FencedWriteResult,
    log: _ReplaySafeLog,
) -> Generator[WorkflowTask, Any, FencedWriteResult]:
    """Wait for the ``ReviewDecision`` external event until the review deadline, then record the
    decision: the reviewer's, or the configured default when the durable timer fires first.

    Returns:
        :data:`RECORD_REVIEW`'s result: the decision in force (the first recorded wins).
    """
    instance_id = instance_id_for(start.order_id, start.attempt)
    ctx.set_custom_status(custom_status.awaiting_review(step))
    deadline = started.complete_by or ctx.current_utc_datetime
    timer = ctx.create_timer(deadline)
    event = ctx.wait_for_external_event(REVIEW_EVENT)
    winner = yield ctx.when_any([event, timer])
    decision, decided_by = started.review_default or ReviewDecision.REJECT.value, "deadline"
    if winner is not timer:
        ctx.cancel_timer(timer)
        raw = ctx.task_result(event)
        if isinstance(raw, dict) and raw.get("decision") in {d.value for d in ReviewDecision}:
            decision, decided_by = str(raw["decision"]), str(raw.get("reviewer") or "reviewer")[:100]
    log.note("review.decision", step, f"{decision} by {decided_by}")
    return (
        yield from _write(
            ctx,
            RECORD_REVIEW,
            RecordReviewInput(
                order_id=start.order_id,
                instance_id=instance_id,
                step=step,
                decision=decision,
                decided_by=decided_by,
            ).to_payload(),
        )
    )


def _cancelled(step: str, code: str | None = None) -> StepError:
    """The cause a stopped order's compensation records: the client's cancel, or an operator's decision."""
    code = code or CANCELLED_BY_CLIENT
    message = (
        "the client cancelled the order" if code == CANCELLED_BY_CLIENT else "an operator stopped the order"
    )
    return StepError(step=step, kind="cancelled", code=code, message=message)


def _compensate(
    ctx: WorkflowContext,
    start: OrchestrationInput,
    definition: WorkflowDefinition,
    log: _ReplaySafeLog,
    *,
    error: StepError | None = None,
    completed: StepResult | None = None,
) -> WorkflowGenerator:
    """Undo the order's completed steps (docs/design.md §4), stage by stage as the begin write returns.

    The undos of a stage run in parallel: each is started by a fenced write, then one durable timer at
    the latest of their deadlines races all of their answers, as a forward step's timer races its one.
    A timeout ends the instance without writing and a retryable failure hands the record to the
    supervisor: either way the record stays ``Compensating`` and the next attempt resumes from the first
    entry not yet undone. A permanent undo failure ends the compensation ``CompensationFailed``.
    """
    instance_id = instance_id_for(start.order_id, start.attempt)
    ctx.set_custom_status(custom_status.COMPENSATING)
    begun = yield from _write(
        ctx,
        BEGIN_COMPENSATION,
        BeginCompensationInput(
            order_id=start.order_id,
            instance_id=instance_id,
            workflow_version=definition.version,
            timeout_s=start.step_timeout_s,
            error=error,
            completed=completed,
        ).to_payload(),
    )
    if not begun.applied:
        log.note("compensation.fenced", None, begun.reason)
        return {"outcome": "fenced", "step": None}
    if begun.process_state == "Error":
        # A point of no return was passed: an operator completes the order.
        log.note("order.error", None, "past_point_of_no_return")
        return {"outcome": "Error", "step": None}

    undone: tuple[UndoResult, ...] = ()
    for stage in begun.undo_stages:
        names = tuple(undo_step_name(step) for step in stage)
        label = ",".join(names)
        scheduled_at = ctx.current_utc_datetime
        # Set before any request exists, so the listener delivers every answer of the stage.
        ctx.set_custom_status(custom_status.waiting(*names))
        deadline: datetime | None = None
        for index, step in enumerate(stage):
            started = yield from _write(
                ctx,
                START_UNDO,
                StartUndoInput(
                    order_id=start.order_id,
                    instance_id=instance_id,
                    workflow_version=definition.version,
                    step=step,
                    timeout_s=start.step_timeout_s,
                    undone=undone if index == 0 else (),  # the previous stage, recorded once
                    response_queue=start.response_queue,
                ).to_payload(),
            )
            if not started.applied:
                log.note("undo.fenced", step, started.reason)
                return {"outcome": "fenced", "step": undo_step_name(step)}
            step_deadline = started.complete_by or scheduled_at + timedelta(seconds=start.step_timeout_s)
            deadline = step_deadline if deadline is None else max(deadline, step_deadline)
        assert deadline is not None  # a stage is never empty
        answers = yield from _await_responses(ctx, names, instance_id, deadline)
        if answers is None:
            log.note("undo.timeout", label, deadline.isoformat())
            return {"outcome": "timeout", "step": label}
        results: list[UndoResult] = []
        failures: list[StepError] = []
        for name in names:
            response = answers[name]
            if response.outcome is AgentOutcome.SUCCEEDED:
                results.append(
                    UndoResult(step=name.removesuffix(":undo"), result=response.result, calls=response.calls)
                )
                continue
            failures.append(
                StepError(
                    step=name,
                    kind=response.error_kind or ErrorKind.TRANSIENT.value,
                    code=response.error_code,
                    message=(response.error_message or "agent reported a failure")[:500],
                    calls=response.calls,
                )
            )
        refused = [f for f in failures if f.kind == ErrorKind.PERMANENT.value]
        permanent = refused[0] if refused else None
        if permanent is not None:
            yield from _write(
                ctx,
                FINISH_COMPENSATION,
                FinishCompensationInput(
                    order_id=start.order_id,
                    instance_id=instance_id,
                    workflow_version=definition.version,
                    undone=tuple(results),
                    failed=permanent,
                    also_failed=tuple(refused[1:]),
                ).to_payload(),
            )
            log.note("order.compensation_failed", permanent.step, permanent.code)
            return {"outcome": "CompensationFailed", "step": permanent.step}
        if failures:
            # Retryable: the supervisor resumes the stage; undos already answered are asked again under
            # their undo keys, which replay their stored result.
            failure = failures[0]
            yield from _write(
                ctx,
                RECORD_STEP_FAILURE,
                RecordStepFailureInput(
                    order_id=start.order_id,
                    instance_id=instance_id,
                    error=failure,
                    at=ctx.current_utc_datetime,
                ).to_payload(),
            )
            log.note("undo.retryable", failure.step, failure.code)
            return {"outcome": "retryable", "step": failure.step}
        undone = tuple(results)

    finished = yield from _write(
        ctx,
        FINISH_COMPENSATION,
        FinishCompensationInput(
            order_id=start.order_id,
            instance_id=instance_id,
            workflow_version=definition.version,
            undone=undone,
        ).to_payload(),
    )
    if not finished.applied:
        return {"outcome": "fenced", "step": None}
    log.note("order.compensated", None, None)
    return {"outcome": "Compensated", "step": None}


def _finish(
    ctx: WorkflowContext,
    start: OrchestrationInput,
    outcome: Outcome,
    *,
    completed: StepResult | None = None,
    error: StepError | None = None,
) -> Generator[WorkflowTask, Any, FencedWriteResult]:
    """Write the order's outcome (and send its reply) through :data:`FINISH_ORDER`."""
    return (
        yield from _write(
            ctx,
            FINISH_ORDER,
            FinishOrderInput(
                order_id=start.order_id,
                instance_id=instance_id_for(start.order_id, start.attempt),
                workflow_version=start.workflow_version,
                outcome=outcome,
                completed=completed,
                error=error,
            ).to_payload(),
        )
    )


def _write(
    ctx: WorkflowContext, activity: str, payload: dict[str, Any]
) -> Generator[WorkflowTask, Any, FencedWriteResult]:
    """Call a fenced-write activity; a write that still raises after its retries counts as fenced out.

    Ending the instance is safe: the record keeps its ``completeBy`` and the supervisor recovers it.
    """
    try:
        raw = yield ctx.call_activity(activity, payload, retry=STATE_WRITE_RETRY)
    except ActivityFailed as exc:
        return FencedWriteResult(applied=False, fenced=False, reason=f"activity failed: {str(exc)[:200]}")
    return FencedWriteResult.model_validate(raw)


def _await_response(
    ctx: WorkflowContext, step: str, instance_id: str, deadline: datetime
) -> Generator[WorkflowTask, Any, AgentResponse | None]:
    """Race the durable timer of ``step`` (a step, or an undo's ``{step}:undo``) against its response.

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
