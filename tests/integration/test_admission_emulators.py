"""Admission control against the real stores and queues: the server-side in-flight COUNT on
cosmosdb-server (via azure-cosmos) and Azurite queues, and the in-memory adapters for comparison."""

from __future__ import annotations

import uuid

import pytest

from intake.admission import IN_FLIGHT_QUERY, AdmissionControl
from intake.submission import IntakeOutcome, handle_intake_message
from orderflow.clock import FakeClock
from orderflow.messages import OrderStatus, StatusReply, parse_message, reply_message_id
from orderflow.settings import Settings
from tests.host_deps import HostDeps
from tests.unit.fakes import client_for, order_body, received

pytestmark = pytest.mark.integration


def test_a_ceiling_of_three_admits_three_of_five_and_rejects_the_rest(deps: HostDeps) -> None:
    # Queues of its own: Azurite is shared by every test of the session.
    suffix = uuid.uuid4().hex[:8]
    settings = Settings.load({}, MAX_IN_FLIGHT_ORDERS=3, MAX_SUBMISSION_BACKLOG=100)
    reply_queue = f"client-{suffix}"
    clock = FakeClock()
    admission = AdmissionControl.from_clients(
        settings.clients, states=deps.states, queues=deps.queues, monotonic=lambda: clock.now().timestamp()
    )
    ids = [f"adm-{suffix}-{n}" for n in range(5)]

    outcomes = {
        order_id: handle_intake_message(
            order_body(order_id, reply_to=reply_queue),
            client=client_for(reply_queue),
            orders=deps.orders,
            states=deps.states,
            queues=deps.queues,
            clock=clock,
            steps=settings.steps,
            starter=settings.starter,
            queue_names=settings.queues,
            admission=admission,
        ).outcome
        for order_id in ids
    }

    assert list(outcomes.values()).count(IntakeOutcome.ACCEPTED) == 3
    assert list(outcomes.values()).count(IntakeOutcome.REJECTED) == 2
    assert deps.states.count(IN_FLIGHT_QUERY) == 3
    replies = {
        message.message_id: parse_message(StatusReply, message.body)
        for message in received(deps.queues.queue(reply_queue))
    }
    rejected = [oid for oid, outcome in outcomes.items() if outcome is IntakeOutcome.REJECTED]
    for order_id in rejected:
        reply = replies[reply_message_id(order_id, OrderStatus.REJECTED)]
        assert reply.reason == "InFlightCeiling"
        assert reply.retry_after_s is not None and reply.retry_after_s >= settings.clients.ADMISSION_REFRESH_S
    assert sorted(reply.status for reply in replies.values()) == sorted(
        [OrderStatus.RECEIVED] * 3 + [OrderStatus.REJECTED] * 2
    )
