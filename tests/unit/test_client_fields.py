"""The classification of every field a client sends (orderflow.client_fields), against the message models.

The table must name each field of the client's messages, found by walking the pydantic models (nested
models too), and nothing else; each personal or payment field must be purged; and the order document's
redaction must do what the table says for each field it marks.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, get_args, get_origin

import pytest
from pydantic import BaseModel

from orderflow.client_fields import CLIENT_FIELDS, DataClass, KeptIn, PurgeAction, document_purge
from orderflow.messages import CancelOrder, SubmitOrder
from orderflow.records import REDACTED, OrderDocument, OrderItem

pytestmark = pytest.mark.unit

CLIENT_MESSAGES: tuple[type[BaseModel], ...] = (SubmitOrder, CancelOrder)
"""The messages a client sends (docs/design.md §5: orders and cancels on its inbound queue)."""

AT = datetime(2026, 3, 1, tzinfo=UTC)


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model an annotation holds (``tuple[SubmitItem, ...]``, ``X | None``), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if get_origin(annotation) is not None:
        for arg in get_args(annotation):
            found = _nested_model(arg)
            if found is not None:
                return found
    return None


def wire_fields(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, str]]:
    """``(model name, wire name)`` of every field of ``model`` and of the models it nests; a nested
    model's fields as ``<field>[].<name>``."""
    for name, info in model.model_fields.items():
        wire = f"{prefix}{info.alias or name}"
        yield model.__name__, wire
        nested = _nested_model(info.annotation)
        if nested is not None:
            yield from wire_fields(nested, f"{wire}[].")


def test_every_field_of_a_clients_messages_is_classified_and_nothing_else_is() -> None:
    sent = {pair for model in CLIENT_MESSAGES for pair in wire_fields(model)}
    classified = [(f.message, f.field) for f in CLIENT_FIELDS]

    assert len(classified) == len(set(classified)), "a field is classified twice"
    assert sent - set(classified) == set(), "fields a client sends that the table does not classify"
    assert set(classified) - sent == set(), "the table classifies fields no client message has"


def test_the_walk_sees_nested_and_optional_fields() -> None:
    # The walk is what makes the test above fail for a new field: it must reach every kind of annotation.
    fields = {wire for _, wire in wire_fields(SubmitOrder)} | {wire for _, wire in wire_fields(CancelOrder)}
    assert {"items[].sku", "items[].quantity", "traceparent", "reason", "customerName"} <= fields


@pytest.mark.parametrize("field", CLIENT_FIELDS, ids=lambda f: f"{f.message}.{f.field}")
def test_personal_and_payment_data_is_purged_and_operational_data_kept(field: Any) -> None:
    if field.data_class is DataClass.OPERATIONAL:
        assert field.purge is PurgeAction.KEEP
    else:
        assert field.purge is not PurgeAction.KEEP
        assert field.kept_in is not KeptIn.STATE_RECORD, "no state record purge reads the table"


def test_free_text_a_client_chooses_is_personal() -> None:
    # The carrier and a cancel's reason are the client's own words: they may hold a name or an address.
    by_name = {(f.message, f.field): f for f in CLIENT_FIELDS}
    assert by_name["SubmitOrder", "carrier"].data_class is DataClass.PERSONAL
    assert by_name["CancelOrder", "reason"].data_class is DataClass.PERSONAL


def document() -> OrderDocument:
    return OrderDocument(
        id="a:o-1",
        order_id="a:o-1",
        customer_id="cust-4711",
        customer_name="Ada Lovelace",
        currency="EUR",
        amount=Decimal("987.65"),
        items=(OrderItem(sku="sku-77", quantity=3),),
        carrier="Ada's neighbour, 12 Rue Exemple",
        reply_to="client-a",
        content_hash="0" * 64,
        client_id="a",
        received_at=AT,
    )


PURGED_VALUES = {PurgeAction.REDACT: REDACTED, PurgeAction.ZERO: Decimal(0), PurgeAction.EMPTY: ()}


def test_the_redaction_purges_every_field_the_table_marks_and_keeps_the_others() -> None:
    original = document()

    redacted = original.redacted(AT).model_dump(by_alias=True)

    marked = document_purge()
    assert set(marked) == {
        f.field
        for f in CLIENT_FIELDS
        if f.kept_in is KeptIn.ORDER_DOCUMENT and f.purge is not PurgeAction.KEEP and "[]" not in f.field
    }
    for name, value in original.model_dump(by_alias=True).items():
        if name in marked:
            assert redacted[name] == PURGED_VALUES[marked[name]], name
        elif name != "redactedAt":
            assert redacted[name] == value, name
    assert redacted["redactedAt"] == AT


def test_a_document_an_earlier_purge_redacted_is_redacted_again() -> None:
    # A narrower purge (version 2) kept the carrier: its documents are marked redacted but still hold it.
    earlier = document().model_copy(
        update={
            "customer_id": REDACTED,
            "customer_name": REDACTED,
            "amount": Decimal(0),
            "items": (),
            "redacted_at": AT,
        }
    )
    assert not earlier.is_redacted()

    again = earlier.redacted(datetime(2026, 4, 1, tzinfo=UTC))

    assert again.is_redacted()
    assert (again.carrier, again.redacted_at) == (REDACTED, AT)
    assert again.redacted(datetime(2026, 5, 1, tzinfo=UTC)) is again
