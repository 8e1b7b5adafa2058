"""Message envelopes: what is accepted, and the dead-letter reason of what is not."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest

from orderflow.errors import InvalidMessage
from orderflow.messages import (
    MAX_MESSAGE_BYTES,
    OPERATOR_ACTION_NOT_ACCEPTED,
    OPERATOR_ACTIONS,
    ORDERS_QUEUE_TYPES,
    AgentResponse,
    ReviewDecisionMessage,
    SubmitOrder,
    client_order_key,
    message_type,
    owned_order_key,
    parse_message,
    validate_order_id,
    validate_order_key,
)
from orderflow.records import client_order_id

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


# --- strict JSON, exact amounts, visible text -------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "reason", "says"),
    [
        (json.dumps(order()).replace('"173665.47"', "NaN"), "InvalidJson", "NaN is not a JSON value"),
        (json.dumps(order()).replace("17}", "Infinity}"), "InvalidJson", "Infinity is not a JSON value"),
        ("\ufeff" + json.dumps(order()), "InvalidJson", "byte-order mark"),
        (b"\xef\xbb\xbf" + json.dumps(order()).encode(), "InvalidJson", "byte-order mark"),
        ("", "InvalidJson", "body is empty"),
        (" \n\t", "InvalidJson", "body is empty"),
        ("null", "NotAnObject", "not null"),
        ('"x"', "NotAnObject", "not string"),
        ("[]", "NotAnObject", "not array"),
        ("true", "NotAnObject", "not boolean"),
        ("1.5", "NotAnObject", "not number"),
        (b'{"a": "Jos\xe9"}', "NotUtf8", "byte 0xe9 at offset 10"),
        # A transport that kept undecodable bytes as lone surrogates (surrogateescape) gives them back.
        (b'{"a": "Jos\xe9"}'.decode("utf-8", "surrogateescape"), "NotUtf8", "byte 0xe9 at offset 10"),
    ],
)
def test_bodies_that_are_not_strict_json_objects_say_why(body: str | bytes, reason: str, says: str) -> None:
    with pytest.raises(InvalidMessage) as caught:
        parse_message(SubmitOrder, body)
    assert caught.value.reason == reason
    assert says in caught.value.description


@pytest.mark.parametrize("version", [True, 1.0, "1", 2, None])
def test_schema_version_is_exactly_the_integer_1(version: object) -> None:
    body = json.dumps(order()).replace('"schemaVersion": 1', f'"schemaVersion": {json.dumps(version)}')
    with pytest.raises(InvalidMessage) as caught:
        parse_message(SubmitOrder, body)
    assert caught.value.reason == "UnsupportedSchemaVersion"


@pytest.mark.parametrize(
    "amount", ["1_000.00", " 12.50", "12.50 ", "+12", "1e3", "١٢٣", "12.", ".5", "0x10", "-1.00"]
)
def test_an_amount_string_is_plain_ascii_decimal(amount: str) -> None:
    with pytest.raises(InvalidMessage) as caught:
        parse_message(SubmitOrder, json.dumps(order(amount=amount)))
    assert caught.value.reason == "InvalidField"
    assert "amount" in caught.value.description


@pytest.mark.parametrize(
    ("wire", "exact", "written"),
    [('"12.50"', Decimal("12.50"), "12.50"), ("12.5", Decimal("12.5"), "12.5"), ("1e2", Decimal(100), "100")],
)
def test_an_amount_is_read_exactly_and_written_as_a_plain_decimal(
    wire: str, exact: Decimal, written: str
) -> None:
    parsed = parse_message(SubmitOrder, json.dumps(order()).replace('"173665.47"', wire))

    assert parsed.amount == exact
    assert json.loads(parsed.to_json())["amount"] == written
    assert parse_message(SubmitOrder, parsed.to_json()) == parsed


@pytest.mark.parametrize("amount", [True, 0.30000000000000004])
def test_an_amount_is_never_a_boolean_or_a_binary_float(amount: object) -> None:
    with pytest.raises(InvalidMessage) as caught:
        parse_message(SubmitOrder, json.dumps(order(amount=amount)))
    assert caught.value.reason == "InvalidField"


@pytest.mark.parametrize(
    ("char", "name"),
    [
        ("\u061c", "ARABIC LETTER MARK"),
        ("\u2060", "WORD JOINER"),
        ("\u00ad", "SOFT HYPHEN"),
        ("\u2029", "PARAGRAPH SEPARATOR"),
        ("\ufffd", "REPLACEMENT CHARACTER"),
        ("\U000e0041", "TAG LATIN CAPITAL LETTER A"),
        ("\ud800", "(unnamed)"),
    ],
)
def test_invisible_reordering_and_mangled_characters_are_refused_by_name(char: str, name: str) -> None:
    with pytest.raises(InvalidMessage) as caught:
        parse_message(SubmitOrder, json.dumps(order(customerName=f"Customer{char}42")))
    assert caught.value.reason == "InvalidField"
    assert f"U+{ord(char):04X} {name}" in caught.value.description


@pytest.mark.parametrize("name", ["Zoë Ñúñez", "北京 Customer", "Customer 🍕", "O'Brien & Sons"])
def test_visible_text_beyond_ascii_is_accepted(name: str) -> None:
    assert parse_message(SubmitOrder, json.dumps(order(customerName=name))).customer_name == name


@pytest.mark.parametrize(("carrier", "valid"), [("  REG AIR ", True), ("   ", False)])
def test_carrier_is_trimmed_and_never_blank(carrier: str, valid: bool) -> None:
    body = json.dumps(order(carrier=carrier))
    if valid:
        assert parse_message(SubmitOrder, body).carrier == "REG AIR"
    else:
        with pytest.raises(InvalidMessage):
            parse_message(SubmitOrder, body)


def test_an_error_inside_a_list_is_reported_without_the_lists_own_echo() -> None:
    with pytest.raises(InvalidMessage) as caught:
        parse_message(SubmitOrder, json.dumps(order(items=[{"sku": "1", "quantity": "3"}])))
    assert caught.value.description == "items.0.quantity: Input should be a valid integer"


# --- message types -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        (json.dumps(order()), None),
        (json.dumps({"schemaVersion": 1, "type": "CancelOrder", "orderId": "o-1"}), "CancelOrder"),
        ('{"\\u0074ype": "CancelOrder"}', "CancelOrder"),  # the same key, escaped
        ("{not json, type", None),  # the parser of the untyped model says what is wrong
        (b'\xff"type"', None),
        ('["type"]', None),
    ],
)
def test_message_type_names_a_known_type_or_none(body: str | bytes, kind: str | None) -> None:
    assert message_type(body, known=ORDERS_QUEUE_TYPES, untyped=SubmitOrder) == kind


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("CancelOrders", "'CancelOrders'"),
        ("SubmitOrder", "'SubmitOrder'"),
        (7, "of JSON type number"),
        (None, "null"),
    ],
)
def test_an_unknown_message_type_is_refused_naming_the_known_ones(value: object, shown: str) -> None:
    with pytest.raises(InvalidMessage) as caught:
        message_type(json.dumps({**order(), "type": value}), known=ORDERS_QUEUE_TYPES, untyped=SubmitOrder)
    assert caught.value.reason == "UnknownMessageType"
    assert shown in caught.value.description
    assert "this queue takes type CancelOrder, or no type for SubmitOrder" in caught.value.description


@pytest.mark.parametrize("kind", ["ReviewDecision", "CompensateOrder"])
def test_an_operator_action_is_refused_naming_the_api_call_that_makes_it(kind: str) -> None:
    body = '{"\\u0074ype": "%s", "anything": "else"}' % kind  # noqa: UP031 (the braces are JSON's)
    with pytest.raises(InvalidMessage) as caught:
        message_type(body, known=ORDERS_QUEUE_TYPES, untyped=SubmitOrder, operator_actions=OPERATOR_ACTIONS)
    assert caught.value.reason == OPERATOR_ACTION_NOT_ACCEPTED
    assert OPERATOR_ACTIONS[kind] in caught.value.description
    assert "operator API" in caught.value.description


@pytest.mark.parametrize("order_id", ["a/b", "a:b", "", "x" * 65, "é", "a\n"])
def test_validate_order_id_refuses_what_no_order_could_be_named(order_id: str) -> None:
    with pytest.raises(InvalidMessage) as caught:
        validate_order_id(order_id)
    assert caught.value.reason == "InvalidField"
    assert "is not an order id" in caught.value.description


def test_validate_order_id_returns_a_valid_id() -> None:
    assert validate_order_id("tpch-1.A_2") == "tpch-1.A_2"


def test_a_clients_order_key_scopes_a_checked_order_id_by_the_client() -> None:
    assert client_order_key("acme", "o-1") == "acme:o-1"
    for not_an_order_id in ("globex:o-1", "../o-1", "", "x" * 65):
        with pytest.raises(InvalidMessage):
            client_order_key("acme", not_an_order_id)


@pytest.mark.parametrize(
    ("reference", "key"),
    [
        ("o-1", "acme:o-1"),  # the client's own order id, as its SDK sends a correlation id
        ("acme:o-1", "acme:o-1"),  # or that order's key
        ("globex:o-1", None),  # another client's order
        ("acme:globex:o-1", None),
        (":o-1", None),
        ("../acme:o-1", None),
        ("acme:o-1/..", None),
        ("o-1' OR '1'='1", None),
        ("acme:" + "x" * 65, None),
        ("", None),
    ],
)
def test_an_owned_order_key_is_found_only_for_the_clients_own_orders(reference: str, key: str | None) -> None:
    assert owned_order_key("acme", reference) == key


def test_an_order_key_without_its_client_prefix_is_refused() -> None:
    # The attack: name another client's order by the id both clients use, without the prefix.
    decision = {"schemaVersion": 1, "type": "ReviewDecision", "orderId": "o-1", "decision": "approve"}
    with pytest.raises(InvalidMessage) as caught:
        parse_message(ReviewDecisionMessage, json.dumps(decision))
    assert caught.value.reason == "InvalidField" and "orderId" in caught.value.description
    assert parse_message(ReviewDecisionMessage, json.dumps({**decision, "orderId": "acme:o-1"}))

    with pytest.raises(InvalidMessage, match="is not an order key: '<client id>:<order id>'"):
        validate_order_key("o-1")
    assert validate_order_key("acme:o-1") == "acme:o-1"
    for bare in ("o-1", ":o-1", "acme:"):
        with pytest.raises(ValueError, match="not an order key"):
            client_order_id(bare)
    assert client_order_id("acme:o-1") == "o-1"
