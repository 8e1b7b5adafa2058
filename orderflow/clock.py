"""Time as a dependency: roles take a :class:`Clock` so tests can move time without sleeping.

A host's roles run on the state store's time (:class:`orderflow.store_clock.StoreClock`), which a host
knows only within an interval: :func:`earliest` and :func:`latest` are its two sides, for the comparisons
that must not err one way or the other. Any other clock is exact: both are its ``now``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Protocol, runtime_checkable


class Clock(Protocol):
    """Source of the current UTC time."""

    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""
        ...


@runtime_checkable
class BoundedClock(Clock, Protocol):
    """A clock known only within an interval: the time is certainly between :meth:`earliest` and
    :meth:`latest`, and :meth:`now` is the best estimate between them."""

    def earliest(self) -> datetime:
        """A time (UTC) that has certainly been reached."""
        ...

    def latest(self) -> datetime:
        """A time (UTC) that has certainly not been passed."""
        ...


def earliest(clock: Clock) -> datetime:
    """The current time (UTC) at its earliest: compare a deadline with it to act only once it has
    certainly passed (the supervisor's "is it overdue?")."""
    return clock.earliest() if isinstance(clock, BoundedClock) else clock.now()


def latest(clock: Clock) -> datetime:
    """The current time (UTC) at its latest: compare a deadline with it to start no work once it may have
    passed (an agent's or a starter's "is it expired?")."""
    return clock.latest() if isinstance(clock, BoundedClock) else clock.now()


class SystemClock:
    """The machine's clock."""

    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""
        return datetime.now(UTC)


class FakeClock:
    """A clock that moves only when told to (thread-safe)."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        """The fake current time."""
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> datetime:
        """Move time forward by ``seconds`` and return the new time."""
        with self._lock:
            self._now += timedelta(seconds=seconds)
            return self._now


class OffsetClock:
    """Another clock moved by a fixed offset: a host whose clock runs ahead (positive) or behind."""

    def __init__(self, base: Clock, offset_s: float) -> None:
        self._base = base
        self._offset = timedelta(seconds=offset_s)

    def now(self) -> datetime:
        """The base clock's time plus the offset."""
        return self._base.now() + self._offset


def steady_seconds() -> float:
    """Seconds on a clock that no step of the wall clock moves and that counts the time a suspended
    machine slept: Linux's ``CLOCK_BOOTTIME``; the monotonic clock where there is none."""
    boottime = getattr(time, "CLOCK_BOOTTIME", None)
    return time.clock_gettime(boottime) if boottime is not None else time.monotonic()


class SteadyClock:
    """``base`` as it read once, advanced since then by :func:`steady_seconds`: UTC time that a wall clock
    stepped after start (an NTP step, a ``date`` command) cannot move. A host measures the store's clock
    against it (:class:`orderflow.store_clock.StoreClock`), so a step between two measurements cannot
    shift a deadline comparison; the rate corrections NTP slews in still apply.

    Args:
        base: The clock read once, at construction.
        steady: Seconds on a step-free clock (tests replace it).
    """

    def __init__(self, base: Clock, *, steady: Callable[[], float] = steady_seconds) -> None:
        self._steady = steady
        self._anchor_s = steady()
        self._anchor = base.now()

    def __repr__(self) -> str:
        return f"SteadyClock(anchor={self._anchor.isoformat()})"

    def now(self) -> datetime:
        """The base clock's reading at construction plus the step-free seconds since."""
        return self._anchor + timedelta(seconds=self._steady() - self._anchor_s)
