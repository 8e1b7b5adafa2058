"""What triggers compensation inside an attempt: the one rule the orchestration applies when an order
cannot go forward.

An attempt stops going forward, and undoes the completed steps (docs/design.md §4), for exactly these
reasons:

- the review before a step was rejected (by a person, or by the default at its deadline);
- someone asked the order to stop: the client's cancel, or an operator's decision;
- the order's end-to-end retry budget has no calls left for the next step;
- a hold lapses before the step that commits it could finish, and was re-acquired once already
  (:mod:`orderflow.protocol.holds`), or its re-acquisition was refused;
- a provider refused a step for good (a permanent error) and no fallback provider is left to try, unless
  the step declares input an operator may correct (:attr:`StepDefinition.correctable`): then the order
  stops in ``Error`` for that correction (:func:`awaits_correction`), and the operator resubmits it with
  corrected input or compensates it.

Everything else is not a reason to compensate. A transient failure, or an agent that ran out of the calls
reserved for one request, is handed to the supervisor, which retries the order with backoff. A timeout
ends the attempt without a write: the supervisor recovers it.

Outside an attempt, three writers move a record to ``Compensating`` directly, and the next attempt (its
input's ``compensate``) resumes the undo without asking this rule: the supervisor when it gives up an
order (``SUPERVISOR_MAX_FAILURES`` recoveries, or the retry budget spent when a deadline passed;
:mod:`supervisor.sweep`), a client's cancel of an order not yet claimed (``intake.cancellation``), and an
operator's decision to compensate (``intake.operator``).
"""

from __future__ import annotations

from orderflow.contracts import CANCELLED_BY_CLIENT, REVIEW_REJECTED, StepError
from orderflow.errors import ErrorKind
from orderflow.results import BudgetExhausted, HoldExpired, ReviewRecorded, ReviewRejected, Stopped

CANCELLED_KIND = "cancelled"
"""``lastError.kind`` of an order someone asked to stop."""

REJECTED_KIND = "rejected"
"""``lastError.kind`` of an order whose review was rejected."""

RETRY_BUDGET_EXHAUSTED = "retry_budget_exhausted"

HOLD_EXPIRED = "hold_expired"
"""``lastError.code`` of an order compensated because a hold lapsed (:mod:`orderflow.protocol.holds`),
and the permanent code a service answers a commit of an expired hold with."""
"""``lastError.code`` of an order whose retry budget ran out."""

Seen = StepError | ReviewRejected | ReviewRecorded | Stopped | BudgetExhausted | HoldExpired
"""What the workflow may learn about a step: a step's error, or an activity's refusal to go on."""


def awaits_correction(seen: Seen, *, correctable: bool, fallback_left: bool = False) -> bool:
    """Whether ``seen`` stops the order in ``Error`` for an operator's input correction: the provider
    refused (a permanent error: nothing was applied), no fallback is left, and the step declares
    correctable input (``correctable``)."""
    return (
        correctable
        and not fallback_left
        and isinstance(seen, StepError)
        and seen.kind == ErrorKind.PERMANENT.value
    )


def compensation_cause(
    step: str, seen: Seen, *, fallback_left: bool = False, correctable: bool = False
) -> StepError | None:
    """The cause to compensate ``step``'s order with, or None when what was seen is no reason to.

    Args:
        step: The forward step the workflow is at.
        seen: The step's error (from its agent), or what a fenced write found instead of going on.
        fallback_left: ``step`` has a fallback provider not tried yet: a refusal moves to it instead.
        correctable: ``step`` declares input an operator may correct: a refusal stops the order in
            ``Error`` instead (:func:`awaits_correction`).

    Returns:
        The ``lastError`` to record when compensation begins (kind ``rejected``, ``cancelled``,
        ``budget_exhausted`` or ``permanent``), or None.
    """
    match seen:
        case ReviewRejected() | ReviewRecorded(decision="reject"):
            return StepError(
                step=step,
                kind=REJECTED_KIND,
                code=REVIEW_REJECTED,
                message="the review of this step was rejected",
            )
        case Stopped(cause=cause):
            return stop_cause(step, cause)
        case BudgetExhausted():
            return StepError(
                step=step,
                kind=ErrorKind.BUDGET.value,
                code=RETRY_BUDGET_EXHAUSTED,
                message="the order's end-to-end retry budget is spent",
            )
        case HoldExpired(step=held):
            return StepError(
                step=step,
                kind=ErrorKind.PERMANENT.value,
                code=HOLD_EXPIRED,
                message=f"the hold of {held} lapses before {step} could finish",
            )
        case StepError(kind=ErrorKind.PERMANENT.value) if not fallback_left:
            return None if awaits_correction(seen, correctable=correctable) else seen
    return None


def stop_cause(step: str, code: str) -> StepError:
    """The cause a stopped order's compensation records: the client's cancel, or an operator's decision
    (``code`` is the stop's ``lastError.code``)."""
    message = (
        "the client cancelled the order" if code == CANCELLED_BY_CLIENT else "an operator stopped the order"
    )
    return StepError(step=step, kind=CANCELLED_KIND, code=code, message=message)
