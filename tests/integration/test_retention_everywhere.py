"""After the retention period, no customer or payment data is left anywhere the local stack keeps data.

Orders carrying distinctive marker values (a customer id and name, an amount, a carrier, a SKU) run
through one devhost over cosmosdb-server, Azurite and the durabletask in-memory backend; two more are
dead-lettered (a conflicting resubmission and an invalid order). The test then scans, as an auditor would,
every document of every Cosmos DB container of the deployment's database, every message of every queue of
the deployment (the dead-letter queues included) and every instance the orchestration backend holds with
its history: the markers are there. Then the clock moves past the retention period, the retention passes
run, and the same scan finds none of them.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import grpc
import pytest
from azure.storage.queue import QueueServiceClient
from durabletask import client as dt_client

from devhost.emulators import LocalEndpoints
from devhost.queues.factory import StorageQueueFactory
from orderflow.clock import SystemClock
from orderflow.records import ProcessState
from orderflow.stores.cosmos import CosmosStores
from supervisor.retention import PURGEABLE_STATES
from tests.harness import System, local_dependencies, running_system
from tests.host_deps import HostDeps

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore:Unverified HTTPS request")]

MARKERS = {
    "customer id": "MARKCUST9902",
    "customer name": "Quintessa Marqueur-Vell",
    "amount": "8642.19",
    "carrier": "Rue du Marqueur 77",
    "sku": "MARKSKU4471",
}
"""Values no order of the fixture catalog holds, so any copy of them comes from these orders."""

DAY_S = 86_400.0


class MovableClock:
    """The system clock, moved forward by :meth:`advance` (the whole host reads the moved time)."""

    def __init__(self) -> None:
        self._offset = timedelta()
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return SystemClock().now() + self._offset

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._offset += timedelta(seconds=seconds)


class Deployment:
    """The local stack's data stores as an auditor reads them: the Cosmos DB database, the Azurite
    queues whose names hold the host id, and the devhost's orchestration backend."""

    def __init__(self, stores: CosmosStores, endpoints: LocalEndpoints) -> None:
        self.stores = stores
        self.queue_service = QueueServiceClient.from_connection_string(endpoints.storage_connection_string)

    def containers(self) -> dict[str, list[dict[str, Any]]]:
        """Every document of every container of the database."""
        found: dict[str, list[dict[str, Any]]] = {}
        for properties in self.stores.database.list_containers():
            container = self.stores.database.get_container_client(properties["id"])
            found[properties["id"]] = list(container.read_all_items())
        return found

    def queues(self, host_id: str) -> dict[str, list[str]]:
        """The bodies of the messages (up to 32 a queue: all these tests leave) of every queue of the
        deployment, dead-letter queues included."""
        found: dict[str, list[str]] = {}
        for properties in self.queue_service.list_queues(name_starts_with=""):
            if host_id not in properties.name:
                continue
            client = self.queue_service.get_queue_client(properties.name)
            found[properties.name] = [m.content or "" for m in client.peek_messages(max_messages=32)]
        return found

    @staticmethod
    def orchestrations(system: System) -> dict[str, str]:
        """Every instance the backend holds: its state with inputs and outputs, and its history."""
        backend = system.host.backend_client
        assert backend is not None
        found: dict[str, str] = {}
        query = dt_client.OrchestrationQuery(fetch_inputs_and_outputs=True)
        for state in backend.get_all_orchestration_states(query):
            history = backend.get_orchestration_history(state.instance_id)
            found[state.instance_id] = repr(state) + repr(history)
        return found


@pytest.fixture
def deployment(local_endpoints: LocalEndpoints) -> Iterator[tuple[HostDeps, Deployment, MovableClock]]:
    database = "ret" + uuid.uuid4().hex[:10]
    stores = CosmosStores.connect(
        local_endpoints.cosmos_endpoint, key=local_endpoints.cosmos_key, database=database, verify_tls=False
    )
    queues = StorageQueueFactory.from_connection_string(local_endpoints.storage_connection_string)
    clock = MovableClock()
    deps = replace(
        local_dependencies(stores.state, stores.orders, queues, queues, stores.alerts), clock=clock
    )
    try:
        yield deps, Deployment(stores, local_endpoints), clock
    finally:
        stores.client.delete_database(database)
        stores.close()


def found_in(text: str) -> set[str]:
    return {name for name, value in MARKERS.items() if value in text}


def scan(deployment: Deployment, system: System) -> dict[str, set[str]]:
    """Which markers each kind of store holds: ``containers``, ``queues`` (live and dead-letter),
    ``dead letters`` alone and ``orchestrations``."""
    queues = deployment.queues(system.deps.settings.queues.HOST_ID)
    dead_letters = {name: bodies for name, bodies in queues.items() if name.endswith("-deadletter")}
    return {
        "containers": found_in(json.dumps(deployment.containers(), ensure_ascii=False, default=str)),
        "queues": found_in(json.dumps(queues, ensure_ascii=False)),
        "dead letters": found_in(json.dumps(dead_letters, ensure_ascii=False)),
        "orchestrations": found_in(json.dumps(deployment.orchestrations(system), ensure_ascii=False)),
    }


def wait_until_ended(system: System, instance_id: str) -> None:
    """Wait for the instance to end: the record settles in its last activity, before the orchestration
    returns."""
    backend = system.host.backend_client
    assert backend is not None
    state = backend.wait_for_orchestration_completion(instance_id, timeout=30)
    assert state is not None and state.runtime_status is dt_client.OrchestrationStatus.COMPLETED


def run_marked_orders(system: System) -> dict[str, ProcessState]:
    """Three orders that finish (processed, declined, out of stock) and two that are dead-lettered; the
    final state of each finished one."""
    reply_to = system.client.reply_queue
    bodies = {order.order_id: order.to_submission(reply_to) for order in system.catalog.orders}
    marked: dict[str, dict[str, Any]] = {
        # Processed: an unknown customer is charged.
        "tpch-1": {
            "customerId": MARKERS["customer id"],
            "customerName": MARKERS["customer name"],
            "amount": MARKERS["amount"],
        },
        # Compensated: customer 2's balance is negative, the charge is declined, the shipment never made.
        "tpch-2": {"customerName": MARKERS["customer name"], "carrier": MARKERS["carrier"]},
        # Compensated: nobody stocks the SKU.
        "tpch-3": {
            "items": [{"sku": MARKERS["sku"], "quantity": 3}],
            "customerName": MARKERS["customer name"],
        },
    }
    for order_id, changes in marked.items():
        system.client.submit({**bodies[order_id], **changes})
    records = system.wait_settled(list(marked), timeout_s=60)
    for order_id, record in records.items():
        wait_until_ended(system, f"{system.key(order_id)}:{record.attempt}")
    # Dead-lettered: the processed order again with other content (ConflictingOrder), and an order in a
    # currency nobody settles in (InvalidField), both holding every marker.
    every_marker = {
        "customerId": MARKERS["customer id"],
        "customerName": MARKERS["customer name"],
        "amount": MARKERS["amount"],
        "carrier": MARKERS["carrier"],
        "items": [{"sku": MARKERS["sku"], "quantity": 1}],
    }
    system.client.submit({**bodies["tpch-1"], **every_marker})
    inbound = system.deps.settings.clients.clients().get(system.deps.settings.queues.HOST_ID).inbound_queue
    invalid = {**bodies["tpch-3"], **every_marker, "orderId": "marked-invalid", "currency": "XXX"}
    system.deps.queues.queue(inbound).send(json.dumps(invalid), message_id="invalid-1")
    system.wait_until(lambda: len(system.deps.queues.dead_letters(inbound)) == 2, timeout_s=30)
    return {order_id: record.process_state for order_id, record in records.items()}


def test_after_retention_no_marker_is_left_in_any_container_queue_dead_letter_or_orchestration(
    deployment: tuple[HostDeps, Deployment, MovableClock],
) -> None:
    deps, auditor, clock = deployment
    with running_system(deps) as system:
        finished = run_marked_orders(system)
        assert set(finished.values()) <= set(PURGEABLE_STATES), finished

        before = scan(auditor, system)
        # The scan sees the data where it is: without the retention passes it would stay there.
        assert before["containers"] == set(MARKERS)
        assert before["dead letters"] == set(MARKERS)
        assert MARKERS["amount"] in json.dumps(auditor.orchestrations(system))  # the charge's result
        assert len(auditor.orchestrations(system)) >= len(finished)

        clock.advance(deps.settings.supervisor.COMPENSATION_LOG_RETENTION_S + DAY_S)
        # What the host runs on its retention cadence (its own loops may get there first: the same end).
        system.host.purge_shared_data()
        system.host.purge_own_history()

        after = scan(auditor, system)
        assert after == {"containers": set(), "queues": set(), "dead letters": set(), "orchestrations": set()}
        assert auditor.orchestrations(system) == {}
        # What the protocol needs stays: each order's final state.
        for order_id, state in finished.items():
            assert system.record(order_id).process_state is state


def test_dead_letters_younger_than_their_retention_stay(
    deployment: tuple[HostDeps, Deployment, MovableClock],
) -> None:
    deps, _, clock = deployment
    # No supervisor role: only the test runs the pass.
    with running_system(deps, roles=("submission",)) as system:
        inbound = (
            system.deps.settings.clients.clients().get(system.deps.settings.queues.HOST_ID).inbound_queue
        )
        system.deps.queues.queue(inbound).send("not json", message_id="garbage-1")
        system.wait_until(lambda: len(system.deps.queues.dead_letters(inbound)) == 1, timeout_s=30)

        clock.advance(deps.settings.supervisor.DEAD_LETTER_RETENTION_S - DAY_S)
        assert system.host.purge_shared_data().dead_letters == 0
        assert len(system.deps.queues.dead_letters(inbound)) == 1

        clock.advance(2 * DAY_S)
        assert system.host.purge_shared_data().dead_letters == 1
        assert system.deps.queues.dead_letters(inbound) == []


def test_an_orchestration_that_ran_to_completion_is_gone_from_the_backend_after_retention(
    deployment: tuple[HostDeps, Deployment, MovableClock],
) -> None:
    deps, _, clock = deployment
    with running_system(deps) as system:
        [order_id] = system.submit_all(["tpch-1"])
        system.wait_settled([order_id])
        instance_id = f"{system.key(order_id)}:1"
        wait_until_ended(system, instance_id)
        backend = system.host.backend_client
        assert backend is not None

        clock.advance(deps.settings.supervisor.COMPENSATION_LOG_RETENTION_S - DAY_S)
        assert system.host.purge_own_history().histories == 0
        assert backend.get_orchestration_state(instance_id) is not None

        clock.advance(2 * DAY_S)
        system.host.purge_own_history()  # the host's own retention loop may get there first
        assert backend.get_orchestration_state(instance_id) is None
        with pytest.raises(grpc.RpcError) as gone:
            backend.get_orchestration_history(instance_id)
        assert gone.value.code() is grpc.StatusCode.NOT_FOUND
