"""A status reply goes to the client's own private queue: never to one of orderflow's queues, and on Service
Bus only to the queue the message's ``ReplyTo`` property names too."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from intake.submission import IntakeOutcome, handle_intake_message
from orderflow.clients import RegisteredClient
from orderflow.clock import FakeClock
from orderflow.errors import InvalidMessage, NotFound
from orderflow.queues.memory import InMemoryQueueFactory
from orderflow.settings import Settings
from orderflow.stores.memory import InMemoryOrderStore, InMemoryStateStore
from orderflow_client.client import OrderflowClient
from tests.unit.fakes import TEST_CLIENT, order_body

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("name", "what"),
    [
        ("agent-inventory", "an agent request queue (AGENT_QUEUE_PREFIX 'agent-')"),
        ("agent-anything-new", "an agent request queue (AGENT_QUEUE_PREFIX 'agent-')"),
        ("agent-responses", "an agent response queue (AGENT_RESPONSES_QUEUE)"),
        ("agent-responses-h1", "an agent response queue (AGENT_RESPONSES_QUEUE)"),
        ("orders-deadletter", "a dead-letter queue"),
        ("client-a-deadletter", "a dead-letter queue"),
        ("client-a", None),
        ("orders", None),
        ("orders2", None),
        ("my-agent-queue", None),
        ("deadletter", None),
    ],
)
def test_reserved_queues_are_orderflows_own(name: str, what: str | None) -> None:
    assert Settings.load(env={}).queues.reserved_queue(name) == what


def test_reserved_queues_follow_the_settings_the_hosts_use() -> None:
    settings = Settings.load(
        env={
            "AGENT_QUEUE_PREFIX": "worker-",
            "AGENT_RESPONSES_QUEUE": "answers",
        }
    )

    assert settings.queues.reserved_queue(settings.queues.agent_queue("payment")) is not None
    assert settings.queues.reserved_queue(settings.queues.response_queue()) is not None
    assert settings.queues.reserved_queue("agent-payment") is None


def _submit(
    body: str, settings: Settings, *, reply_to: str | None = None, client: RegisteredClient = TEST_CLIENT
) -> tuple[Any, InMemoryQueueFactory]:
    states, orders, queues = InMemoryStateStore(), InMemoryOrderStore(), InMemoryQueueFactory()
    try:
        result = handle_intake_message(
            body,
            client=client,
            reply_to=reply_to,
            orders=orders,
            states=states,
            queues=queues,
            clock=FakeClock(datetime(2026, 1, 1, 12, tzinfo=UTC)),
            steps=settings.steps,
            starter=settings.starter,
            queue_names=settings.queues,
        )
    except InvalidMessage as refused:
        with pytest.raises(NotFound):
            states.get("o-1")
        with pytest.raises(NotFound):
            orders.get("o-1")
        return refused, queues
    return result, queues


def test_a_submission_naming_the_configured_response_queue_is_dead_lettered() -> None:
    settings = Settings.load(env={"AGENT_RESPONSES_QUEUE": "answers"})

    refused, queues = _submit(order_body("o-1", reply_to="answers"), settings)

    assert isinstance(refused, InvalidMessage)
    assert refused.reason == "ReservedReplyQueue"
    assert refused.description == (
        "replyTo 'answers' is an agent response queue (AGENT_RESPONSES_QUEUE), not a client's reply queue; "
        "name the client's own private queue"
    )
    assert queues.queue("answers").approximate_count() == 0  # no reply was sent there


@pytest.mark.parametrize(
    ("property_reply_to", "accepted"), [("client-a", True), (None, True), ("client-b", False), ("", False)]
)
def test_the_body_reply_queue_must_match_the_transport_reply_to(
    property_reply_to: str | None, accepted: bool
) -> None:
    outcome, _ = _submit(
        order_body("o-1", reply_to="client-a"), Settings.load(env={}), reply_to=property_reply_to
    )

    if accepted:
        assert outcome.outcome is IntakeOutcome.ACCEPTED
    else:
        assert isinstance(outcome, InvalidMessage)
        assert outcome.reason == "ReplyToMismatch"
        assert f"ReplyTo property {property_reply_to!r}" in outcome.description


@dataclass
class RecordingQueues:
    """A queue factory whose queues record every send with its options."""

    sent: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)

    def queue(self, name: str) -> Any:
        factory = self

        class Queue:
            def send(self, body: str, **options: Any) -> None:
                factory.sent.append((name, body, options))

        return Queue()

    def dead_letters(self, name: str, *, max_messages: int = 32) -> list[Any]:
        return []


def test_the_client_sends_its_reply_queue_as_the_reply_to_property_too() -> None:
    queues = RecordingQueues()
    client = OrderflowClient(queues, reply_queue="client-a", orders_queue="orders-a")

    client.submit(json.loads(order_body("o-1", reply_to="someone-else")))

    [(queue, body, options)] = queues.sent
    assert queue == "orders-a"
    assert json.loads(body)["replyTo"] == options["reply_to"] == "client-a"
