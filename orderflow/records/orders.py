"""The order document a client submits, and its redaction by the retention purge."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from decimal import Decimal
from typing import Any

from pydantic import ConfigDict

from orderflow.client_fields import PurgeAction, document_purge
from orderflow.records.model import (
    REDACTED,
    SCHEMA_VERSION,
    Model,
)
from orderflow.records.times import (
    UtcDatetime,
)


class OrderItem(Model):
    """One order line: a stock-keeping unit and a quantity (units)."""

    model_config = ConfigDict(frozen=True)

    sku: str
    quantity: int


class OrderDocument(Model):
    """The immutable order (``orders`` container, partition key ``/orderId``).

    ``content_hash`` is the SHA-256 of the canonical JSON of the immutable fields; a resubmission is
    accepted only when it matches (docs/design.md §2). The one change a document ever sees is its
    redaction once the order is finished and its retention period over (:meth:`redacted`), marked by
    ``redacted_at``.
    """

    id: str
    order_id: str
    customer_id: str
    customer_name: str
    currency: str
    amount: Decimal
    items: tuple[OrderItem, ...]
    carrier: str
    reply_to: str
    content_hash: str
    client_id: str
    received_at: UtcDatetime
    schema_version: int = SCHEMA_VERSION
    redacted_at: UtcDatetime | None = None

    def redacted(self, at: datetime) -> OrderDocument:
        """This document without its customer and payment data (docs/data.md), redacted at ``at`` (UTC).

        Each field :data:`orderflow.client_fields.CLIENT_FIELDS` marks is purged: text holds
        :data:`REDACTED` (``customerId``, ``customerName``, ``carrier``), ``amount`` is 0 and ``items`` is
        empty (values of their types, so code that reads a redacted document still runs: a late
        ``start_step`` reads it before its fenced write refuses); fields this version does not know (a
        newer schema's) are dropped. The keys, ``contentHash`` (a resubmission is still told a duplicate or
        a conflict), ``receivedAt``, ``currency``, ``replyTo`` and ``clientId`` stay. A redacted document
        (:meth:`is_redacted`) is returned as it is; one redacted by an earlier, narrower purge is redacted
        again and keeps its ``redactedAt``.
        """
        if self.is_redacted():
            return self
        known = {field.alias or name for name, field in OrderDocument.model_fields.items()}
        data = {key: value for key, value in self.to_json_dict().items() if key in known}
        for name, action in document_purge().items():
            data[name] = PURGED[action]
        data["redactedAt"] = self.redacted_at or at
        return OrderDocument.model_validate(data)

    def is_redacted(self) -> bool:
        """Whether the document is redacted: marked, and every field the purge changes holds its purged
        value (a document an earlier, narrower purge redacted is marked but not redacted)."""
        if self.redacted_at is None:
            return False
        current = self.model_dump(by_alias=True)
        return all(current.get(name) == PURGED[action] for name, action in document_purge().items())


PURGED: dict[PurgeAction, Any] = {
    PurgeAction.REDACT: REDACTED,
    PurgeAction.ZERO: Decimal(0),
    PurgeAction.EMPTY: (),
}
"""What a purged field of the order document holds, by :class:`~orderflow.client_fields.PurgeAction`."""


def content_hash(content: dict[str, Any]) -> str:
    """SHA-256 (hex) of the canonical JSON form of ``content`` (sorted keys, no spaces)."""
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
