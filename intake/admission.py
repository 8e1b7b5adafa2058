"""Admission control: backpressure at submission, so overload is refused instead of stored.

Submission asks :class:`~intake.client_admission.ClientAdmission` before it writes a new order. Ceilings
apply per client and for the whole system (a ceiling of 0, or none, disables its check):

- **in flight, per client**: a registered client's orders in ``Pending`` or ``Processing`` may not exceed
  its quota (:meth:`orderflow.settings.Clients.client_quota`: its own ``maxInFlight``, else an equal
  share of what the others' leave of ``MAX_IN_FLIGHT_ORDERS``), counted on its ``clientId``: one client
  at its quota is refused ``ClientInFlightCeiling`` while the others go on. The quotas never add up to
  more than the global ceiling (the settings refuse a registry whose do), so no client can fill the
  system for the others;
- **in flight, global**: orders in ``Pending`` or ``Processing``
  (:data:`~orderflow.protocol.state_machine.IN_FLIGHT_STATES`) may not exceed ``MAX_IN_FLIGHT_ORDERS``:
  an order is admitted only while ``in_flight < ceiling``;
- **backlog, per client**: while the client's inbound queue holds more than ``MAX_SUBMISSION_BACKLOG``
  messages (the one being handled included), its new orders are refused. Refusing is cheap, so an
  oversized backlog drains quickly and its client learns early instead of after a long wait.

Each set of ceilings is one :class:`AdmissionControl`; :class:`~intake.client_admission.ClientAdmission`
asks the client's first, then the global one, and gives back the client's place if the global one refuses.

Neither count is read per message. Each is a :class:`_CachedCount`: a server-side ``COUNT``
(:meth:`StateStore.count`) or the queue's ``approximate_count()``, re-read at most once every
``ADMISSION_REFRESH_S`` seconds by one thread while the others keep deciding on the cached value.

**Burst bound.** Between refreshes the process adds every order it admitted to the cached in-flight
count, so one process alone never admits past the ceiling on account of stale data. Two slacks remain:

1. *Other processes.* Each process admits against its own snapshot, so with P processes the ceiling
   is overshot by at most the orders the *other* processes admit within one refresh period — never
   more than what arrives in one refresh period.
2. *Writes in progress when a count is read.* An order admitted just before a count query starts but
   written just after it is missed by that count (admissions made *while* the query runs are kept). At
   most one per handler running concurrently (devhost: 4 submission handlers per process).

So the in-flight count stays below ``ceiling + arrivals at other processes per refresh period +
P × concurrent handlers``. Orders leaving the in-flight states are seen only at the next refresh, which
errs on the side of refusing.

**When a count cannot be read.** The in-flight check fails *closed*: it protects the state store
against unbounded growth, and rejecting is always safe (the client is told, nothing is written, the
message is completed), while admitting blind could grow the store without limit. A single failed
refresh does not reject anything: the last good count (plus local admissions) stays usable for
``max_stale_s`` (default three refresh periods); only after that, or before any count was ever read, is
an order refused with reason ``InFlightCountUnavailable``. The backlog check fails *open*: it is an
early signal about a queue whose messages are still each admitted under the in-flight ceiling, and a
backlog count that is unavailable for good (a Service Bus identity without the rights to read runtime
properties) must not turn away every order. Failed reads are logged and retried one refresh period
later, never per message.

**Retry-After.** A rejected client should not come back before this process can have seen room, which
is the next refresh: ``retry_after_s = max(refresh period, 1 s) × (1 + spread)``, where ``spread`` in
[0, 1) is derived from the order id. The spread de-synchronises a crowd rejected in the same instant
(no thundering herd at the next refresh), and being a function of the order id it is deterministic:
a redelivered rejection carries the same reply.
"""

from __future__ import annotations

import hashlib
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from orderflow import telemetry
from orderflow.clients import RegisteredClient
from orderflow.errors import OrderflowError
from orderflow.protocol.state_machine import IN_FLIGHT_STATES
from orderflow.queues.base import QueueFactory
from orderflow.settings import Clients
from orderflow.stores.base import StateQuery, StateStore

logger = logging.getLogger(__name__)

MIN_RETRY_AFTER_S = 1.0
"""Smallest ``retry_after_s`` a rejection carries (seconds), even with a refresh period near 0."""

STALE_PERIODS = 3
"""Default ``max_stale_s`` in refresh periods: how long after it was read the last good count stays
usable while refreshes fail."""

IN_FLIGHT_QUERY = StateQuery(process_states=tuple(sorted(IN_FLIGHT_STATES)))
"""The in-flight filter: ``processState`` in ``Pending``, ``Processing``."""


class BacklogSource(Protocol):
    """What admission control reads of the submission queue (every :class:`MessageQueue` has it)."""

    @property
    def name(self) -> str:
        """The queue's name, for logs."""
        ...

    def approximate_count(self) -> int:
        """Approximate number of messages in the queue."""
        ...


class AdmissionReason(StrEnum):
    """Why an order was refused; the ``reason`` of its ``Rejected`` reply."""

    IN_FLIGHT_CEILING = "InFlightCeiling"
    CLIENT_IN_FLIGHT_CEILING = "ClientInFlightCeiling"
    BACKLOG_CEILING = "BacklogCeiling"
    IN_FLIGHT_COUNT_UNAVAILABLE = "InFlightCountUnavailable"


@dataclass(frozen=True)
class AdmissionDecision:
    """The outcome of :meth:`AdmissionControl.admit`.

    Attributes:
        admitted: Whether the order may be written.
        reason: Why it was refused (None when admitted).
        detail: A short human-readable explanation with the numbers (None when admitted).
        retry_after_s: Seconds the client should wait before submitting again (None when admitted).
    """

    admitted: bool
    reason: AdmissionReason | None = None
    detail: str | None = None
    retry_after_s: float | None = None


ADMITTED = AdmissionDecision(admitted=True)


def retry_after_s(order_id: str, refresh_s: float) -> float:
    """Seconds a refused client should wait: one refresh period plus a per-order spread of up to one more.

    Args:
        order_id: The refused order; fixes the spread, so the same order always gets the same answer.
        refresh_s: The admission refresh period (seconds); raised to :data:`MIN_RETRY_AFTER_S`.

    Returns:
        A value in ``[base, 2 × base)`` with ``base = max(refresh_s, MIN_RETRY_AFTER_S)``, to 0.1 s.
    """
    base = max(refresh_s, MIN_RETRY_AFTER_S)
    digest = hashlib.sha256(order_id.encode("utf-8")).digest()
    spread = int.from_bytes(digest[:4], "big") / 2**32
    # Round down to 0.1 s so the result stays below 2 × base.
    return math.floor(base * (1 + spread) * 10) / 10


class _CachedCount:
    """One count, re-read at most every ``refresh_s`` seconds, plus what this process admitted since.

    Thread-safe through the owner's condition variable, which guards every field. The read itself runs
    outside it, by one thread at a time: the others keep using the cached value, unless it is unusable
    (never read, or older than ``max_stale_s`` after an idle spell), in which case they wait for the
    read in progress rather than decide on nothing or all query at once.
    """

    def __init__(
        self,
        what: str,
        read: Callable[[], int],
        *,
        refresh_s: float,
        max_stale_s: float,
        monotonic: Callable[[], float],
        condition: threading.Condition,
    ) -> None:
        self.what = what
        self._read = read
        self._refresh_s = refresh_s
        self._max_stale_s = max_stale_s
        self._monotonic = monotonic
        self._condition = condition
        self.value: int | None = None
        self.read_at = -math.inf
        """Monotonic time at which the last successful read started."""
        self.local = 0
        """Orders admitted by this process that the cached value may not include yet."""
        self._local_total = 0
        self._next_read_at = -math.inf
        self._reading = False
        self._failing = False

    def refresh_if_due(self) -> None:
        """Re-read the count if the refresh period has passed since the last attempt.

        Never raises for a failed read (:class:`OrderflowError` or :class:`OSError`): the failure is
        logged and the next attempt waits a full refresh period, so a failing dependency is asked at
        most once per period, not once per message.
        """
        with self._condition:
            if self._reading:
                # Wait only if the cached value is not worth deciding on (never read, or old after an
                # idle spell); otherwise go on with it while the read runs.
                while self._reading and (
                    self.value is None or self._monotonic() - self.read_at > self._max_stale_s
                ):
                    self._condition.wait()
                return
            started = self._monotonic()
            if started < self._next_read_at:
                return
            self._reading = True
            mark = self._local_total
        value: int | None = None
        try:
            value = self._read()
        except (OrderflowError, OSError) as exc:
            logger.warning("admission control could not read the %s count: %s", self.what, exc)
            telemetry.event("admission.count_failed", count=self.what, error=type(exc).__name__)
        finally:
            with self._condition:
                if value is not None:
                    self.value = value
                    self.read_at = started
                    # Orders admitted while the query ran may be missing from it: keep counting them.
                    self.local = self._local_total - mark
                self._failing = value is None
                self._next_read_at = started + self._refresh_s
                self._reading = False
                self._condition.notify_all()

    def add_local(self) -> None:
        """Count one admitted order until a later read includes it (call with the condition held)."""
        self.local += 1
        self._local_total += 1

    def current(self, now: float) -> int | None:
        """The cached value plus local admissions, or None if it is unknown.

        Unknown means never read, or reads are failing and the last good value is older than
        ``max_stale_s``. While reads succeed the value is as fresh as the refresh period makes it
        (it is re-read before a decision whenever due). Call with the condition held.
        """
        if self.value is None or (self._failing and now - self.read_at > self._max_stale_s):
            return None
        return self.value + self.local


class Admission(Protocol):
    """What submission asks before it writes a new order."""

    def admit(self, order_id: str, client: RegisteredClient) -> AdmissionDecision:
        """Decide whether ``client``'s new order ``order_id`` may be written; an admitted order is counted."""
        ...

    def release(self, client: RegisteredClient) -> None:
        """Give back the place an admitted order took when it turned out not to be new (a duplicate, or a
        conflicting order that wrote nothing): it must not hold a place no order fills."""
        ...


class AdmissionControl:
    """One set of ceilings: whether a new order may enter the system, or a client's quota (see the module
    docstring for the guarantees).

    One instance per process (and client), shared by every submission handler thread.

    Args:
        states: The state store; its server-side count gives the in-flight orders.
        backlog: The queue whose backlog is watched, or None to disable the backlog check.
        max_in_flight: Ceiling on ``Pending`` + ``Processing`` orders; 0 disables the check.
        max_backlog: Ceiling on messages waiting in ``backlog`` (a client's inbound queue); 0 disables
            the check.
        refresh_s: Seconds between reads of each count (``ADMISSION_REFRESH_S``); 0 reads every time.
        max_stale_s: Seconds the last good in-flight count stays usable while reads fail; default
            :data:`STALE_PERIODS` refresh periods.
        monotonic: Monotonic time in seconds (injectable for tests).
        client_id: Count only this client's orders (``clientId``) and refuse ``ClientInFlightCeiling``;
            None (default): every order, ``InFlightCeiling``.

    Raises:
        ValueError: a ceiling, ``refresh_s`` or ``max_stale_s`` is negative.
    """

    def __init__(
        self,
        *,
        states: StateStore,
        backlog: BacklogSource | None,
        max_in_flight: int,
        max_backlog: int,
        refresh_s: float,
        max_stale_s: float | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        client_id: str | None = None,
    ) -> None:
        if min(max_in_flight, max_backlog) < 0 or refresh_s < 0 or (max_stale_s or 0) < 0:
            raise ValueError("admission ceilings and periods must not be negative")
        self.max_in_flight = max_in_flight
        self.max_backlog = max_backlog
        self.refresh_s = refresh_s
        self.max_stale_s = STALE_PERIODS * refresh_s if max_stale_s is None else max_stale_s
        self._monotonic = monotonic
        self.client_id = client_id
        query = (
            IN_FLIGHT_QUERY
            if client_id is None
            else StateQuery(IN_FLIGHT_QUERY.process_states, client_id=client_id)
        )
        self._condition = threading.Condition()
        self._in_flight = (
            _CachedCount(
                "in-flight" if client_id is None else f"in-flight of client {client_id}",
                lambda: states.count(query),
                refresh_s=refresh_s,
                max_stale_s=self.max_stale_s,
                monotonic=monotonic,
                condition=self._condition,
            )
            if max_in_flight > 0
            else None
        )
        self._backlog = (
            _CachedCount(
                f"backlog of {backlog.name}",
                backlog.approximate_count,
                refresh_s=refresh_s,
                max_stale_s=self.max_stale_s,
                monotonic=monotonic,
                condition=self._condition,
            )
            if backlog is not None and max_backlog > 0
            else None
        )

    @classmethod
    def from_clients(
        cls,
        clients: Clients,
        *,
        states: StateStore,
        queues: QueueFactory,
        monotonic: Callable[[], float] = time.monotonic,
        client: RegisteredClient | None = None,
    ) -> AdmissionControl:
        """The global ceiling (``MAX_IN_FLIGHT_ORDERS``), or with ``client`` that client's: its
        ``maxInFlight`` and the ``MAX_SUBMISSION_BACKLOG`` of its inbound queue; counts are re-read every
        ``ADMISSION_REFRESH_S``.

        The queue client is created only if the backlog check is enabled (creating one may do I/O).
        """
        if client is None:
            return cls(
                states=states,
                backlog=None,
                max_in_flight=clients.MAX_IN_FLIGHT_ORDERS,
                max_backlog=0,
                refresh_s=clients.ADMISSION_REFRESH_S,
                monotonic=monotonic,
            )
        backlog = queues.queue(client.inbound_queue) if clients.MAX_SUBMISSION_BACKLOG > 0 else None
        return cls(
            states=states,
            backlog=backlog,
            max_in_flight=clients.client_quota(client),
            max_backlog=clients.MAX_SUBMISSION_BACKLOG,
            refresh_s=clients.ADMISSION_REFRESH_S,
            monotonic=monotonic,
            client_id=client.client_id,
        )

    def __repr__(self) -> str:
        client = f", client_id={self.client_id!r}" if self.client_id is not None else ""
        return (
            f"{type(self).__name__}(max_in_flight={self.max_in_flight}, max_backlog={self.max_backlog}, "
            f"refresh_s={self.refresh_s}{client})"
        )

    def give_back(self) -> None:
        """Undo the count of one order this instance admitted that takes no place after all (another
        ceiling refused it, or it was not new); the next refresh of the count corrects any overlap."""
        with self._condition:
            if self._in_flight is not None and self._in_flight.local > 0:
                self._in_flight.local -= 1

    def release(self, client: RegisteredClient | None = None) -> None:
        """Give back the place of an admitted order that was not new (``client`` is not looked at)."""
        self.give_back()

    def admit(self, order_id: str, client: RegisteredClient | None = None) -> AdmissionDecision:
        """Decide whether the new order ``order_id`` may be written; an admitted order is counted.

        ``client`` is not looked at: these ceilings hold for whichever orders this instance counts.

        At most one count query per refresh period and count; otherwise no I/O. Call it only for an
        order about to be created: every admission takes a place under the in-flight ceiling until
        the next refresh (a redelivery that turns out to exist already merely errs towards refusing).

        Args:
            order_id: The order; fixes the spread of ``retry_after_s``.

        Returns:
            :data:`ADMITTED`, or a refusal with its reason, a detail and ``retry_after_s`` (seconds).
            Never raises for a count that cannot be read: see the module docstring.
        """
        for count in (self._in_flight, self._backlog):
            if count is not None:
                count.refresh_if_due()
        with self._condition:
            now = self._monotonic()
            if self._in_flight is not None:
                in_flight = self._in_flight.current(now)
                if in_flight is None:
                    return self._refuse(
                        order_id,
                        AdmissionReason.IN_FLIGHT_COUNT_UNAVAILABLE,
                        "the number of orders in flight cannot be read right now",
                    )
                if in_flight >= self.max_in_flight and self.client_id is not None:
                    return self._refuse(
                        order_id,
                        AdmissionReason.CLIENT_IN_FLIGHT_CEILING,
                        f"{in_flight} of this client's orders in flight (Pending + Processing); its quota "
                        f"is {self.max_in_flight}",
                    )
                if in_flight >= self.max_in_flight:
                    return self._refuse(
                        order_id,
                        AdmissionReason.IN_FLIGHT_CEILING,
                        f"{in_flight} orders in flight (Pending + Processing); the ceiling is "
                        f"{self.max_in_flight}",
                    )
            if self._backlog is not None:
                # Fails open: an unknown backlog skips this check (module docstring).
                backlog = self._backlog.current(now)
                if backlog is not None and backlog > self.max_backlog:
                    return self._refuse(
                        order_id,
                        AdmissionReason.BACKLOG_CEILING,
                        f"about {backlog} orders wait in the inbound queue; the ceiling is "
                        f"{self.max_backlog}",
                    )
            if self._in_flight is not None:
                self._in_flight.add_local()
            return ADMITTED

    def _refuse(self, order_id: str, reason: AdmissionReason, detail: str) -> AdmissionDecision:
        return AdmissionDecision(
            admitted=False,
            reason=reason,
            detail=detail,
            retry_after_s=retry_after_s(order_id, self.refresh_s),
        )
