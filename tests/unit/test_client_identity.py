"""A client is identified by the inbound queue its message arrived on, never by its body (docs/clients.md).

Each test is an attack that succeeded while every client shared one submission queue and named its reply
queue in the body, followed by what it does now."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from intake.admission import AdmissionReason
from intake.client_admission import ClientAdmission
from intake.submission import (
    IntakeOutcome,
    IntakeResult,
    handle_intake_message,
    initial_state,
    order_document,
)
from orderflow.clients import RegisteredClient
from orderflow.clock import FakeClock
from orderflow.errors import ConflictingOrder, InvalidMessage, NotFound
from orderflow.messages import OrderStatus, StatusReply, SubmitOrder, parse_message
from orderflow.queues.memory import InMemoryQueueFactory
from orderflow.records import ProcessState
from orderflow.settings import Settings
from orderflow.step_requests import request_payload
from orderflow.stores.memory import InMemoryOrderStore, InMemoryStateStore
from orderflow.workflows import new_order_workflow
from tests.unit.fakes import order_body, received

pytestmark = pytest.mark.unit

CLIENTS = [{"id": "acme", "maxInFlight": 3}, {"id": "globex"}]


class System:
    """The submission path over in-memory stores and queues, with two registered clients."""

    def __init__(self, **settings: object) -> None:
        self.settings = Settings.load({}, CLIENTS=json.dumps(CLIENTS), **settings)
        self.acme = self.settings.clients.client("acme")
        self.globex = self.settings.clients.client("globex")
        self.states, self.orders = InMemoryStateStore(), InMemoryOrderStore()
        self.queues = InMemoryQueueFactory()
        self.clock = FakeClock(datetime(2026, 1, 1, 12, tzinfo=UTC))
        self.admission = ClientAdmission.from_clients(
            self.settings.clients, states=self.states, queues=self.queues
        )

    def send(self, client: RegisteredClient, body: str) -> IntakeResult:
        return handle_intake_message(
            body,
            client=client,
            orders=self.orders,
            states=self.states,
            queues=self.queues,
            clock=self.clock,
            steps=self.settings.steps,
            starter=self.settings.starter,
            queue_names=self.settings.queues,
            admission=self.admission,
        )

    def submit(self, client: RegisteredClient, order_id: str, **changes: object) -> IntakeResult:
        return self.send(client, order_body(order_id, reply_to=client.reply_queue, **changes))

    def cancel(self, client: RegisteredClient, order_id: str) -> IntakeResult:
        return self.send(client, json.dumps({"schemaVersion": 1, "type": "CancelOrder", "orderId": order_id}))

    def replies(self, client: RegisteredClient) -> list[StatusReply]:
        return [parse_message(StatusReply, m.body) for m in received(self.queues.queue(client.reply_queue))]


@pytest.fixture
def system() -> System:
    return System()


def test_a_reply_to_naming_another_clients_queue_is_dead_lettered_before_anything_is_written(
    system: System,
) -> None:
    system.replies(system.globex)  # globex's reply queue exists and is empty

    with pytest.raises(InvalidMessage) as refused:
        system.send(system.acme, order_body("o-1", reply_to=system.globex.reply_queue))

    assert refused.value.reason == "ReplyToNotRegistered"
    assert "client 'acme'" in refused.value.description
    assert system.replies(system.globex) == []  # globex hears nothing of an order it never placed
    with pytest.raises(NotFound):
        system.states.get("o-1")
    with pytest.raises(NotFound):
        system.orders.get("o-1")


def test_the_order_records_the_client_it_arrived_for(system: System) -> None:
    assert system.submit(system.acme, "o-1").outcome is IntakeOutcome.ACCEPTED

    record, document = system.states.get("acme:o-1").item, system.orders.get("acme:o-1")
    assert (record.client_id, record.reply_to) == ("acme", "replies-acme")
    assert document.client_id == "acme"
    assert [r.status for r in system.replies(system.acme)] == [OrderStatus.RECEIVED]


def test_a_cancel_of_another_clients_order_is_answered_as_an_unknown_order(system: System) -> None:
    system.submit(system.acme, "o-1")
    system.replies(system.acme)

    with pytest.raises(InvalidMessage) as foreign:
        system.cancel(system.globex, "o-1")
    with pytest.raises(InvalidMessage) as missing:
        system.cancel(system.globex, "o-404")

    assert system.states.get("acme:o-1").item.process_state is ProcessState.PENDING
    assert system.states.get("acme:o-1").item.cancel_requested_at is None
    # Word for word what a cancel of an order that does not exist gets: no hint that o-1 exists.
    assert (foreign.value.reason, foreign.value.description.replace("o-1", "X")) == (
        missing.value.reason,
        missing.value.description.replace("o-404", "X"),
    )
    assert foreign.value.reason == "UnknownOrder"
    assert system.replies(system.acme) == [] and system.replies(system.globex) == []
    assert system.cancel(system.acme, "o-1").outcome is IntakeOutcome.CANCEL  # the owner still can
    assert system.states.get("acme:o-1").item.process_state is ProcessState.CANCELLED


def _store_in_flight(system: System, order_id: str, client: RegisteredClient) -> None:
    """An order of ``client`` in flight, stored as the intake stores it."""
    order = parse_message(SubmitOrder, order_body(order_id, reply_to=client.reply_queue))
    system.orders.create(order_document(order, system.clock, client))
    system.states.create(
        initial_state(order, new_order_workflow(None), system.settings.steps, system.clock, client)
    )


def test_unused_reply_queue_names_create_no_queue(system: System) -> None:
    before = system.queues.names()

    for n in range(17):
        with pytest.raises(InvalidMessage, match="ReplyToNotRegistered"):
            system.send(system.acme, order_body(f"o-{n}", reply_to=f"unused-{n}"))

    assert system.queues.names() == before  # not one queue was created on demand


def test_one_client_at_its_quota_does_not_refuse_another(system: System) -> None:
    accepted = [system.submit(system.acme, f"a-{n}").outcome for n in range(5)]

    assert accepted == [IntakeOutcome.ACCEPTED] * 3 + [IntakeOutcome.REJECTED] * 2
    assert system.replies(system.acme)[-1].reason == AdmissionReason.CLIENT_IN_FLIGHT_CEILING.value
    assert [system.submit(system.globex, f"g-{n}").outcome for n in range(5)] == [IntakeOutcome.ACCEPTED] * 5


def test_a_client_without_a_quota_of_its_own_cannot_fill_the_system_for_the_others() -> None:
    # The attack: a client registered without maxInFlight submits until the global ceiling is reached.
    system = System(MAX_IN_FLIGHT_ORDERS=10, ADMISSION_REFRESH_S=60.0)
    assert system.settings.clients.client_quota(system.globex) == 7  # what acme's 3 leave of the 10

    outcomes = [system.submit(system.globex, f"g-{n}") for n in range(12)]

    assert [o.outcome for o in outcomes] == [IntakeOutcome.ACCEPTED] * 7 + [IntakeOutcome.REJECTED] * 5
    assert {o.reason for o in outcomes[7:]} == {AdmissionReason.CLIENT_IN_FLIGHT_CEILING.value}
    assert [system.submit(system.acme, f"a-{n}").outcome for n in range(3)] == [IntakeOutcome.ACCEPTED] * 3


def test_quotas_that_could_fill_the_global_ceiling_are_refused_at_start_up() -> None:
    with pytest.raises(ValueError, match="add up to 3, which under MAX_IN_FLIGHT_ORDERS \\(3\\) leave less"):
        System(MAX_IN_FLIGHT_ORDERS=3)  # acme's 3 leave globex nothing
    with pytest.raises(ValueError, match="add up to 9, which under MAX_IN_FLIGHT_ORDERS \\(8\\) exceed it"):
        Settings.load({}, MAX_IN_FLIGHT_ORDERS=8, CLIENTS=json.dumps([{"id": "a", "maxInFlight": 9}]))
    unbounded = Settings.load({}, MAX_IN_FLIGHT_ORDERS=0, CLIENTS=json.dumps(CLIENTS))
    assert [unbounded.clients.client_quota(c) for c in unbounded.clients.clients()] == [
        3,
        0,
    ]  # no ceiling, no share


def test_the_global_ceiling_still_holds_and_a_refusal_gives_the_clients_place_back() -> None:
    system = System(MAX_IN_FLIGHT_ORDERS=6, ADMISSION_REFRESH_S=60.0)
    initech = RegisteredClient.model_validate({"id": "initech"})
    for n in range(4):  # orders of a client no longer registered, counted by the global ceiling only
        _store_in_flight(system, f"old-{n}", initech)
    outcomes = [system.submit(system.globex, f"g-{n}").outcome for n in range(2)]
    assert outcomes == [IntakeOutcome.ACCEPTED] * 2
    refused = system.submit(system.acme, "a-1")
    assert (refused.outcome, refused.reason) == (IntakeOutcome.REJECTED, "InFlightCeiling")
    # acme's refused order did not take one of its three places.
    own = system.admission.client_ceiling(system.acme)
    assert [own.admit(f"probe-{n}").admitted for n in range(4)] == [True, True, True, False]


def test_two_clients_may_use_the_same_order_id_and_neither_hears_of_the_other(system: System) -> None:
    # The attack: submit another client's next order id first, so that its real order is refused.
    assert system.submit(system.globex, "o-1", amount="1.00").outcome is IntakeOutcome.ACCEPTED
    assert system.submit(system.acme, "o-1").outcome is IntakeOutcome.ACCEPTED

    acme, globex = system.states.get("acme:o-1").item, system.states.get("globex:o-1").item
    assert (acme.client_id, acme.reply_to) == ("acme", "replies-acme")
    assert (globex.client_id, globex.reply_to) == ("globex", "replies-globex")
    assert system.orders.get("acme:o-1").amount != system.orders.get("globex:o-1").amount
    # Two orders, two idempotency namespaces: no step of one can be taken for the other's.
    assert {s.idempotency_key for s in acme.steps.values()}.isdisjoint(
        s.idempotency_key for s in globex.steps.values()
    )
    # Each client hears of its own order only, under its own order id.
    assert [(r.order_id, r.status) for r in system.replies(system.acme)] == [("o-1", OrderStatus.RECEIVED)]
    assert [(r.order_id, r.status) for r in system.replies(system.globex)] == [("o-1", OrderStatus.RECEIVED)]


def test_a_conflicting_resubmission_is_refused_and_the_reply_reveals_no_hash(system: System) -> None:
    system.submit(system.acme, "o-1")
    system.replies(system.acme)

    with pytest.raises(ConflictingOrder) as conflict:
        system.submit(system.acme, "o-1", amount="1.00")

    assert conflict.value.detail == "order o-1 exists with different content"
    [reply] = system.replies(system.acme)
    assert (reply.order_id, reply.status, reply.reason) == ("o-1", OrderStatus.REJECTED, "ConflictingOrder")
    assert reply.detail == "order o-1 exists with different content"
    stored_hash = system.orders.get("acme:o-1").content_hash
    assert stored_hash[:12] not in (reply.detail or "")
    assert system.orders.get("acme:o-1").amount != 1


def test_resending_one_order_does_not_fill_the_ceilings_for_everyone() -> None:
    # globex has no maxInFlight: its quota is what acme's 3 leave of the global 6. Resending its one order
    # (or resending it with other content, a conflict that writes nothing) must not take the places of
    # orders that exist once.
    system = System(MAX_IN_FLIGHT_ORDERS=6, ADMISSION_REFRESH_S=60.0)
    assert system.submit(system.globex, "g-1").outcome is IntakeOutcome.ACCEPTED
    assert system.submit(system.acme, "a-1").outcome is IntakeOutcome.ACCEPTED
    resent = [system.submit(system.globex, "g-1").outcome for _ in range(10)]
    for _ in range(10):
        with pytest.raises(ConflictingOrder):
            system.submit(system.globex, "g-1", amount="1.00")

    assert resent == [IntakeOutcome.DUPLICATE] * 10
    # One of globex's three places is taken: two more fit, and only two; acme's two are still free.
    assert system.submit(system.globex, "g-2").outcome is IntakeOutcome.ACCEPTED
    assert system.submit(system.globex, "g-3").outcome is IntakeOutcome.ACCEPTED
    refused = system.submit(system.globex, "g-4")
    assert (refused.outcome, refused.reason) == (IntakeOutcome.REJECTED, "ClientInFlightCeiling")
    assert [system.submit(system.acme, f"a-{n}").outcome for n in (2, 3)] == [IntakeOutcome.ACCEPTED] * 2


def test_only_the_deployments_own_queues_are_ever_created(system: System) -> None:
    created = system.settings.clients.is_deployment_queue
    assert all(created(q) for q in ("orders-acme", "replies-acme", "replies-globex", "agent-payment"))
    assert all(created(q) for q in ("agent-responses", "agent-responses-h1", "replies-acme-deadletter"))
    assert not any(created(q) for q in ("replies-initech", "client-a", "unused-1"))


def test_the_payment_service_is_told_whose_customer_it_charges(system: System) -> None:
    # Customer ids are the client's own: two clients' customer "1" are two customers.
    for client in (system.acme, system.globex):
        system.submit(client, "o-1")
    charge = next(step for step in new_order_workflow(None).steps if step.operation == "charge")

    payloads = [request_payload(charge, system.orders.get(key)) for key in ("acme:o-1", "globex:o-1")]

    assert [(p["clientId"], p["customerId"]) for p in payloads] == [("acme", "1"), ("globex", "1")]
