"""The protocol's state machine (tests/unit/test_protocol_machine.py) against cosmosdb-server.

The same actors and invariants, with the state and order stores on the local Cosmos DB emulator through
the real azure-cosmos SDK (:mod:`orderflow.stores.cosmos`): its ETags, 412s on a stale If-Match and paged
cross-partition queries with continuation tokens. Each example gets empty containers of its own. A much
shorter run than the in-memory one, since every step costs real requests.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Iterator

import pytest
from azure.cosmos import PartitionKey
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from devhost.emulators import LocalEndpoints
from orderflow.stores.base import OrderStore, StateStore
from orderflow.stores.cosmos import PARTITION_KEY_PATH, CosmosOrderStore, CosmosStateStore, CosmosStores
from tests.unit.test_protocol_machine import ProtocolMachine

pytestmark = pytest.mark.integration

COSMOS_SETTINGS = settings(
    max_examples=5,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@pytest.fixture
def cosmos(local_endpoints: LocalEndpoints) -> Iterator[CosmosStores]:
    """A database of its own on the session's cosmosdb-server, dropped afterwards."""
    stores = CosmosStores.connect(
        local_endpoints.cosmos_endpoint,
        key=local_endpoints.cosmos_key,
        database="machine" + uuid.uuid4().hex[:10],
        verify_tls=False,
    )
    try:
        yield stores
    finally:
        stores.client.delete_database(stores.database)
        stores.close()


def fresh_containers(cosmos: CosmosStores) -> Callable[[], tuple[StateStore, OrderStore, Callable[[], None]]]:
    """A store factory for the machine: empty ``orderstate`` and ``orders`` containers per example."""
    numbers = itertools.count()

    def make() -> tuple[StateStore, OrderStore, Callable[[], None]]:
        n = next(numbers)
        key = PartitionKey(path=PARTITION_KEY_PATH)
        state = cosmos.database.create_container(id=f"orderstate{n}", partition_key=key)
        orders = cosmos.database.create_container(id=f"orders{n}", partition_key=key)
        history = cosmos.database.create_container(id=f"orderhistory{n}", partition_key=key)

        def release() -> None:
            for container in (state, orders, history):
                cosmos.database.delete_container(container)

        return CosmosStateStore(state, history=history), CosmosOrderStore(orders), release

    return make


def test_the_protocol_holds_on_cosmos_db(cosmos: CosmosStores) -> None:
    make = fresh_containers(cosmos)

    class OnCosmosDB(ProtocolMachine):
        def __init__(self) -> None:
            super().__init__(make)

    run_state_machine_as_test(OnCosmosDB, settings=COSMOS_SETTINGS)
