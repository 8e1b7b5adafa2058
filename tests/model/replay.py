"""Replaying the model's record changes against the code.

The model prints one ``TRACE`` line per record change (``model/orderflow.pml``'s ``TRACE``): who made it,
which change, the order, the writer's attempt and step, then the record after it. :func:`replay` plays
each change on a real state record with the code's own functions: the step start decision
(``decide_step_start``) and its write (``transitions.forward.start_step``), the other transitions of
``orderflow.protocol.transitions``, the client's cancel (``intake.cancellation.handle_cancel``, on an
in-memory store) and the operator's rules (``orderflow.operator_actions.action_refusal``). Each write is
checked by the state machine (``conditional.check_change``) and must leave the record as the model says.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from intake.cancellation import CancelOutcome, handle_cancel
from intake.submission import handle_intake_message
from orderflow.clock import FakeClock
from orderflow.contracts import StartStepInput, StepError, StepResult, UndoResult
from orderflow.errors import IllegalTransition
from orderflow.messages import CancelOrder
from orderflow.operator_actions import OperatorAction, action_refusal
from orderflow.protocol.conditional import check_change
from orderflow.protocol.step_start import (
    AwaitReview,
    OutOfBudget,
    ReviewNeed,
    Start,
    Suspended,
    decide_step_start,
)
from orderflow.protocol.transitions import compensation, forward, requests, supervision
from orderflow.records import (
    PendingReply,
    ProcessState,
    ReviewDecision,
    StateRecord,
    StepStatus,
    client_order_id,
    instance_id_for,
)
from orderflow.workflows import ORDER_V1
from tests.host_deps import HostDeps
from tests.unit.fakes import TEST_CLIENT, memory_deps, order_body

TRACE = re.compile(r"TRACE ((?:\d+ ){5}): ((?:\d+ ?){13})")
PROCESS = list(ProcessState)
STEPS = list(StepStatus)
ACTORS = ("starter", "owner", "supervisor", "client", "operator", "reviewer", "relay")
KINDS = [
    "claim",
    "start",
    "fail",
    "finish",
    "undo_start",
    "compensated",
    "begin_compensation",
    "release",
    "await_review",
    "record_review",
    "error",
    "requeue",
    "give_up",
    "compensation_requeue",
    "compensation_failed",
    "cancel",
    "suspend",
    "resume",
    "decide",
    "resubmit",
    "operator_compensate",
    "compensation_retry",
    "reply",
    "no_budget",
]
REVIEW_DECISIONS = {2: ReviewDecision.APPROVE, 3: ReviewDecision.REJECT}
ORDER = "a:o-1"
UNBOUNDED_BUDGET = 1000


@dataclass(frozen=True)
class Change:
    """One record change of a model run: who (:data:`ACTORS`), which (:data:`KINDS`), the writer's
    attempt and step, and the record after it as the model holds it."""

    actor: str
    kind: str
    order: int
    attempt: int
    step: int
    after: tuple[int, ...]
    """processState, lockedBy, attempt, failureCount, compensationFailures, the two steps' statuses,
    cancel requested, suspended, review, budget spent and limit, reply owed (the model's numbers)."""


@dataclass(frozen=True)
class Bounds:
    """The model's bounds the code's functions need: steps, ``SUPERVISOR_MAX_FAILURES``, stuck
    compensations before ``CompensationFailed``, ``RETRY_BUDGET``, whether the first step is reviewed
    and whether the budget is modelled."""

    steps: int = 1
    sup_max: int = 2
    comp_max: int = 2
    budget: int = 1
    review: bool = False
    budgeted: bool = False


class Disagreement(AssertionError):
    """The code refused a model step, or reached another record than the model."""


def parse(output: str) -> list[Change]:
    """The ``TRACE`` lines of a spin run's output, in order."""
    changes = []
    for match in TRACE.finditer(output):
        actor, kind, order, attempt, step = (int(x) for x in match.group(1).split())
        after = tuple(int(x) for x in match.group(2).split())
        changes.append(Change(ACTORS[actor], KINDS[kind], order, attempt, step, after))
    return changes


class Replay:
    """One order's record, driven by the model's changes through the code."""

    def __init__(self, bounds: Bounds) -> None:
        self.bounds = bounds
        self.clock = FakeClock()
        # Without the budget in the model, the code's is too large to run out.
        budget = bounds.budget if bounds.budgeted else UNBOUNDED_BUDGET
        self.deps: HostDeps = memory_deps(
            self.clock, RETRY_BUDGET=budget, AGENT_MAX_CALLS_PER_STEP=1, REVIEW_AMOUNT_ABOVE=1.0
        )
        handle_intake_message(
            order_body("o-1"),
            client=TEST_CLIENT,
            orders=self.deps.orders,
            states=self.deps.states,
            queues=self.deps.queues,
            clock=self.clock,
            steps=self.deps.settings.steps,
            starter=self.deps.settings.starter,
            queue_names=self.deps.settings.queues,
            definition=ORDER_V1,
        )
        self.names = [step.name for step in ORDER_V1.steps[: bounds.steps]]

    @property
    def record(self) -> StateRecord:
        """The record as stored now."""
        return self.deps.states.get(ORDER).item

    def play(self, change: Change) -> None:
        """Apply ``change`` with the code's function for it and compare the result with the model's.

        Raises:
            Disagreement: the code refuses the change, or its record differs from the model's.
        """
        self.clock.advance(1.0)
        try:
            if change.actor == "client":
                self._cancel()
            elif change.kind != "reply":  # the outbox entry: the model's own bookkeeping, not a move
                self._write(change)
        except IllegalTransition as refused:
            raise Disagreement(f"{change}: the code refuses it: {refused}") from refused
        got, want = self.project(self.record), self.expected(change.after)
        if got != want:
            raise Disagreement(f"{change}: the code's record is {got}, the model's {want}")

    def _write(self, change: Change) -> None:
        found = self.deps.states.get(ORDER)
        before = found.item
        after = self._transition(change, before.copied())
        if after is None:
            raise Disagreement(f"{change}: the code writes nothing")
        check_change(before, after, housekeeping=change.kind in ("suspend", "resume"))
        self.deps.states.replace(after, etag=found.etag)

    def _transition(self, change: Change, record: StateRecord) -> StateRecord | None:
        now = self.clock.now()
        owner = instance_id_for(ORDER, change.attempt) if change.attempt else None
        name = self.names[change.step] if change.step < len(self.names) else self.names[-1]
        match change.kind:
            case "claim":
                forward.claim(record, now=now, claim_timeout_s=30.0)
                record.begin_attempt(record.locked_by, now)
                return record
            case "start" | "release" | "await_review" | "no_budget":
                assert owner is not None
                return self._start(change, record, name, owner)
            case "fail":
                error = StepError(step=name, kind="permanent", code="refused", message="refused", calls=1)
                return compensation.begin_compensation(
                    record,
                    ORDER_V1,
                    completed=self._completed(change, record),
                    error=error,
                    timeout_s=8,
                    now=now,
                )
            case "begin_compensation":
                return compensation.begin_compensation(
                    record,
                    ORDER_V1,
                    completed=self._completed(change, record),
                    error=None,
                    timeout_s=8,
                    now=now,
                )
            case "finish" | "error":
                return self._finish(change, record, name)
            case "undo_start":
                assert owner is not None
                return compensation.start_undo(
                    record,
                    step_name=name,
                    undone=self._undone(change, record),
                    instance_id=owner,
                    timeout_s=8,
                    now=now,
                )
            case "compensated":
                return compensation.finish_compensation(
                    record,
                    ORDER_V1,
                    undone=self._undone(change, record),
                    failed=None,
                    also_failed=(),
                    now=now,
                )
            case "record_review":
                decision = REVIEW_DECISIONS[change.after[9]].value
                return forward.record_review(
                    record, step=name, decision=decision, decided_by="model", now=now, claim_timeout_s=30.0
                )
        return self._from_outside(change, record)

    def _from_outside(self, change: Change, record: StateRecord) -> StateRecord | None:
        now = self.clock.now()
        match change.kind:
            case "requeue" | "give_up":
                assert record.complete_by is not None
                done = supervision.recover(
                    record,
                    complete_by=record.complete_by,
                    now=now,
                    max_failures=self.bounds.sup_max,
                    requeue_delay_s=lambda _failures: 1.0,
                    poisoned=lambda _record, _error: None,
                    hold_by="model",
                )
                if (done.give_up or done.cancelled) != (change.kind == "give_up"):
                    raise Disagreement(
                        f"{change}: the code's recovery gives up: {done.give_up or done.cancelled}"
                    )
                return done.record
            case "compensation_requeue" | "compensation_failed":
                return supervision.recover_compensation(
                    record, now=now, max_failures=self.bounds.comp_max, requeue_delay_s=lambda _failures: 1.0
                )
            case "suspend" | "resume":
                action = OperatorAction.SUSPEND if change.kind == "suspend" else OperatorAction.RESUME
                self._allowed(change, action, record)
                if action is OperatorAction.SUSPEND:
                    return requests.suspend(record, by="model", by_name=None, now=now)
                return requests.resume(record, now=now)
            case "resubmit" | "operator_compensate" | "compensation_retry":
                self._allowed(change, OperatorAction.RESUBMIT, record)
                if change.kind == "resubmit":
                    return requests.new_attempt(record, now, self.bounds.budget)
                if change.kind == "operator_compensate":
                    return requests.compensate_error(record, now=now)
                return requests.retry_compensation(record, now=now)
            case "decide":
                if record.process_state is not ProcessState.AWAITING_REVIEW:
                    raise Disagreement(f"{change}: a review of a record not awaiting one")
                decision = REVIEW_DECISIONS[change.after[9]]
                return requests.decide_review(record, decision=decision, by="model", by_name=None, now=now)
        raise Disagreement(f"{change}: no transition of the code replays it")

    def _allowed(self, change: Change, action: OperatorAction, record: StateRecord) -> None:
        refusal = action_refusal(action, record.process_state, suspended=record.suspended_at is not None)
        if refusal is not None:
            raise Disagreement(f"{change}: the operator API refuses it: {refusal.code}")

    def _start(self, change: Change, record: StateRecord, name: str, owner: str) -> StateRecord | None:
        """The step start decision and its write, as the start_step activity makes them."""
        step_def = ORDER_V1.step(name)
        completed = self._completed(change, record)
        review = ReviewNeed.NEEDED if self.bounds.review and name == self.names[0] else ReviewNeed.NOT_NEEDED
        decision = decide_step_start(
            record, step_def, instance_id=owner, review=review, max_calls_per_step=1, completed=completed
        )
        expected = {
            "start": Start,
            "release": Suspended,
            "await_review": AwaitReview,
            "no_budget": OutOfBudget,
        }
        if not isinstance(decision, expected[change.kind]):
            raise Disagreement(f"{change}: the code decides {decision}")
        data = StartStepInput(
            order_id=ORDER,
            instance_id=owner,
            workflow_version=ORDER_V1.version,
            step=name,
            timeout_s=8,
            completed=completed,
            response_queue="agent-responses-model",
        )
        settings = self.deps.settings
        return forward.start_step(
            decision,
            record,
            ORDER_V1,
            data,
            steps=settings.steps,
            starter=settings.starter,
            breakers=settings.breakers,
            now=self.clock.now(),
        )

    def _finish(self, change: Change, record: StateRecord, name: str) -> StateRecord | None:
        completed = self._completed(change, record)
        if change.kind == "finish":
            owed = PendingReply(status="Processed")
            return forward.finish_order(
                record,
                ORDER_V1,
                target=ProcessState.PROCESSED,
                completed=completed,
                error=None,
                owed=owed,
                now=self.clock.now(),
            )
        error = StepError(step=name, kind="permanent", code="refused", message="refused", calls=1)
        return forward.finish_order(
            record,
            ORDER_V1,
            target=ProcessState.ERROR,
            completed=completed,
            error=error,
            owed=PendingReply(status="Failed"),
            now=self.clock.now(),
        )

    def _completed(self, change: Change, record: StateRecord) -> StepResult | None:
        """The step completion the model's write carries: a step Running in the record, Completed after."""
        for index, name in enumerate(self.names):
            now_completed = STEPS[change.after[5 + index]] is StepStatus.COMPLETED
            if now_completed and record.steps[name].status is StepStatus.RUNNING:
                return StepResult(step=name, result={"ref": name}, calls=1)
        return None

    def _undone(self, change: Change, record: StateRecord) -> tuple[UndoResult, ...]:
        """The undo the model's write records: a step Compensating in the record, Compensated after."""
        return tuple(
            UndoResult(step=name, result={}, calls=1)
            for index, name in enumerate(self.names)
            if STEPS[change.after[5 + index]] is StepStatus.COMPENSATED
            and record.steps[name].status is StepStatus.COMPENSATING
        )

    def _cancel(self) -> None:
        request = CancelOrder(schema_version=1, type="CancelOrder", order_id=client_order_id(ORDER))
        done = handle_cancel(
            request.to_json(),
            client=TEST_CLIENT,
            states=self.deps.states,
            queues=self.deps.queues,
            clock=self.clock,
        )
        if done.outcome not in (CancelOutcome.CANCELLED, CancelOutcome.REQUESTED):
            raise Disagreement(f"the code's cancel did not write: {done.outcome}")

    def project(self, record: StateRecord) -> tuple[Any, ...]:
        """The record as the model holds it (see :meth:`expected`)."""
        state = record.process_state
        review = record.review
        rv = (
            0
            if review is None
            else (1 if review.decision is None else 2 + list(ReviewDecision).index(review.decision))
        )
        budget = (record.retry_budget.spent, record.retry_budget.limit) if self.bounds.budgeted else (0, 0)
        return (
            state,
            record.locked_by is not None and state in LIVE,
            record.attempt,
            record.failure_count,
            record.compensation_failures,
            tuple(record.steps[name].status for name in self.names),
            record.cancel_requested_at is not None,
            record.suspended_at is not None,
            rv,
            *budget,
        )

    def expected(self, after: tuple[int, ...]) -> tuple[Any, ...]:
        """The model's record in the shape of :meth:`project`: the owner (lockedBy) of a live record only
        (the code keeps a finished attempt's lockedBy, the model clears it); the reply owed is not
        compared (the code's cancel delivers its reply at once)."""
        state = PROCESS[after[0]]
        budget = (after[10], after[11]) if self.bounds.budgeted else (0, 0)
        return (
            state,
            after[1] != 0 and state in LIVE,
            after[2],
            after[3],
            after[4],
            tuple(STEPS[after[5 + index]] for index in range(self.bounds.steps)),
            bool(after[7]),
            bool(after[8]),
            after[9],
            *budget,
        )


LIVE = frozenset({ProcessState.PROCESSING, ProcessState.AWAITING_REVIEW, ProcessState.COMPENSATING})


def replay(changes: Iterable[Change], bounds: Bounds) -> int:
    """Play a run's changes (one order) through the code; returns how many were played.

    Raises:
        Disagreement: at the first change the code refuses or ends elsewhere than the model.
    """
    run = Replay(bounds)
    played = 0
    for change in changes:
        run.play(change)
        played += 1
    return played
