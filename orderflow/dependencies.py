"""The dependency container the roles take, and the caches a host process shares between them."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from orderflow.breaker import CircuitBreakers
from orderflow.clock import Clock
from orderflow.queues.base import DeadLetterQueues, QueueFactory
from orderflow.records import OrderDocument, StateRecord
from orderflow.stores.base import AlertStore, OrderStore, StateStore, Versioned


class RecordCache:
    """A small thread-safe LRU of the newest known version of each state record.

    Args:
        capacity: Records kept; the least recently used is dropped beyond it.
    """

    def __init__(self, capacity: int = 4096) -> None:
        self._items: OrderedDict[str, Versioned[StateRecord]] = OrderedDict()
        self._capacity = capacity
        self._lock = threading.Lock()

    def get(self, order_id: str) -> Versioned[StateRecord] | None:
        """The cached version, or None."""
        with self._lock:
            found = self._items.get(order_id)
            if found is not None:
                self._items.move_to_end(order_id)
            return found

    def put(self, version: Versioned[StateRecord]) -> None:
        """Remember a version just read or written."""
        with self._lock:
            self._items[version.item.order_id] = version
            self._items.move_to_end(version.item.order_id)
            while len(self._items) > self._capacity:
                self._items.popitem(last=False)

    def discard(self, order_id: str) -> None:
        """Forget a record (after a conflict)."""
        with self._lock:
            self._items.pop(order_id, None)


class OrderCache:
    """A bounded cache of order documents (the oldest entry leaves first); they are immutable, so a
    cached copy is never stale."""

    def __init__(self, capacity: int = 4096) -> None:
        self._items: OrderedDict[str, OrderDocument] = OrderedDict()
        self._capacity = capacity
        self._lock = threading.Lock()

    def get(self, store: OrderStore, order_id: str) -> OrderDocument:
        """The document, from the cache or the store.

        Raises:
            NotFound: the order store has no such order.
        """
        with self._lock:
            found = self._items.get(order_id)
        if found is not None:
            return found
        document = store.get(order_id)
        self.put(document)
        return document

    def put(self, document: OrderDocument) -> None:
        """Remember a document just read, or just created by this process (the submission's create:
        the first activity then reads no order the process wrote a moment before)."""
        with self._lock:
            self._items[document.order_id] = document
            while len(self._items) > self._capacity:
                self._items.popitem(last=False)


@dataclass
class Dependencies:
    """Everything the roles touch but their settings: the one dependency container, built once by each
    host process (:mod:`function_host.wiring` on Azure, ``python -m devhost`` locally, whose
    :class:`devhost.host.DevHost` runs its roles on it) and passed to the role functions. The settings are
    not here: a host hands each role the sections it reads.

    Attributes:
        states: The state store.
        orders: The order store.
        queues: Every queue, by name.
        clock: The time source (UTC).
        cache: The newest state-record versions this process knows (saves point reads).
        order_cache: Order documents this process has read or created (immutable, so never stale).
        breakers: The remote dependencies' circuit breakers (shared through their store), or None:
            no breakers (``BREAKER_ENABLED`` off, or a host wired without a breaker store).
        dead_letters: The dead-letter queues, for the operator API (the unwrapped transport of
            ``queues``), or None: the API answers 503 for them.
        alerts: The alerts and supervisor sweep documents, or None: alerts are only logged, sweeps leave
            no status, and the API answers 503 for them.
    """

    states: StateStore
    orders: OrderStore
    queues: QueueFactory
    clock: Clock
    cache: RecordCache = field(default_factory=RecordCache)
    order_cache: OrderCache = field(default_factory=OrderCache)
    breakers: CircuitBreakers | None = None
    dead_letters: DeadLetterQueues | None = None
    alerts: AlertStore | None = None
