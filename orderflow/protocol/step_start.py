"""May this step start? The one decision the claim and the ``start_step`` activity share.

A step starts only in a record that is ``Processing`` and owned by the attempt asking (the fenced write
checks ownership before it asks; docs/design.md §3.3). Then, in this order:

0. an operator suspended the order: **suspended**, start nothing until it is resumed (the attempt
   hands the record back, ``Pending`` and unlocked; docs/operations.md#suspended-orders). An attempt
   already waiting for the step's review, ``AwaitingReview``, **awaits review** on: waiting starts
   nothing, and a re-run of its activity must not end an attempt the suspend asked nothing of;
1. a stop was asked for (a client's cancel, an operator's decision): **stop**, start nothing more;
2. the step may need a person's review: **await review** until a decision is recorded, **reject** if
   it was rejected; a caller that has not read the order's amount learns only that review is
   **unknown**;
3. the orchestration asks for the step's fallback provider: the step **moves to its fallback** (another
   provider, another idempotency key, a reservation of its own);
4. this attempt already started the step (an activity re-run, or the claim started it): **already
   started**, nothing to write;
5. the step's dependency (its provider's agent) is held by an open circuit breaker
   (:mod:`orderflow.breaker`; the caller asks it first): **await the dependency**, nothing reserved;
6. the step commits a hold, or is irreversible in a workflow with holds, and a hold would lapse before
   it could finish (:mod:`orderflow.protocol.holds`): **re-acquire the hold** once (calls reserved as
   for a start), else the **hold lapsed** and the order is compensated;
7. the attempt needs a reservation of calls from the order's end-to-end retry budget, counted after
   the previous step's unused reservation has gone back: none left is **budget exhausted**;
8. otherwise **start**.

:func:`decide_step_start` is pure: it reads a record and returns what to do; the caller applies it in
its one conditional write. Decisions are a tagged union whose class names say what to do; the
activity reports what it did with the results of :mod:`orderflow.results` (``OutOfBudget`` is reported
as ``BudgetExhausted``, ``StopRequested`` as ``Stopped``, ``RejectedByReview`` as ``ReviewRejected``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from enum import Enum

from orderflow.contracts import StepResult
from orderflow.errors import IllegalTransition
from orderflow.protocol.holds import HoldLapsed, HoldRule, ReacquireHold, decide_holds
from orderflow.records import ProcessState, ReviewDecision, ReviewState, StateRecord, StepStatus
from orderflow.workflows import StepDefinition


class ReviewNeed(Enum):
    """Whether the step must pause for a person's review, as far as the caller knows."""

    NOT_NEEDED = "not_needed"
    NEEDED = "needed"
    UNKNOWN = "unknown"
    """The step reviews orders above an amount, and the caller has not read the order."""


@dataclass(frozen=True)
class Suspended:
    """An operator suspended the order: the step does not start; the attempt ends and gives the record
    back (``Pending``, unlocked) for the starter to claim after the resume."""


@dataclass(frozen=True)
class StopRequested:
    """A stop was asked for: the step does not start, and the orchestration compensates."""


@dataclass(frozen=True)
class NotProcessing:
    """The record is in no state to start a step (``state``): someone else moved it."""

    state: ProcessState


@dataclass(frozen=True)
class AwaitReview:
    """Pause for a person's decision; ``review`` is the pending review of this step, if one exists."""

    review: ReviewState | None


@dataclass(frozen=True)
class ReviewUnknown:
    """The step may need review, and only the order's amount can tell: read it and decide again."""


@dataclass(frozen=True)
class RejectedByReview:
    """A person rejected the order before this step: it does not start."""


@dataclass(frozen=True)
class AlreadyStarted:
    """This attempt's start of the step is already in the record: nothing to write."""


@dataclass(frozen=True)
class AwaitDependency:
    """The step's dependency is unavailable (its breaker is open) until ``retry_at`` (UTC): the step
    does not start, nothing is reserved, and the order waits
    (:func:`orderflow.protocol.transitions.forward.hold_for_dependency`).

    Attributes:
        dependency: The agent whose breaker holds the step.
        retry_at: When to try again.
    """

    dependency: str
    retry_at: datetime


@dataclass(frozen=True)
class OutOfBudget:
    """No calls are left in the order's retry budget for this attempt of the step.

    Attributes:
        to_fallback: The step moves to its fallback provider in the same write.
    """

    to_fallback: bool


@dataclass(frozen=True)
class Start:
    """Start the step for this attempt.

    Attributes:
        grant: Calls to reserve from the retry budget (at least 1), or None when the attempt keeps the
            reservation it holds (a step restarted by the same attempt, after a review).
        to_fallback: The step moves to its fallback provider first.
    """

    grant: int | None
    to_fallback: bool


StepStartDecision = (
    Suspended
    | StopRequested
    | NotProcessing
    | AwaitReview
    | ReviewUnknown
    | RejectedByReview
    | AlreadyStarted
    | HoldLapsed
    | ReacquireHold
    | AwaitDependency
    | OutOfBudget
    | Start
)
"""What :func:`decide_step_start` decided."""

_LIVE = (ProcessState.PROCESSING, ProcessState.AWAITING_REVIEW)


def decide_step_start(
    record: StateRecord,
    step: StepDefinition,
    *,
    instance_id: str,
    review: ReviewNeed,
    max_calls_per_step: int,
    fallback: bool = False,
    completed: StepResult | None = None,
    dependency_held: AwaitDependency | None = None,
    holds: HoldRule | None = None,
) -> StepStartDecision:
    """Decide whether ``step`` starts for attempt ``instance_id`` (the rules in the module docstring).

    Args:
        record: The state record as read, owned by ``instance_id``.
        step: The step's definition.
        instance_id: The attempt asking.
        review: Whether the step must pause for review (:class:`ReviewNeed`).
        max_calls_per_step: ``AGENT_MAX_CALLS_PER_STEP``, the most one attempt of a step reserves.
        fallback: The orchestration asks for the step's fallback provider (its primary refused).
        completed: The previous step's result, whose completion is written with this start: its unused
            reservation goes back to the budget before this step reserves, and a re-run is "already
            started" only once that completion is in the record too.
        dependency_held: The step's dependency (:func:`step_dependency`) is held by its breaker, as
            :meth:`orderflow.breaker.CircuitBreakers.admit` answered; None: it may be called now.
        holds: The hold rule's inputs (:class:`HoldRule`) when the step may be guarded by holds; None
            for a caller that starts no guarded step.

    Returns:
        One of the :data:`StepStartDecision` classes.

    Raises:
        IllegalTransition: a fallback is asked for a step that has no fallback provider.
        KeyError: the record has no state for ``step``.
    """
    if record.process_state in _LIVE and record.suspended_at is not None:
        waiting = record.process_state is ProcessState.AWAITING_REVIEW
        held = _held_for_review(record, step, review) if waiting else None
        return held if isinstance(held, AwaitReview) and held.review is not None else Suspended()
    if record.process_state in _LIVE and record.cancel_requested_at is not None:
        return StopRequested()
    if record.process_state not in _LIVE:
        return NotProcessing(record.process_state)
    paused = _held_for_review(record, step, review)
    if paused is not None:
        return paused
    if record.process_state is not ProcessState.PROCESSING:
        return NotProcessing(record.process_state)
    state = record.steps[step.name]
    to_fallback = fallback and not state.fallback
    if to_fallback and step.fallback_agent is None:
        raise IllegalTransition(f"{step.name} has no fallback provider")
    completed_step = None if completed is None else completed.step
    if not to_fallback and _started_by(record, step.name, instance_id, completed_step):
        return AlreadyStarted()
    if dependency_held is not None:
        return dependency_held
    lapsing = _lapsing(
        record, step, instance_id, holds, completed=completed, max_calls_per_step=max_calls_per_step
    )
    if lapsing is not None:
        return lapsing
    # A fallback is a new provider: the attempt reserves again, whatever the primary held.
    if not to_fallback and state.status is StepStatus.RUNNING and state.last_instance == instance_id:
        return Start(grant=None, to_fallback=False)
    grant = _grant(record, completed, max_calls_per_step)
    if grant == 0:
        return OutOfBudget(to_fallback=to_fallback)
    return Start(grant=grant, to_fallback=to_fallback)


def step_dependency(step: StepDefinition, *, fallback: bool = False) -> str:
    """The dependency (agent) a start of ``step`` sends its request to: the fallback provider's agent
    when the orchestration asks for it, else the step's own."""
    return step.fallback_agent if fallback and step.fallback_agent else step.agent


def _held_for_review(
    record: StateRecord, step: StepDefinition, review: ReviewNeed
) -> AwaitReview | ReviewUnknown | RejectedByReview | None:
    """Rule 2: what review holds the step at, or None when review lets it go on (not needed, or
    approved)."""
    if review is ReviewNeed.UNKNOWN:
        return ReviewUnknown()
    if review is ReviewNeed.NEEDED:
        pending = record.review if record.review is not None and record.review.step == step.name else None
        if pending is None or pending.decision is None:
            return AwaitReview(pending)
        if pending.decision is ReviewDecision.REJECT:
            return RejectedByReview()
    return None


def _lapsing(
    record: StateRecord,
    step: StepDefinition,
    instance_id: str,
    holds: HoldRule | None,
    *,
    completed: StepResult | None,
    max_calls_per_step: int,
) -> HoldLapsed | ReacquireHold | OutOfBudget | None:
    """Rule 6: what the hold rule holds the step at (a new re-acquisition reserves its calls as a start
    does), or None when it may start."""
    lapsing = (
        None
        if holds is None
        else decide_holds(record, step, instance_id=instance_id, rule=holds, completed=completed)
    )
    if not isinstance(lapsing, ReacquireHold) or lapsing.started:
        return lapsing
    grant = _grant(record, completed, max_calls_per_step)
    return replace(lapsing, grant=grant) if grant else OutOfBudget(to_fallback=False)


def _grant(record: StateRecord, completed: StepResult | None, max_calls_per_step: int) -> int:
    """Rule 5: calls this attempt of the step may reserve (0: none left), counted after the previous
    step's unused reservation has gone back to the budget."""
    spent = record.retry_budget.spent
    if completed is not None and record.steps[completed.step].status is not StepStatus.COMPLETED:
        spent = record.spent_after_settling(completed.step, completed.calls)
    return min(max(0, record.retry_budget.limit - spent), max_calls_per_step)


def _started_by(record: StateRecord, step: str, instance_id: str, completed_step: str | None) -> bool:
    state = record.steps[step]
    return (
        state.status is StepStatus.RUNNING
        and state.last_instance == instance_id
        and record.complete_by is not None
        and (completed_step is None or record.steps[completed_step].status is StepStatus.COMPLETED)
    )
