"""Every field a client sends, classified, with what the retention purge does with it.

:data:`CLIENT_FIELDS` is the one table of the fields of a client's messages
(:class:`orderflow.messages.SubmitOrder`, :class:`orderflow.messages.CancelOrder` and the models they
nest). The purge reads it (:meth:`orderflow.records.OrderDocument.redacted` applies :func:`document_purge`),
and a test fails when a field of those models is missing from it, so a field added to a message is
classified before it ships. Free text a client chooses is personal whatever its name says: the client
decides what it holds. Where each field is kept, and why: docs/data.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class DataClass(StrEnum):
    """How a field is classified (docs/data.md)."""

    PERSONAL = "personal"
    """Identifies or describes a person (who ordered, what, where it goes), or is free text a client
    chooses and so may hold anything."""
    PAYMENT = "payment"
    """Says what was paid."""
    OPERATIONAL = "operational"
    """What the protocol runs on: keys, versions, queue names, codes from a closed set."""


class PurgeAction(StrEnum):
    """What the retention purge does with a field."""

    KEEP = "keep"
    """Kept: the protocol needs it after the order's end, and it says nothing about a person."""
    REDACT = "redact"
    """Text replaced by ``[redacted]`` (:data:`orderflow.records.REDACTED`)."""
    ZERO = "zero"
    """A number replaced by 0."""
    EMPTY = "empty"
    """A list emptied, and with it every field of its elements."""


class KeptIn(StrEnum):
    """Where orderflow keeps a field once the message is consumed."""

    ORDER_DOCUMENT = "order document"
    """The ``orders`` container, under the field's wire name."""
    LAST_ERROR = "state record lastError.message"
    """The cancelled order's ``lastError.message``, which the purge redacts as all error texts."""
    STATE_RECORD = "state record"
    """A state record field of the same name."""
    NOT_KEPT = "not kept"
    """Read on receipt and dropped."""


@dataclass(frozen=True)
class ClientField:
    """One field of a client's message.

    Attributes:
        message: The model's class name (``SubmitOrder``, ``CancelOrder``, ``SubmitItem``).
        field: The wire name (camelCase); a nested model's fields as ``items[].sku``.
        data_class: Its :class:`DataClass`.
        purge: What the retention purge does with it.
        kept_in: Where orderflow keeps it.
    """

    message: str
    field: str
    data_class: DataClass
    purge: PurgeAction
    kept_in: KeptIn


def _f(message: str, field: str, data_class: DataClass, purge: PurgeAction, kept_in: KeptIn) -> ClientField:
    return ClientField(message, field, data_class, purge, kept_in)


_P, _PAY, _OP = DataClass.PERSONAL, DataClass.PAYMENT, DataClass.OPERATIONAL
_DOC = KeptIn.ORDER_DOCUMENT

CLIENT_FIELDS: tuple[ClientField, ...] = (
    _f("SubmitOrder", "schemaVersion", _OP, PurgeAction.KEEP, _DOC),
    _f("SubmitOrder", "orderId", _OP, PurgeAction.KEEP, _DOC),
    _f("SubmitOrder", "customerId", _P, PurgeAction.REDACT, _DOC),
    _f("SubmitOrder", "customerName", _P, PurgeAction.REDACT, _DOC),
    _f("SubmitOrder", "currency", _OP, PurgeAction.KEEP, _DOC),
    _f("SubmitOrder", "amount", _PAY, PurgeAction.ZERO, _DOC),
    _f("SubmitOrder", "items", _P, PurgeAction.EMPTY, _DOC),
    _f("SubmitItem", "items[].sku", _P, PurgeAction.EMPTY, _DOC),
    _f("SubmitItem", "items[].quantity", _P, PurgeAction.EMPTY, _DOC),
    _f("SubmitOrder", "carrier", _P, PurgeAction.REDACT, _DOC),
    _f("SubmitOrder", "replyTo", _OP, PurgeAction.KEEP, _DOC),
    _f("SubmitOrder", "traceparent", _OP, PurgeAction.KEEP, KeptIn.STATE_RECORD),
    _f("CancelOrder", "schemaVersion", _OP, PurgeAction.KEEP, KeptIn.NOT_KEPT),
    _f("CancelOrder", "type", _OP, PurgeAction.KEEP, KeptIn.NOT_KEPT),
    _f("CancelOrder", "orderId", _OP, PurgeAction.KEEP, KeptIn.NOT_KEPT),
    _f("CancelOrder", "reason", _P, PurgeAction.REDACT, KeptIn.LAST_ERROR),
    _f("CancelOrder", "traceparent", _OP, PurgeAction.KEEP, KeptIn.NOT_KEPT),
)
"""Every field of a client's messages. Order ids are operational: they are the keys every resubmission is
checked against, and docs/data.md asks clients to keep personal data out of them."""


def document_purge() -> dict[str, PurgeAction]:
    """The order document's fields the purge changes: wire name -> action (top-level fields only; a
    list's elements go with it)."""
    return {
        f.field: f.purge
        for f in CLIENT_FIELDS
        if f.kept_in is KeptIn.ORDER_DOCUMENT and f.purge is not PurgeAction.KEEP and "[]" not in f.field
    }
