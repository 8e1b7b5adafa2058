"""Order documents and circuit-breaker documents in Cosmos DB: the order store and the breaker store."""

from __future__ import annotations

from datetime import datetime

from azure.cosmos import ContainerProxy

from orderflow.breaker import BreakerDoc
from orderflow.errors import NotFound
from orderflow.records import OrderDocument
from orderflow.stores.base import Redaction, Versioned, stored_at
from orderflow.stores.cosmos.container import CosmosContainer, check_key, system_free


class CosmosOrderStore:
    """Order documents in a Cosmos DB container: the ``OrderStore`` port."""

    def __init__(self, container: ContainerProxy, *, operation_timeout_s: float | None = None) -> None:
        self._container = CosmosContainer(container, "order", operation_timeout_s=operation_timeout_s)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(container={self._container.container.id!r})"

    def create(self, document: OrderDocument) -> None:
        """Insert a new order document.

        Raises:
            AlreadyExists: an order with this id exists (409); the stored one is left untouched.
            TransientError: throttled beyond the SDK's retries, timed out or unreachable.
            ValueError: ``document.id`` differs from ``document.order_id``.
        """
        check_key(document.id, document.order_id)
        self._container.create(document.to_json_dict())

    def get(self, order_id: str) -> OrderDocument:
        """Point-read an order document.

        Raises:
            NotFound: no such order.
            TransientError: throttled beyond the SDK's retries, timed out or unreachable.
        """
        return OrderDocument.model_validate(system_free(self._container.read(order_id)))

    def redact(self, order_id: str, *, at: datetime) -> Redaction:
        """Replace the document's customer and payment data with redaction markers, once (If-Match).

        Returns:
            ``redacted``, or ``already_redacted`` when nothing needed writing.

        Raises:
            NotFound: no such order.
            ConcurrencyConflict: another redaction wrote between this one's read and write (412).
            TransientError: throttled beyond the SDK's retries, timed out or unreachable; the write may
                or may not have happened (a later call finds out).
        """
        stored = self._container.read(order_id)
        document = OrderDocument.model_validate(system_free(stored))
        if document.is_redacted():
            return Redaction.ALREADY_REDACTED
        self._container.replace(document.redacted(at).to_json_dict(), str(stored["_etag"]))
        return Redaction.REDACTED


class CosmosBreakerStore:
    """Circuit-breaker documents in a Cosmos DB container (``breakers``, partition key ``/id``): the
    :class:`~orderflow.breaker.BreakerStore` port. A container of its own, so that no query over the state
    records ever meets a breaker document."""

    def __init__(self, container: ContainerProxy, *, operation_timeout_s: float | None = None) -> None:
        self._container = CosmosContainer(
            container, "circuit breaker", operation_timeout_s=operation_timeout_s
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(container={self._container.container.id!r})"

    def find(self, dependency: str) -> Versioned[BreakerDoc] | None:
        """The dependency's document, or None.

        Raises:
            TransientError: Cosmos DB is unavailable.
        """
        try:
            doc = self._container.read(dependency)
        except NotFound:
            return None
        return Versioned(BreakerDoc.from_stored(doc), str(doc["_etag"]))

    def create(self, doc: BreakerDoc) -> Versioned[BreakerDoc]:
        """Insert a document.

        Raises:
            AlreadyExists: one exists (409).
        """
        stored = self._container.create(doc.to_json_dict())
        return Versioned(BreakerDoc.from_stored(stored), str(stored["_etag"]))

    def replace(self, doc: BreakerDoc, *, etag: str) -> Versioned[BreakerDoc]:
        """Replace a document only if its ETag is still ``etag`` (If-Match).

        Raises:
            ConcurrencyConflict: the ETag differs (412).
        """
        stored = self._container.replace(doc.to_json_dict(), etag)
        return Versioned(BreakerDoc.from_stored(stored), str(stored["_etag"]))

    def clock_probe(self, host_id: str) -> datetime | None:
        """Write this host's clock-probe document (``clock-probe:{host_id}``, read by no one) and return the
        store's stamp of the write (UTC, whole seconds): :data:`orderflow.store_clock.Probe`. The
        container shares the state store's account, so its stamps are the state store's clock.

        Raises:
            TransientError: Cosmos DB is unavailable.
        """
        return stored_at(self._container.upsert({"id": f"clock-probe:{host_id}", "hostId": host_id}))
