"""The allowed ``processState`` and step-status transitions, in one place.

Every state-store write goes through :func:`check_transition` / :func:`check_step_transition`, so an
illegal move (a stale writer resurrecting a finished order, a step going backwards) fails loudly
instead of corrupting a record. Writing the same state again is always allowed: a step update
rewrites ``Processing`` with new step data.
"""

from __future__ import annotations

from collections.abc import Mapping

from orderflow.errors import IllegalTransition
from orderflow.records import ProcessState, StepStatus

P = ProcessState
S = StepStatus

PROCESS_TRANSITIONS: Mapping[ProcessState, frozenset[ProcessState]] = {
    # Claim; a cancel before the claim; compensation of steps done by an earlier attempt.
    P.PENDING: frozenset({P.PROCESSING, P.CANCELLED, P.COMPENSATING, P.ERROR}),
    # Finish, fail, pause for review, start undoing; the supervisor re-queues (Pending) or gives up (Error).
    P.PROCESSING: frozenset({P.PENDING, P.PROCESSED, P.ERROR, P.AWAITING_REVIEW, P.COMPENSATING}),
    P.AWAITING_REVIEW: frozenset({P.PROCESSING, P.PENDING, P.COMPENSATING, P.ERROR}),
    # An operator resubmits (Pending) or decides to undo (Compensating).
    P.ERROR: frozenset({P.PENDING, P.COMPENSATING}),
    # Done or stuck; Error when it finds a point of no return passed (an irreversible step's effect).
    P.COMPENSATING: frozenset({P.COMPENSATED, P.COMPENSATION_FAILED, P.CANCELLED, P.ERROR}),
    # An operator retries a failed compensation.
    P.COMPENSATION_FAILED: frozenset({P.COMPENSATING}),
    P.PROCESSED: frozenset(),
    P.COMPENSATED: frozenset(),
    P.CANCELLED: frozenset(),
}
"""``processState`` → the states it may move to (besides itself)."""

TERMINAL_STATES: frozenset[ProcessState] = frozenset(
    state for state, targets in PROCESS_TRANSITIONS.items() if not targets
)
"""States no write may ever leave: ``Processed``, ``Compensated``, ``Cancelled``."""

SETTLED_STATES: frozenset[ProcessState] = TERMINAL_STATES | {P.ERROR, P.COMPENSATION_FAILED}
"""States in which nothing happens until a person acts: terminal states plus ``Error`` and
``CompensationFailed`` (both raise an operator alert)."""

IN_FLIGHT_STATES: frozenset[ProcessState] = frozenset({P.PENDING, P.PROCESSING})
"""States that count towards admission control's in-flight ceiling."""

STEP_TRANSITIONS: Mapping[StepStatus, frozenset[StepStatus]] = {
    S.NOT_STARTED: frozenset({S.RUNNING}),
    # A running step may be started again by a later attempt (same status, attempts + 1).
    # ... or undone without a recorded outcome, when its attempt died mid-step.
    S.RUNNING: frozenset({S.COMPLETED, S.FAILED, S.NOT_STARTED, S.COMPENSATING}),
    S.FAILED: frozenset({S.RUNNING, S.COMPENSATING}),
    S.COMPLETED: frozenset({S.COMPENSATING}),
    S.COMPENSATING: frozenset({S.COMPENSATED, S.COMPENSATION_FAILED}),
    S.COMPENSATION_FAILED: frozenset({S.COMPENSATING}),
    S.COMPENSATED: frozenset(),
}
"""Step status → the statuses it may move to (besides itself)."""


def is_terminal(state: ProcessState) -> bool:
    """True for states no write may leave."""
    return state in TERMINAL_STATES


def can_transition(current: ProcessState, target: ProcessState) -> bool:
    """True when ``current`` → ``target`` is allowed (staying in place always is, unless terminal)."""
    if current == target:
        return not is_terminal(current)
    return target in PROCESS_TRANSITIONS[current]


def check_transition(current: ProcessState, target: ProcessState) -> None:
    """Reject an illegal ``processState`` change.

    Raises:
        IllegalTransition: ``target`` is not reachable from ``current``.
    """
    if not can_transition(current, target):
        raise IllegalTransition(f"processState {current.value} -> {target.value} is not allowed")


def can_step_transition(current: StepStatus, target: StepStatus) -> bool:
    """True when a step may move from ``current`` to ``target`` (staying in place is allowed)."""
    return current == target or target in STEP_TRANSITIONS[current]


def check_step_transition(step: str, current: StepStatus, target: StepStatus) -> None:
    """Reject an illegal step-status change.

    Raises:
        IllegalTransition: ``target`` is not reachable from ``current``.
    """
    if not can_step_transition(current, target):
        raise IllegalTransition(f"step {step}: {current.value} -> {target.value} is not allowed")
