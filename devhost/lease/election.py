"""Leader election for local supervisors: one blob lease, one leader, stand-bys that take over.

On Azure the supervisor is a timer trigger, and timer triggers run as a singleton per app
(docs/design.md §1), so it uses :class:`NoLease`. Local devhost processes each run a supervisor loop;
they elect a leader through an Azure Storage blob lease (Azurite locally, the same code on a storage
account). The lease is an *efficiency* device only: every recovery write is conditional on the ETag the
supervisor read (docs/design.md §3.5), so two supervisors that both believe they lead still recover each
record at most once. The lease just keeps them from doing the same work twice.

Lease semantics relied on, from the Azure Storage "Lease Blob" REST API
(https://learn.microsoft.com/rest/api/storageservices/lease-blob) and the ``BlobLeaseClient`` of
azure-storage-blob:

- **acquire** with a proposed lease id succeeds when the blob has no active lease, or when its active
  lease has that same id (which restarts the period); otherwise 409 ``LeaseAlreadyPresent``. The
  duration is 15 to 60 seconds, or infinite (-1); an infinite lease never expires, so a dead leader
  would never be replaced, and is not allowed here.
- **renew** restarts the period of the caller's lease. An expired lease can still be renewed as long as
  the blob has not been leased again (or modified) since; once another client acquired it, renew fails
  with 409 ``LeaseIdMismatchWithLeaseOperation``.
- **release** ends the lease at once, so another client may acquire it immediately (hand-over on a clean
  shutdown); releasing a lease that is no longer ours answers 409, which is harmless.

The local expiry guard. The service starts a lease's period when it *processes* the request, which is
after we sent it; so a period measured locally from the moment the request was *sent* ends no later than
the service's. On top of that, a leader considers itself not-leader once
``now > sent_at + duration - safety_margin``. The margin covers what the send-time bound does not: clock
*rate* differences between this machine and the service (ppm), the service's own expiry granularity, and
the time between checking :attr:`is_leader` and acting on it. So a leader that cannot renew (storage
unreachable, process paused before the check) stops acting as leader *before* the service lets anyone
else acquire the lease. A leader renews every ``renew_every_s`` (a third of the period by default), so
two renewals fit before the local guard ends its term and one failed renewal costs nothing.

Take-over latency: a stand-by acquires at its first attempt after the service-side lease expires, which
is at most one lease period after the dead leader's last successful renewal, plus the stand-by's own
polling interval. A leader that stops cleanly releases the lease, and the next attempt of a stand-by wins.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Protocol

from orderflow.errors import TransientError

logger = logging.getLogger(__name__)

MIN_LEASE_S = 15
"""Shortest finite blob lease the Storage service grants, in seconds."""

MAX_LEASE_S = 60
"""Longest finite blob lease the Storage service grants, in seconds."""

Monotonic = Callable[[], float]
"""A monotonic clock in seconds (``time.monotonic``); injectable so tests can move time."""


class SupervisorLease(Protocol):
    """What a supervisor loop needs from leader election.

    Implementations: :class:`~devhost.lease.blob.LeaderLease` (a blob lease),
    :class:`~devhost.lease.memory.InMemoryLease` (tests),
    :class:`NoLease` (always leader).
    """

    @property
    def is_leader(self) -> bool:
        """Whether this process may act as leader now (a local check, no I/O)."""
        ...

    @property
    def renew_every_s(self) -> float:
        """Seconds between renewals; a loop must call :meth:`maintain` at least this often."""
        ...

    def acquire(self) -> bool:
        """Try once, without waiting, to become leader; True when this process now leads."""
        ...

    def renew(self) -> bool:
        """Renew a held lease; False when it is no longer ours."""
        ...

    def release(self) -> None:
        """Give leadership up at once so that a stand-by can take over."""
        ...

    def maintain(self) -> bool:
        """Renew when due, or try to acquire when not leader; return :attr:`is_leader`."""
        ...


class NoLease:
    """Always the leader: election disabled, or a host that is a singleton already (Azure timers)."""

    def __repr__(self) -> str:
        return "NoLease()"

    @property
    def is_leader(self) -> bool:
        """Always True."""
        return True

    @property
    def renew_every_s(self) -> float:
        """Infinite: there is nothing to renew."""
        return math.inf

    def acquire(self) -> bool:
        """Always True."""
        return True

    def renew(self) -> bool:
        """Always True."""
        return True

    def release(self) -> None:
        """Nothing to release."""

    def maintain(self) -> bool:
        """Always True."""
        return True


class GuardedLease(ABC):
    """The local expiry guard and renewal schedule shared by the blob lease and its in-memory twin.

    Subclasses implement the three remote operations; this class decides when to call them and whether
    this process is leader. Thread-safe: one lock serialises the operations (they are rare).

    Args:
        duration_s: Lease period in seconds, 15 to 60.
        renew_every_s: Seconds between renewals (default: a third of the period).
        safety_margin_s: Seconds before the locally computed expiry at which leadership ends (default:
            a fifth of the period).
        monotonic: Local monotonic clock, seconds.
        lease_id: This elector's lease id (default: a new UUID; the service requires GUID format).

    Raises:
        ValueError: the period is outside 15-60 s, or the renewal interval and margin leave no time to
            renew before the local guard ends the term.
    """

    def __init__(
        self,
        *,
        duration_s: int = MIN_LEASE_S,
        renew_every_s: float | None = None,
        safety_margin_s: float | None = None,
        monotonic: Monotonic = time.monotonic,
        lease_id: str | None = None,
    ) -> None:
        if not MIN_LEASE_S <= duration_s <= MAX_LEASE_S:
            raise ValueError(f"lease duration must be {MIN_LEASE_S}-{MAX_LEASE_S} s, got {duration_s}")
        self.duration_s = duration_s
        self._renew_every_s = duration_s / 3 if renew_every_s is None else renew_every_s
        self.safety_margin_s = duration_s / 5 if safety_margin_s is None else safety_margin_s
        if self.safety_margin_s <= 0 or self._renew_every_s <= 0:
            raise ValueError("renew_every_s and safety_margin_s must be positive")
        if self._renew_every_s >= duration_s - self.safety_margin_s:
            raise ValueError(
                f"renew_every_s ({self._renew_every_s}) must be shorter than the guarded term "
                f"({duration_s} - {self.safety_margin_s} s)"
            )
        self.lease_id = lease_id or str(uuid.uuid4())
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._held = False  # the last acquire or renew succeeded and nothing since says otherwise
        self._valid_until = -math.inf  # local end of the term: sent_at + duration - margin
        self._renew_at = math.inf

    # --- the remote side ----------------------------------------------------------------------
    @abstractmethod
    def _remote_acquire(self) -> bool:
        """Acquire (or re-acquire) the lease with :attr:`lease_id`; False when another holds it."""

    @abstractmethod
    def _remote_renew(self) -> bool:
        """Renew the lease with :attr:`lease_id`; False when it is not ours any more."""

    @abstractmethod
    def _remote_release(self) -> None:
        """Release the lease with :attr:`lease_id`; a lease that is not ours is not an error."""

    # --- the public operations ------------------------------------------------------------------
    @property
    def is_leader(self) -> bool:
        """Whether this process holds the lease and its local term has not run out (no I/O)."""
        with self._lock:
            return self._held and self._monotonic() < self._valid_until

    @property
    def renew_every_s(self) -> float:
        """Seconds between renewals."""
        return self._renew_every_s

    def _started(self, sent_at: float) -> None:
        self._held = True
        self._valid_until = sent_at + self.duration_s - self.safety_margin_s
        self._renew_at = sent_at + self._renew_every_s

    def _lost(self) -> None:
        self._held = False
        self._valid_until = -math.inf
        self._renew_at = math.inf

    def acquire(self) -> bool:
        """Try once to acquire the lease; never waits for another holder.

        Returns:
            True when this process is now leader.

        Raises:
            TransientError: the lease service is unreachable or failed; leadership is unchanged (a
                held lease still ends at its local expiry).
            PermanentError: the service refused the request (authorisation, bad configuration).
        """
        with self._lock:
            sent_at = self._monotonic()
            if self._remote_acquire():
                was_held = self._held
                self._started(sent_at)
                if not was_held:
                    logger.info("supervisor lease %s acquired: this process leads", self.lease_id)
                return True
            if self._held:
                logger.warning("supervisor lease %s was taken over by another process", self.lease_id)
            self._lost()
            return False

    def renew(self) -> bool:
        """Renew the held lease, restarting its period.

        Returns:
            True when the lease is (still) ours; False when it was not held or another process has it.

        Raises:
            TransientError: the lease service is unreachable or failed; the term still ends at its
                local expiry unless a later renewal succeeds.
            PermanentError: the service refused the request.
        """
        with self._lock:
            if not self._held:
                return False
            sent_at = self._monotonic()
            if self._remote_renew():
                self._started(sent_at)
                return True
            logger.warning("supervisor lease %s lost: another process leads", self.lease_id)
            self._lost()
            return False

    def release(self) -> None:
        """Stop leading now and release the lease so a stand-by can acquire it at once.

        Local leadership ends before the request is sent, so a failed release never leaves this process
        acting as leader; the service-side lease then simply expires.

        Raises:
            TransientError: the lease service is unreachable or failed.
            PermanentError: the service refused the request.
        """
        with self._lock:
            if not self._held:
                return
            self._lost()
            self._remote_release()
            logger.info("supervisor lease %s released", self.lease_id)

    def maintain(self) -> bool:
        """One election step for a loop: renew when due, or try to acquire when not leader.

        A :class:`TransientError` is logged and swallowed: a leader stays leader until its local term
        runs out, a stand-by stays stand-by, and the next call tries again.

        Returns:
            :attr:`is_leader` after the step.

        Raises:
            PermanentError: the service refused the request (a configuration problem worth failing on).
        """
        try:
            with self._lock:
                held, due = self._held, self._monotonic() >= self._renew_at
            if held and not due:
                return self.is_leader
            if not (held and self.renew()):
                self.acquire()
        except TransientError as exc:
            logger.warning("supervisor lease %s: %s", self.lease_id, exc.detail)
        return self.is_leader
