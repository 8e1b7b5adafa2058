"""The race of a durable timer against an agent's answers (one step's, or a stage's of undos)."""

from __future__ import annotations

from collections.abc import Generator
from datetime import datetime
from typing import Any

from orchestrators.context import WorkflowContext, WorkflowTask
from orderflow.messages import AgentResponse, request_id_for, step_event_name


def await_response(
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


def await_responses(
    ctx: WorkflowContext, steps: tuple[str, ...], instance_id: str, deadline: datetime
) -> Generator[WorkflowTask, Any, dict[str, AgentResponse] | None]:
    """Race one durable timer against the response events of ``steps`` (a stage of undos, in parallel).

    For a single step the actions are exactly those of :func:`await_response`.

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
