"""The alerts store's contract, run against the in-memory adapter and the Cosmos DB one (emulator): newest
first across day partitions, the kind and since filters, paging with tokens bound to their query, and the
supervisor's per-minute tallies (a point read in the day's partition, create, If-Match replace)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from devhost.emulators import LocalEndpoints
from orderflow.alerts import NOT_ALERTS, SWEEP_KIND, TALLY_KIND, TALLY_TTL_S, alert_doc, minute_of, tallied
from orderflow.errors import AlreadyExists, ConcurrencyConflict, InvalidContinuation
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
