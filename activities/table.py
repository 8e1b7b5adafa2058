"""The activities role's table: each orchestration activity declared once, with its contract and function.

Both hosts register activities by walking :data:`ACTIVITIES` (``function_host.blueprints.activities``
on Azure, ``devhost.durabletask_adapter`` locally), so an activity cannot be registered under one host
and forgotten under the other. The workflow calls the same contracts (:mod:`orderflow.contracts`) with
typed inputs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from activities.compensation import begin_compensation, finish_compensation, start_undo
from activities.sections import ActivitySections
from activities.steps import finish_order, record_review, record_step_failure, start_step
from orderflow import tracing
from orderflow.contracts import (
    BEGIN_COMPENSATION_ACTIVITY,
    FINISH_COMPENSATION_ACTIVITY,
    FINISH_ORDER_ACTIVITY,
    RECORD_REVIEW_ACTIVITY,
    RECORD_STEP_FAILURE_ACTIVITY,
    START_STEP_ACTIVITY,
    START_UNDO_ACTIVITY,
    ActivityContract,
)
from orderflow.dependencies import Dependencies
from orderflow.errors import NotFound

InputT = TypeVar("InputT", bound=BaseModel)
ResultT = TypeVar("ResultT")


@dataclass(frozen=True)
class Activity(Generic[InputT, ResultT]):
    """An orchestration activity: its contract and the plain function that performs it.

    Attributes:
        contract: The name, input model and result union both sides agree on.
        function: ``(input, dependencies, sections) -> result``; idempotent, since activities run at least
            once.
        summary: One line for the host's function listing.
    """

    contract: ActivityContract[InputT, ResultT]
    function: Callable[[InputT, Dependencies, ActivitySections], ResultT]
    summary: str

    @property
    def name(self) -> str:
        """The registered name (the contract's)."""
        return self.contract.name

    def run(self, payload: Any, deps: Dependencies, sections: ActivitySections) -> dict[str, Any]:
        """Run the activity on the runtime's JSON input, with the host's dependencies and the settings
        sections the activities read; returns its result as JSON.

        The activity runs under a span ``orderflow.activity.<name>`` in its attempt's trace: a child of
        the attempt's claim span, found on the state record (:meth:`StateRecord.attempt_traceparent`),
        with the result's ``outcome``. Orchestrator code opens no span: it is replayed, an activity's run
        is not.

        Raises:
            pydantic.ValidationError: the input is not this activity's (a bug in the caller: the
                runtime's retries cannot fix it, so it fails the activity).
            Whatever the function raises (store and queue errors, which the runtime retries).
        """
        data = self.contract.input.model_validate(payload)
        order_id: str | None = getattr(data, "order_id", None)
        instance_id: str | None = getattr(data, "instance_id", None)
        attributes = tracing.order_attributes(order_id, instance_id, step=getattr(data, "step", None))
        parent = _attempt_traceparent(deps, order_id, instance_id) if tracing.enabled() else None
        with tracing.span(tracing.ACTIVITY_PREFIX + self.name, parent=parent, attributes=attributes) as span:
            result = self.function(data, deps, sections)
            outcome = getattr(result, "outcome", None)
            if isinstance(outcome, str):
                tracing.mark_outcome(span, outcome)
        return self.contract.result_payload(result)


def _attempt_traceparent(deps: Dependencies, order_id: str | None, instance_id: str | None) -> str | None:
    """The trace context the activity of ``instance_id`` runs under, from the record (this process's
    cached copy, else a point read that the activity's fenced write then finds cached): traceparents
    never change once written, so any copy that holds the attempt will do."""
    if order_id is None or instance_id is None:
        return None
    found = deps.cache.get(order_id)
    if found is None or not any(e.instance_id == instance_id for e in found.item.attempt_history):
        try:
            found = deps.states.get(order_id)
        except NotFound:
            return None
        deps.cache.put(found)
    return found.item.attempt_traceparent(instance_id)


def _reading_no_settings(
    function: Callable[[InputT, Dependencies], ResultT],
) -> Callable[[InputT, Dependencies, ActivitySections], ResultT]:
    """``function``, for the table, of an activity that reads no settings section."""

    def run(data: InputT, deps: Dependencies, sections: ActivitySections) -> ResultT:
        return function(data, deps)

    return run


ACTIVITIES: tuple[Activity[Any, Any], ...] = (
    Activity(START_STEP_ACTIVITY, start_step, "Fenced write starting a step, then the agent request."),
    Activity(
        FINISH_ORDER_ACTIVITY,
        _reading_no_settings(finish_order),
        "Fenced write of the order's outcome, then the reply.",
    ),
    Activity(RECORD_STEP_FAILURE_ACTIVITY, record_step_failure, "Fenced write of a retryable failure."),
    Activity(RECORD_REVIEW_ACTIVITY, record_review, "Fenced write of a review decision (first wins)."),
    Activity(
        BEGIN_COMPENSATION_ACTIVITY,
        _reading_no_settings(begin_compensation),
        "Fenced write to Compensating; the steps to undo.",
    ),
    Activity(START_UNDO_ACTIVITY, start_undo, "Fenced write starting an undo, then the undo request."),
    Activity(
        FINISH_COMPENSATION_ACTIVITY,
        _reading_no_settings(finish_compensation),
        "Fenced write of the compensation's end.",
    ),
)
"""Every orchestration activity, one entry each."""
