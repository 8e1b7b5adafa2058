"""Message envelopes: what is accepted, and the dead-letter reason of what is not."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest

from orderflow.errors import InvalidMessage
from orderflow.messages import MAX_MESSAGE_BYTES, AgentResponse, SubmitOrder, parse_message

pytestmark = pytest.mark.unit


def order(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "schemaVersion": 1,
        "orderId": "tpch-1",
        "customerId": "370",
        "customerName": "Customer#000000370",
        "currency": "USD",
        "amount": "173665.47",
        "items": [{"sku": "1552", "quantity": 17}, {"sku": "674", "quantity": 36}],
        "carrier": "TRUCK",
        "replyTo": "client-a",
    }
    body.update(changes)
    return {k: v for k, v in body.items() if v is not None}


def test_valid_order_round_trips() -> None:
    parsed = parse_message(SubmitOrder, json.dumps(order()))
    assert parsed.order_id == "tpch-1"
    assert parsed.amount == Decimal("173665.47")
    assert [(i.sku, i.quantity) for i in parsed.items] == [("1552", 17), ("674", 36)]
    assert json.loads(parsed.to_json())["replyTo"] == "client-a"


def test_json_number_amount_is_parsed_exactly() -> None:
    parsed = parse_message(SubmitOrder, json.dumps(order()).replace('"173665.47"', "173665.47"))
    assert parsed.amount == Decimal("173665.47")


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"\xff\xfe not utf-8", "NotUtf8"),
        ("{not json", "InvalidJson"),
        ("[1, 2]", "NotAnObject"),
        (json.dumps(order(orderId=None)), "MissingField"),
        (json.dumps(order(discount="5")), "UnexpectedField"),
        (json.dumps(order(schemaVersion=2)), "UnsupportedSchemaVersion"),
        (json.dumps(order(currency="XYZ")), "InvalidField"),
        (json.dumps(order(amount="-1.00")), "InvalidField"),
        (json.dumps(order(amount="1.001")), "InvalidField"),
        (json.dumps(order(items=[])), "InvalidField"),
        (json.dumps(order(items=[{"sku": "1", "quantity": 0}])), "InvalidField"),
        (json.dumps(order(items=[{"sku": "1", "quantity": "3"}])), "InvalidField"),
        (json.dumps(order(orderId="a:b")), "InvalidField"),
        (json.dumps(order(replyTo="Not_A_Queue")), "InvalidField"),
        (json.dumps(order(customerName="bad\u0007name")), "InvalidField"),
        ("x" * (MAX_MESSAGE_BYTES + 1), "TooLarge"),
        ("[" * 20_000, "InvalidJson"),  # nested past the recursion limit
        ('{"schemaVersion": 1, "x": ' + "9" * 5000 + "}", "InvalidJson"),  # past int digit limits
        (json.dumps(order()).replace('"orderId"', '"orderId": "other", "orderId"', 1), "InvalidJson"),
        (json.dumps(order(customerName="bidi\u202eeman")), "InvalidField"),
        (json.dumps(order(customerName="c1\u0085control")), "InvalidField"),
        (json.dumps(order(customerName="\ufeffbom")), "InvalidField"),
    ],
)
def test_bad_submissions_get_a_specific_reason(body: str | bytes, reason: str) -> None:
    with pytest.raises(InvalidMessage) as caught:
        parse_message(SubmitOrder, body)
    assert caught.value.reason == reason
    assert caught.value.description


def test_description_names_the_field() -> None:
    with pytest.raises(InvalidMessage) as caught:
        parse_message(SubmitOrder, json.dumps(order(currency="XYZ")))
    assert "currency" in caught.value.description


def test_agent_response_rejects_unknown_outcome() -> None:
    with pytest.raises(InvalidMessage) as caught:
        parse_message(
            AgentResponse,
            json.dumps(
                {
                    "requestId": "o:1:s",
                    "eventId": "o:1:s:response",
                    "eventName": "s:response",
                    "orderId": "o",
                    "instanceId": "o:1",
                    "step": "s",
                    "outcome": "maybe",
                    "completedAt": "2026-01-01T00:00:00Z",
                }
            ),
        )
    assert caught.value.reason == "InvalidField"


@pytest.mark.parametrize(("length", "valid"), [(3, True), (52, True), (53, False), (63, False)])
def test_reply_queue_names_leave_room_for_the_dead_letter_suffix(length: int, valid: bool) -> None:
    body = json.dumps(order(replyTo="a" * length))
    if valid:
        assert parse_message(SubmitOrder, body).reply_to == "a" * length
    else:
        with pytest.raises(InvalidMessage) as caught:
            parse_message(SubmitOrder, body)
        assert caught.value.reason == "InvalidField"
        assert "replyTo" in caught.value.description
