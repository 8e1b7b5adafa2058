"""An in-memory twin of the blob lease, for tests: one :class:`InMemoryLeaseBlob` shared by several
:class:`InMemoryLease` electors, on an injectable monotonic clock."""

from __future__ import annotations

import math
import threading
import time

from devhost.lease.election import MIN_LEASE_S, GuardedLease, Monotonic
from orderflow.errors import TransientError


class InMemoryLeaseBlob:
    """The service side of an in-memory lease: one blob's lease state, on the service's clock.

    Share one instance between the :class:`InMemoryLease` electors of a test. ``fail`` makes every
    operation raise :class:`TransientError` (storage unreachable).

    Args:
        monotonic: The service's clock, seconds (usually the same fake clock as the electors').
    """

    def __init__(self, monotonic: Monotonic = time.monotonic) -> None:
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._holder: str | None = None
        self._expires_at = -math.inf
        self.fail = False

    def __repr__(self) -> str:
        return f"InMemoryLeaseBlob(holder={self.holder!r})"

    @property
    def holder(self) -> str | None:
        """The lease id of the active lease, or None when the blob is not leased."""
        with self._lock:
            return self._active()

    def _active(self) -> str | None:
        return self._holder if self._monotonic() < self._expires_at else None

    def _check(self) -> None:
        if self.fail:
            raise TransientError("in-memory lease blob unreachable")

    def acquire(self, lease_id: str, duration_s: int) -> bool:
        """Acquire for ``lease_id`` unless another id holds an active lease (Lease Blob: Acquire)."""
        with self._lock:
            self._check()
            active = self._active()
            if active is not None and active != lease_id:
                return False
            self._holder, self._expires_at = lease_id, self._monotonic() + duration_s
            return True

    def renew(self, lease_id: str, duration_s: int) -> bool:
        """Renew ``lease_id``'s lease, even expired, unless it was released or leased again."""
        with self._lock:
            self._check()
            if self._holder != lease_id:
                return False
            self._expires_at = self._monotonic() + duration_s
            return True

    def release(self, lease_id: str) -> None:
        """End ``lease_id``'s lease at once; a lease held by another id is left alone."""
        with self._lock:
            self._check()
            if self._holder == lease_id:
                self._holder, self._expires_at = None, -math.inf


class InMemoryLease(GuardedLease):
    """The blob lease's semantics in memory, for unit tests: same guard, same schedule, fake clock.

    Args:
        blob: The shared service-side lease state.
        duration_s: Lease period in seconds, 15 to 60.
        renew_every_s: Seconds between renewals (default: a third of the period).
        safety_margin_s: Seconds before the local expiry at which leadership ends (default: a fifth).
        monotonic: Local clock, seconds.
        lease_id: This elector's lease id (default: a new UUID).

    Raises:
        ValueError: see :class:`GuardedLease`.
    """

    def __init__(
        self,
        blob: InMemoryLeaseBlob,
        *,
        duration_s: int = MIN_LEASE_S,
        renew_every_s: float | None = None,
        safety_margin_s: float | None = None,
        monotonic: Monotonic = time.monotonic,
        lease_id: str | None = None,
    ) -> None:
        super().__init__(
            duration_s=duration_s,
            renew_every_s=renew_every_s,
            safety_margin_s=safety_margin_s,
            monotonic=monotonic,
            lease_id=lease_id,
        )
        self._blob = blob

    def __repr__(self) -> str:
        return f"InMemoryLease(lease_id={self.lease_id!r}, duration_s={self.duration_s})"

    def _remote_acquire(self) -> bool:
        return self._blob.acquire(self.lease_id, self.duration_s)

    def _remote_renew(self) -> bool:
        return self._blob.renew(self.lease_id, self.duration_s)

    def _remote_release(self) -> None:
        self._blob.release(self.lease_id)
