"""Supervisors against the real stores (cosmosdb-server, Azurite) and in memory: races, paging, thresholds.

Correctness never depends on the lease (docs/design.md §3.5): with election off, supervisors sweeping the
same records at once still recover each one exactly once, because every recovery is a conditional write.
Sweeps are bounded and resume from a cursor; thresholds push ``nextAttemptAt`` out, then give up.
Business time is a fake clock, so no test waits for a deadline.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import pytest

from devhost.host import DevHost
from devhost.lease.memory import InMemoryLease, InMemoryLeaseBlob
from devhost.settings import LocalSettings
from intake.submission import handle_intake_message
from orchestrators.starter import run_starter_pass
from orderflow import telemetry
from orderflow.attempts import claim
from orderflow.clock import FakeClock
from orderflow.records import ProcessState, StateRecord, TimelineChunk, order_key
from orderflow.settings import Settings
from orderflow.stores.base import Page, StateQuery, StateStore, Versioned
from supervisor.sweep import ScanAnomaly, SweepCursor, SweepReport, run_sweep
from tests.dev_host import dev_host
from tests.host_deps import HostDeps
from tests.unit.fakes import RecordingClient, client_for, order_body, received

pytestmark = pytest.mark.integration

CLAIM_TIMEOUT_S = 30


@dataclass
class World:
    """Stores and queues of the ``deps`` fixture, on a fake clock, with a reply queue of its own."""

    deps: HostDeps
    clock: FakeClock
    reply_queue: str

    @property
    def states(self) -> StateStore:
        return self.deps.states

    def record(self, order_id: str) -> StateRecord:
        return self.deps.states.get(order_id).item

    def expired(self, prefix: str, n: int, settings: Settings) -> list[str]:
        """Submit and claim ``n`` orders, then let their claims' completeBy pass; their keys."""
        client = client_for(self.reply_queue)
        order_ids = [order_key(client.client_id, f"{prefix}-{i:02d}") for i in range(n)]
        for order_id in order_ids:
            handle_intake_message(
                order_body(order_id, reply_to=self.reply_queue),
                client=client,
                orders=self.deps.orders,
                states=self.deps.states,
                queues=self.deps.queues,
                clock=self.clock,
                steps=settings.steps,
                starter=settings.starter,
                queue_names=settings.queues,
            )
            assert (
                claim(
                    self.deps.states,
                    self.deps.states.get(order_id),
                    self.clock,
                    settings.starter,
                    settings.steps,
                    host_id=settings.queues.HOST_ID,
                )
                is not None
            )
        self.clock.advance(CLAIM_TIMEOUT_S + 1)
        return order_ids

    def sweep(self, settings: Settings, cursor: SweepCursor | None = None) -> SweepReport:
        return run_sweep(
            states=self.deps.states,
            queues=self.deps.queues,
            clock=self.clock,
            supervisor=settings.supervisor,
            scans=settings.scans,
            host_id=settings.queues.HOST_ID,
            cursor=cursor,
        )


@pytest.fixture
def world(deps: HostDeps) -> World:
    clock = FakeClock()
    return World(replace(deps, clock=clock), clock, f"client-{uuid.uuid4().hex[:8]}")


def settings_for(**overrides: object) -> Settings:
    # No lease (a host given none is always leader): these supervisors are plain functions racing each
    # other, as when election is disabled.
    base: dict[str, object] = {"CLAIM_TIMEOUT_S": CLAIM_TIMEOUT_S}
    return Settings.load({}, **{**base, **overrides})


def wait_until(predicate: Callable[[], bool], *, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise AssertionError("condition not met in time")


# --- racing supervisors ---------------------------------------------------------------------------


def test_two_supervisors_without_a_lease_recover_each_record_exactly_once(world: World) -> None:
    settings = settings_for(SUPERVISOR_PAGE_SIZE=4)  # small pages, so the two scans interleave
    order_ids = world.expired("race", 30, settings)
    barrier = threading.Barrier(2)
    reports: list[SweepReport] = []
    errors: list[BaseException] = []

    def supervisor() -> None:
        try:
            barrier.wait()
            reports.append(world.sweep(settings))
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=supervisor) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    first, second = reports
    assert set(first.requeued).isdisjoint(second.requeued)
    assert sorted(first.requeued + second.requeued) == order_ids
    assert first.gave_up == second.gave_up == []
    for order_id in order_ids:
        record = world.record(order_id)
        assert (record.process_state, record.failure_count, record.locked_by) == (
            ProcessState.PENDING,
            1,
            None,
        )


# --- bounded sweeps and the cursor ----------------------------------------------------------------


def test_a_bounded_sweep_resumes_where_the_last_one_stopped(world: World) -> None:
    settings = settings_for(SUPERVISOR_MAX_RECORDS=10, SUPERVISOR_PAGE_SIZE=4)
    order_ids = world.expired("page", 25, settings)
    cursor = SweepCursor()

    first = world.sweep(settings, cursor)
    assert (len(first.requeued), first.scanned, first.pages) == (10, 10, 3)  # pages of 4, 4, 2
    assert not first.resumed and not first.scan_complete
    assert cursor.cutoff == first.cutoff and cursor.token is not None  # kept for the next sweep

    # An order that expires after the scan began belongs to the next scan, not this one.
    (late,) = world.expired("zz-late", 1, settings)

    second = world.sweep(settings, cursor)
    assert second.resumed and second.cutoff == first.cutoff
    assert len(second.requeued) == 10 and set(second.requeued).isdisjoint(first.requeued)

    third = world.sweep(settings, cursor)
    assert third.resumed and third.scan_complete and not cursor.in_progress
    assert len(third.requeued) == 5
    assert sorted(first.requeued + second.requeued + third.requeued) == order_ids
    assert late not in third.requeued

    fourth = world.sweep(settings, cursor)  # a new scan, with a new cutoff
    assert not fourth.resumed and fourth.requeued == [late] and fourth.scan_complete
    assert {world.record(o).failure_count for o in [*order_ids, late]} == {1}


def test_a_sweep_that_loses_leadership_stops_and_the_next_resumes_its_page(world: World) -> None:
    settings = settings_for(SUPERVISOR_PAGE_SIZE=4)
    order_ids = world.expired("stop", 10, settings)
    cursor = SweepCursor()
    # Asked before each page and each record: page 1 (4 records), page 2's first record, then lost.
    answers = iter([True] * 7 + [False] * 10)
    report = run_sweep(
        states=world.states,
        queues=world.deps.queues,
        clock=world.clock,
        supervisor=settings.supervisor,
        scans=settings.scans,
        host_id=settings.queues.HOST_ID,
        cursor=cursor,
        keep_going=lambda: next(answers),
    )
    assert report.stopped_early and not report.scan_complete
    assert len(report.requeued) == report.scanned == 5
    assert cursor.in_progress
    rest = world.sweep(settings, cursor)
    assert rest.resumed and rest.scan_complete
    assert sorted(report.requeued + rest.requeued) == order_ids
    assert {world.record(o).failure_count for o in order_ids} == {1}


def test_a_rejected_token_restarts_the_scan_and_says_so(world: World) -> None:
    settings = settings_for()
    order_ids = world.expired("bad", 5, settings)
    cursor = SweepCursor(cutoff=world.clock.now(), token="not-a-token")
    report = world.sweep(settings, cursor)
    assert (
        report.restarted_scan and report.scan_complete and report.anomaly is None
    )  # one stale token: normal
    assert sorted(report.requeued) == order_ids


class RepeatingTokens:
    """A state store whose continuation token never changes, as a faulty service might answer."""

    def __init__(self, inner: StateStore) -> None:
        self.inner = inner

    def create(self, record: StateRecord) -> Versioned[StateRecord]:
        return self.inner.create(record)

    def get(self, order_id: str) -> Versioned[StateRecord]:
        return self.inner.get(order_id)

    def replace(self, record: StateRecord, *, etag: str) -> Versioned[StateRecord]:
        return self.inner.replace(record, etag=etag)

    def query(
        self, query: StateQuery, *, max_item_count: int, continuation: str | None = None
    ) -> Page[Versioned[StateRecord]]:
        page = self.inner.query(query, max_item_count=max_item_count)
        return Page(page.items, "same-token" if page.continuation is not None else None)

    def count(self, query: StateQuery) -> int:
        return self.inner.count(query)

    def history(
        self, order_id: str, *, max_item_count: int, continuation: str | None = None
    ) -> Page[TimelineChunk]:
        return self.inner.history(order_id, max_item_count=max_item_count, continuation=continuation)


def test_a_repeating_token_restarts_the_scan_once_then_ends_the_sweep(world: World) -> None:
    settings = settings_for(SUPERVISOR_PAGE_SIZE=2)
    order_ids = world.expired("rep", 12, settings)
    cursor = SweepCursor()
    with telemetry.recording() as seen:
        report = run_sweep(
            states=RepeatingTokens(world.states),
            queues=world.deps.queues,
            clock=world.clock,
            supervisor=settings.supervisor,
            scans=settings.scans,
            host_id=settings.queues.HOST_ID,
            cursor=cursor,
        )
    # Pages 1-2, repeat → restart; pages 3-4, repeat → end: bounded, and the next sweep starts over.
    assert report.restarted_scan and not report.scan_complete
    assert (report.anomaly, seen["alert.scan_anomaly"]) == (ScanAnomaly.TOKEN_REPEATED, 1)
    assert not cursor.in_progress and cursor.scans == 2
    assert report.pages == 4 and len(report.requeued) == 8
    rest = world.sweep(settings, cursor)
    assert sorted(report.requeued + rest.requeued) == order_ids


# --- thresholds -------------------------------------------------------------------------------------


def test_extended_backoff_after_the_threshold_then_give_up(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    settings = settings_for(
        SUPERVISOR_MAX_FAILURES=5,
        SUPERVISOR_EXTENDED_BACKOFF_AFTER=3,
        SUPERVISOR_EXTENDED_BACKOFF_S=600,
        SUPERVISOR_BACKOFF_INITIAL_S=2,
    )
    (order_id,) = world.expired("thr", 1, settings)
    client = RecordingClient()

    def starter_claims() -> bool:
        before = len(client.started)
        run_starter_pass(
            states=world.states,
            client=client,
            clock=world.clock,
            starter=settings.starter,
            steps=settings.steps,
            scans=settings.scans,
            queue_names=settings.queues,
            response_queue="r-unused",
            capacity=5,
        )
        return len(client.started) > before

    delays = []
    for failure in range(1, 5):
        report = world.sweep(settings)
        assert report.requeued == [order_id]
        assert report.extended_backoff == ([order_id] if failure >= 3 else [])
        record = world.record(order_id)
        assert (record.failure_count, record.process_state) == (failure, ProcessState.PENDING)
        assert record.next_attempt_at is not None
        delay = (record.next_attempt_at - world.clock.now()).total_seconds()
        delays.append(delay)
        world.clock.advance(delay - 1)
        assert not starter_claims()  # the starter honours nextAttemptAt
        world.clock.advance(1)
        assert starter_claims()
        world.clock.advance(CLAIM_TIMEOUT_S + 1)  # the new attempt times out too
    assert delays == [2, 4, 600, 600]

    with caplog.at_level(logging.ERROR, logger="orderflow.alerts"):
        final = world.sweep(settings)
    assert final.gave_up == [order_id] and final.requeued == []
    record = world.record(order_id)
    # Forward progress is given up: the record waits, unlocked, for an attempt that compensates.
    assert (record.process_state, record.failure_count, record.next_attempt_at, record.locked_by) == (
        ProcessState.COMPENSATING,
        5,
        world.clock.now(),
        None,
    )
    assert record.last_error is not None and record.last_error.code == "too_many_failures"
    assert any("order_gave_up" in r.getMessage() and order_id in r.getMessage() for r in caplog.records)
    replies = [json.loads(m.body) for m in received(world.deps.queues.queue(world.reply_queue))]
    assert [(r["status"], r.get("reason")) for r in replies] == [("Received", None)]  # the undo replies
    assert world.sweep(settings).scanned == 0  # unlocked, no completeBy: nothing to sweep


# --- the host's wiring: lease, stand-by, hand-over --------------------------------------------------


@pytest.fixture
def supervisors(world: World) -> Iterator[list[DevHost]]:
    blob = InMemoryLeaseBlob()
    settings, local = settings_for(), LocalSettings.load({}, SUPERVISOR_INTERVAL_S=0.05)
    hosts = [
        dev_host(
            replace(world.deps, settings=settings, local=local),
            roles=("supervisor",),
            lease=InMemoryLease(blob),
        )
        for _ in range(2)
    ]
    for host in hosts:
        host.start()
    try:
        yield hosts
    finally:
        for host in hosts:
            host.stop()


def test_only_the_leader_sweeps_and_a_stopped_leader_hands_over(
    world: World, supervisors: list[DevHost]
) -> None:
    settings = supervisors[0].settings
    wait_until(lambda: sum(h.lease.is_leader for h in supervisors) == 1)
    leader, standby = sorted(supervisors, key=lambda h: not h.lease.is_leader)

    first = world.expired("lead", 6, settings)
    wait_until(lambda: all(world.record(o).process_state is ProcessState.PENDING for o in first))
    assert standby.sweep_cursor.scans == 0  # it stood by the whole time
    assert leader.sweep_cursor.scans > 0

    leader.stop()  # releases the lease: no waiting for it to expire
    assert not leader.lease.is_leader
    wait_until(lambda: standby.lease.is_leader, timeout_s=2)
    second = world.expired("next", 4, settings)
    wait_until(lambda: all(world.record(o).process_state is ProcessState.PENDING for o in second))
    assert standby.sweep_cursor.scans > 0
    assert {world.record(o).failure_count for o in first + second} == {1}
