"""The supervisor's sweep: find orders whose ``completeBy`` has passed and recover or fail them.

The state store deliberately does not distinguish a step that timed out from a process that crashed
(docs/design.md §3.4): either way the record is ``Processing`` with an expired ``completeBy``. For each such
record the supervisor makes one conditional write on the ETag it read (§3.5; :mod:`supervisor.recovery`):

- ``failureCount += 1``;
- below ``SUPERVISOR_MAX_FAILURES``, and with retry budget left: back to ``Pending``, ``lockedBy = null``,
  ``nextAttemptAt = now + delay`` so a starter claims a new attempt later. The delay is exponential and
  capped (``SUPERVISOR_BACKOFF_INITIAL_S`` .. ``SUPERVISOR_BACKOFF_MAX_S``) for the first failures, and
  ``SUPERVISOR_EXTENDED_BACKOFF_S`` once ``failureCount`` reaches ``SUPERVISOR_EXTENDED_BACKOFF_AFTER``:
  an order that kept failing is waiting on something that seconds will not fix (an outage downstream), so
  it waits long enough for that to clear instead of burning its last attempts and retry budget;
- otherwise forward progress is over: ``Compensating``, unlocked and ready, with ``lastError`` naming
  why (``too_many_failures`` or ``retry_budget_exhausted``) and an operator alert; a starter claims an
  attempt that undoes the completed steps and replies (docs/design.md §4).

An expired ``Compensating`` record (its undoing attempt died or timed out) is unlocked the same way for
another attempt to resume the undo, counted in ``compensationFailures``; at ``SUPERVISOR_MAX_FAILURES`` it
becomes ``CompensationFailed`` with an alert and a ``CompensationFailed`` reply.

Clearing ``lockedBy`` fences the expired attempt: any write it still tries changes nothing (§3.3).
Several supervisors may sweep at once; the ETag makes at most one win each record, and the loser skips.
Correctness never depends on the supervisor lease (:mod:`devhost.lease`), which only saves work.

**One clock.** Every ``completeBy`` is written on the state store's time (each host's clock is a
:class:`~orderflow.store_clock.StoreClock`), and a deadline is overdue only once the store's time has
certainly passed it: the earliest side of this host's interval (:func:`overdue_cutoff`). So no host's
clock, this one's included, makes the supervisor recover an attempt before its deadline.

**The completeBy window.** A *scan* reads ``Processing`` records with ``completeBy < cutoff``, the cutoff
being the store's earliest time when the scan started; there is deliberately no lower bound. A lower bound
such as ``now - SUPERVISOR_WINDOW_S`` would hide, forever, every record stuck for longer than the window:
exactly the ones that most need recovering (after an outage of the supervisors, or behind a backlog larger
than a few sweeps). The cutoff is pinned for the whole scan, across sweeps, for two reasons: a continuation
token is valid only for the exact query that issued it (the stores bind tokens to a fingerprint of the
query, its bound included), and a fixed bound makes a scan finite (records that expire meanwhile belong to
the next scan instead of extending this one). The window is not used to prioritise recent records either:
Cosmos DB serves the query streamably, and resumably, only without ORDER BY (orderflow.stores.cosmos), so
the scan takes the store's stable order (id order in memory, resource order in Cosmos DB), and every record
it meets is overdue anyway. A record that expires during a scan waits for the scan's remaining sweeps, at
most ``ceil(expired / SUPERVISOR_MAX_RECORDS)`` intervals.

**Bounded sweeps.** A sweep examines at most ``SUPERVISOR_MAX_RECORDS`` records, asks for pages of
``min(SUPERVISOR_PAGE_SIZE, budget left)`` so it never reads a record it will not examine, and stops early
when ``keep_going`` says so (the host passes "still leader"). It also reads at most ``SCAN_MAX_PAGES``
pages, runs at most ``SCAN_MAX_S`` seconds (checked before each page) and ends at ``SCAN_MAX_EMPTY_PAGES``
empty pages in a row, each with a fresh token, which it reports as an anomaly
(:mod:`orderflow.stores.paging`): records alone do not bound a store that answers empty pages, and the
sweep shares its thread with the lease renewal and the reply relay. The :class:`SweepCursor` carries the scan
from one sweep to the next: the cutoff and the token of the next page, advanced only once every record of
a page was examined, so a sweep cut short re-reads its last page (recovered records have left the result,
the others are examined again, harmlessly). The stores' tokens are positions (the last id read in memory,
a resource position in Cosmos DB), not offsets, so records leaving the result set do not shift later
pages. Following docs/design.md §7, a scan ends only on a null token; a token the store rejects
(``InvalidContinuation``) or one seen before in the same scan restarts the scan from the start, once per
sweep, and the report says so.

**Every scan ends.** Only two ends of a sweep keep the scan's position for the next one: its record bound
(it examined ``SUPERVISOR_MAX_RECORDS`` records and decided some of them: the scan is moving through a
finite backlog) and a lost leadership. Every other unfinished end starts the next sweep on a new scan, from
the first page, with the cutoff of its own start (:func:`_end_unfinished_scan`): a page bound (a store
that keeps answering pages without an end would otherwise pin the cutoff, and hide every record that
expires after it, for as long as it misbehaves), a transient failure of the store (a page that always
fails would do the same), a second rejected or repeated token, or a record bound reached with nothing
decided (a store answering records its query does not match). Recovered records
have left the result, so starting over loses no progress; the records a new scan re-reads first are only
those that could not be recovered. So a record that expires while the store misbehaves is in the query of
the next sweep, and is recovered within one ``SUPERVISOR_INTERVAL_S`` plus that sweep's own bounded scan,
provided the store's answers reach it before they stop ending (past that point no scan can reach it). The
store's misbehaviour itself (``SCAN_MAX_EMPTY_PAGES`` empty pages in a row,
or a token rejected or repeated again after a restart) raises the ``scan_anomaly`` alert, counted per
reason and ``ALERT_WINDOW_S`` (:data:`orderflow.alerts.ALERT_KINDS`), on every sweep it ends.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from orderflow import telemetry, tracing
from orderflow.clock import Clock
from orderflow.errors import InvalidContinuation, OrderflowError, TransientError
from orderflow.queues.base import QueueFactory
from orderflow.records import StateRecord
from orderflow.settings import Scans, Supervisor
from orderflow.stores.base import StateStore, Versioned
from orderflow.stores.paging import PageBudget, PageLimits, PageStop
from supervisor.poison import VersionFailures
from supervisor.recovery import Recovery, expired_query, is_extended, overdue_cutoff, recover

logger = logging.getLogger(__name__)

RESTARTS_PER_SWEEP = 1
"""Scans one sweep restarts after a rejected or repeated token before it gives up until the next sweep."""


class ScanAnomaly(StrEnum):
    """A store anomaly that ended a sweep's scan unfinished: the ``reason`` of its ``scan_anomaly`` alert."""

    EMPTY_PAGES = "empty_pages"
    """``SCAN_MAX_EMPTY_PAGES`` empty pages in a row, each with a new continuation token."""
    TOKEN_REPEATED = "token_repeated"
    """A continuation token came back again in the scan that restarted after a repeated one."""
    TOKEN_REJECTED = "token_rejected"
    """The store rejected a token again in the scan that restarted after a rejected one."""


@dataclass
class SweepReport:
    """What one sweep did.

    Attributes:
        scanned: Records examined.
        pages: Query pages read.
        requeued: Order ids put back to ``Pending`` (recovered for another attempt).
        gave_up: Order ids whose forward progress was given up (now ``Compensating``) or whose
            compensation was (now ``CompensationFailed``); alert raised.
        extended_backoff: Those of ``requeued`` that wait ``SUPERVISOR_EXTENDED_BACKOFF_S``.
        held: Order ids the poison guard held for an operator (:mod:`supervisor.poison`); alert raised.
        skipped: Records examined and left alone (no longer expired when looked at).
        lost_races: Records another writer moved first (its conditional write won).
        failed: Order ids whose recovery failed permanently (logged; the scan moved past them).
        restarted_scan: A rejected or repeated continuation token restarted the scan from the start.
        resumed: The sweep continued a scan that an earlier sweep left unfinished.
        scan_complete: The scan reached its last page; the next sweep starts a new one.
        stopped_early: ``keep_going`` returned False (leadership lost); the cursor keeps the position.
        bounded: Why the sweep stopped at a page bound (``SCAN_MAX_PAGES``, ``SCAN_MAX_S``, or
            ``SCAN_MAX_EMPTY_PAGES`` empty pages in a row: an anomaly), or None; the scan then ends, so
            the next sweep starts a new one.
        anomaly: The store anomaly that ended the scan (``scan_anomaly`` alert raised), or None.
        cutoff: The ``completeBy`` bound of the scan, UTC.
    """

    scanned: int = 0
    pages: int = 0
    requeued: list[str] = field(default_factory=list)
    gave_up: list[str] = field(default_factory=list)
    extended_backoff: list[str] = field(default_factory=list)
    held: list[str] = field(default_factory=list)
    skipped: int = 0
    lost_races: int = 0
    failed: list[str] = field(default_factory=list)
    restarted_scan: bool = False
    resumed: bool = False
    scan_complete: bool = False
    stopped_early: bool = False
    bounded: PageStop | None = None
    anomaly: ScanAnomaly | None = None
    cutoff: datetime | None = None

    @property
    def recovered(self) -> list[str]:
        """Order ids this sweep decided: re-queued, held or given up."""
        return [*self.requeued, *self.held, *self.gave_up]


@dataclass
class SweepCursor:
    """Where a scan stands between sweeps; keep one per supervisor loop (not thread-safe).

    Attributes:
        cutoff: ``completeBy`` bound of the scan in progress (UTC), or None when no scan is in progress.
        token: Continuation token of the scan's next page, or None for its first page.
        seen: Tokens already used in this scan (a repeat restarts it).
        scans: Scans started through this cursor, restarts included.
        failures: The supervisor's window of failures by workflow version (:mod:`supervisor.poison`),
            made on first use and kept across scans: as long as the cursor is.
    """

    cutoff: datetime | None = None
    token: str | None = None
    seen: set[str] = field(default_factory=set)
    scans: int = 0
    failures: VersionFailures | None = None

    def failures_for(self, supervisor: Supervisor) -> VersionFailures:
        """:attr:`failures`, made from the ``POISON_VERSION_*`` settings on first use."""
        if self.failures is None:
            self.failures = VersionFailures.from_section(supervisor)
        return self.failures

    @property
    def in_progress(self) -> bool:
        """Whether a scan was started and has not reached its last page."""
        return self.cutoff is not None

    def start(self, cutoff: datetime) -> None:
        """Begin a new scan of records whose ``completeBy`` is before ``cutoff``."""
        self.cutoff = cutoff
        self.token = None
        self.seen = set()
        self.scans += 1

    def reset(self) -> None:
        """Forget the scan in progress; the next sweep starts a new one."""
        self.cutoff = None
        self.token = None
        self.seen = set()


def run_sweep(
    *,
    states: StateStore,
    queues: QueueFactory,
    clock: Clock,
    supervisor: Supervisor,
    scans: Scans,
    host_id: str,
    cursor: SweepCursor | None = None,
    keep_going: Callable[[], bool] | None = None,
) -> SweepReport:
    """One bounded sweep over ``Processing`` records whose ``completeBy`` has passed.

    Args:
        states: The state store.
        queues: Queues, for the ``Failed`` reply of an order given up.
        clock: Time source.
        supervisor: ``SUPERVISOR_PAGE_SIZE``, ``SUPERVISOR_MAX_RECORDS`` and the recovery thresholds.
        scans: The ``SCAN_*`` page bounds (:mod:`orderflow.stores.paging`).
        host_id: This supervisor's host, in the timelines of the records it recovers.
        cursor: The scan to continue (updated in place); None scans from the start with a fresh cursor,
            which is what a stateless host (an Azure timer) does.
        keep_going: Asked before each record; False ends the sweep where it stands (lost leadership).

    Returns:
        A :class:`SweepReport`.

    Raises:
        TransientError: the store is unavailable; the cursor is reset, so the next sweep starts a new scan.
    """
    cursor = cursor if cursor is not None else SweepCursor()
    report = SweepReport()
    _start_or_resume(cursor, report, clock)
    pages = PageBudget("sweep", PageLimits.from_scans(scans))
    try:
        _scan(
            report,
            cursor,
            pages,
            states,
            queues=queues,
            clock=clock,
            supervisor=supervisor,
            host_id=host_id,
            keep_going=keep_going,
        )
    except TransientError:
        # A page that keeps failing must not hold every later sweep on this scan's cutoff either; the
        # records recovered so far have left the result, so starting over costs only a re-read.
        cursor.reset()
        raise
    report.bounded = pages.stopped
    _end_unfinished_scan(cursor, report, supervisor)
    _log_sweep(report)
    telemetry.record_stuck_orders(report.scanned - report.skipped)
    return report


def _scan(
    report: SweepReport,
    cursor: SweepCursor,
    pages: PageBudget,
    states: StateStore,
    *,
    queues: QueueFactory,
    clock: Clock,
    supervisor: Supervisor,
    host_id: str,
    keep_going: Callable[[], bool] | None,
) -> None:
    """Read and examine the cursor's scan page by page into ``report``, within the sweep's bounds.

    Raises:
        TransientError: the store is unavailable.
    """
    restarts = 0
    recoverer = _Recoverer(states, queues, clock, supervisor, host_id, cursor.failures_for(supervisor))
    while report.scanned < supervisor.SUPERVISOR_MAX_RECORDS and cursor.cutoff is not None:
        if not pages.allows_another() or _told_to_stop(report, keep_going):
            break
        budget = min(supervisor.SUPERVISOR_PAGE_SIZE, supervisor.SUPERVISOR_MAX_RECORDS - report.scanned)
        try:
            page = states.query(
                expired_query(cursor.cutoff), max_item_count=budget, continuation=cursor.token
            )
        except InvalidContinuation:
            restarts += 1
            if not _restart_scan(cursor, report, ScanAnomaly.TOKEN_REJECTED, restarts, clock=clock):
                break
            continue
        report.pages += 1
        pages.record(page)
        _examine_page(report, page.items, recoverer, keep_going)
        if report.stopped_early:
            break
        token = page.continuation
        if token is None:
            cursor.reset()
            report.scan_complete = True
            break
        if token in cursor.seen:
            restarts += 1
            if not _restart_scan(cursor, report, ScanAnomaly.TOKEN_REPEATED, restarts, clock=clock):
                break
            continue
        cursor.seen.add(token)
        cursor.token = token


def _end_unfinished_scan(cursor: SweepCursor, report: SweepReport, supervisor: Supervisor) -> None:
    """End the scan of a sweep that stopped short of its last page, unless it may resume; alert an anomaly.

    The scan keeps its position only after a lost leadership, or at the record bound with some record
    recovered, held or given up by this sweep (a finite backlog being worked through: a lost race or a
    failure decides nothing, and a store answering stale copies without end would otherwise pin the
    cutoff). Otherwise the cursor is reset, so the next sweep starts a new scan whose cutoff covers every
    record that expired meanwhile (the module's "Every scan ends").
    """
    if report.bounded is PageStop.EMPTY_PAGES:
        report.anomaly = ScanAnomaly.EMPTY_PAGES
    at_record_bound = report.scanned >= supervisor.SUPERVISOR_MAX_RECORDS and report.bounded is None
    resumable = report.stopped_early or (at_record_bound and bool(report.recovered))
    if cursor.in_progress and not resumable:
        logger.warning(
            "supervisor scan: ended unfinished (bounded=%s, scanned=%s, skipped=%s); the next sweep "
            "starts a new scan",
            report.bounded,
            report.scanned,
            report.skipped,
        )
        cursor.reset()
    if report.anomaly is not None:
        telemetry.alert(
            "scan_anomaly",
            loop="sweep",
            reason=report.anomaly,
            pages=report.pages,
            scanned=report.scanned,
            cutoff=_iso(report.cutoff),
        )


def _start_or_resume(cursor: SweepCursor, report: SweepReport, clock: Clock) -> None:
    """Continue the cursor's scan in progress, or start a new one with the cutoff of now."""
    if cursor.in_progress:
        report.resumed = True
    else:
        cursor.start(overdue_cutoff(clock))
    report.cutoff = cursor.cutoff


def _told_to_stop(report: SweepReport, keep_going: Callable[[], bool] | None) -> bool:
    """Whether ``keep_going`` ends the sweep here (the report then says it stopped early)."""
    if keep_going is not None and not keep_going():
        report.stopped_early = True
        return True
    return False


def _examine_page(
    report: SweepReport,
    records: list[Versioned[StateRecord]],
    recoverer: _Recoverer,
    keep_going: Callable[[], bool] | None,
) -> None:
    """Recover each record of a page into ``report``, unless ``keep_going`` stops the sweep first."""
    for found in records:
        if _told_to_stop(report, keep_going):
            break
        report.scanned += 1
        _recover_into(report, found, recoverer)


def _log_sweep(report: SweepReport) -> None:
    """One log line for a sweep that decided, failed or restarted anything."""
    if report.recovered or report.failed or report.restarted_scan or report.bounded:
        logger.info(
            "supervisor sweep: scanned=%s pages=%s requeued=%s held=%s gave_up=%s extended=%s "
            "lost_races=%s failed=%s resumed=%s complete=%s restarted=%s bounded=%s",
            report.scanned,
            report.pages,
            len(report.requeued),
            len(report.held),
            len(report.gave_up),
            len(report.extended_backoff),
            report.lost_races,
            len(report.failed),
            report.resumed,
            report.scan_complete,
            report.restarted_scan,
            report.bounded,
        )


def _restart_scan(
    cursor: SweepCursor,
    report: SweepReport,
    anomaly: ScanAnomaly,
    restarts: int,
    *,
    clock: Clock,
) -> bool:
    """Restart the scan from its first page, at most :data:`RESTARTS_PER_SWEEP` times per sweep.

    Args:
        anomaly: What happened to the token (``TOKEN_REJECTED`` or ``TOKEN_REPEATED``); once the restarts
            are spent it becomes the report's :attr:`SweepReport.anomaly`.

    Returns:
        True to go on with the restarted scan; False to end the sweep (the cursor is reset, so the
        next sweep starts a new scan).
    """
    report.restarted_scan = True
    why = (
        "continuation token rejected"
        if anomaly is ScanAnomaly.TOKEN_REJECTED
        else "continuation token repeated"
    )
    if restarts > RESTARTS_PER_SWEEP:
        logger.warning("supervisor scan: %s again; ending the sweep, the next one starts over", why)
        cursor.reset()
        report.anomaly = anomaly
        return False
    logger.warning("supervisor scan: %s; restarting the scan from the start", why)
    cursor.start(overdue_cutoff(clock))
    report.cutoff = cursor.cutoff
    return True


@dataclass(frozen=True)
class _Recoverer:
    """What one sweep recovers records with: where it writes and replies, and what it decides by."""

    states: StateStore
    queues: QueueFactory
    clock: Clock
    supervisor: Supervisor
    host_id: str
    failures: VersionFailures

    def recover(self, found: Versioned[StateRecord]) -> Recovery:
        """:func:`supervisor.recovery.recover` of ``found``."""
        return recover(
            self.states,
            found,
            queues=self.queues,
            clock=self.clock,
            supervisor=self.supervisor,
            host_id=self.host_id,
            failures=self.failures,
        )


def _recover_into(report: SweepReport, found: Versioned[StateRecord], recoverer: _Recoverer) -> None:
    """Recover one record and count the outcome; a permanent failure is logged and counted, not raised.

    The recovery is an ``orderflow.recovery`` span in the order's trace (a child of its submission span:
    the next attempt's claim is its sibling), with the outcome (``requeued``, ``held``, ``gave_up`` ...).
    """
    record = found.item
    order_id = record.order_id
    attributes = tracing.order_attributes(
        order_id, record.locked_by, record.attempt, state=record.process_state.value
    )
    expired = None if record.locked_by is None else record.attempt_traceparent(record.locked_by)
    with tracing.span(
        tracing.RECOVERY, parent=record.traceparent, links=(expired,), attributes=attributes
    ) as span:
        try:
            outcome = recoverer.recover(found)
        except TransientError:
            raise
        except OrderflowError as exc:
            # One bad record (deleted meanwhile, refused by the store) must not stall the scan behind it.
            logger.warning("supervisor could not recover order %s: %s", order_id, exc)
            report.failed.append(order_id)
            tracing.mark_outcome(span, "failed", error=True)
            return
        tracing.mark_outcome(span, outcome.value)
    if outcome is Recovery.REQUEUED:
        report.requeued.append(order_id)
        if is_extended(found.item.failure_count + 1, recoverer.supervisor):
            report.extended_backoff.append(order_id)
    elif outcome is Recovery.HELD:
        report.held.append(order_id)
    elif outcome is Recovery.GAVE_UP:
        report.gave_up.append(order_id)
    elif outcome is Recovery.LOST_RACE:
        report.lost_races += 1
    else:
        report.skipped += 1


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None
