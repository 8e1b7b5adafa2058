"""Circuit breakers over the Cosmos DB adapter on cosmosdb-server: two hosts, each with a client of its
own, share one breaker; its conditional writes hand a half-open breaker's probe to one of them."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from devhost.emulators import LocalEndpoints
from orderflow.breaker import CircuitBreakers, Closed, Open
from orderflow.clock import FakeClock
from orderflow.settings import Settings
from orderflow.stores.cosmos import CosmosStores

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore:Unverified HTTPS request")]

START = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def two_clients(
    local_endpoints: LocalEndpoints, unique_name: str
) -> Iterator[tuple[CosmosStores, CosmosStores]]:
    def connect() -> CosmosStores:
        return CosmosStores.connect(
            local_endpoints.cosmos_endpoint,
            key=local_endpoints.cosmos_key,
            database=unique_name,
            verify_tls=False,
            connection_timeout=10,
        )

    first = connect()
    second = connect()
    try:
        yield first, second
    finally:
        second.close()
        first.client.delete_database(unique_name)
        first.close()


def test_two_hosts_share_one_breaker_and_one_probe_at_a_time(
    two_clients: tuple[CosmosStores, CosmosStores],
) -> None:
    clock = FakeClock(START)
    settings = {"BREAKER_FAILURES_TO_OPEN": 3, "BREAKER_OPEN_S": 10.0, "BREAKER_CACHE_S": 0.0}
    a = CircuitBreakers(
        two_clients[0].breakers,
        clock,
        Settings.load({}, HOST_ID="h1", **settings).breakers,
        Settings.load({}, HOST_ID="h1", **settings).queues.HOST_ID,
    )
    b = CircuitBreakers(
        two_clients[1].breakers,
        clock,
        Settings.load({}, HOST_ID="h2", **settings).breakers,
        Settings.load({}, HOST_ID="h2", **settings).queues.HOST_ID,
    )

    assert b.view("payment") == Closed()
    for _ in range(3):
        a.failed("payment", holder="o-1:1")
    assert b.admit("payment", holder="o-2:1") == START + timedelta(seconds=10)

    clock.advance(10)
    assert b.admit("payment", holder="o-2:1") is None  # the probe is b's
    assert a.admit("payment", holder="o-3:1") == START + timedelta(seconds=40)
    b.succeeded("payment")
    assert a.view("payment") == Closed()
    assert a.admit("payment", holder="o-3:1") is None
    stored = two_clients[0].breakers.find("payment")
    assert stored is not None and stored.item.open_until is None and stored.item.changed_by == "h2"
    assert not isinstance(a.view("inventory"), Open)
