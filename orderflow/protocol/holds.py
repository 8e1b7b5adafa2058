"""The hold rule: irreversible work starts only while every short-term hold is live (docs/design.md §10).

A step that commits a hold (``capture``, ``commit``), and every irreversible step of a workflow with
holds, is *guarded*: it starts only when every hold the workflow acquires was recorded, and every hold not
yet committed expires later than now + the skew margin (``HOLD_SKEW_MARGIN_S``) + the step's deadline. A
commit that starts then reaches the service before the hold expires on the service's clock, however late
within its deadline it is made, as long as the two clocks are no further apart than the margin.

When a hold would lapse first, the order **re-acquires** it once, under a new idempotency key
(:func:`orderflow.protocol.keys.reacquire_key`), naming the old hold for the service to release; once a
hold was re-acquired, or when the guarded step was sent before (its commit may already be applied, and a
new hold cannot replace a committed one), a lapsing hold **lapsed**: the order is compensated. A commit is
never started against a hold that expires before it can finish.

:func:`decide_holds` is pure; :func:`orderflow.protocol.step_start.decide_step_start` asks it, and the
write applies what it decided.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from orderflow.contracts import StepResult
from orderflow.records import Hold, StateRecord, parse_utc
from orderflow.workflows import StepDefinition, WorkflowDefinition

REACQUIRE_LIMIT = 1
"""Times one hold may be re-acquired before a lapse compensates the order."""
HOLD_EXPIRY_SKEW_S = 30.0
"""Seconds a hold's ``expiresAt`` may lie beyond its acquisition + the hold's lifetime (the service's clock
may be that far ahead); a later one claims more than was asked and is not believed."""


@dataclass(frozen=True)
class HoldRule:
    """What the rule needs besides the record: the workflow, the time and the margins.

    Attributes:
        definition: The record's workflow.
        now: The time of the decision (UTC, the deciding host's store clock).
        deadline_s: Seconds the guarded step may take (its timeout).
        margin_s: ``HOLD_SKEW_MARGIN_S``, seconds kept for clock skew.
    """

    definition: WorkflowDefinition
    now: datetime
    deadline_s: float
    margin_s: float

    @property
    def needed_until(self) -> datetime:
        """The latest a commit started now may still reach the service, allowing for skew (UTC)."""
        return self.now + timedelta(seconds=self.margin_s + self.deadline_s)


@dataclass(frozen=True)
class ReacquireHold:
    """Re-acquire the hold of ``step`` before the guarded step starts.

    Attributes:
        step: The step whose hold lapses.
        started: This attempt already started the re-acquisition (an activity re-run): re-send its
            request, write nothing.
        grant: Calls the re-acquisition reserves from the retry budget (set by the step-start decision).
    """

    step: str
    started: bool = False
    grant: int = 0


@dataclass(frozen=True)
class HoldLapsed:
    """The hold of ``step`` expires (``expires_at``, None when it was never recorded) before the guarded
    step could finish, and may not be re-acquired: the step does not start; the order is compensated."""

    step: str
    expires_at: datetime | None


HoldDecision = ReacquireHold | HoldLapsed | None
"""What :func:`decide_holds` decided; None: every hold is live, the step may start."""


def decide_holds(
    record: StateRecord,
    step: StepDefinition,
    *,
    instance_id: str,
    rule: HoldRule,
    completed: StepResult | None = None,
) -> HoldDecision:
    """Whether the holds let ``step`` start for attempt ``instance_id`` (the rules in the module
    docstring), checked from the earliest expiry on. ``completed`` is the previous step's result, written
    in the same write as this start: the hold it acquired, or the commit it made, counts.

    Returns:
        None when ``step`` is not guarded or every hold is live long enough; :class:`ReacquireHold`
        when the earliest lapsing hold may be re-acquired (or this attempt is re-acquiring one);
        :class:`HoldLapsed` otherwise.

    Raises:
        KeyError: the record has no state for ``step``.
    """
    definition = rule.definition
    if not definition.guarded_by_holds(step):
        return None
    holds = _holds_with(record, definition, completed, rule.now)
    for name, hold in holds.items():
        if hold is not None and hold.reacquiring_by == instance_id:
            return ReacquireHold(name, started=True)
    sent_before = record.steps[step.name].attempts > 0
    for name, hold in sorted(holds.items(), key=lambda item: _expiry(item[1])):
        if hold is not None and (hold.committed_at is not None or hold.expires_at > rule.needed_until):
            continue
        if hold is None or sent_before or hold.reacquired >= REACQUIRE_LIMIT or hold.reacquiring_by:
            return HoldLapsed(name, None if hold is None else hold.expires_at)
        return ReacquireHold(name)
    return None


def uncommitted_holds(record: StateRecord) -> list[tuple[str, Hold]]:
    """The order's holds not yet made permanent, as (step, hold), earliest expiry first: what a service
    will undo by itself if the order does not commit them in time (a suspended order loses them)."""
    live = [(step, hold) for step, hold in record.holds.items() if hold.committed_at is None]
    return sorted(live, key=lambda item: item[1].expires_at)


def hold_acquired(step: StepDefinition, result: dict[str, str], key: str, at: datetime) -> Hold:
    """The hold ``step`` acquired under ``key``, from its result (``holdId``, ``expiresAt``), recorded at
    ``at`` (UTC, after the call that acquired it). An answer without a readable ``expiresAt`` expires at
    ``at``: nothing commits against an expiry nobody knows; nor against one later than ``at`` + the hold's
    lifetime + :data:`HOLD_EXPIRY_SKEW_S`, more than the service was asked to grant (the agent refuses
    such an answer already: ``agents.results``).

    Raises:
        ValueError: ``step`` acquires no hold.
    """
    if step.hold is None:
        raise ValueError(f"{step.name} acquires no hold")
    try:
        expires_at = parse_utc(result["expiresAt"]) if result.get("expiresAt") else at
    except ValueError:
        expires_at = at
    if expires_at > at + timedelta(seconds=step.hold.lifetime_s + HOLD_EXPIRY_SKEW_S):
        expires_at = at
    return Hold(
        hold_id=result.get("holdId", ""),
        expires_at=expires_at,
        commit=step.hold.commit,
        idempotency_key=key,
        acquired_at=at,
    )


def _holds_with(
    record: StateRecord, definition: WorkflowDefinition, completed: StepResult | None, now: datetime
) -> dict[str, Hold | None]:
    """The workflow's holds as the record has them, with ``completed``'s hold or commit laid over."""
    holds = {name: record.holds.get(name) for name in definition.hold_steps}
    if completed is None or completed.step in record.completed_steps():
        return holds
    done = definition.step(completed.step)
    if done.hold is not None:
        key = record.steps[done.name].idempotency_key
        holds[done.name] = hold_acquired(done, completed.result, key, now)
    committed = None if done.commits is None else holds.get(done.commits)
    if done.commits is not None and committed is not None and committed.committed_at is None:
        holds[done.commits] = committed.model_copy(update={"committed_at": now})
    return holds


def _expiry(hold: Hold | None) -> datetime:
    """Sort key: a hold never recorded first, then by expiry."""
    return datetime.min.replace(tzinfo=UTC) if hold is None else hold.expires_at
