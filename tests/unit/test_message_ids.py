"""Every ``MessageId`` orderflow sends fits Service Bus's limit, for the longest ids intake accepts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from azure.servicebus import ServiceBusMessage

from agents.agent import handle_request
from orderflow.clock import FakeClock
from orderflow.contracts import fallback_step_name, reacquire_step_name, undo_step_name
from orderflow.messages import (
    MAX_MESSAGE_ID_CHARS,
    AgentRequest,
    OrderStatus,
    bounded_message_id,
    reply_message_id,
    request_id_for,
)
from orderflow.queues.memory import InMemoryQueueFactory
from orderflow.records import instance_id_for
from orderflow.settings import Settings
from orderflow.workflows import WORKFLOWS

pytestmark = pytest.mark.unit

START = datetime(2026, 1, 1, tzinfo=UTC)
REPLY_QUEUE = "agent-responses-local"
LONGEST_CLIENT = "c" * 32
LONGEST_ORDER = "O" * 64
LONGEST_KEY = f"{LONGEST_CLIENT}:{LONGEST_ORDER}"
ATTEMPTS = (1, 9, 10**6, 2**63)


def request_steps() -> set[str]:
    """Every step name a request can carry, over every built-in workflow version."""
    names: set[str] = set()
    longest = "s" * 48  # the longest step name a workflow may declare
    for name in [longest, *(step.name for workflow in WORKFLOWS.values() for step in workflow.steps)]:
        names |= {name, fallback_step_name(name), reacquire_step_name(name), undo_step_name(name)}
    return names


def sendable(message_id: str) -> None:
    """Raises the SDK's own ValueError if Service Bus would refuse ``message_id``."""
    ServiceBusMessage("{}", message_id=message_id)


class Service:
    name = "inventory"

    def call(self, operation: str, payload: object, **kwargs: object) -> dict[str, str]:
        return {"reservationId": "r-1"}


def test_the_agent_answers_a_long_request_under_a_message_id_service_bus_accepts() -> None:
    instance_id = instance_id_for(LONGEST_KEY, 2**31)
    step = undo_step_name("s" * 48)  # the longest step name a workflow may declare
    request_id = request_id_for(instance_id, step)
    assert len(f"{request_id}:response") > MAX_MESSAGE_ID_CHARS
    clock = FakeClock(START)
    queues = InMemoryQueueFactory(clock=lambda: 0.0)
    settings = Settings.load({})
    body = AgentRequest(
        request_id=request_id,
        order_id=LONGEST_KEY,
        instance_id=instance_id,
        step=step,
        operation="release",
        idempotency_key=f"{LONGEST_KEY}:{step}",
        deadline=START + timedelta(seconds=30),
        reply_to=REPLY_QUEUE,
        payload={},
        max_calls=3,
    ).to_json()
    handle_request(
        body,
        service=Service(),
        queues=queues,
        clock=clock,
        agents=settings.agents,
        queue_names=settings.queues,
        sleep=lambda _s: None,
    )
    [sent] = queues.queue(REPLY_QUEUE).peek_all()
    sendable(sent.message_id)
    assert sent.message_id == bounded_message_id(f"{request_id}:response")


@pytest.mark.parametrize("attempt", ATTEMPTS)
def test_every_request_and_response_id_of_every_workflow_is_sendable(attempt: int) -> None:
    instance_id = instance_id_for(LONGEST_KEY, attempt)
    seen: dict[str, str] = {}
    for step in sorted(request_steps()):
        request_id = request_id_for(instance_id, step)
        for logical in (request_id, f"{request_id}:response"):
            message_id = bounded_message_id(logical)
            sendable(message_id)
            assert message_id == bounded_message_id(logical)  # deterministic: duplicates stay detectable
            assert seen.setdefault(message_id, logical) == logical  # unique
    assert len(seen) == 2 * len(request_steps())


def test_reply_ids_for_the_longest_order_key_are_sendable() -> None:
    for status in OrderStatus:
        sendable(bounded_message_id(reply_message_id(LONGEST_KEY, status)))


def test_an_id_that_fits_is_kept_readable() -> None:
    readable = "acme:o-1:1:reserve_inventory:response"
    assert bounded_message_id(readable) == readable
    exactly = "x" * MAX_MESSAGE_ID_CHARS
    assert bounded_message_id(exactly) == exactly


def test_a_long_id_keeps_a_readable_prefix_and_is_exactly_the_limit() -> None:
    long_id = f"{LONGEST_KEY}:12:create_shipment:fallback:response"
    bounded = bounded_message_id(long_id)
    assert len(bounded) == MAX_MESSAGE_ID_CHARS
    assert long_id.startswith(bounded[:63])
    assert bounded_message_id(long_id + "x") != bounded


def test_characters_outside_the_bmp_are_counted_as_two_units() -> None:
    bounded = bounded_message_id("\U0001f600" * 100)
    assert len(bounded.encode("utf-16-le")) // 2 <= MAX_MESSAGE_ID_CHARS


def test_an_empty_id_is_refused() -> None:
    with pytest.raises(ValueError, match="empty"):
        bounded_message_id("")
