"""The agent refuses a service's result that breaks the contract: too long a value, or a hold granted for
longer than asked."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agents.agent import handle_request
from agents.results import INVALID_RESULT, MAX_RESULT_VALUE_CHARS
from orderflow.clock import FakeClock
from orderflow.messages import AgentOutcome, AgentRequest, AgentResponse, parse_message
from orderflow.protocol.holds import HOLD_EXPIRY_SKEW_S
from orderflow.queues.memory import InMemoryQueueFactory
from orderflow.settings import Settings

pytestmark = pytest.mark.unit

START = datetime(2026, 1, 1, tzinfo=UTC)
REPLY_QUEUE = "agent-responses-local"
HOLD_S = 120


class Answering:
    """A service that answers every call with ``result``, taking ``duration_s`` of the fake clock."""

    name = "inventory"

    def __init__(self, clock: FakeClock, result: dict[str, str], duration_s: float = 0.0) -> None:
        self.clock = clock
        self.result = result
        self.duration_s = duration_s
        self.calls = 0

    def call(self, operation: str, payload: object, **kwargs: object) -> dict[str, str]:
        self.calls += 1
        self.clock.advance(self.duration_s)
        return dict(self.result)


def answer(result: dict[str, str], payload: dict[str, Any], *, duration_s: float = 0.0) -> AgentResponse:
    clock = FakeClock(START)
    queues = InMemoryQueueFactory(clock=lambda: 0.0)
    settings = Settings.load({})
    service = Answering(clock, result, duration_s)
    body = AgentRequest(
        request_id="acme:o-1:1:reserve_inventory",
        order_id="acme:o-1",
        instance_id="acme:o-1:1",
        step="reserve_inventory",
        operation="reserve",
        idempotency_key="acme:o-1:reserve_inventory",
        deadline=START + timedelta(seconds=30),
        reply_to=REPLY_QUEUE,
        payload=payload,
        max_calls=3,
    ).to_json()
    handle_request(
        body,
        service=service,
        queues=queues,
        clock=clock,
        agents=settings.agents,
        queue_names=settings.queues,
        sleep=lambda seconds: None,
    )
    [sent] = queues.queue(REPLY_QUEUE).peek_all()
    assert service.calls == 1  # a contract violation is permanent: never retried
    return parse_message(AgentResponse, sent.body)


def at(seconds: float) -> str:
    return (START + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def test_a_result_value_longer_than_the_bound_is_a_permanent_contract_violation() -> None:
    response = answer({"reservationId": "r" * (MAX_RESULT_VALUE_CHARS + 1)}, {})
    assert response.outcome is AgentOutcome.FAILED
    assert (response.error_kind, response.error_code) == ("permanent", INVALID_RESULT)
    assert response.result == {}


def test_a_result_value_at_the_bound_is_kept() -> None:
    response = answer({"reservationId": "r" * MAX_RESULT_VALUE_CHARS}, {})
    assert response.outcome is AgentOutcome.SUCCEEDED
    assert response.result == {"reservationId": "r" * MAX_RESULT_VALUE_CHARS}


def test_a_hold_granted_for_a_year_is_refused() -> None:
    response = answer({"holdId": "h-1", "expiresAt": at(365 * 86400)}, {"holdS": HOLD_S})
    assert (response.outcome, response.error_kind, response.error_code) == (
        AgentOutcome.FAILED,
        "permanent",
        INVALID_RESULT,
    )


def test_a_hold_just_past_lifetime_and_skew_is_refused_and_one_within_is_kept() -> None:
    limit = HOLD_S + HOLD_EXPIRY_SKEW_S
    refused = answer({"holdId": "h-1", "expiresAt": at(limit + 0.001)}, {"holdS": HOLD_S})
    assert refused.error_code == INVALID_RESULT
    kept = answer({"holdId": "h-1", "expiresAt": at(limit)}, {"holdS": HOLD_S})
    assert kept.outcome is AgentOutcome.SUCCEEDED
    assert kept.result["expiresAt"] == at(limit)


def test_the_bound_counts_from_the_call_start_not_from_the_answer() -> None:
    # The call took 10 s: 5 s past the bound from its start, though within one from its answer.
    late = at(HOLD_S + HOLD_EXPIRY_SKEW_S + 5)
    response = answer({"holdId": "h-1", "expiresAt": late}, {"holdS": HOLD_S}, duration_s=10.0)
    assert response.error_code == INVALID_RESULT


def test_an_expiry_is_not_bounded_for_a_call_that_asked_for_no_hold() -> None:
    response = answer({"expiresAt": at(365 * 86400)}, {})
    assert response.outcome is AgentOutcome.SUCCEEDED
