"""Which of an order's steps may have had an effect downstream, and the point of no return.

One rule that three callers share: compensation (which steps need an undo entry, and whether the order
can be compensated at all), a client's cancel and an operator's decision to compensate (both refused
past the point of no return). A step may have had an effect once an attempt started it, unless the
remote service refused it (a permanent error: nothing was applied). An irreversible step that may have
had an effect is a point of no return passed (docs/design.md §4).
"""

from __future__ import annotations

from orderflow.errors import ErrorKind
from orderflow.records import StateRecord, StepStatus
from orderflow.workflows import WorkflowDefinition

PAST_POINT_OF_NO_RETURN = "past_point_of_no_return"
"""``lastError.code`` and reply reason of an order that cannot be compensated: an irreversible step may
have applied its effect, so only completing the order (an operator's decision) is left."""


def refused(record: StateRecord, step: str) -> bool:
    """Whether ``step`` failed because the remote service refused it (no effect was applied).

    The ``lastError`` of an order stopped past a point of no return is permanent too, and names the
    irreversible step, but says the opposite: that step may have taken effect.
    """
    error = record.last_error
    return (
        record.steps[step].status is StepStatus.FAILED
        and error is not None
        and error.step == step
        and error.kind == ErrorKind.PERMANENT.value
        and error.code != PAST_POINT_OF_NO_RETURN
    )


def may_have_effect(record: StateRecord, step: str) -> bool:
    """Whether ``step`` may have had an effect: an attempt started it and the service did not refuse it."""
    state = record.steps[step]
    if state.status is StepStatus.NOT_STARTED or state.attempts == 0:
        return False
    return not refused(record, step)


def irreversible_effects(record: StateRecord, definition: WorkflowDefinition) -> list[str]:
    """Irreversible steps that completed or whose outcome is unknown: the points of no return passed."""
    return [
        step.name
        for step in definition.steps
        if step.irreversible and step.name in record.steps and may_have_effect(record, step.name)
    ]
