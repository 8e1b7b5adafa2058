"""Scheduler — starter: the sweeper of ``Pending`` records that no one has started.

The submission claims a new order and starts its attempt at once (the fast path, :mod:`intake.submission`).
The starter's timer pass is the sweeper for everything that did not start that way: a process that died
between the create and the claim, an order re-queued by the supervisor after its backoff, an order deferred
for its dependency's open breaker, a resubmitted or resumed order, and everything when the fast path is
off (``CLAIM_ON_SUBMIT``). Each record it finds is claimed and started by the same conditional write the
fast path uses (:func:`orderflow.attempts.claim_and_start`); where both race, the ETag decides and the
loser does nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from orderflow.attempts import (
    CLAIMABLE_STATES,
    AttemptStarts,
    ClaimOutcome,
    FirstRequests,
    claim_and_start,
)
from orderflow.breaker import CircuitBreakers
from orderflow.clock import Clock
from orderflow.errors import InvalidContinuation
from orderflow.orchestration import OrchestrationClient
from orderflow.records import StateRecord
from orderflow.settings import Queues, Scans, Starter, Steps
from orderflow.stores.base import StateQuery, StateStore, Versioned
from orderflow.stores.paging import PageBudget, PageLimits

logger = logging.getLogger(__name__)


class Room(Protocol):
    """A host's room for more orchestrations, shared by every claimant in its process."""

    def take(self) -> bool:
        """Take room for one more orchestration; False when the process is full."""
        ...

    def started(self) -> None:
        """End a :meth:`take` whose claim started its orchestration, or may have (it raised)."""
        ...

    def give_back(self) -> None:
        """End a :meth:`take` that started nothing: its room is free again."""
        ...


@dataclass
class StarterReport:
    """What one starter pass did."""

    examined: int = 0
    claimed: list[str] = field(default_factory=list)
    lost_races: int = 0
    already_started: int = 0


def run_starter_pass(
    *,
    states: StateStore,
    client: OrchestrationClient,
    clock: Clock,
    starter: Starter,
    steps: Steps,
    scans: Scans,
    queue_names: Queues,
    response_queue: str,
    capacity: int,
    on_claimed: Callable[[Versioned[StateRecord]], None] | None = None,
    breakers: CircuitBreakers | None = None,
    first_requests: FirstRequests | None = None,
    room: Room | None = None,
) -> StarterReport:
    """Claim up to ``min(capacity, STARTER_BATCH)`` ready ``Pending`` records and start their attempts.

    Args:
        states: The state store.
        client: Durable client used to schedule orchestrations.
        clock: Time source.
        starter / steps: ``STARTER_BATCH`` and what a claim reads (:func:`orderflow.attempts.claim`).
        scans: The ``SCAN_*`` page bounds.
        queue_names: ``HOST_ID`` and the agents' request queues (the first requests).
        response_queue: Response queue agents must answer on for instances started here.
        capacity: How many more orchestrations this host may run now.
        on_claimed: Called with each claimed record and its ETag (the host's record cache), so the
            new orchestration's first write needs no point read.
        breakers: The dependencies' circuit breakers: a record whose first step waits for an open one
            is deferred, not claimed (:func:`orderflow.attempts.claim`).
        first_requests: Where to send the request of the step a claim started (module docstring);
            None: each orchestration sends its first request through its ``start_step`` activity.
        room: The process's room, when other claimants share it (the submission's claims): each
            record's room is taken just before its claim, and each take ended once the claim has (given
            back when it started nothing); the pass ends when the process is full. None: ``capacity``
            alone bounds the pass.

    Returns:
        A :class:`StarterReport`.
    """
    report = StarterReport()
    wanted = min(capacity, starter.STARTER_BATCH)
    if wanted <= 0:
        return report
    query = StateQuery(
        process_states=CLAIMABLE_STATES, unlocked=True, ready_at=clock.now(), not_suspended=True
    )
    starts = AttemptStarts(
        client=client,
        response_queue=response_queue,
        on_claimed=on_claimed,
        breakers=breakers,
        first_requests=first_requests,
    )
    continuation: str | None = None
    budget = PageBudget("starter", PageLimits.from_scans(scans))
    while len(report.claimed) < wanted and budget.allows_another():
        try:
            page = states.query(query, max_item_count=wanted, continuation=continuation)
        except InvalidContinuation:
            break
        budget.record(page)
        for found in page.items:
            if room is not None and not room.take():
                return report
            report.examined += 1
            outcome = ClaimOutcome.STARTED  # a claim that raises may have started: counted until a read
            try:
                outcome = claim_and_start(
                    found,
                    states=states,
                    clock=clock,
                    starter=starter,
                    steps=steps,
                    queue_names=queue_names,
                    starts=starts,
                )
            finally:
                _end_take(room, started=outcome is not ClaimOutcome.NOT_CLAIMED)
            if outcome is ClaimOutcome.NOT_CLAIMED:
                report.lost_races += 1
                continue
            if outcome is ClaimOutcome.ALREADY_STARTED:
                report.already_started += 1
            report.claimed.append(found.item.order_id)
            if len(report.claimed) >= wanted:
                break
        continuation = page.continuation
        if continuation is None:
            break
    return report


def _end_take(room: Room | None, *, started: bool) -> None:
    """End the take of one claim's room: :meth:`Room.started`, or :meth:`Room.give_back` when the claim
    started nothing."""
    if room is None:
        return
    if started:
        room.started()
    else:
        room.give_back()
