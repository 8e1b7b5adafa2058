"""Fuzzing the submission parser and handler (hypothesis): arbitrary bytes, arbitrary JSON values and
structured mutations of a valid order.

Whatever arrives either parses into a valid :class:`SubmitOrder` that survives its own wire form
(``to_json`` then parse gives an equal model and the same text), or is refused with
:class:`InvalidMessage` and a documented reason. Nothing else is ever raised, and the submission handler
writes both records of an order or none. Derandomized and without the example database, so a run is
the same on every machine; the budget is a few seconds.
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from intake.submission import IntakeOutcome, handle_intake_message
from orderflow.clock import FakeClock
from orderflow.errors import InvalidMessage
from orderflow.messages import PARSE_REASONS, SUBMISSION_REASONS, StatusReply, SubmitOrder, parse_message
from orderflow.queues.memory import InMemoryQueueFactory
from orderflow.settings import Settings
from orderflow.stores.memory import InMemoryOrderStore, InMemoryStateStore
from tests.corpus import CorpusRun
from tests.unit.fakes import TEST_CLIENT, received

pytestmark = pytest.mark.unit

FUZZ = settings(
    max_examples=250,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

VALID_ORDER: dict[str, Any] = {
    "schemaVersion": 1,
    "orderId": "fuzz-1",
    "customerId": "42",
    "customerName": "Customer#000000042",
    "currency": "USD",
    "amount": "250.00",
    "items": [{"sku": "1552", "quantity": 2}, {"sku": "674", "quantity": 36}],
    "carrier": "TRUCK",
    "replyTo": "fuzz-client",
}
TEXT_FIELDS = ("orderId", "customerId", "customerName", "currency", "carrier", "replyTo")

# Any code point, lone surrogates included: JSON can carry them as \\ud800 escapes.
ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=40)
JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats()  # NaN and infinities included: json.dumps writes them as NaN / Infinity
    | ANY_TEXT
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(ANY_TEXT, inner, max_size=4),
    max_leaves=12,
)
AMOUNTS = (
    st.decimals(allow_nan=True, allow_infinity=True).map(str)
    | st.text(alphabet="0123456789.-+eE_ \u0660\u0665", max_size=14)
    | st.integers(min_value=-5, max_value=10**10)
)


@st.composite
def mutated_orders(draw: st.DrawFn) -> str:
    """A valid order with one to four mutations: a field dropped, added, replaced by any JSON value or
    by any text, the amount rewritten, an item changed; as JSON text, escaped to ASCII or not."""
    order = copy.deepcopy(VALID_ORDER)
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        operation = draw(st.sampled_from(["drop", "add", "replace", "text", "amount", "item"]))
        if operation == "drop" and order:
            del order[draw(st.sampled_from(sorted(order)))]
        elif operation == "add":
            order[draw(ANY_TEXT)] = draw(JSON_VALUES)
        elif operation == "replace":
            order[draw(st.sampled_from(sorted(VALID_ORDER)))] = draw(JSON_VALUES)
        elif operation == "text":
            order[draw(st.sampled_from(TEXT_FIELDS))] = draw(ANY_TEXT)
        elif operation == "amount":
            order["amount"] = draw(AMOUNTS)
        elif operation == "item" and isinstance(order.get("items"), list) and order["items"]:
            item = order["items"][0]
            if isinstance(item, dict):
                key = draw(st.sampled_from(["sku", "quantity", "extra"]))
                item[key] = draw(ANY_TEXT | st.integers(min_value=-2, max_value=20_000) | JSON_VALUES)
    return json.dumps(order, ensure_ascii=draw(st.booleans()))


BODIES = st.one_of(
    st.binary(max_size=300),
    JSON_VALUES.map(json.dumps),
    mutated_orders(),
)


def _parsed_or_refused(body: str | bytes) -> SubmitOrder | None:
    """Parse ``body``: the order, or None when it was refused with a documented reason."""
    try:
        order = parse_message(SubmitOrder, body)
    except InvalidMessage as refused:
        assert refused.reason in PARSE_REASONS, refused
        assert refused.description
        return None
    again = parse_message(SubmitOrder, order.to_json())
    assert again == order
    assert again.to_json() == order.to_json()
    return order


@FUZZ
@given(st.binary(max_size=400))
def test_arbitrary_bytes_are_refused_with_a_documented_reason(body: bytes) -> None:
    assert _parsed_or_refused(body) is None


@FUZZ
@given(JSON_VALUES)
def test_arbitrary_json_values_are_refused_with_a_documented_reason(value: Any) -> None:
    assert _parsed_or_refused(json.dumps(value)) is None


@settings(FUZZ, max_examples=300)
@given(mutated_orders())
def test_a_mutated_order_parses_into_an_order_that_round_trips_or_is_refused(body: str) -> None:
    _parsed_or_refused(body)


def test_the_mutations_reach_both_outcomes() -> None:
    """The strategy is worth running: it yields accepted orders as well as refused ones."""
    outcomes: set[bool] = set()

    @settings(FUZZ, max_examples=100)
    @given(mutated_orders())
    def collect(body: str) -> None:
        outcomes.add(_parsed_or_refused(body) is not None)

    collect()
    assert outcomes == {True, False}


@settings(FUZZ, max_examples=200)
@given(BODIES)
def test_the_submission_handler_records_an_order_whole_or_not_at_all(body: str | bytes) -> None:
    run = CorpusRun("fuzz", [])
    states, orders = run.recording(InMemoryStateStore(), InMemoryOrderStore())
    queues = InMemoryQueueFactory()
    try:
        result = handle_intake_message(
            body,
            client=TEST_CLIENT,
            orders=orders,
            states=states,
            queues=queues,
            clock=FakeClock(datetime(2026, 1, 1, 12, tzinfo=UTC)),
            steps=Settings.load(env={}).steps,
            starter=Settings.load(env={}).starter,
            queue_names=Settings.load(env={}).queues,
        )
    except InvalidMessage as refused:
        # UnknownOrder: a well-formed request (a cancel ...) about an order that does not exist.
        assert refused.reason in SUBMISSION_REASONS | {"UnknownOrder"}, refused
        assert (run.written_orders, run.written_states) == ([], [])
        return
    assert result.outcome is IntakeOutcome.ACCEPTED
    assert run.written_orders == run.written_states == [result.order_id]
    order = parse_message(SubmitOrder, body)
    [reply] = received(queues.queue(order.reply_to))
    assert parse_message(StatusReply, reply.body).status.value == "Received"
