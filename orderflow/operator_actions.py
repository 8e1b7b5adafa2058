"""Which orders an operator's ``resubmit``, ``suspend`` and ``resume`` apply to, by state and suspension.

One rule, used in two places: the operator API checks it on the record before it writes
(:mod:`operator_api.resubmit`, :mod:`operator_api.suspension`), and the bulk commands
(:mod:`orderflow_client.cli_bulk`) check it on each listed order's summary, so that an order the action cannot
apply to is reported as skipped and never sent. The API checks more than a listing shows (a resubmit of
an ``Error`` order whose compensation began is refused too); what it refuses is always its own answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from orderflow.protocol.state_machine import SETTLED_STATES
from orderflow.records import ProcessState

NOT_RESUBMITTABLE = "NotResubmittable"
"""Refusal: the order is in no state a resubmit starts from."""
NOT_SUSPENDABLE = "NotSuspendable"
"""Refusal: the order is settled (finished, ``Error`` or ``CompensationFailed``): nothing to hold."""
ALREADY_SUSPENDED = "AlreadySuspended"
"""Refusal: a suspend of an order already suspended."""
NOT_SUSPENDED = "NotSuspended"
"""Refusal: a resume of an order not suspended."""

RESUBMITTABLE_STATES = frozenset({ProcessState.ERROR, ProcessState.COMPENSATION_FAILED})
"""States a resubmit starts from: a new attempt of an ``Error`` order, a compensation retry."""


class OperatorAction(StrEnum):
    """An action on one order that the bulk commands can send: its route's last path segment."""

    RESUBMIT = "resubmit"
    SUSPEND = "suspend"
    RESUME = "resume"


@dataclass(frozen=True)
class Refusal:
    """Why an action does not apply: the API's ``error.code`` and a message for people."""

    code: str
    detail: str


def action_refusal(
    action: OperatorAction, state: ProcessState, *, suspended: bool, suspended_by: str | None = None
) -> Refusal | None:
    """Why ``action`` does not apply to an order in ``state``, or None when it does.

    Args:
        action: The action.
        state: The order's ``processState``.
        suspended: Whether it is suspended (``suspendedAt`` set).
        suspended_by: Who suspended it (``suspendedBy``), when known (a listing does not say).
    """
    if action is OperatorAction.RESUBMIT:
        if state in RESUBMITTABLE_STATES:
            return None
        detail = f"order is {state.value}: only Error and CompensationFailed orders are resubmitted"
        return Refusal(NOT_RESUBMITTABLE, detail)
    if action is OperatorAction.SUSPEND:
        if state in SETTLED_STATES:
            return Refusal(NOT_SUSPENDABLE, f"order is {state.value}")
        if suspended:
            return Refusal(ALREADY_SUSPENDED, f"suspended by {suspended_by or 'an operator'}")
        return None
    return None if suspended else Refusal(NOT_SUSPENDED, "the order is not suspended")
