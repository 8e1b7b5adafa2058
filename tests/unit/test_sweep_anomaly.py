"""A store whose answers never end cannot hide an order that expires meanwhile from the supervisor's sweep.

The state store is the in-memory one, wrapped so that its scans never end: where a scan's last page should
come (a null token), it answers empty pages, each with a fresh token, for ever; or so that every page after
the first fails. Sweeps run on a fake clock, one every ``SUPERVISOR_INTERVAL_S``, with the cursor a
supervisor loop keeps between them.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from datetime import datetime

import pytest

from intake.submission import handle_intake_message
from orderflow import telemetry
from orderflow.alert_sink import AlertSink
from orderflow.alerts import ALERT_KINDS
from orderflow.attempts import claim
from orderflow.clock import FakeClock
from orderflow.errors import TransientError
from orderflow.records import ProcessState, StateRecord, TimelineChunk
from orderflow.stores.base import AlertQuery, Page, StateQuery, StateStore, Versioned
from orderflow.stores.memory import InMemoryAlertStore
from supervisor.sweep import ScanAnomaly, SweepCursor, SweepReport
from tests.host_deps import HostDeps
from tests.unit.fakes import TEST_CLIENT, memory_deps, order_body, sweep_once

pytestmark = pytest.mark.unit

PERIOD_S = 5.0
EMPTY_PAGES = 4
ORDER_ID = "a:o-late"


class NeverEnding:
    """The in-memory state store, except that a scan never ends: after its last page of records come empty
    pages, each with a new continuation token, without end."""

    def __init__(self, inner: StateStore) -> None:
        self.inner = inner
        self.empty_pages = 0

    def create(self, record: StateRecord) -> Versioned[StateRecord]:
        return self.inner.create(record)

    def get(self, order_id: str) -> Versioned[StateRecord]:
        return self.inner.get(order_id)

    def replace(self, record: StateRecord, *, etag: str) -> Versioned[StateRecord]:
        return self.inner.replace(record, etag=etag)

    def query(
        self, query: StateQuery, *, max_item_count: int, continuation: str | None = None
    ) -> Page[Versioned[StateRecord]]:
        if continuation is not None and continuation.startswith("endless-"):
            return Page([], self._fresh_token())
        page = self.inner.query(query, max_item_count=max_item_count, continuation=continuation)
        return page if page.continuation is not None else Page(page.items, self._fresh_token())

    def _fresh_token(self) -> str:
        self.empty_pages += 1
        return f"endless-{self.empty_pages}"

    def count(self, query: StateQuery) -> int:
        return self.inner.count(query)

    def history(
        self, order_id: str, *, max_item_count: int, continuation: str | None = None
    ) -> Page[TimelineChunk]:
        return self.inner.history(order_id, max_item_count=max_item_count, continuation=continuation)


class FailingAfterTheFirstPage(NeverEnding):
    """The in-memory state store, except that every page but a scan's first fails as transient."""

    def query(
        self, query: StateQuery, *, max_item_count: int, continuation: str | None = None
    ) -> Page[Versioned[StateRecord]]:
        if continuation is not None:
            raise TransientError("the store timed out")
        return self.inner.query(query, max_item_count=max_item_count)


class EndlessStaleCopies(NeverEnding):
    """The in-memory state store, except that past a scan's last page it answers full pages of stale copies
    of records it returned before (their old ETags), each with a new continuation token, without end."""

    def __init__(self, inner: StateStore) -> None:
        super().__init__(inner)
        self.returned: list[Versioned[StateRecord]] = []

    def query(
        self, query: StateQuery, *, max_item_count: int, continuation: str | None = None
    ) -> Page[Versioned[StateRecord]]:
        if continuation is not None and continuation.startswith("endless-") and self.returned:
            return Page(self.returned[:max_item_count], self._fresh_token())
        page = super().query(query, max_item_count=max_item_count, continuation=continuation)
        self.returned.extend(page.items)
        return page


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def deps(clock: FakeClock) -> HostDeps:
    made = memory_deps(clock, SCAN_MAX_EMPTY_PAGES=EMPTY_PAGES)
    return HostDeps(
        states=NeverEnding(made.states),
        orders=made.orders,
        queues=made.queues,
        clock=clock,
        settings=made.settings,
        dead_letters=made.dead_letters,
        alerts=made.alerts,
    )


@pytest.fixture
def alerts(clock: FakeClock) -> Iterator[InMemoryAlertStore]:
    store = InMemoryAlertStore(clock=clock)
    previous = telemetry.use_alert_sink(AlertSink(store, clock, "h1", window_s=3600))
    try:
        yield store
    finally:
        telemetry.use_alert_sink(previous)


def sweep_after_a_period(deps: HostDeps, clock: FakeClock, cursor: SweepCursor) -> SweepReport:
    """What the supervisor loop does every period: wait ``PERIOD_S``, then sweep with its cursor."""
    clock.advance(PERIOD_S)
    return sweep_once(deps, clock, cursor=cursor)


def submit_and_claim(deps: HostDeps, clock: FakeClock, order_id: str = ORDER_ID) -> datetime:
    """Submit ``order_id`` and claim its first attempt, which dies silently; when it becomes overdue."""
    handle_intake_message(
        order_body(order_id),
        client=TEST_CLIENT,
        orders=deps.orders,
        states=deps.states,
        queues=deps.queues,
        clock=clock,
        steps=deps.settings.steps,
        starter=deps.settings.starter,
        queue_names=deps.settings.queues,
    )
    claimed = claim(
        deps.states,
        deps.states.get(order_id),
        clock,
        deps.settings.starter,
        deps.settings.steps,
        host_id=deps.settings.queues.HOST_ID,
    )
    assert claimed is not None and claimed.item.complete_by is not None
    # is_overdue: strictly past completeBy by the store's time (a fake clock's is its own).
    return claimed.item.complete_by


def test_an_order_expiring_while_the_store_never_ends_is_recovered_within_two_periods_with_an_alert(
    deps: HostDeps, clock: FakeClock, alerts: InMemoryAlertStore
) -> None:
    assert isinstance(deps.states, NeverEnding)
    cursor = SweepCursor()
    with telemetry.recording() as seen:
        # The store misbehaves before anything expires: each sweep ends at its empty-page bound.
        before = [sweep_after_a_period(deps, clock, cursor) for _ in range(3)]
        assert [(r.anomaly, r.scan_complete) for r in before] == [(ScanAnomaly.EMPTY_PAGES, False)] * 3
        overdue_at = submit_and_claim(deps, clock)
        after: list[tuple[datetime, SweepReport]] = []
        while len(after) < 6:
            report = sweep_after_a_period(deps, clock, cursor)
            after.append((clock.now(), report))

    recovered_at = [at for at, report in after if ORDER_ID in report.requeued]
    assert len(recovered_at) == 1, [report.requeued for _, report in after]
    waited_s = (recovered_at[0] - overdue_at).total_seconds()
    assert 0 < waited_s <= 2 * PERIOD_S
    record = deps.states.get(ORDER_ID).item
    assert (record.process_state, record.failure_count, record.locked_by) == (ProcessState.PENDING, 1, None)

    # Every sweep met the anomaly and said so; the alerts of one window are one stored alert, counted.
    sweeps = len(before) + len(after)
    assert [r.anomaly for _, r in after] == [ScanAnomaly.EMPTY_PAGES] * len(after)
    assert (seen["alert.scan_anomaly"], seen["scan.anomaly"]) == (sweeps, sweeps)
    [stored] = alerts.list_documents(AlertQuery(kind="scan_anomaly"), max_item_count=10).items
    assert stored["count"] == sweeps
    assert stored["cause"] == f"{ALERT_KINDS['scan_anomaly'].summary} (reason=empty_pages)"
    assert stored["details"]["loop"] == "sweep"


def test_an_order_expiring_while_a_later_page_keeps_failing_is_recovered_within_two_periods(
    deps: HostDeps, clock: FakeClock
) -> None:
    settings = deps.settings.replace(**{"SUPERVISOR_PAGE_SIZE": 1})
    failing = dataclasses.replace(deps, states=FailingAfterTheFirstPage(deps.states), settings=settings)
    cursor = SweepCursor()
    # Two orders stuck: a sweep recovers the one on the first page, then fails on the second page.
    for order_id in ("a:o-1", "a:o-2"):
        stuck_at = submit_and_claim(failing, clock, order_id)
    clock.advance((stuck_at - clock.now()).total_seconds())
    with pytest.raises(TransientError):
        sweep_after_a_period(failing, clock, cursor)
    assert failing.states.get("a:o-1").item.process_state is ProcessState.PENDING

    overdue_at = submit_and_claim(failing, clock)
    recovered_at: list[datetime] = []
    for _ in range(6):
        with contextlib.suppress(TransientError):  # a sweep that reaches a second page fails there
            sweep_after_a_period(failing, clock, cursor)
        if failing.states.get(ORDER_ID).item.failure_count == 1:
            recovered_at.append(clock.now())
            break
    assert recovered_at, "the order expired after the failing page was never recovered"
    assert 0 < (recovered_at[0] - overdue_at).total_seconds() <= 2 * PERIOD_S
    assert failing.states.get("a:o-2").item.process_state is ProcessState.PENDING


def test_pages_of_stale_copies_without_end_never_pin_the_scans_cutoff(clock: FakeClock) -> None:
    # Every stale copy loses its conditional write, which decides nothing: the scan must not resume.
    made = memory_deps(
        clock,
        SCAN_MAX_EMPTY_PAGES=EMPTY_PAGES,
        SUPERVISOR_PAGE_SIZE=2,
        SUPERVISOR_MAX_RECORDS=6,
    )
    deps = dataclasses.replace(made, states=EndlessStaleCopies(made.states))
    cursor = SweepCursor()
    for order_id in ("a:o-0", "a:o-1", "a:o-2"):
        stuck_at = submit_and_claim(deps, clock, order_id)
    clock.advance((stuck_at - clock.now()).total_seconds())
    first = sweep_after_a_period(deps, clock, cursor)
    assert sorted(first.requeued) == ["a:o-0", "a:o-1", "a:o-2"]

    overdue_at = submit_and_claim(deps, clock)
    recovered_at: list[datetime] = []
    for _ in range(6):
        if ORDER_ID in sweep_after_a_period(deps, clock, cursor).requeued:
            recovered_at.append(clock.now())
            break
    assert recovered_at, "the order that expired after the stale pages began was never recovered"
    assert 0 < (recovered_at[0] - overdue_at).total_seconds() <= 2 * PERIOD_S
