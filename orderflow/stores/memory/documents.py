"""In-memory order documents and circuit-breaker documents: the order store and the breaker store."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from orderflow.breaker import BreakerDoc
from orderflow.clock import Clock
from orderflow.errors import NotFound
from orderflow.records import OrderDocument
from orderflow.stores.base import Redaction, Versioned, stored_at
from orderflow.stores.memory.container import MemoryContainer, check_key


class InMemoryOrderStore:
    """Order documents in memory: the :class:`~orderflow.stores.base.OrderStore` port."""

    def __init__(self) -> None:
        self._container = MemoryContainer("order")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(orders={len(self._container)})"

    def create(self, document: OrderDocument) -> None:
        """Insert a new order document.

        Raises:
            AlreadyExists: an order with this id exists; the stored one is left untouched.
            ValueError: ``document.id`` differs from ``document.order_id``.
        """
        check_key(document.id, document.order_id)
        self._container.create(document.to_json_dict())

    def get(self, order_id: str) -> OrderDocument:
        """Read an order document.

        Raises:
            NotFound: no such order.
        """
        return self._document(self._container.read(order_id))

    @staticmethod
    def _document(doc: dict[str, Any]) -> OrderDocument:
        return OrderDocument.model_validate({k: v for k, v in doc.items() if not k.startswith("_")})

    def redact(self, order_id: str, *, at: datetime) -> Redaction:
        """Replace the document's customer and payment data with redaction markers, once (If-Match).

        Returns:
            ``redacted``, or ``already_redacted`` when nothing needed writing.

        Raises:
            NotFound: no such order.
            ConcurrencyConflict: another redaction wrote between this one's read and write.
        """
        stored = self._container.read(order_id)
        document = self._document(stored)
        if document.is_redacted():
            return Redaction.ALREADY_REDACTED
        self._container.replace(document.redacted(at).to_json_dict(), str(stored["_etag"]))
        return Redaction.REDACTED


class InMemoryBreakerStore:
    """Circuit-breaker documents in memory: the :class:`~orderflow.breaker.BreakerStore` port,
    thread-safe, with the state store's ETag semantics. Hosts that share one instance share breakers.

    Args:
        clock: The store's own clock, which stamps each write's ``_ts`` (default: the machine's).
    """

    def __init__(self, *, clock: Clock | None = None) -> None:
        self._container = MemoryContainer("circuit breaker", clock=clock)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(breakers={len(self._container)})"

    def find(self, dependency: str) -> Versioned[BreakerDoc] | None:
        """The dependency's document, or None."""
        try:
            doc = self._container.read(dependency)
        except NotFound:
            return None
        return Versioned(BreakerDoc.from_stored(doc), str(doc["_etag"]))

    def create(self, doc: BreakerDoc) -> Versioned[BreakerDoc]:
        """Insert a document.

        Raises:
            AlreadyExists: one exists.
        """
        stored = self._container.create(doc.to_json_dict())
        return Versioned(BreakerDoc.from_stored(stored), str(stored["_etag"]))

    def replace(self, doc: BreakerDoc, *, etag: str) -> Versioned[BreakerDoc]:
        """Replace a document only if its ETag is still ``etag``.

        Raises:
            ConcurrencyConflict: the ETag differs. NotFound: no such document.
        """
        stored = self._container.replace(doc.to_json_dict(), etag)
        return Versioned(BreakerDoc.from_stored(stored), str(stored["_etag"]))

    def clock_probe(self, host_id: str) -> datetime | None:
        """Write this host's clock-probe document and return the store's stamp of the write (UTC, whole
        seconds), as :meth:`orderflow.stores.cosmos.CosmosBreakerStore.clock_probe` does."""
        doc = {"id": f"clock-probe:{host_id}", "hostId": host_id}
        try:
            stored = self._container.replace(doc, str(self._container.read(doc["id"])["_etag"]))
        except NotFound:
            stored = self._container.create(doc)
        return stored_at(stored)
