"""Scheduler — starter: claim ``Pending`` records and start attempt-specific orchestrations.

The claim (docs/design.md §3.2) is one conditional write that sets ``processState=Processing``,
``lockedBy={orderId}:{attempt+1}``, ``attempt+=1`` and a ``completeBy`` for the start-up, *before* the
orchestration is scheduled; two starters reading the same record race on its ETag and exactly one wins.
Scheduling an instance id that already exists is success, never a reason to start again: Durable
Functions 1.x ``start_new`` would silently replace it (docs/design.md §7). A process that dies between the
claim and the start leaves a ``Processing`` record whose ``completeBy`` expires: the supervisor
recovers it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol

from activities.contracts import OrchestrationInput
from orchestrators.workflow import ORDER_WORKFLOW
from orderflow import telemetry
from orderflow.clock import Clock
from orderflow.errors import ConcurrencyConflict, InvalidContinuation
from orderflow.records import ProcessState, StateRecord, instance_id_for
from orderflow.settings import Settings
from orderflow.stores.base import StateQuery, StateStore, Versioned

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class InstanceStatus:
    """What the runtime knows of an orchestration instance.

    Attributes:
        running: False once the instance completed, failed or was terminated.
        custom_status: The workflow's custom status (the step it waits on), if set.
    """

    running: bool
    custom_status: str | None = None


class OrchestrationClient(Protocol):
    """The durable client operations the roles use (durabletask locally, Durable Functions on Azure)."""

    def start(self, name: str, instance_id: str, payload: dict[str, Any]) -> bool:
        """Schedule a new instance.

        Returns:
            True if started now, False if an instance with this id already existed (not an error).
        """
        ...

    def get_status(self, instance_id: str) -> InstanceStatus | None:
        """The instance's status, or None if no such instance exists."""
        ...

    def raise_event(self, instance_id: str, name: str, payload: dict[str, Any]) -> None:
        """Raise external event ``name`` on the instance."""
        ...


@dataclass
class StarterReport:
    """What one starter pass did."""

    examined: int = 0
    claimed: list[str] = field(default_factory=list)
    lost_races: int = 0
    already_started: int = 0


CLAIMABLE_STATES = (ProcessState.PENDING, ProcessState.COMPENSATING)
"""States a starter claims when unlocked and ready: ``Pending`` (run the steps) and ``Compensating``
(resume the undo: the supervisor unlocked it after its attempt expired, or gave up forward progress)."""


def claim(
    states: StateStore, found: Versioned[StateRecord], clock: Clock, settings: Settings
) -> Versioned[StateRecord] | None:
    """Claim one ``Pending`` (or unlocked ``Compensating``) record with a conditional write.

    Args:
        states: The state store.
        found: The record as read, with its ETag.
        clock: Time source.
        settings: ``CLAIM_TIMEOUT_S``.

    Returns:
        The claimed record with its new ETag, or None when it is no longer claimable or another
        starter won the race.
    """
    record = found.item
    now = clock.now()
    if (
        record.process_state not in CLAIMABLE_STATES
        or record.locked_by is not None
        or (record.next_attempt_at is not None and record.next_attempt_at > now)
    ):
        return None
    claimed = record.model_copy(deep=True)
    # A Compensating record stays Compensating: the new attempt resumes the undo.
    if record.process_state is ProcessState.PENDING:
        claimed.process_state = ProcessState.PROCESSING
    claimed.attempt = record.attempt + 1
    claimed.locked_by = instance_id_for(record.order_id, claimed.attempt)
    claimed.complete_by = now + timedelta(seconds=settings.CLAIM_TIMEOUT_S)
    claimed.next_attempt_at = None
    claimed.updated_at = now
    claimed.begin_attempt(settings.HOST_ID, now)
    try:
        return states.replace(claimed, etag=found.etag)
    except ConcurrencyConflict:
        return None


def start_attempt(
    client: OrchestrationClient, record: StateRecord, *, response_queue: str, step_timeout_s: float
) -> bool:
    """Start the orchestration of a claimed record; an existing instance counts as started.

    Returns:
        True if a new instance was started, False if it already existed.
    """
    assert record.locked_by is not None
    payload = OrchestrationInput(
        order_id=record.order_id,
        attempt=record.attempt,
        workflow_version=record.workflow_version,
        completed_steps=tuple(record.completed_steps()),
        response_queue=response_queue,
        max_calls=record.retry_budget.remaining,
        step_timeout_s=step_timeout_s,
        compensate=record.process_state is ProcessState.COMPENSATING,
    ).to_payload()
    return client.start(ORDER_WORKFLOW, record.locked_by, payload)


def run_starter_pass(
    *,
    states: StateStore,
    client: OrchestrationClient,
    clock: Clock,
    settings: Settings,
    response_queue: str,
    capacity: int,
    on_claimed: Callable[[Versioned[StateRecord]], None] | None = None,
) -> StarterReport:
    """Claim up to ``min(capacity, STARTER_BATCH)`` ready ``Pending`` records and start their attempts.

    Args:
        states: The state store.
        client: Durable client used to schedule orchestrations.
        clock: Time source.
        settings: Starter settings.
        response_queue: Response queue agents must answer on for instances started here.
        capacity: How many more orchestrations this host may run now.
        on_claimed: Called with each claimed record and its ETag (the host's record cache), so the
            new orchestration's first write needs no point read.

    Returns:
        A :class:`StarterReport`.
    """
    report = StarterReport()
    wanted = min(capacity, settings.STARTER_BATCH)
    if wanted <= 0:
        return report
    query = StateQuery(process_states=CLAIMABLE_STATES, unlocked=True, ready_at=clock.now())
    continuation: str | None = None
    while len(report.claimed) < wanted:
        try:
            page = states.query(query, max_item_count=wanted, continuation=continuation)
        except InvalidContinuation:
            break
        for found in page.items:
            report.examined += 1
            won = claim(states, found, clock, settings)
            if won is None:
                report.lost_races += 1
                continue
            if on_claimed is not None:
                on_claimed(won)
            record = won.item
            telemetry.event(
                "claim", order_id=record.order_id, instance_id=record.locked_by, attempt=record.attempt
            )
            if not start_attempt(
                client, record, response_queue=response_queue, step_timeout_s=settings.STEP_TIMEOUT_S
            ):
                report.already_started += 1
            report.claimed.append(record.order_id)
            if len(report.claimed) >= wanted:
                break
        continuation = page.continuation
        if continuation is None:
            break
    return report
