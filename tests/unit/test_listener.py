"""The response listener: raise the agent's response on the waiting instance, drop what cannot be used."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from orchestrators.listener import Delivery, handle_response
from orderflow.custom_status import WAITING_PREFIX
from orderflow.errors import InvalidMessage, TransientError
from orderflow.messages import AgentOutcome, AgentResponse, ReviewDecisionMessage
from orderflow.orchestration import InstanceStatus
from tests.unit.fakes import RecordingClient

pytestmark = pytest.mark.unit

INSTANCE = "o-1:2"


def response(step: str = "charge", **changes: Any) -> AgentResponse:
    fields: dict[str, Any] = {
        "request_id": f"{INSTANCE}:{step}",
        "event_id": f"{INSTANCE}:{step}:response",
        "event_name": f"{step}:response",
        "order_id": "o-1",
        "instance_id": INSTANCE,
        "step": step,
        "outcome": AgentOutcome.SUCCEEDED,
        "result": {"chargeId": "ch-9", "amount": "1000.50"},
        "calls": 2,
        "completed_at": datetime(2026, 1, 1, 12, 0, 1, 500000, tzinfo=UTC),
    }
    fields.update(changes)
    return AgentResponse.model_validate(fields)


def client_with(status: InstanceStatus | None) -> RecordingClient:
    client = RecordingClient()
    if status is not None:
        client.statuses[INSTANCE] = status
    return client


def test_response_for_the_awaited_step_is_raised_as_its_event() -> None:
    client = client_with(InstanceStatus(running=True, custom_status=f"{WAITING_PREFIX}charge"))
    body = response().to_json()

    delivery = handle_response(body, client=client)

    assert delivery is Delivery.RAISED
    [(instance_id, name, payload)] = client.raised
    assert (instance_id, name) == (INSTANCE, "charge:response")
    assert payload == json.loads(body)
    assert payload["requestId"] == "o-1:2:charge"
    assert payload["eventId"] == "o-1:2:charge:response"
    assert payload["result"] == {"chargeId": "ch-9", "amount": "1000.50"}
    assert payload["completedAt"] == "2026-01-01T12:00:01.500000Z"
    assert "request_id" not in payload


def test_failed_response_is_raised_with_its_error() -> None:
    client = client_with(InstanceStatus(running=True, custom_status="waiting:reserve"))
    body = response(
        "reserve",
        outcome=AgentOutcome.FAILED,
        error_kind="permanent",
        error_code="out_of_stock",
        error_message="sku 10",
        result={},
    ).to_json()

    assert handle_response(body.encode("utf-8"), client=client) is Delivery.RAISED

    [(_, name, payload)] = client.raised
    assert name == "reserve:response"
    assert (payload["outcome"], payload["errorKind"], payload["errorCode"]) == (
        "failed",
        "permanent",
        "out_of_stock",
    )


def test_response_for_an_unknown_instance_is_dropped() -> None:
    client = client_with(None)

    assert handle_response(response().to_json(), client=client) is Delivery.UNKNOWN_INSTANCE
    assert client.raised == []


@pytest.mark.parametrize("custom_status", ["waiting:charge", None, "done"])
def test_response_for_a_finished_instance_is_dropped(custom_status: str | None) -> None:
    client = client_with(InstanceStatus(running=False, custom_status=custom_status))

    assert handle_response(response().to_json(), client=client) is Delivery.INSTANCE_FINISHED
    assert client.raised == []


@pytest.mark.parametrize(
    "custom_status",
    ["waiting:reserve", "waiting:charge:undo", "charge", "waiting:Charge", "compensating", "review:charge"],
)
def test_response_for_a_step_the_instance_is_not_waiting_on_is_dropped(custom_status: str | None) -> None:
    client = client_with(InstanceStatus(running=True, custom_status=custom_status))

    assert handle_response(response("charge").to_json(), client=client) is Delivery.NOT_WAITING
    assert client.raised == []


@pytest.mark.parametrize("custom_status", [None, ""])
@pytest.mark.parametrize("step", ["charge", "reserve"])
def test_a_response_before_the_instance_s_first_episode_is_retried_not_raised(
    custom_status: str | None, step: str
) -> None:
    # The starter sends the request of the step the claim started once the instance is scheduled: its
    # answer can come back before the instance has run. Raised then, the Azure Storage backend can
    # discard it (Azure/durabletask#720); so it is retried until the status says what the instance
    # waits for, and an answer to any other step is then dropped as not awaited.
    client = client_with(InstanceStatus(running=True, custom_status=custom_status))

    with pytest.raises(TransientError, match="first episode"):
        handle_response(response(step).to_json(), client=client)
    assert client.raised == []

    client.statuses[INSTANCE] = InstanceStatus(running=True, custom_status="waiting:charge")
    expected = Delivery.RAISED if step == "charge" else Delivery.NOT_WAITING
    assert handle_response(response(step).to_json(), client=client) is expected


def test_delivery_values_are_stable_strings() -> None:
    assert [d.value for d in Delivery] == [
        "raised",
        "unknown_instance",
        "instance_finished",
        "not_waiting",
        "inconsistent",
    ]


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("not json", "InvalidJson"),
        ("[]", "NotAnObject"),
        (json.dumps({"requestId": "x"}), "MissingField"),
        (response().to_json().replace('"calls":2', '"calls":2,"extra":1'), "UnexpectedField"),
        (response().to_json().replace('"outcome":"succeeded"', '"outcome":"maybe"'), "InvalidField"),
    ],
)
def test_invalid_body_raises_invalid_message_and_raises_no_event(body: str, reason: str) -> None:
    client = client_with(InstanceStatus(running=True, custom_status="waiting:charge"))

    with pytest.raises(InvalidMessage) as raised:
        handle_response(body, client=client)

    assert raised.value.reason == reason
    assert client.raised == []


@pytest.mark.parametrize(
    "changes",
    [
        {"request_id": "o-1:1:charge"},  # another attempt's request id
        {"request_id": "o-1:2:reserve"},  # another step's request id
        {"event_name": "reserve:response"},  # an event name the instance does not wait on for this step
    ],
)
def test_response_with_inconsistent_ids_is_dropped_not_raised(changes: dict[str, Any]) -> None:
    client = client_with(InstanceStatus(running=True, custom_status=f"{WAITING_PREFIX}charge"))

    assert handle_response(response(**changes).to_json(), client=client) is Delivery.INCONSISTENT
    assert client.raised == []


class UncheckedClient(RecordingClient):
    """A client whose runtime needs no status read before a raise (``UncheckedEventRaiser``): it knows
    only ``existing`` instances, and reads no status."""

    def get_status(self, instance_id: str) -> InstanceStatus | None:
        raise AssertionError("no status is read before an unchecked raise")

    def raise_event_if_exists(self, instance_id: str, name: str, payload: dict[str, Any]) -> bool:
        if instance_id not in self.existing:
            return False
        self.raise_event(instance_id, name, payload)
        return True


def test_where_the_runtime_allows_it_a_response_is_raised_without_a_status_read() -> None:
    client = UncheckedClient(existing={INSTANCE})
    body = response().to_json()

    assert handle_response(body, client=client) is Delivery.RAISED
    assert client.raised == [(INSTANCE, "charge:response", json.loads(body))]


def test_an_unchecked_raise_on_an_instance_the_runtime_does_not_know_is_dropped() -> None:
    client = UncheckedClient()

    assert handle_response(response().to_json(), client=client) is Delivery.UNKNOWN_INSTANCE
    assert client.raised == []


@pytest.mark.parametrize(
    "changes",
    [{"request_id": "o-1:1:charge"}, {"request_id": "o-1:2:reserve"}, {"event_name": "reserve:response"}],
)
def test_an_inconsistent_response_is_dropped_before_any_unchecked_raise(changes: dict[str, Any]) -> None:
    client = UncheckedClient(existing={INSTANCE})

    assert handle_response(response(**changes).to_json(), client=client) is Delivery.INCONSISTENT
    assert client.raised == []


def test_a_review_decision_still_reads_the_status_where_raises_need_none() -> None:
    client = UncheckedClient(existing={INSTANCE})
    decision = ReviewDecisionMessage(
        schema_version=1, type="ReviewDecision", order_id="a:o-1", decision="approve", instance_id=INSTANCE
    ).to_json()

    with pytest.raises(AssertionError, match="no status is read"):
        handle_response(decision, client=client)
