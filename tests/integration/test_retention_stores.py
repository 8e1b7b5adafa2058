"""Retention against both stores, read as an attacker or auditor would: the stored JSON of every order.

Each test runs on the in-memory stores (marker ``unit``) and on the Cosmos DB adapters over the session's
cosmosdb-server (marker ``integration``), each Cosmos run in a database of its own. The orders are
submitted through the submission role, then given everything a finished order can hold: step results,
compensation data and undo results, error and reply texts that quote them (docs/data.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from devhost.emulators import LocalEndpoints
from intake.cancellation import CancelOutcome, handle_cancel
from intake.submission import IntakeOutcome, handle_intake_message
from orderflow.client_fields import CLIENT_FIELDS, KeptIn, PurgeAction
from orderflow.clock import FakeClock
from orderflow.errors import ConflictingOrder
from orderflow.queues.memory import InMemoryQueueFactory
from orderflow.records import (
    CompensationEntry,
    LastError,
    PendingReply,
    ProcessState,
    StepStatus,
    UndoStatus,
)
from orderflow.settings import Settings
from orderflow.stores.base import OrderStore, StateStore
from orderflow.stores.cosmos import CosmosStores
from orderflow.stores.memory import InMemoryOrderStore, InMemoryStateStore
from orderflow.workflows import workflow_for
from supervisor.retention import purge_expired_logs
from tests.unit.fakes import TEST_CLIENT, order_body, received

pytestmark = pytest.mark.filterwarnings("ignore:Unverified HTTPS request")

DAY_S = 86_400.0
RETENTION_S = 30 * DAY_S

SECRETS = {
    "customer id": "cust-4711",
    "customer name": "Ada Lovelace",
    "amount": "987.65",
    "charge id": "ch-7f3a9",
    "reservation id": "rsv-5521",
    "shipment id": "shp-8812",
    "refund id": "re-3310",
    "carrier": "Rue Exemple 12, Ada's neighbour",
}
"""Payment and customer data an order carries; none may be left in a store after the retention period."""

RESULTS = {
    "reserve": {"reservationId": SECRETS["reservation id"]},
    "charge": {"chargeId": SECRETS["charge id"], "amount": SECRETS["amount"], "currency": "USD"},
    "ship": {"shipmentId": SECRETS["shipment id"], "carrier": "TRUCK"},
}
"""Step results by operation, as the demo services answer."""

UNDO_RESULTS = {
    "reserve": {"undone": "true", "reservationId": SECRETS["reservation id"]},
    "charge": {"undone": "true", "chargeId": SECRETS["charge id"], "refundId": SECRETS["refund id"]},
    "ship": {"undone": "false", "reason": "irreversible"},
}

FINISHED = {
    "a:o-processed": ProcessState.PROCESSED,
    "a:o-compensated": ProcessState.COMPENSATED,
    "a:o-cancelled": ProcessState.CANCELLED,
}
KEPT = {"a:o-error": ProcessState.ERROR, "a:o-compensation-failed": ProcessState.COMPENSATION_FAILED}


@dataclass
class Stores:
    """Both stores of one adapter, a clock and queues, and the documents exactly as stored."""

    states: StateStore
    orders: OrderStore
    queues: InMemoryQueueFactory
    clock: FakeClock
    settings: Settings
    stored: Callable[[str, str], dict[str, Any]]
    """``stored(container, order_id)``: the raw document, ``container`` ``orderstate`` or ``orders``."""

    def text(self, order_id: str) -> str:
        """Everything both stores hold for ``order_id``, as JSON text (system properties dropped)."""
        docs = [self.stored(container, order_id) for container in ("orderstate", "orders")]
        return json.dumps(docs, ensure_ascii=False)

    def submit(self, order_id: str, **changes: Any) -> IntakeOutcome:
        fields = {
            "customerId": SECRETS["customer id"],
            "customerName": SECRETS["customer name"],
            "amount": SECRETS["amount"],
            "carrier": SECRETS["carrier"],
        }
        body = order_body(order_id, **{**fields, **changes})
        return handle_intake_message(
            body,
            client=TEST_CLIENT,
            orders=self.orders,
            states=self.states,
            queues=self.queues,
            clock=self.clock,
            steps=self.settings.steps,
            starter=self.settings.starter,
            queue_names=self.settings.queues,
        ).outcome

    def purge(self) -> int:
        report = purge_expired_logs(
            states=self.states,
            orders=self.orders,
            clock=self.clock,
            supervisor=self.settings.supervisor,
            scans=self.settings.scans,
        )
        return report.purged


def _system_free(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if not k.startswith("_")}


@pytest.fixture(
    params=[
        pytest.param("memory", marks=pytest.mark.unit, id="memory"),
        pytest.param("cosmos", marks=pytest.mark.integration, id="cosmos"),
    ]
)
def stores(request: pytest.FixtureRequest, unique_name: str) -> Iterator[Stores]:
    clock = FakeClock()
    settings = Settings.load({}, COMPENSATION_LOG_RETENTION_S=RETENTION_S)
    if request.param == "memory":
        states, orders = InMemoryStateStore(), InMemoryOrderStore()
        containers = {"orderstate": states._container, "orders": orders._container}

        def stored_in_memory(container: str, order_id: str) -> dict[str, Any]:
            return _system_free(containers[container].read(order_id))

        yield Stores(states, orders, InMemoryQueueFactory(), clock, settings, stored_in_memory)
        return
    endpoints: LocalEndpoints = request.getfixturevalue("local_endpoints")
    cosmos = CosmosStores.connect(
        endpoints.cosmos_endpoint,
        key=endpoints.cosmos_key,
        database=unique_name,
        verify_tls=False,
        connection_timeout=10,
    )

    def stored_in_cosmos(container: str, order_id: str) -> dict[str, Any]:
        client = cosmos.database.get_container_client(container)
        return _system_free(client.read_item(item=order_id, partition_key=order_id))

    try:
        yield Stores(cosmos.state, cosmos.orders, InMemoryQueueFactory(), clock, settings, stored_in_cosmos)
    finally:
        cosmos.client.delete_database(unique_name)
        cosmos.close()


def settle(stores: Stores, order_id: str, state: ProcessState) -> None:
    """Submit ``order_id`` and give its record everything a settled order can hold, ending ``state``."""
    assert stores.submit(order_id) is IntakeOutcome.ACCEPTED
    found = stores.states.get(order_id)
    record = found.item.model_copy(deep=True)
    now = stores.clock.now()
    definition = workflow_for(record.workflow_version)
    quoted = f"payment refused {SECRETS['charge id']} of {SECRETS['amount']} for {SECRETS['customer id']}"
    for step in definition.steps:
        record.steps[step.name].status = StepStatus.COMPLETED
        record.steps[step.name].result = dict(RESULTS[step.operation])
        record.compensation_log.append(
            CompensationEntry(
                step=step.name,
                action=step.operation,
                undo=step.undo,
                undo_key=f"{order_id}:{step.name}:undo",
                data=dict(RESULTS[step.operation]),
                recorded_at=now,
                status=UndoStatus.COMPENSATED,
                undo_result=dict(UNDO_RESULTS[step.operation]),
                undone_at=now,
            )
        )
    record.process_state = state
    record.last_error = LastError(
        kind="permanent", code="declined", message=quoted, step="charge_payment", at=now
    )
    record.compensation_error = LastError(kind="transient", code="refund_failed", message=quoted, at=now)
    record.pending_reply = PendingReply(status="Failed", reason="declined", detail=quoted)
    record.updated_at = now
    stores.states.replace(record, etag=found.etag)


def secrets_in(text: str) -> set[str]:
    return {name for name, value in SECRETS.items() if value in text}


def test_after_the_retention_period_no_finished_order_holds_payment_or_customer_data(stores: Stores) -> None:
    for order_id, state in {**FINISHED, **KEPT}.items():
        settle(stores, order_id, state)

    stores.clock.advance(RETENTION_S - DAY_S)
    assert stores.purge() == 0
    for order_id in {**FINISHED, **KEPT}:
        assert secrets_in(stores.text(order_id)) == set(SECRETS), order_id  # the scan finds them

    stores.clock.advance(2 * DAY_S)
    assert stores.purge() == len(FINISHED)

    for order_id, state in FINISHED.items():
        assert secrets_in(stores.text(order_id)) == set(), order_id
        record = stores.states.get(order_id).item
        assert record.process_state is state
        assert [entry.undo_key for entry in record.compensation_log] == [
            f"{order_id}:{step}:undo" for step in record.steps
        ]
        assert {step.idempotency_key for step in record.steps.values()} == {
            f"{order_id}:{step}" for step in record.steps
        }
        assert record.last_error is not None and record.last_error.code == "declined"
    for order_id in KEPT:
        # Error and CompensationFailed orders keep everything for the operator who resolves them.
        assert secrets_in(stores.text(order_id)) == set(SECRETS), order_id
    assert stores.purge() == 0


def test_a_purged_order_resubmitted_is_a_duplicate_and_a_changed_one_a_conflict(stores: Stores) -> None:
    settle(stores, "a:o-1", ProcessState.PROCESSED)
    stores.clock.advance(RETENTION_S + DAY_S)
    assert stores.purge() == 1
    received(stores.queues.queue("client-a"))
    before = stores.text("a:o-1")

    assert stores.submit("a:o-1") is IntakeOutcome.DUPLICATE
    with pytest.raises(ConflictingOrder):
        stores.submit("a:o-1", amount="987.66")

    assert stores.text("a:o-1") == before  # neither wrote anything, nor brought the data back
    replies = [json.loads(m.body) for m in received(stores.queues.queue("client-a"))]
    assert [(r["status"], r.get("reason")) for r in replies] == [
        ("Processed", None),
        ("Rejected", "ConflictingOrder"),
    ]
    assert secrets_in(json.dumps(replies[0])) == set()
    assert stores.states.get("a:o-1").item.data_purged_at is not None
    assert stores.orders.get("a:o-1").redacted_at is not None


CLIENT_MARKERS: dict[tuple[str, str], tuple[Any, str]] = {
    ("SubmitOrder", "customerId"): ("cust-marker-31", "cust-marker-31"),
    ("SubmitOrder", "customerName"): ("Marker Olwen Pryce", "Marker Olwen Pryce"),
    ("SubmitOrder", "amount"): ("4417.93", "4417.93"),
    ("SubmitOrder", "items"): ([{"sku": "sku-marker-88", "quantity": 7}], "sku-marker-88"),
    ("SubmitOrder", "carrier"): ("Olwen's sister, Marker Row 5", "Marker Row 5"),
    ("CancelOrder", "reason"): ("moved to 12 Marker Lane", "Marker Lane"),
}
"""For each field of a client's messages that orderflow keeps and the table purges: the value sent, and
the text of it a scan looks for."""


def test_every_client_field_the_table_purges_is_gone_after_the_retention_period(stores: Stores) -> None:
    kept = {
        (f.message, f.field)
        for f in CLIENT_FIELDS
        if f.purge is not PurgeAction.KEEP and f.kept_in is not KeptIn.NOT_KEPT and "[]" not in f.field
    }
    assert set(CLIENT_MARKERS) == kept, "give each field the table purges a marker here"
    sent = {
        field: value for (message, field), (value, _) in CLIENT_MARKERS.items() if message == "SubmitOrder"
    }
    assert stores.submit("a:o-1", **sent) is IntakeOutcome.ACCEPTED
    reason, _ = CLIENT_MARKERS["CancelOrder", "reason"]
    cancel = {"schemaVersion": 1, "type": "CancelOrder", "orderId": "o-1", "reason": reason}
    cancelled = handle_cancel(
        json.dumps(cancel), client=TEST_CLIENT, states=stores.states, queues=stores.queues, clock=stores.clock
    )
    assert cancelled.outcome is CancelOutcome.CANCELLED

    def left() -> set[tuple[str, str]]:
        text = stores.text("a:o-1")
        return {field for field, (_, marker) in CLIENT_MARKERS.items() if marker in text}

    assert left() == set(CLIENT_MARKERS)  # the scan finds each one before the period ends
    stores.clock.advance(RETENTION_S + DAY_S)
    assert stores.purge() == 1

    assert left() == set()
