"""Retention: purge the payment and customer data of orders finished more than the retention period ago.

A finished order (``Processed``, ``Compensated``, ``Cancelled``: no undo can run any more) keeps its data
for ``COMPENSATION_LOG_RETENTION_S`` after its last change (for audits and disputes). Then one pass
redacts its order document (customer id and name, amount, items) and purges its state record (step
results, compensation data and undo results, error and reply texts), keeping what the protocol needs
after the end: statuses, keys, the content hash, error kinds and codes, times. ``CompensationFailed`` and
``Error`` orders keep theirs for the operator who resolves them; the period starts at the resolution.
What each field holds, and why it is kept or purged: docs/data.md.

Two more passes reach what the stores do not. :func:`purge_expired_dead_letters` deletes dead letters
older than ``DEAD_LETTER_RETENTION_S`` (neither queue service expires one, and each holds a whole message);
:func:`purge_finished_histories` deletes the orchestration history of instances that ended and were created
more than ``COMPENSATION_LOG_RETENTION_S`` ago (activity inputs and outputs hold step results and agent
requests). :func:`run_retention_pass` runs the three.

Per record, the document is redacted first and the record marked second (``dataPurgedAt``,
``dataPurgeVersion``), each a conditional write: a pass that dies between the two, or whose record write
loses a race (412), leaves the record unmarked, and the next pass redoes both (a redacted document is
left as it is). A record a narrower purge marked (a lower ``dataPurgeVersion``) is purged again. A pass
is bounded like a sweep: ``max_records`` records, and the ``SCAN_*`` page bounds
(:mod:`orderflow.stores.paging`), so pages with nothing on them (Cosmos DB returns some) are followed,
but not for ever.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TypeVar

from orderflow import telemetry
from orderflow.clock import Clock
from orderflow.dependencies import Dependencies
from orderflow.errors import ConcurrencyConflict, InvalidContinuation, NotFound, TransientError
from orderflow.orchestration import OrchestrationHistories
from orderflow.protocol.conditional import Note, update
from orderflow.queues.base import MAX_DEAD_LETTER_SCAN, DeadLetter, DeadLetterQueues, QueueFactory
from orderflow.records import DATA_PURGE_VERSION, ProcessState, StateRecord
from orderflow.settings import Clients, Queues, Scans, Supervisor
from orderflow.stores.base import OrderStore, StateQuery, StateStore, Versioned
from orderflow.stores.paging import PageBudget, PageLimits
from orderflow.timeline import Actor
from orderflow.workflows import agent_names

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

PURGEABLE_STATES = (ProcessState.PROCESSED, ProcessState.COMPENSATED, ProcessState.CANCELLED)
"""Finished for good: no undo can run any more."""


@dataclass
class PurgeReport:
    """What one retention pass did: records purged, and records that moved meanwhile (left for later)."""

    purged: int = 0
    lost_races: int = 0


def purge_expired_logs(
    *,
    states: StateStore,
    orders: OrderStore,
    clock: Clock,
    supervisor: Supervisor,
    scans: Scans,
    max_records: int = 100,
) -> PurgeReport:
    """Purge the payment and customer data of orders finished more than the retention period ago.

    Args:
        states: The state store.
        orders: The order store (each purged record's document is redacted).
        clock: Time source (UTC).
        supervisor: ``COMPENSATION_LOG_RETENTION_S`` (0 disables the purge).
        scans: The ``SCAN_*`` page bounds.
        max_records: Most records this pass looks at (each costs up to two writes).

    Returns:
        A :class:`PurgeReport`.

    Raises:
        TransientError: a store is unavailable; the next pass starts over.
    """
    report = PurgeReport()
    if supervisor.COMPENSATION_LOG_RETENTION_S <= 0:
        return report
    now = clock.now()
    query = StateQuery(
        process_states=PURGEABLE_STATES,
        updated_before=now - timedelta(seconds=supervisor.COMPENSATION_LOG_RETENTION_S),
        purge_version_below=DATA_PURGE_VERSION,
    )
    # Purged records leave the result, so each pass starts again from the first page.
    budget = PageBudget("retention", PageLimits.from_scans(scans))
    continuation: str | None = None
    examined = 0
    while examined < max_records and budget.allows_another():
        try:
            page = states.query(query, max_item_count=max_records - examined, continuation=continuation)
        except InvalidContinuation:
            break
        budget.record(page)
        for found in page.items:
            if _purge(found, states=states, orders=orders, now=now):
                report.purged += 1
            else:
                report.lost_races += 1
        examined += len(page.items)
        continuation = page.continuation
        if continuation is None:
            break
    if report.purged:
        telemetry.event("retention.purged", records=report.purged)
    return report


def _purge(found: Versioned[StateRecord], *, states: StateStore, orders: OrderStore, now: datetime) -> bool:
    """Redact the order's document, then purge and mark its record; False if either write lost a race."""
    order_id = found.item.order_id
    try:
        orders.redact(order_id, at=now)
    except NotFound:
        # Submission writes the document before the record; a record without one has nothing to redact.
        logger.warning("retention: order %s has a state record but no order document", order_id)
    except ConcurrencyConflict:
        return False  # another pass is redacting it

    def purge(record: StateRecord) -> StateRecord:
        record.purge_data(now)
        return record

    try:
        update(
            states,
            order_id,
            purge,
            clock=None,  # a purge keeps every time, ``updatedAt`` included
            actor=Note(Actor("retention"), action="purge", at=now),
            found=found,
            attempts=1,
            housekeeping=True,
        )
    except ConcurrencyConflict:
        return False
    return True


DEAD_LETTER_PEEK = 32
"""Dead letters one look at a queue reads (Storage peeks at most 32), without changing any."""


def dead_letter_sources(clients: Clients, queue_names: Queues) -> list[str]:
    """The queues whose dead letters the retention pass deletes: those orderflow consumes, and so
    dead-letters on: every registered client's inbound queue, every agent's request queue, the response
    queue and this host's own (``AGENT_RESPONSES_QUEUE-<HOST_ID>`` locally). Reply queues are the
    clients' to consume (docs/data.md)."""
    names = [client.inbound_queue for client in clients.clients()]
    names += [queue_names.agent_queue(agent) for agent in agent_names()]
    names += [queue_names.AGENT_RESPONSES_QUEUE, queue_names.response_queue()]
    return list(dict.fromkeys(names))


def purge_expired_dead_letters(
    *,
    queues: QueueFactory,
    dead_letters: DeadLetterQueues,
    names: Iterable[str],
    clock: Clock,
    supervisor: Supervisor,
) -> int:
    """Delete the dead letters of ``names`` dead-lettered more than ``DEAD_LETTER_RETENTION_S`` ago.

    Each queue is first peeked (nothing changes, so a pass with nothing to delete disturbs no operator);
    only when its oldest dead letters are expired are they received and deleted, at most as many as the
    peek found expired, and again while whole peeks are expired, up to
    :data:`~orderflow.queues.base.MAX_DEAD_LETTER_SCAN` a queue.

    Args:
        queues: Peeks at dead letters (:meth:`QueueFactory.dead_letters`).
        dead_letters: Deletes them (:meth:`DeadLetterQueues.remove_dead_letters`).
        names: The queues whose dead letters to look at (:func:`dead_letter_sources`).
        clock: Time source (UTC).
        supervisor: ``DEAD_LETTER_RETENTION_S`` (0 never deletes).

    Returns:
        The number of dead letters deleted.

    Raises:
        TransientError, PermanentError: a queue failed (what was deleted before stays deleted).
    """
    if supervisor.DEAD_LETTER_RETENTION_S <= 0:
        return 0
    cutoff = clock.now() - timedelta(seconds=supervisor.DEAD_LETTER_RETENTION_S)

    def expired(dead: DeadLetter) -> bool:
        return dead.dead_lettered_at < cutoff

    deleted = 0
    for name in names:
        removed_here = 0
        while removed_here < MAX_DEAD_LETTER_SCAN:
            peeked = queues.dead_letters(name, max_messages=DEAD_LETTER_PEEK)
            due = sum(1 for dead in peeked if expired(dead))
            if not due:
                break
            removed = len(dead_letters.remove_dead_letters(name, expired, most=due))
            removed_here += removed
            if removed < due or due < DEAD_LETTER_PEEK:
                break  # the rest is younger, or another remover took some
        deleted += removed_here
    if deleted:
        telemetry.event("retention.dead_letters_deleted", dead_letters=deleted)
    return deleted


def purge_finished_histories(
    *, histories: OrchestrationHistories, clock: Clock, supervisor: Supervisor
) -> int:
    """Delete the orchestration history of the instances that ended (completed, failed or terminated)
    and were created more than ``COMPENSATION_LOG_RETENTION_S`` ago.

    An attempt's history holds its activities' inputs and outputs: step results (charge ids, amounts)
    and agent requests (customer, amount, items). The order's state record keeps what the protocol
    needs, so nothing reads an ended instance's history. A running instance is left alone; it is
    deleted by the first pass after it ends.

    Args:
        histories: The orchestration runtime's purge.
        clock: Time source (UTC).
        supervisor: ``COMPENSATION_LOG_RETENTION_S`` (0 never deletes).

    Returns:
        The number of instances deleted.

    Raises:
        TransientError: the runtime is unavailable; the next pass tries again.
    """
    if supervisor.COMPENSATION_LOG_RETENTION_S <= 0:
        return 0
    cutoff = clock.now() - timedelta(seconds=supervisor.COMPENSATION_LOG_RETENTION_S)
    deleted = histories.purge_ended_before(cutoff)
    if deleted:
        telemetry.event("retention.histories_deleted", instances=deleted)
    return deleted


@dataclass
class RetentionReport:
    """What one :func:`run_retention_pass` did (None: that part did not run, or failed and was logged)."""

    records: PurgeReport | None = None
    dead_letters: int | None = None
    histories: int | None = None


def run_retention_pass(
    deps: Dependencies,
    *,
    supervisor: Supervisor,
    scans: Scans,
    stores: bool = True,
    dead_letter_queues: Sequence[str] = (),
    histories: OrchestrationHistories | None = None,
) -> RetentionReport:
    """One retention pass: the stores (:func:`purge_expired_logs`), the dead letters of
    ``dead_letter_queues`` (:func:`purge_expired_dead_letters`) and the orchestration history
    (:func:`purge_finished_histories`). A part whose service is unavailable (``TransientError``) is logged
    and left for the next pass; the other parts still run.

    Args:
        deps: The stores, queues (``deps.dead_letters`` deletes dead letters; None skips them) and clock.
        supervisor: The retention periods.
        scans: The page sizes of the stores' scans.
        stores: Purge the stores (the local host's processes that are not the supervisor leader do not).
        dead_letter_queues: The queues whose dead letters to delete (:func:`dead_letter_sources`).
        histories: The orchestration runtime's purge, or None (this process runs no orchestrations).
    """
    report = RetentionReport()
    dead_letters = deps.dead_letters
    if stores:
        report.records = _unless_unavailable(
            "the stores",
            lambda: purge_expired_logs(
                states=deps.states,
                orders=deps.orders,
                clock=deps.clock,
                supervisor=supervisor,
                scans=scans,
            ),
        )
    if dead_letters is not None and dead_letter_queues:
        report.dead_letters = _unless_unavailable(
            "the dead letters",
            lambda: purge_expired_dead_letters(
                queues=deps.queues,
                dead_letters=dead_letters,
                names=dead_letter_queues,
                clock=deps.clock,
                supervisor=supervisor,
            ),
        )
    if histories is not None:
        report.histories = _unless_unavailable(
            "the orchestration history",
            lambda: purge_finished_histories(histories=histories, clock=deps.clock, supervisor=supervisor),
        )
    return report


def _unless_unavailable(part: str, run: Callable[[], _T]) -> _T | None:
    """``run()``, or None when a service it needs is unavailable (logged: the next pass tries again)."""
    try:
        return run()
    except TransientError as exc:
        logger.warning("retention: %s not purged this pass: %s", part, exc)
        return None
