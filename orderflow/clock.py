"""Time as a dependency: roles take a :class:`Clock` so tests can move time without sleeping."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    """Source of the current UTC time."""

    def now(self) -> datetime:
        """The current time, timezone-aware UTC."""
        ...


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
