"""Counting wrappers of the state-store and order-store ports (for benchmarks).

Each wrapper forwards every call, with its keyword arguments as given, to the adapter it wraps, and
counts it in an :class:`~bench.counting.OperationCounts` before the call (a call that raises is
counted too: it cost a request). With a :data:`~bench.counting.CallerLabel` each count is labelled
with the caller, for a breakdown of where reads and writes come from.

State-store operations counted: ``read`` (point read), ``create``, ``replace``, ``replace_conflict``
(a replace answered 412), ``query_page`` (one page of a query), ``query_item`` (items those pages
returned) and ``count`` (an aggregate query). Order-store operations: ``read``, ``create`` and
``redact``.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from bench.counting import UNLABELLED, CallerLabel, OperationCounts
from orderflow.errors import ConcurrencyConflict
from orderflow.records import OrderDocument, StateRecord, TimelineChunk
from orderflow.stores.base import (
    OrderStore,
    Page,
    Redaction,
    StateQuery,
    StateStore,
    Versioned,
)

_Port = TypeVar("_Port", StateStore, OrderStore)


class _CountingWrapper(Generic[_Port]):
    """What both wrappers share: the wrapped adapter, the tally, the caller label."""

    def __init__(
        self, inner: _Port, *, counts: OperationCounts | None = None, label: CallerLabel | None = None
    ) -> None:
        self.inner: _Port = inner
        self.counts = counts if counts is not None else OperationCounts()
        self._label = label

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"

    def _count(self, operation: str) -> str:
        """Count one ``operation`` under the caller's label; returns the label."""
        label = self._label() if self._label is not None else UNLABELLED
        self.counts.add(operation, label)
        return label


class CountingStateStore(_CountingWrapper[StateStore]):
    """A :class:`~orderflow.stores.base.StateStore` that counts the calls it forwards.

    Args:
        inner: The adapter every call goes to.
        counts: Where to count (a new one by default; shared to aggregate several wrappers).
        label: Labels each call with its caller; None counts every call :data:`UNLABELLED`.

    Attributes:
        counts: The tally.
    """

    def create(self, record: StateRecord, **kwargs: Any) -> Versioned[StateRecord]:
        """Count ``create`` and forward."""
        self._count("create")
        return self.inner.create(record, **kwargs)

    def get(self, order_id: str, **kwargs: Any) -> Versioned[StateRecord]:
        """Count ``read`` and forward."""
        self._count("read")
        return self.inner.get(order_id, **kwargs)

    def replace(self, record: StateRecord, **kwargs: Any) -> Versioned[StateRecord]:
        """Count ``replace`` (and ``replace_conflict`` when it raises ConcurrencyConflict) and forward."""
        label = self._count("replace")
        try:
            return self.inner.replace(record, **kwargs)
        except ConcurrencyConflict:
            self.counts.add("replace_conflict", label)
            raise

    def query(self, query: StateQuery, **kwargs: Any) -> Page[Versioned[StateRecord]]:
        """Count ``query_page``, forward, then count the page's items as ``query_item``."""
        label = self._count("query_page")
        page = self.inner.query(query, **kwargs)
        self.counts.add("query_item", label, len(page.items))
        return page

    def count(self, query: StateQuery, **kwargs: Any) -> int:
        """Count ``count`` (an aggregate query) and forward."""
        self._count("count")
        return self.inner.count(query, **kwargs)

    def history(self, order_id: str, **kwargs: Any) -> Page[TimelineChunk]:
        """Count ``history_page`` and forward."""
        self._count("history_page")
        return self.inner.history(order_id, **kwargs)


class CountingOrderStore(_CountingWrapper[OrderStore]):
    """An :class:`~orderflow.stores.base.OrderStore` that counts the calls it forwards.

    Args:
        inner: The adapter every call goes to.
        counts: Where to count (a new one by default).
        label: Labels each call with its caller; None counts every call :data:`UNLABELLED`.
    """

    def create(self, document: OrderDocument, **kwargs: Any) -> None:
        """Count ``create`` and forward."""
        self._count("create")
        self.inner.create(document, **kwargs)

    def get(self, order_id: str, **kwargs: Any) -> OrderDocument:
        """Count ``read`` and forward."""
        self._count("read")
        return self.inner.get(order_id, **kwargs)

    def redact(self, order_id: str, **kwargs: Any) -> Redaction:
        """Count ``redact`` and forward."""
        self._count("redact")
        return self.inner.redact(order_id, **kwargs)
