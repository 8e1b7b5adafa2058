"""The state store's time as every host reads it: one time base for every deadline, whatever host clocks say.

Each ``completeBy``, ``nextAttemptAt`` and review deadline is written by one host and compared by
another. On the hosts' own clocks, a supervisor ahead of the writer would recover a live attempt, and a
writer behind the agents would send requests that arrive already expired. So every host reads the
*store's* clock instead. It cannot read it directly, but each of its writes brackets it: the store stamps
the write (Cosmos DB's ``_ts``, whole seconds), and the host's clock just before and just after the write
bound ``offset = host clock - store clock`` (:func:`orderflow.clock_skew.skew_bounds`). A
:class:`StoreClock` keeps the intersection of the intervals of its recent writes, which narrows with every
write whose stamp falls at another point of the second, and answers three questions:

- :meth:`StoreClock.now`: the best estimate of the store's time (the interval's middle): what a host
  *writes* as a deadline's base;
- :meth:`StoreClock.earliest`: the store's time is certainly no earlier: what the supervisor compares a
  deadline with, so it never acts before a deadline has passed by the store's clock;
- :meth:`StoreClock.latest`: the store's time is certainly no later: what an agent or a starter compares
  a deadline with before it starts work, so it starts none once the deadline may have passed.

A host with no recent write measures with a cheap write of its own (``probe``). A host that has never
measured answers :meth:`~StoreClock.now` from its own clock and, for the two bounds, an interval so wide
that nothing is overdue and everything is expired: it acts on no deadline until the store has answered
one write. docs/operations.md, "Clock skew", states the bound that remains.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from datetime import datetime, timedelta

from orderflow.clock import Clock
from orderflow.clock_skew import ClockCheckedStateStore, ClockSkewMonitor, SkewBounds, skew_bounds
from orderflow.settings import Alerts
from orderflow.stores.base import StateStore

logger = logging.getLogger(__name__)

WINDOW_S = 300.0
"""Seconds a measurement takes part in the interval: long enough for many writes to narrow it, short
enough that a host clock stepped since (an NTP correction) is soon measured afresh."""

REFRESH_S = 30.0
"""A host whose newest measurement is older than this measures with its probe before it answers."""

PROBE_RETRY_S = 5.0
"""Fewest seconds between two probes (a store that is down is not asked on every reading)."""

MAX_MEASUREMENTS = 256
"""Measurements kept at most (the oldest go first)."""

UNMEASURED_SPAN_S = 365 * 86_400.0
"""Half-width of the interval of a host that has never measured: nothing is certainly overdue on it, and
everything may be expired."""

Probe = Callable[[], datetime | None]
"""A cheap write of the host's own that returns the store's stamp of it (UTC, whole seconds), or None when
the store gave none. Raises :class:`~orderflow.errors.TransientError` when the store is unavailable."""


class StoreClock:
    """The state store's time read through this host's clock and its measured offset; thread-safe.

    Implements :class:`~orderflow.clock.Clock` (``now``) and :class:`~orderflow.clock.BoundedClock`
    (``earliest``, ``latest``). Fed by every write of the host (:meth:`observe`, through
    :class:`orderflow.clock_skew.ClockSkewMonitor`) and, when it has no recent one, by ``probe``.

    Args:
        host: The host's own clock (the machine's).
        probe: A write of the host's own that returns the store's stamp (:data:`Probe`), or None.
        window_s: :data:`WINDOW_S`.
        refresh_s: :data:`REFRESH_S`.
        monotonic: Time source of the measurements' ages and of the probe's rate limit (tests replace it).
    """

    def __init__(
        self,
        host: Clock,
        *,
        probe: Probe | None = None,
        window_s: float = WINDOW_S,
        refresh_s: float = REFRESH_S,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.host = host
        self._probe = probe
        self._window_s = window_s
        self._refresh_s = refresh_s
        self._monotonic = monotonic
        self._measured: deque[tuple[float, SkewBounds]] = deque(maxlen=MAX_MEASUREMENTS)
        self._last: SkewBounds | None = None
        self._tightest: SkewBounds | None = None
        self._probed_at: float | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(host={self.host!r}, offset={self._last!r})"

    def observe(self, bounds: SkewBounds) -> None:
        """Take one write's bounds of ``offset = host clock - store clock`` (seconds).

        The interval narrows to what every recent measurement agrees on; one that shares no point with
        it (the host's clock was stepped) replaces them all.
        """
        with self._lock:
            entry = (self._monotonic(), bounds)
            self._last = bounds
            tightest = self._tightest
            low = bounds.low_s if tightest is None else max(tightest.low_s, bounds.low_s)
            high = bounds.high_s if tightest is None else min(tightest.high_s, bounds.high_s)
            if low > high:
                self._measured.clear()
                low, high = bounds.low_s, bounds.high_s
            self._measured.append(entry)
            self._tightest = SkewBounds(low_s=low, high_s=high)

    def measure(self) -> SkewBounds | None:
        """Measure now with the probe, bracketing it with the host's clock.

        Returns:
            The probe write's bounds, or None without a probe, or when the store gave no stamp or was
            unavailable (logged; the interval keeps what it had).
        """
        if self._probe is None:
            return None
        with self._lock:
            self._probed_at = self._monotonic()
        before = self.host.now()
        try:
            stamp = self._probe()
        except Exception as exc:
            # A reading of the time never fails its caller: whatever the store answered (down, 403, a
            # missing container), there is no measurement.
            logger.warning("the store clock's probe failed: %s", exc)
            return None
        if stamp is None:
            return None
        bounds = skew_bounds(before, self.host.now(), stamp)
        self.observe(bounds)
        return bounds

    def offset(self) -> SkewBounds | None:
        """The tightest interval of ``offset = host clock - store clock`` (seconds) that the writes of the
        last ``window_s`` agree on, measuring first when the newest is older than ``refresh_s``; with none
        that recent, the last one measured; None if never measured."""
        if self._claim_probe():
            self.measure()
        with self._lock:
            horizon = self._monotonic() - self._window_s
            if self._measured and self._measured[0][0] < horizon:
                while self._measured and self._measured[0][0] < horizon:
                    self._measured.popleft()
                self._tightest = _intersection([b for _, b in self._measured])
            return self._last if self._tightest is None else self._tightest

    def _claim_probe(self) -> bool:
        """Whether this reading should measure first (and then no other for :data:`PROBE_RETRY_S`)."""
        if self._probe is None:
            return False
        with self._lock:
            at = self._monotonic()
            if self._probed_at is not None and at - self._probed_at < PROBE_RETRY_S:
                return False
            if self._measured and at - self._measured[-1][0] <= self._refresh_s:
                return False
            self._probed_at = at
            return True

    def now(self) -> datetime:
        """The store's time as best estimated (UTC): the host's clock less the interval's middle, or the
        host's clock itself before any measurement."""
        bounds = self.offset()
        shift = 0.0 if bounds is None else (bounds.low_s + bounds.high_s) / 2
        return self.host.now() - timedelta(seconds=shift)

    def earliest(self) -> datetime:
        """A time (UTC) the store's clock has certainly reached: the host's clock less the interval's top."""
        bounds = self.offset()
        return self.host.now() - timedelta(seconds=UNMEASURED_SPAN_S if bounds is None else bounds.high_s)

    def latest(self) -> datetime:
        """A time (UTC) the store's clock has certainly not passed: the host's clock less the interval's
        bottom."""
        bounds = self.offset()
        return self.host.now() - timedelta(seconds=-UNMEASURED_SPAN_S if bounds is None else bounds.low_s)


def store_timed(
    states: StateStore, host: Clock, alerts: Alerts, host_id: str, *, probe: Probe | None = None
) -> tuple[ClockCheckedStateStore, StoreClock]:
    """What a host wires: ``states`` measuring ``host`` on every write, and the :class:`StoreClock` those
    measurements (and ``probe``'s) feed, the clock every role of the host then runs on.

    The store is wrapped with the host's own clock, never the store clock: a measurement brackets a
    write with the clock being measured. The host measures once here, so that its first deadline is
    already on the store's time (a store that is unavailable now is measured on the first write instead).
    """
    store_clock = StoreClock(host, probe=probe)
    monitor = ClockSkewMonitor(
        host,
        tolerance_s=alerts.CLOCK_SKEW_TOLERANCE_S,
        host_id=host_id,
        on_measured=store_clock.observe,
    )
    store_clock.measure()
    return ClockCheckedStateStore(states, monitor), store_clock


def _intersection(measured: list[SkewBounds]) -> SkewBounds | None:
    """The interval every one of ``measured`` contains (they share a point: :meth:`StoreClock.observe`)."""
    if not measured:
        return None
    return SkewBounds(low_s=max(b.low_s for b in measured), high_s=min(b.high_s for b in measured))
