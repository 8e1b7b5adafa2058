"""The poison guard: an order failing the same way again and again is held; a failing version flagged.

An order *fails the same way* when its last ``POISON_FAILURES`` attempts, each ended by the supervisor,
failed at the same step with the same error code, as each attempt recorded it (``attemptHistory``'s
``errorStep`` / ``errorCode``). An expiry (``complete_by_expired``) never counts: the state store does not
say why an attempt stopped writing (docs/design.md §3.4), so expiries are not "the same failure"; nor are
the agents' transient codes (:data:`NOT_THE_ORDERS`: a dependency down fails every order that calls it
alike). What counts is a failure of the order's own: above all ``workflow_error``, which the orchestration
records when its own code raises (a poison input, a bug of its version). Rather
than re-queue such an order until ``SUPERVISOR_MAX_FAILURES``, the supervisor *holds* it in the same
conditional write: ``Pending``, unlocked and *suspended* (``suspendedAt``, ``suspendedBy`` =
:data:`POISON_GUARD`: no starter claims it and no sweep looks at it, as for an operator's suspension),
``lastError`` code :data:`REPEATED_FAILURE`, and a ``poison_order`` alert. An operator's ``resume`` runs it
again (after fixing the cause), ``compensate`` (or a client's cancel) undoes it instead.

A *workflow version failing*: each failure of the order's own the supervisor acts on is noted by
``(workflowVersion, step, code)`` in a :class:`VersionFailures` window; when ``POISON_VERSION_ORDERS``
distinct orders are in it within ``POISON_VERSION_WINDOW_S``, ``workflow_version_failing`` is raised, once
per window. While it is raised for a failure, orders failing that way are not held: the cause is systemic
(a dependency down, a broken version) and holding every order would leave them all to be moved on one by
one; they are re-queued and given up as before. The window lives in memory, per supervisor: a local
supervisor keeps one across sweeps, an Azure timer sweep has one per sweep (docs/operations.md).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import NamedTuple

from orderflow import telemetry
from orderflow.breaker import DEPENDENCY_UNAVAILABLE
from orderflow.errors import DEADLINE_EXCEEDED, SERVICE_AUTH_REFUSED, TRANSIENT_EXHAUSTED
from orderflow.records import AttemptEntry, LastError
from orderflow.settings import Supervisor

POISON_GUARD = "supervisor:poison-guard"
"""``suspendedBy`` of an order the guard holds (an operator's suspension names the verified principal)."""

REPEATED_FAILURE = "repeated_failure"
"""``lastError.code`` of an order the guard holds."""

EXPIRED = "complete_by_expired"
"""The code of an expiry, which says nothing of how an attempt failed (never counted by the guard)."""

NOT_THE_ORDERS = frozenset(
    {EXPIRED, TRANSIENT_EXHAUSTED, DEADLINE_EXCEEDED, DEPENDENCY_UNAVAILABLE, SERVICE_AUTH_REFUSED}
)
"""Codes that say a dependency, its credential or a host failed, not the order: never counted by the guard. A
dependency down for a while fails every order that calls it the same way, and with fewer than
``POISON_VERSION_ORDERS`` of them in flight the version window cannot tell; the circuit breaker, the
retry budget and ``SUPERVISOR_MAX_FAILURES`` bound those."""


class Failure(NamedTuple):
    """How attempts of orders of ``version`` failed: at ``step`` with ``code``."""

    version: str
    step: str
    code: str


def repeated_failure(history: Sequence[AttemptEntry], times: int) -> tuple[str, str] | None:
    """The ``(step, code)`` the last ``times`` attempts of ``history`` all failed with, or None.

    Only tenures the supervisor ended (``recovered``) with a recorded failure of the order's own count
    (:data:`NOT_THE_ORDERS` never do); 0 disables the guard.
    """
    if times <= 0:
        return None
    ended = [entry for entry in history if entry.ended_at is not None][-times:]
    if len(ended) < times:
        return None
    ways = {(entry.outcome, entry.error_step, entry.error_code) for entry in ended}
    if len(ways) != 1:
        return None
    ((outcome, step, code),) = ways
    if outcome != "recovered" or step is None or code is None or code in NOT_THE_ORDERS:
        return None
    return step, code


def held_error(cause: LastError, step: str, code: str, times: int, now: datetime) -> LastError:
    """``lastError`` of an order the guard holds: what kept failing, and that an operator decides next."""
    return LastError(
        kind=cause.kind,
        code=REPEATED_FAILURE,
        step=step,
        message=f"{times} attempts in a row failed at {step} with {code}; held for an operator",
        at=now,
    )


@dataclass
class VersionFailures:
    """Orders whose attempts failed, by ``(version, step, code)``, over a sliding window; not thread-safe.

    Attributes:
        window_s: ``POISON_VERSION_WINDOW_S``.
        threshold: ``POISON_VERSION_ORDERS``.
    """

    window_s: float
    threshold: int
    _seen: dict[Failure, deque[tuple[datetime, str]]] = field(default_factory=dict)
    _raised: dict[Failure, datetime] = field(default_factory=dict)

    @classmethod
    def from_section(cls, supervisor: Supervisor) -> VersionFailures:
        """A window of ``POISON_VERSION_WINDOW_S`` seconds and ``POISON_VERSION_ORDERS`` orders."""
        return cls(
            window_s=supervisor.POISON_VERSION_WINDOW_S,
            threshold=supervisor.POISON_VERSION_ORDERS,
        )

    def _orders(self, failure: Failure, now: datetime) -> set[str]:
        seen = self._seen.get(failure)
        if seen is None:
            return set()
        while seen and seen[0][0] <= now - timedelta(seconds=self.window_s):
            seen.popleft()
        return {order_id for _, order_id in seen}

    def systemic(self, failure: Failure, now: datetime) -> bool:
        """Whether ``workflow_version_failing`` stands for ``failure`` (raised within the window)."""
        raised = self._raised.get(failure)
        return raised is not None and now - raised < timedelta(seconds=self.window_s)

    def note(self, failure: Failure, order_id: str, now: datetime) -> None:
        """Count ``order_id`` failing as ``failure`` at ``now``; raise ``workflow_version_failing`` when
        ``threshold`` distinct orders did within the window and it is not raised for it already. A
        failure of :data:`NOT_THE_ORDERS` is not counted: many orders expiring or meeting a dependency
        that is down say nothing of their version (the breaker's ``breaker_open`` says that)."""
        if failure.code in NOT_THE_ORDERS:
            return
        self._seen.setdefault(failure, deque()).append((now, order_id))
        orders = self._orders(failure, now)
        if len(orders) < self.threshold or self.systemic(failure, now):
            return
        self._raised[failure] = now
        telemetry.alert(
            "workflow_version_failing",
            workflow_version=failure.version,
            step=failure.step,
            code=failure.code,
            orders=len(orders),
            window_s=self.window_s,
        )
