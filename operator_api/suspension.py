"""An operator suspends an order, or resumes it: a flag on the record, not a state.

Suspension is a flag (``suspendedAt``, ``suspendedBy``, ``suspendedByName``) because it is orthogonal to
where the order is: a ``Pending``, ``Processing``, ``AwaitingReview`` or ``Compensating`` order is
suspended, and resumed in the same place. A ``Suspended`` state would have to remember the state it
came from, add transitions from and back to every live state, and every reader that asks "is it
running?" would have to learn it. With the flag the state machine is untouched, and the three places
that could start a step check it (docs/operations.md#suspended-orders):

- the starter's query and claim skip a suspended record;
- the running attempt's next ``start_step`` decides :class:`orderflow.protocol.step_start.Suspended`: it
  records the previous step's completion, ends its tenure and leaves the record ``Pending`` and unlocked;
- the supervisor's sweep skips a suspended record (an attempt that died while suspended is recovered
  after the resume).

A resume clears the flag and makes a ``Pending`` record ready at once. Which orders may be suspended
or resumed is :func:`orderflow.operator_actions.action_refusal`'s rule (the bulk commands check it too).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from operator_api.answers import Refused
from operator_api.decisions import apply_decision
from orderflow import telemetry
from orderflow.clock import Clock
from orderflow.operator_actions import OperatorAction, action_refusal
from orderflow.operator_auth import Principal
from orderflow.protocol.holds import uncommitted_holds
from orderflow.protocol.transitions import requests
from orderflow.queues.base import QueueFactory
from orderflow.records import StateRecord
from orderflow.stores.base import StateStore


@dataclass(frozen=True)
class SuspensionOutcome:
    """The record written (or read, when ``refusal`` is set, 409: nothing written) and its ETag."""

    record: StateRecord
    etag: str
    refusal: Refused | None = None


def _refusal(action: OperatorAction, record: StateRecord) -> tuple[str, str] | None:
    suspended, by = record.suspended_at is not None, record.suspended_by
    refused = action_refusal(action, record.process_state, suspended=suspended, suspended_by=by)
    return None if refused is None else (refused.code, refused.detail)


def _suspend(record: StateRecord, principal: Principal, now: datetime) -> tuple[str, str] | None:
    refused = _refusal(OperatorAction.SUSPEND, record)
    if refused is not None:
        return refused
    requests.suspend(record, by=principal.audit_id, by_name=principal.display_name or None, now=now)
    return None


def _resume(record: StateRecord, now: datetime) -> tuple[str, str] | None:
    refused = _refusal(OperatorAction.RESUME, record)
    if refused is not None:
        return refused
    requests.resume(record, now=now)
    return None


def set_suspension(
    order_id: str,
    principal: Principal,
    *,
    suspend: bool,
    if_match: str | None,
    states: StateStore,
    queues: QueueFactory,
    clock: Clock,
) -> SuspensionOutcome:
    """Suspend (``suspend=True``) or resume an order with one ETag-conditional write. Its ``completeBy``
    stays: an attempt waiting for a review is healthy and owes nothing for this.

    Raises:
        StaleVersion: ``if_match`` given and no longer the record's ETag; nothing written.
        InvalidMessage: ``UnknownOrder``.
        TransientError, ConcurrencyConflict: retry.
    """
    what = "suspend" if suspend else "resume"

    def decide(record: StateRecord) -> tuple[tuple[str, str] | None, bool]:
        now = clock.now()
        refused = _suspend(record, principal, now) if suspend else _resume(record, now)
        return refused, refused is None

    applied = apply_decision(
        principal=principal,
        role="operator",
        states=states,
        queues=queues,
        clock=clock,
        order_id=order_id,
        decide=decide,
        what=what,
        grace_s=None,  # it asks nothing of the order: an owner waiting for a review keeps waiting
        if_match=if_match,
        housekeeping=True,  # a flag, not a state: a resume may clear it on an order that finished meanwhile
    )
    if applied.decision is not None:
        refusal, detail = applied.decision
        telemetry.event("operator.refused", order_id=order_id, operator=principal.audit_id, reason=refusal)
        refused = Refused(409, refusal, detail, etag=applied.etag)
        return SuspensionOutcome(applied.record, applied.etag, refused)
    telemetry.event(f"operator.{what}", order_id=order_id, operator=principal.audit_id)
    holds = uncommitted_holds(applied.record) if suspend else []
    if holds:
        # The services undo these at their expiry, suspended or not: the order will have to re-acquire.
        step, hold = holds[0]
        telemetry.alert(
            "holds_expire_while_suspended",
            order_id=order_id,
            step=step,
            expires_at=hold.expires_at.isoformat(),
        )
    return SuspensionOutcome(applied.record, applied.etag)
