"""Azure Functions triggers of the activities role: the orchestration's activities. Each trigger decodes
its binding and calls the plain role function; nothing more."""

from __future__ import annotations

import typing
from typing import Any

import azure.durable_functions as df

from activities.compensation import begin_compensation, finish_compensation, start_undo
from activities.steps import finish_order, record_review, record_step_failure, start_step
from function_host.wiring import dependencies
from orderflow.contracts import (
    BEGIN_COMPENSATION,
    FINISH_COMPENSATION,
    FINISH_ORDER,
    RECORD_REVIEW,
    RECORD_STEP_FAILURE,
    START_STEP,
    START_UNDO,
)

ActivityPayload = typing.Dict[str, Any]  # noqa: UP006
"""An activity's JSON input or output, as the Durable extension passes it and the worker decodes it.

A ``typing`` generic on purpose: the Python worker refuses a ``dict[str, Any]`` annotation on a binding
(a ``types.GenericAlias`` is neither a class nor a ``typing`` generic to its check: "invalid non-type
annotation") and the host then loads no function of the app at all.
"""

bp = df.Blueprint()


@bp.function_name(START_STEP)
@bp.activity_trigger(input_name="payload")
def start_step_activity(payload: ActivityPayload) -> ActivityPayload:
    """Fenced write starting a step, then the agent request."""
    return start_step(payload, dependencies())


@bp.function_name(FINISH_ORDER)
@bp.activity_trigger(input_name="payload")
def finish_order_activity(payload: ActivityPayload) -> ActivityPayload:
    """Fenced write of the order's outcome, then the client's reply."""
    return finish_order(payload, dependencies())


@bp.function_name(RECORD_STEP_FAILURE)
@bp.activity_trigger(input_name="payload")
def record_step_failure_activity(payload: ActivityPayload) -> ActivityPayload:
    """Fenced write of a retryable step failure."""
    return record_step_failure(payload, dependencies())


@bp.function_name(RECORD_REVIEW)
@bp.activity_trigger(input_name="payload")
def record_review_activity(payload: ActivityPayload) -> ActivityPayload:
    """Fenced write of a review decision (the first recorded wins)."""
    return record_review(payload, dependencies())


@bp.function_name(BEGIN_COMPENSATION)
@bp.activity_trigger(input_name="payload")
def begin_compensation_activity(payload: ActivityPayload) -> ActivityPayload:
    """Fenced write moving the order to Compensating; returns the steps to undo."""
    return begin_compensation(payload, dependencies())


@bp.function_name(START_UNDO)
@bp.activity_trigger(input_name="payload")
def start_undo_activity(payload: ActivityPayload) -> ActivityPayload:
    """Fenced write starting an undo, then the undo request."""
    return start_undo(payload, dependencies())


@bp.function_name(FINISH_COMPENSATION)
@bp.activity_trigger(input_name="payload")
def finish_compensation_activity(payload: ActivityPayload) -> ActivityPayload:
    """Fenced write of the compensation's outcome, then the client's reply."""
    return finish_compensation(payload, dependencies())
