"""One in-memory container: documents kept as JSON text in their stored form, a new ETag on every write,
conditional replaces, an optional index on one field, and selection in id order."""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Collection
from typing import Any

from orderflow.clock import Clock
from orderflow.errors import AlreadyExists, ConcurrencyConflict, NotFound

logger = logging.getLogger("orderflow.stores.memory")  # the package's one logger, as filters name it

TOKEN_PREFIX = "mem1."


def _new_etag() -> str:
    # Quoted like Cosmos DB's; unique across stores so an ETag of one item never matches another.
    return f'"{uuid.uuid4()}"'


class MemoryContainer:
    """JSON documents keyed by id, with ETags; the shared core of both in-memory stores.

    Args:
        kind: What the documents are, for error messages.
        indexed_field: A top-level field whose values are indexed (as Cosmos DB indexes every path):
            :meth:`select` given ``among`` values looks only at the documents holding one of them,
            so a sweep over a few live records costs the same beside 1k or 100k settled ones.
    """

    def __init__(self, kind: str, *, indexed_field: str | None = None, clock: Clock | None = None) -> None:
        self.kind = kind
        self._clock = clock
        self._lock = threading.Lock()
        self._docs: dict[str, str] = {}
        self._indexed_field = indexed_field
        self._index: dict[Any, set[str]] = {}

    def _reindex(self, item_id: str, before: str | None, after: dict[str, Any]) -> None:
        # Called under the lock with the document's previous text (None when new) and its new content.
        field = self._indexed_field
        if field is None:
            return
        if before is not None:
            old = json.loads(before).get(field)
            if old == after.get(field):
                return
            self._index.get(old, set()).discard(item_id)
        self._index.setdefault(after.get(field), set()).add(item_id)

    def _stamp(self, doc: dict[str, Any]) -> str:
        # System properties as Cosmos adds them; the models drop ``_``-prefixed keys when parsing.
        stored = {k: v for k, v in doc.items() if not k.startswith("_")}
        stored["_etag"] = _new_etag()
        now = self._clock.now().timestamp() if self._clock is not None else time.time()
        stored["_ts"] = int(now)
        return json.dumps(stored)

    def create(self, doc: dict[str, Any]) -> dict[str, Any]:
        item_id = str(doc["id"])
        text = self._stamp(doc)
        with self._lock:
            if item_id in self._docs:
                raise AlreadyExists(f"{self.kind} {item_id!r} already exists")
            self._docs[item_id] = text
            self._reindex(item_id, None, doc)
        return dict(json.loads(text))

    def upsert(self, doc: dict[str, Any]) -> dict[str, Any]:
        """Create ``doc`` or replace the item of its id, whatever its ETag (Cosmos DB's upsert)."""
        item_id = str(doc["id"])
        text = self._stamp(doc)
        with self._lock:
            current = self._docs.get(item_id)
            self._docs[item_id] = text
            self._reindex(item_id, current, doc)
        return dict(json.loads(text))

    def read(self, item_id: str) -> dict[str, Any]:
        with self._lock:
            text = self._docs.get(item_id)
        if text is None:
            raise NotFound(f"{self.kind} {item_id!r} not found")
        return dict(json.loads(text))

    def replace(self, doc: dict[str, Any], etag: str) -> dict[str, Any]:
        item_id = str(doc["id"])
        text = self._stamp(doc)
        with self._lock:
            current = self._docs.get(item_id)
            if current is None:
                raise NotFound(f"{self.kind} {item_id!r} not found")
            if json.loads(current)["_etag"] != etag:
                logger.debug("conditional replace of %s %s lost: ETag changed", self.kind, item_id)
                raise ConcurrencyConflict(f"{self.kind} {item_id!r} changed since it was read (412)")
            self._docs[item_id] = text
            self._reindex(item_id, current, doc)
        return dict(json.loads(text))

    def __len__(self) -> int:
        with self._lock:
            return len(self._docs)

    def select(
        self,
        predicate: Callable[[dict[str, Any]], bool],
        after_id: str | None,
        limit: int | None = None,
        *,
        among: Collection[Any] | None = None,
    ) -> list[dict[str, Any]]:
        """Up to ``limit`` matching documents with an id greater than ``after_id``, in id order.

        Args:
            among: Values of the indexed field: only documents holding one of them are looked at
                (the predicate must imply it). None: every document.
        """
        with self._lock:
            if among is not None and self._indexed_field is not None:
                ids = set().union(*(self._index.get(value, ()) for value in among))
                snapshot = sorted((item_id, self._docs[item_id]) for item_id in ids)
            else:
                snapshot = sorted(self._docs.items())
        found: list[dict[str, Any]] = []
        for item_id, text in snapshot:
            if after_id is not None and item_id <= after_id:
                continue
            doc = json.loads(text)
            if predicate(doc):
                found.append(doc)
                if limit is not None and len(found) >= limit:
                    break
        return found


def check_key(item_id: str, order_id: str) -> None:
    """Check that an item's id is its order id.

    Raises:
        ValueError: they differ.
    """
    # The Cosmos containers are partitioned on /orderId and point reads use the order id for both id
    # and partition key; a record whose id differs could be written but never read back.
    if item_id != order_id:
        raise ValueError(f"id {item_id!r} must equal orderId {order_id!r}")
