"""Every loop over query pages ends within its page and time bounds, whatever the store answers.

The store here is the real ``CosmosStateStore`` over the real ``azure-cosmos`` client; only its HTTP
exchange is answered from memory (:mod:`tests.cosmos_transport`), with what cosmosdb-server cannot
produce: empty pages, each with a new continuation token, without end. The SDK's own pager skips such
pages by itself, without a bound, so the bounds must hold inside the store's query as well as in the
loops above it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint

from orchestrators.starter import run_starter_pass
from orderflow import telemetry
from orderflow.clock import FakeClock
from orderflow.errors import TransientError
from orderflow.queues.memory import InMemoryQueueFactory
from orderflow.records import ProcessState, RetryBudget, StateRecord
from orderflow.replies import resend_pending_replies
from orderflow.settings import Settings
from orderflow.stores.base import Page, StateQuery
from orderflow.stores.cosmos import MAX_COUNT_PAGES
from orderflow.stores.paging import PageBudget, PageLimits, PageStop
from supervisor.retention import purge_expired_logs
from supervisor.sweep import ScanAnomaly, SweepCursor, run_sweep
from tests.cosmos_transport import STOP_AFTER, CosmosTransport, FakeCosmos, fake_cosmos
from tests.unit.fakes import RecordingClient

pytestmark = pytest.mark.unit

EMPTY_PAGES = 5
SETTINGS = Settings.load({}, SCAN_MAX_EMPTY_PAGES=EMPTY_PAGES, SCAN_MAX_PAGES=20)


@pytest.fixture
def transport() -> CosmosTransport:
    return CosmosTransport()


@pytest.fixture
def cosmos(transport: CosmosTransport) -> Iterator[FakeCosmos]:
    made = fake_cosmos(transport)
    try:
        yield made
    finally:
        made.client.close()


@pytest.fixture
def reader() -> Iterator[InMemoryMetricReader]:
    metric_reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[metric_reader])
    telemetry.use_meter_provider(provider)
    try:
        yield metric_reader
    finally:
        telemetry.use_meter_provider(None)
        provider.shutdown()


def metric(reader: InMemoryMetricReader, name: str) -> list[tuple[dict[str, Any], float]]:
    data = reader.get_metrics_data()
    found = []
    for resource_metrics in data.resource_metrics if data else []:
        for scope_metrics in resource_metrics.scope_metrics:
            for each in scope_metrics.metrics:
                if each.name == name:
                    for point in each.data.data_points:
                        assert isinstance(point, NumberDataPoint)
                        found.append((dict(point.attributes or {}), point.value))
    return found


def test_the_cosmos_store_returns_an_empty_page_with_its_token_instead_of_paging_on(
    cosmos: FakeCosmos, transport: CosmosTransport
) -> None:
    first = cosmos.state.query(StateQuery(), max_item_count=10)
    second = cosmos.state.query(StateQuery(), max_item_count=10, continuation=first.continuation)
    assert (first.items, second.items) == ([], [])
    # One HTTP page per call, and the second call resumed from the token the first one returned.
    assert transport.queries == [None, "empty-1"]
    assert first.continuation is not None and second.continuation not in (None, first.continuation)


def test_a_sweep_over_endless_empty_pages_ends_its_scan_at_its_bound_and_alerts_the_anomaly(
    cosmos: FakeCosmos,
    transport: CosmosTransport,
    reader: InMemoryMetricReader,
    caplog: pytest.LogCaptureFixture,
) -> None:
    cursor = SweepCursor()
    with telemetry.recording() as events, caplog.at_level(logging.WARNING, "orderflow.stores.paging"):
        report = run_sweep(
            states=cosmos.state,
            queues=InMemoryQueueFactory(),
            clock=FakeClock(),
            supervisor=SETTINGS.supervisor,
            scans=SETTINGS.scans,
            host_id=SETTINGS.queues.HOST_ID,
            cursor=cursor,
        )
    assert len(transport.queries) == EMPTY_PAGES  # today's SDK pager alone would have read STOP_AFTER
    assert (report.pages, report.scanned, report.bounded) == (EMPTY_PAGES, 0, PageStop.EMPTY_PAGES)
    assert (report.scan_complete, report.anomaly, cursor.in_progress) == (
        False,
        ScanAnomaly.EMPTY_PAGES,
        False,
    )
    assert (events["scan.anomaly"], events["alert.scan_anomaly"]) == (1, 1)
    assert metric(reader, telemetry.SCAN_ANOMALIES) == [({"loop": "sweep"}, 1)]
    assert [r.getMessage() for r in caplog.records if r.name == "orderflow.stores.paging"] == [
        f"sweep: {EMPTY_PAGES} empty pages in a row, each with a new continuation token; ending this pass, "
        "the next one starts over"
    ]

    # The next sweep starts a new scan from its first page (no token), which the store now ends.
    transport.pager = lambda _n, _token: ([], None)
    later = run_sweep(
        states=cosmos.state,
        queues=InMemoryQueueFactory(),
        clock=FakeClock(),
        supervisor=SETTINGS.supervisor,
        scans=SETTINGS.scans,
        host_id=SETTINGS.queues.HOST_ID,
        cursor=cursor,
    )
    assert transport.queries[EMPTY_PAGES] is None
    assert (later.resumed, later.scan_complete, later.bounded, later.anomaly) == (False, True, None, None)


def test_a_sweep_stops_at_its_page_bound_when_empty_pages_alternate_with_full_ones(
    cosmos: FakeCosmos, transport: CosmosTransport
) -> None:
    # A non-empty page resets the run of empty ones, so only the page bound ends this sweep. The record
    # of each odd page is not expired (no completeBy), so the sweep only examines it.
    now = FakeClock().now()
    record = StateRecord(
        id="o-1",
        order_id="o-1",
        client_id="a",
        reply_to="client-a",
        process_state=ProcessState.PROCESSING,
        retry_budget=RetryBudget(limit=24),
        workflow_version="order-v1",
        created_at=now,
        updated_at=now,
    ).to_json_dict() | {"_etag": '"1"'}
    transport.pager = lambda n, _token: ([record] if n % 2 else [], f"t-{n + 1}")
    report = run_sweep(
        states=cosmos.state,
        queues=InMemoryQueueFactory(),
        clock=FakeClock(),
        supervisor=Settings.load({}, SCAN_MAX_EMPTY_PAGES=2, SCAN_MAX_PAGES=6).supervisor,
        scans=Settings.load({}, SCAN_MAX_EMPTY_PAGES=2, SCAN_MAX_PAGES=6).scans,
        host_id=Settings.load({}, SCAN_MAX_EMPTY_PAGES=2, SCAN_MAX_PAGES=6).queues.HOST_ID,
    )
    assert (report.pages, report.scanned, report.skipped, report.bounded) == (6, 3, 3, PageStop.PAGES)
    assert len(transport.queries) == 6
    assert report.anomaly is None  # pages that hold records may be slow or sparse, not an anomaly


def test_a_sweep_at_its_record_bound_with_nothing_decided_starts_a_new_scan_next_time(
    cosmos: FakeCosmos, transport: CosmosTransport
) -> None:
    # Every page holds a record the query does not match (not expired): the record bound ends each sweep,
    # and resuming such a scan would pin its cutoff as surely as empty pages do.
    now = FakeClock().now()
    record = StateRecord(
        id="o-1",
        order_id="o-1",
        client_id="a",
        reply_to="client-a",
        process_state=ProcessState.PROCESSING,
        retry_budget=RetryBudget(limit=24),
        workflow_version="order-v1",
        created_at=now,
        updated_at=now,
    ).to_json_dict() | {"_etag": '"1"'}
    transport.pager = lambda n, _token: ([record], f"t-{n + 1}")
    cursor = SweepCursor()
    settings = Settings.load({}, SUPERVISOR_MAX_RECORDS=3, SUPERVISOR_PAGE_SIZE=1, SCAN_MAX_PAGES=20)
    report = run_sweep(
        states=cosmos.state,
        queues=InMemoryQueueFactory(),
        clock=FakeClock(),
        supervisor=settings.supervisor,
        scans=settings.scans,
        host_id=settings.queues.HOST_ID,
        cursor=cursor,
    )
    assert (report.scanned, report.skipped, report.bounded, report.scan_complete) == (3, 3, None, False)
    assert not cursor.in_progress
    run_sweep(
        states=cosmos.state,
        queues=InMemoryQueueFactory(),
        clock=FakeClock(),
        supervisor=settings.supervisor,
        scans=settings.scans,
        host_id=settings.queues.HOST_ID,
        cursor=cursor,
    )
    assert transport.queries[3] is None  # the second sweep began at the first page


def test_the_starter_the_reply_relay_and_retention_end_within_their_bounds(
    cosmos: FakeCosmos, transport: CosmosTransport
) -> None:
    clock = FakeClock()
    starter = run_starter_pass(
        states=cosmos.state,
        client=RecordingClient(),
        clock=clock,
        starter=SETTINGS.starter,
        steps=SETTINGS.steps,
        scans=SETTINGS.scans,
        queue_names=SETTINGS.queues,
        response_queue="agent-responses",
        capacity=8,
    )
    assert (starter.examined, len(transport.queries)) == (0, EMPTY_PAGES)
    relay = resend_pending_replies(
        states=cosmos.state,
        queues=InMemoryQueueFactory(),
        clock=clock,
        grace_s=30,
        limits=PageLimits.from_scans(SETTINGS.scans),
    )
    assert (relay.resent, len(transport.queries)) == ([], 2 * EMPTY_PAGES)
    purge = purge_expired_logs(
        states=cosmos.state,
        orders=cosmos.orders,
        clock=clock,
        supervisor=SETTINGS.supervisor,
        scans=SETTINGS.scans,
    )
    assert (purge.purged, len(transport.queries)) == (0, 3 * EMPTY_PAGES)


def test_a_count_over_endless_empty_pages_fails_as_transient_at_its_page_bound(
    cosmos: FakeCosmos, transport: CosmosTransport
) -> None:
    with pytest.raises(TransientError, match=f"did not finish within {MAX_COUNT_PAGES} pages"):
        cosmos.state.count(StateQuery())
    assert len(transport.queries) == MAX_COUNT_PAGES < STOP_AFTER


# --- the budget itself ---------------------------------------------------------------------------------


class Ticking:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def empty(token: str | None = "t") -> Page[Any]:
    return Page([], token)


def stop_of(budget: PageBudget) -> PageStop | None:
    return budget.stopped  # read afresh: a budget's stop changes as it records pages


def test_a_budget_stops_at_its_time_bound_before_the_next_page() -> None:
    clock = Ticking()
    budget = PageBudget("test", PageLimits(max_pages=100, max_empty_pages=100, max_s=2.0), monotonic=clock)
    assert budget.allows_another()
    budget.record(Page([object()], "t"))
    clock.now += 2.0
    assert not budget.allows_another()
    assert (budget.stopped, budget.pages) == (PageStop.TIME, 1)


def test_empty_pages_count_towards_the_anomaly_only_in_a_row_and_a_last_page_is_not_one() -> None:
    budget = PageBudget("test", PageLimits(max_pages=100, max_empty_pages=3, max_s=60.0))
    for page in (empty(), empty(), Page([object()], "t"), empty(), empty(), empty(None)):
        budget.record(page)
    assert budget.stopped is None and budget.allows_another()
    for _ in range(3):
        budget.record(empty())
    assert (stop_of(budget), budget.allows_another()) == (PageStop.EMPTY_PAGES, False)
