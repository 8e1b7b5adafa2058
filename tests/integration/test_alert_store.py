"""The alerts store's contract, run against the in-memory adapter and the Cosmos DB one (emulator): newest
first across day partitions, the kind and since filters, paging with tokens bound to their query, the
supervisor's per-minute tallies and the counted alerts (a point read in the day's partition, create,
If-Match replace; concurrent writers lose no count), and the dead-letter replay records (written over,
found by dead letter id or replay message id across days, never listed as alerts)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from devhost.emulators import LocalEndpoints
from orderflow.alert_sink import AlertSink, count_alert
from orderflow.alerts import (
    DAY_S,
    NOT_ALERTS,
    SWEEP_KIND,
    TALLY_KIND,
    TALLY_TTL_S,
    AlertDoc,
    alert_doc,
    counted,
    counted_alert_id,
    minute_of,
    replay_doc_id,
    tallied,
    window_start,
)
from orderflow.clock import FakeClock
from orderflow.errors import AlreadyExists, ConcurrencyConflict, InvalidContinuation
from orderflow.records import format_utc
from orderflow.replays import replay_record
from orderflow.stores.base import AlertQuery, AlertStore
from orderflow.stores.cosmos import CosmosStores
from orderflow.stores.memory import InMemoryAlertStore
from supervisor.status import sweep_doc
from supervisor.sweep import SweepReport

ADAPTERS = [
    pytest.param("memory", marks=pytest.mark.unit, id="memory"),
    pytest.param("cosmos", marks=pytest.mark.integration, id="cosmos"),
]


@pytest.fixture(params=ADAPTERS)
def alerts(request: pytest.FixtureRequest, unique_name: str) -> Iterator[AlertStore]:
    if request.param == "memory":
        yield InMemoryAlertStore()
        return
    endpoints: LocalEndpoints = request.getfixturevalue("local_endpoints")
    stores = CosmosStores.connect(
        endpoints.cosmos_endpoint, key=endpoints.cosmos_key, database=unique_name, verify_tls=False
    )
    try:
        yield stores.alerts
    finally:
        stores.close()


def every(store: AlertStore, query: AlertQuery, size: int) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    token: str | None = None
    for _ in range(50):
        page = store.list_documents(query, max_item_count=size, continuation=token)
        assert len(page.items) <= size
        found += page.items
        token = page.continuation
        if token is None:
            return found
    raise AssertionError("the listing did not end")


def test_alerts_list_newest_first_across_days_filtered_and_paged(alerts: AlertStore) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    times = [now - timedelta(days=1, minutes=5), now - timedelta(minutes=3), now - timedelta(minutes=2), now]
    kinds = ["order_gave_up", "breaker_open", "order_gave_up", "order_gave_up"]
    for n, (at, kind) in enumerate(zip(times, kinds, strict=True)):
        alerts.add(alert_doc(kind, {"order_id": f"a:o-{n}", "reason": "too_many_failures"}, at=at, host="h1"))
    alerts.add(sweep_doc(SweepReport(scanned=2), started=now, ended=now, host_id="h1", leadership="lease"))

    listed = every(alerts, AlertQuery(exclude_kinds=NOT_ALERTS), size=2)
    assert [d["orderId"] for d in listed] == ["a:o-3", "a:o-2", "a:o-1", "a:o-0"]
    assert listed[0]["suggestedAction"] and listed[0]["day"] == now.date().isoformat()
    gave_up = every(alerts, AlertQuery(kind="order_gave_up", since=now - timedelta(minutes=10)), size=5)
    assert [d["orderId"] for d in gave_up] == ["a:o-3", "a:o-2"]
    [sweep] = every(alerts, AlertQuery(kind=SWEEP_KIND), size=5)
    assert (sweep["host"], sweep["scanned"], sweep["ttl"]) == ("h1", 2, 3600)

    first = alerts.list_documents(AlertQuery(exclude_kinds=NOT_ALERTS), max_item_count=1)
    token = first.continuation
    assert token is not None
    with pytest.raises(InvalidContinuation):
        alerts.list_documents(
            AlertQuery(kind="breaker_open"), max_item_count=1, continuation=first.continuation
        )
    with pytest.raises(InvalidContinuation):
        alerts.list_documents(AlertQuery(), max_item_count=1, continuation="garbage")


def test_a_minutes_sweep_tally_is_read_created_replaced_if_match_and_never_listed_as_an_alert(
    alerts: AlertStore,
) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    minute = minute_of(now)
    assert alerts.get_tally(now) is None
    first = sweep_doc(
        SweepReport(scanned=4, requeued=["a:o-1"]), started=now, ended=now, host_id="h1", leadership="lease"
    )
    alerts.put_tally(tallied(None, first), etag=None)
    with pytest.raises(AlreadyExists):
        alerts.put_tally(tallied(None, first), etag=None)
    found = alerts.get_tally(minute + timedelta(seconds=59))  # any time in the minute names its tally
    assert found is not None
    assert (found.item.at, found.item.sweeps, found.item.recovered, found.item.stuck_max) == (minute, 1, 1, 4)
    alerts.put_tally(tallied(found.item, first), etag=found.etag)
    with pytest.raises(ConcurrencyConflict):
        alerts.put_tally(tallied(found.item, first), etag=found.etag)  # the ETag it was read with is stale
    alerts.add(alert_doc("order_gave_up", {"order_id": "a:o-1"}, at=now, host="h1"))

    [tally] = every(alerts, AlertQuery(kind=TALLY_KIND, since=minute), size=5)
    assert (tally["sweeps"], tally["recovered"], tally["ttl"]) == (2, 2, TALLY_TTL_S)
    listed = every(alerts, AlertQuery(exclude_kinds=NOT_ALERTS), size=5)
    assert [d["kind"] for d in listed] == ["order_gave_up"]


@pytest.mark.parametrize("ahead", [timedelta(days=3), timedelta(days=365 * 7000)])
def test_a_since_past_every_day_partition_is_an_empty_answer(alerts: AlertStore, ahead: timedelta) -> None:
    # The listing reads from tomorrow back to since: a since after tomorrow leaves no day to read.
    now = datetime.now(UTC).replace(microsecond=0)
    alerts.add(alert_doc("order_gave_up", {"order_id": "a:o-1"}, at=now, host="h1"))

    page = alerts.list_documents(AlertQuery(since=now + ahead), max_item_count=10)

    assert (page.items, page.continuation) == ([], None)


def occurrence(at: datetime, *, order: str = "a:o-1", client: str = "a", window_s: int = 3600) -> AlertDoc:
    """A conflicting_order alert of ``client`` raised at ``at``, with the id it is counted under."""
    doc = alert_doc("conflicting_order", {"order_id": order, "client_id": client}, at=at, host="h1")
    return doc.model_copy(update={"id": counted_alert_id(doc.kind, client, window_start(at, window_s))})


def test_a_counted_alert_is_read_in_its_day_created_once_and_replaced_only_if_match(
    alerts: AlertStore,
) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    first = occurrence(now)
    assert alerts.get_alert(first.id, day=first.day) is None
    alerts.put_alert(first, etag=None)
    with pytest.raises(AlreadyExists):
        alerts.put_alert(first, etag=None)
    found = alerts.get_alert(first.id, day=first.day)
    assert found is not None and found.item == first
    alerts.put_alert(counted(found.item, occurrence(now, order="a:o-2")), etag=found.etag)
    with pytest.raises(ConcurrencyConflict):
        alerts.put_alert(counted(found.item, first), etag=found.etag)  # the ETag it was read with is stale

    [listed] = every(alerts, AlertQuery(exclude_kinds=NOT_ALERTS), size=5)
    assert (listed["id"], listed["count"], listed["orderId"]) == (first.id, 2, "a:o-2")
    assert listed["firstSeen"] == listed["at"] == format_utc(now)


def test_two_writers_counting_one_alert_at_once_lose_no_count(alerts: AlertStore) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    each = 20
    start = threading.Barrier(2)

    def writer(n: int) -> None:
        start.wait()
        for i in range(each):
            count_alert(alerts, occurrence(now + timedelta(milliseconds=i), order=f"a:o-{n}"))

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(writer, range(2)))

    [listed] = every(alerts, AlertQuery(kind="conflicting_order"), size=5)
    assert listed["count"] == 2 * each
    assert listed["firstSeen"] == format_utc(now)


def test_the_next_window_starts_a_new_stored_alert_and_other_clients_have_their_own(
    alerts: AlertStore,
) -> None:
    # The start of a whole window of today: the three alerts of the first window share it.
    now = datetime.now(UTC).replace(microsecond=0)
    clock = FakeClock(window_start(now, 60))
    sink = AlertSink(alerts, clock, "h1", window_s=60)
    for _ in range(3):
        assert sink("conflicting_order", {"order_id": "a:o-1", "client_id": "a"})
        clock.advance(10)
    assert sink("conflicting_order", {"order_id": "b:o-1", "client_id": "b"})
    clock.advance(60)
    assert sink("conflicting_order", {"order_id": "a:o-1", "client_id": "a"})

    listed = every(alerts, AlertQuery(kind="conflicting_order"), size=5)
    assert [(d["details"]["client_id"], d["count"]) for d in listed] == [("a", 1), ("b", 1), ("a", 3)]
    assert len({d["id"] for d in listed}) == 3


def test_replay_records_are_written_over_found_by_either_id_across_days_and_never_listed_as_alerts(
    alerts: AlertStore,
) -> None:
    now = datetime.now(UTC).replace(microsecond=0)

    def record(queue: str, dead_letter_id: str, by: str, at: datetime) -> None:
        replay = replay_record(
            queue,
            dead_letter_id,
            replay_id="m-1:replay:0123456789abcdef",
            order_id="a:o-1",
            by=by,
            by_name=None,
            at=at,
            ttl_s=DAY_S * 3,
        )
        alerts.put_replay(replay)

    record("orders-a", "17", "t/otto", now - timedelta(days=1))  # yesterday's partition
    record("orders-a", "18", "t/otto", now - timedelta(minutes=1))
    record("orders-a", "18", "t/olga", now - timedelta(minutes=1))  # the same replay done again: over it
    record("orders-b", "18", "t/otto", now)  # another queue's dead letter 18

    by_id = alerts.find_replays("orders-a", dead_letter_id="18")
    by_message = alerts.find_replays("orders-a", replay_message_id="m-1:replay:0123456789abcdef")
    assert [(r.id, r.by, r.queue) for r in by_id] == [(replay_doc_id("orders-a", "18"), "t/olga", "orders-a")]
    assert [(r.dead_letter_id, r.by, r.ttl) for r in by_message] == [
        ("18", "t/olga", DAY_S * 3),
        ("17", "t/otto", DAY_S * 3),
    ]
    assert alerts.find_replays("orders-b", dead_letter_id="17") == []
    with pytest.raises(ValueError):
        alerts.find_replays("orders-a")
    assert every(alerts, AlertQuery(exclude_kinds=NOT_ALERTS), size=5) == []
