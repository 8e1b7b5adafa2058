"""Azure Functions triggers of the activities role: the orchestration's activities, one trigger each.

Each trigger is registered under its contract's name and hands its JSON input to its entry of the role's
table (``activities.table.ACTIVITIES``), which validates it, calls the plain role function and returns its
result as JSON. tests/unit/test_function_app.py checks that every entry of the table has its trigger here.
"""

from __future__ import annotations

import typing
from typing import Any

import azure.durable_functions as df

from activities.sections import ActivitySections
from activities.table import ACTIVITIES
from function_host.wiring import app_settings, dependencies
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

_BY_NAME = {activity.name: activity for activity in ACTIVITIES}

bp = df.Blueprint()


def _run(name: str, payload: ActivityPayload) -> ActivityPayload:
    """Run the table's activity ``name`` on ``payload`` with the worker's dependencies and the
    activities' settings sections."""
    return _BY_NAME[name].run(payload, dependencies(), ActivitySections.of(app_settings()))


@bp.function_name(START_STEP)
@bp.activity_trigger(input_name="payload")
def start_step(payload: ActivityPayload) -> ActivityPayload:
    """Fenced write starting a step, then the agent request (``activities.steps.start_step``)."""
    return _run(START_STEP, payload)


@bp.function_name(FINISH_ORDER)
@bp.activity_trigger(input_name="payload")
def finish_order(payload: ActivityPayload) -> ActivityPayload:
    """Fenced write of the order's outcome, then the reply (``activities.steps.finish_order``)."""
    return _run(FINISH_ORDER, payload)


@bp.function_name(RECORD_STEP_FAILURE)
@bp.activity_trigger(input_name="payload")
def record_step_failure(payload: ActivityPayload) -> ActivityPayload:
    """Fenced write of a retryable failure (``activities.steps.record_step_failure``)."""
    return _run(RECORD_STEP_FAILURE, payload)


@bp.function_name(RECORD_REVIEW)
@bp.activity_trigger(input_name="payload")
def record_review(payload: ActivityPayload) -> ActivityPayload:
    """Fenced write of a review decision, the first wins (``activities.steps.record_review``)."""
    return _run(RECORD_REVIEW, payload)


@bp.function_name(BEGIN_COMPENSATION)
@bp.activity_trigger(input_name="payload")
def begin_compensation(payload: ActivityPayload) -> ActivityPayload:
    """Fenced write to Compensating; the steps to undo (``activities.compensation.begin_compensation``)."""
    return _run(BEGIN_COMPENSATION, payload)


@bp.function_name(START_UNDO)
@bp.activity_trigger(input_name="payload")
def start_undo(payload: ActivityPayload) -> ActivityPayload:
    """Fenced write starting an undo, then the undo request (``activities.compensation.start_undo``)."""
    return _run(START_UNDO, payload)


@bp.function_name(FINISH_COMPENSATION)
@bp.activity_trigger(input_name="payload")
def finish_compensation(payload: ActivityPayload) -> ActivityPayload:
    """Fenced write of the compensation's end (``activities.compensation.finish_compensation``)."""
    return _run(FINISH_COMPENSATION, payload)
