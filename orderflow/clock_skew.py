"""How far this host's clock is from the state store's, measured on the host's own writes.

The state store stamps each write with its own time (Cosmos DB's ``_ts``: whole seconds), a clock every
host shares. A host that reads its clock just before and just after a write brackets the store's stamp:

    offset = host clock - store clock,  before - (_ts + 1)  <=  offset  <=  after - _ts

(``_ts`` is the store's time rounded down to the second). Every measurement feeds the host's
:class:`~orderflow.store_clock.StoreClock`, on which every deadline is written and compared, so a host's
offset does not move any deadline. The host's own clock still times its local waits (a durable timer on
Azure, a lease's renewal), so a host whose whole interval lies beyond half of ``CLOCK_SKEW_TOLERANCE_S``
raises ``clock_skew`` (at most once per :data:`ALERT_EVERY_S`). docs/operations.md, "Clock skew".
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from orderflow import telemetry
from orderflow.clock import Clock
from orderflow.records import StateRecord, TimelineChunk
from orderflow.settings import Alerts
from orderflow.stores.base import Page, StateQuery, StateStore, Versioned

logger = logging.getLogger(__name__)

STORE_TS_RESOLUTION_S = 1.0
"""Resolution of the store's write stamp (``_ts`` is whole seconds)."""

ALERT_EVERY_S = 300.0
"""Fewest seconds between two ``clock_skew`` alerts of one host (every write measures)."""


@dataclass(frozen=True)
class SkewBounds:
    """What one write says about ``offset = host clock - store clock``, in seconds: low <= offset <= high."""

    low_s: float
    high_s: float

    def beyond(self, limit_s: float) -> bool:
        """Whether the offset is certainly more than ``limit_s`` either way (the whole interval is out)."""
        return self.low_s > limit_s or self.high_s < -limit_s


def skew_bounds(before: datetime, after: datetime, stored_at: datetime) -> SkewBounds:
    """Bounds of this host's offset from a write it made between ``before`` and ``after`` (its clock),
    which the store stamped ``stored_at`` (rounded down to :data:`STORE_TS_RESOLUTION_S`)."""
    resolution = timedelta(seconds=STORE_TS_RESOLUTION_S)
    return SkewBounds(
        low_s=(before - (stored_at + resolution)).total_seconds(),
        high_s=(after - stored_at).total_seconds(),
    )


class ClockSkewMonitor:
    """Measures a host's clock on its writes and alerts ``clock_skew`` when it is too far off; thread-safe.

    Args:
        clock: The host's clock (the one its roles use).
        tolerance_s: ``CLOCK_SKEW_TOLERANCE_S``; the alert fires beyond half of it.
        host_id: Named in the alert.
        monotonic: Time source of the alert's rate limit (tests replace it).
        on_measured: Told every measurement (the host's store clock), or None.
    """

    def __init__(
        self,
        clock: Clock,
        *,
        tolerance_s: float,
        host_id: str,
        monotonic: Callable[[], float] = time.monotonic,
        on_measured: Callable[[SkewBounds], None] | None = None,
    ) -> None:
        self.clock = clock
        self._on_measured = on_measured
        self.limit_s = tolerance_s / 2
        self.host_id = host_id
        self.last: SkewBounds | None = None
        self._monotonic = monotonic
        self._alerted_at: float | None = None
        self._lock = threading.Lock()

    def observe(self, before: datetime, after: datetime, stored_at: datetime | None) -> SkewBounds | None:
        """Take one write's measurement; alert if it shows the clock too far off.

        Returns:
            The bounds, or None when the store gave no write time.
        """
        if stored_at is None:
            return None
        bounds = skew_bounds(before, after, stored_at)
        if self._on_measured is not None:
            self._on_measured(bounds)
        with self._lock:
            self.last = bounds
            if not bounds.beyond(self.limit_s):
                return bounds
            now = self._monotonic()
            if self._alerted_at is not None and now - self._alerted_at < ALERT_EVERY_S:
                return bounds
            self._alerted_at = now
        telemetry.alert(
            "clock_skew",
            host=self.host_id,
            offset_low_s=round(bounds.low_s, 3),
            offset_high_s=round(bounds.high_s, 3),
            tolerated_s=self.limit_s,
        )
        return bounds


class ClockCheckedStateStore:
    """A state store whose creates and replaces each measure the host's clock (:class:`ClockSkewMonitor`).

    Everything else passes through; the wrapped store's behaviour and errors are unchanged.
    """

    def __init__(self, inner: StateStore, monitor: ClockSkewMonitor) -> None:
        self.inner = inner
        self.monitor = monitor

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"

    def create(self, record: StateRecord) -> Versioned[StateRecord]:
        """:meth:`StateStore.create`, measured."""
        before = self.monitor.clock.now()
        written = self.inner.create(record)
        self.monitor.observe(before, self.monitor.clock.now(), written.stored_at)
        return written

    def get(self, order_id: str) -> Versioned[StateRecord]:
        """:meth:`StateStore.get`."""
        return self.inner.get(order_id)

    def replace(self, record: StateRecord, *, etag: str) -> Versioned[StateRecord]:
        """:meth:`StateStore.replace`, measured."""
        before = self.monitor.clock.now()
        written = self.inner.replace(record, etag=etag)
        self.monitor.observe(before, self.monitor.clock.now(), written.stored_at)
        return written

    def query(
        self, query: StateQuery, *, max_item_count: int, continuation: str | None = None
    ) -> Page[Versioned[StateRecord]]:
        """:meth:`StateStore.query`."""
        return self.inner.query(query, max_item_count=max_item_count, continuation=continuation)

    def count(self, query: StateQuery) -> int:
        """:meth:`StateStore.count`."""
        return self.inner.count(query)

    def history(
        self, order_id: str, *, max_item_count: int, continuation: str | None = None
    ) -> Page[TimelineChunk]:
        """:meth:`StateStore.history`."""
        return self.inner.history(order_id, max_item_count=max_item_count, continuation=continuation)


def clock_checked(states: StateStore, clock: Clock, alerts: Alerts, host_id: str) -> ClockCheckedStateStore:
    """``states`` measuring ``clock`` on every write against ``CLOCK_SKEW_TOLERANCE_S``: what a host wires."""
    monitor = ClockSkewMonitor(clock, tolerance_s=alerts.CLOCK_SKEW_TOLERANCE_S, host_id=host_id)
    return ClockCheckedStateStore(states, monitor)
