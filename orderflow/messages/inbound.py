"""What arrives on the ``orders`` queue (a submission, a cancellation), a reviewer's decision as the
operator API forwards it, and the operator actions no queue takes."""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    StringConstraints,
    field_serializer,
    field_validator,
)

from orderflow.messages.envelope import Envelope, Traced
from orderflow.messages.fields import (
    PLAIN_DECIMAL,
    SUPPORTED_CURRENCIES,
    CleanText,
    OrderId,
    OrderKey,
    QueueName,
    SchemaVersion,
)

MAX_QUANTITY_PER_SKU = 10_000
"""Most units of one SKU in one order, on one line or over several."""


class SubmitItem(Envelope):
    """One line of a submitted order."""

    sku: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_\-]{1,32}$")]
    quantity: int = Field(ge=1, le=MAX_QUANTITY_PER_SKU, strict=True)


class SubmitOrder(Traced):
    """An order submission (``orders`` queue).

    Attributes:
        schema_version: Must be 1.
        order_id: The client's order id; the idempotency key of the submission.
        customer_id: 1-64 letters, digits, ``_`` or ``-``.
        customer_name: 1-200 characters after trimming surrounding whitespace.
        amount: Order total, positive, at most two decimal places, below 10^9: a string of ASCII digits
            with an optional decimal point (``"12.50"``), or a JSON number (read exactly, never as a
            binary float). On the wire it is always written as a plain decimal string.
        currency: ISO 4217 code from :data:`SUPPORTED_CURRENCIES`.
        items: 1–100 lines; at most :data:`MAX_QUANTITY_PER_SKU` units of one SKU in all.
        carrier: The shipping carrier, 1-32 characters after trimming surrounding whitespace.
        reply_to: The client's private reply queue for status messages. Checked on receipt: it must be the
            reply queue the client registry holds for the client whose inbound queue the message came
            on (docs/clients.md); replies never go to a queue named only in a body.

    Every text field refuses invisible and reordering characters (:func:`forbidden_character`).
    """

    schema_version: SchemaVersion
    order_id: OrderId
    customer_id: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_\-]{1,64}$")]
    customer_name: CleanText
    currency: str
    amount: Decimal = Field(gt=0, lt=Decimal(10) ** 9, decimal_places=2)
    items: tuple[SubmitItem, ...] = Field(min_length=1, max_length=100)
    carrier: Annotated[str, StringConstraints(min_length=1, max_length=32, strip_whitespace=True)]
    reply_to: QueueName

    @field_validator("currency")
    @classmethod
    def _known_currency(cls, value: str) -> str:
        if value not in SUPPORTED_CURRENCIES:
            raise ValueError(
                f"unsupported currency {value[:16]!r}; expected one of {sorted(SUPPORTED_CURRENCIES)}"
            )
        return value

    @field_validator("amount", mode="before")
    @classmethod
    def _amount_is_exact(cls, value: Any) -> Any:
        # Floats cannot represent money exactly (JSON numbers arrive as Decimal, never float).
        if isinstance(value, bool):
            raise ValueError('amount must be a decimal string such as "12.50", not a boolean')
        if isinstance(value, float):
            raise ValueError('amount must be a decimal string such as "12.50", not a float')
        # Decimal() also reads "1_000", " 12 ", "+5", "1e3" and non-ASCII digits: money is written plainly.
        if isinstance(value, str) and not PLAIN_DECIMAL.fullmatch(value):
            raise ValueError(
                "amount must be a decimal string of ASCII digits with an optional decimal point, "
                'such as "12.50"'
            )
        return value

    @field_validator("items")
    @classmethod
    def _quantity_per_sku_is_capped(cls, items: tuple[SubmitItem, ...]) -> tuple[SubmitItem, ...]:
        # A line's cap would mean nothing if the same SKU could be repeated over many lines.
        totals: dict[str, int] = {}
        for item in items:
            totals[item.sku] = totals.get(item.sku, 0) + item.quantity
            if totals[item.sku] > MAX_QUANTITY_PER_SKU:
                raise ValueError(
                    f"sku {item.sku!r}: {totals[item.sku]} units over several lines; "
                    f"at most {MAX_QUANTITY_PER_SKU} per order"
                )
        return items

    @field_serializer("amount", when_used="json")
    def _amount_as_plain_decimal(self, amount: Decimal) -> str:
        # Positional notation: an amount read from the JSON number 1e2 goes out as "100", not "1E+2".
        return format(amount, "f")

    def immutable_content(self) -> dict[str, Any]:
        """The fields whose hash identifies the order: everything the client sent but its trace context
        (a resubmission from another trace is the same order), the amount in one canonical form
        (``12.5`` and ``12.50`` are the same order)."""
        content = self.model_dump(mode="json", by_alias=True, exclude={"traceparent"})
        content["amount"] = f"{self.amount:.2f}"
        return content


CANCEL_ORDER = "CancelOrder"
"""``type`` of a :class:`CancelOrder` message; a body without ``type`` is a :class:`SubmitOrder`."""


class CancelOrder(Traced):
    """A client's request to cancel an order (on the ``orders`` queue, beside submissions).

    The answer goes to the reply queue the order was submitted with: ``Cancelled`` once what was done is
    undone, or ``CancelRefused`` (the order is settled, or past its point of no return).

    Attributes:
        schema_version: Must be 1.
        type: ``CancelOrder``.
        order_id: The order to cancel.
        reason: Optional free text from the client, kept in the order's ``lastError``.
    """

    schema_version: SchemaVersion
    type: Literal["CancelOrder"]
    order_id: OrderId
    reason: CleanText | None = None


COMPENSATE_ORDER = "CompensateOrder"
"""``type`` of what was once an operator's decision to compensate on the ``orders`` queue; it is a call to
the operator API now, and the queue refuses the type (:data:`OPERATOR_ACTIONS`)."""

REVIEW_DECISION = "ReviewDecision"
"""``type`` of a :class:`ReviewDecisionMessage`."""


class ReviewDecisionMessage(Envelope):
    """A reviewer's decision on an order awaiting review, as the operator API forwards it, with the
    waiting attempt's ``instanceId``, to that attempt's response queue (only the app sends there).

    Attributes:
        schema_version: Must be 1.
        type: ``ReviewDecision``.
        order_id: The order's key.
        decision: ``approve`` or ``reject``.
        reviewer: Who decided: the verified principal's audit id
            (:attr:`orderflow.operator_auth.Principal.audit_id`), as in the record's ``review.decidedBy``.
        instance_id: The attempt the decision is raised on.
    """

    schema_version: SchemaVersion
    type: Literal["ReviewDecision"]
    order_id: OrderKey
    decision: Literal["approve", "reject"]
    reviewer: CleanText = "reviewer"
    instance_id: str | None = None


ORDERS_QUEUE_TYPES = (CANCEL_ORDER,)
"""The ``type`` values the ``orders`` queue takes besides order submissions, which have no ``type``."""

OPERATOR_ACTIONS: dict[str, str] = {
    REVIEW_DECISION: "POST /api/operator/orders/{orderId}/review",
    COMPENSATE_ORDER: "POST /api/operator/orders/{orderId}/compensate",
}
"""Types of a reviewer's or an operator's action, which no client queue takes (docs/design.md §9), and
the operator API call that makes each: a message of one is dead-lettered ``OperatorActionNotAccepted``."""
