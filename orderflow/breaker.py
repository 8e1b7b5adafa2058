"""Circuit breakers: one per remote dependency (an agent's service), shared by every host.

A breaker's state is one small document per dependency in the breakers store (:class:`BreakerStore`),
written only with ETag-conditional writes, so hosts agree on it without talking to each other
(docs/operations.md, "Circuit breakers"). Its states:

- **closed** (no ``openUntil``): calls flow. Each host counts the transient failures it sees in a row
  (a success resets the count); at ``BREAKER_FAILURES_TO_OPEN`` it opens the breaker for every host;
- **open** (``openUntil`` in the future): no step on the dependency starts and no agent calls it; the
  orders wait (:func:`orderflow.protocol.transitions.forward.hold_for_dependency`) with their retry
  budgets unspent;
- **half-open** (``openUntil`` passed): exactly one caller, the one whose conditional write takes the
  probe lease (``probeBy`` until ``probeUntil``), may call. A success closes the breaker; a transient
  failure re-opens it for twice as long (up to ``BREAKER_OPEN_MAX_S``). A probe that dies frees the
  lease when it ends.

The transitions are pure functions of a document (:func:`breaker_view`, :func:`opened`,
:func:`probing`, :func:`closed`); :class:`CircuitBreakers` applies them for one host, with a short
cache of the documents it read. A breaker never stops work because its own store failed: a store
error lets the call through (logged), as if the breaker were closed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from orderflow import telemetry
from orderflow.clock import Clock
from orderflow.errors import AlreadyExists, ConcurrencyConflict, OrderflowError
from orderflow.records import Model, UtcDatetime
from orderflow.settings import Breakers
from orderflow.stores.base import Versioned

logger = logging.getLogger(__name__)

DEPENDENCY_UNAVAILABLE = "dependency_unavailable"
"""``lastError.code`` (and an agent response's ``errorCode``) of a step held by an open breaker."""


class BreakerDoc(Model):
    """The stored state of one dependency's breaker (``breakers`` container, id = the dependency).

    Attributes:
        id: The dependency: the agent's name (``payment``, ``inventory``, ...).
        open_until: While in the future the breaker is open; once passed, half-open; None: closed.
        opened_at: When it last opened (UTC), for operators.
        reopened: Failed probes since it opened: the open period doubles with each.
        probe_by: Who holds the probe lease of a half-open breaker (an instance id), or None.
        probe_until: When that lease ends (UTC).
        changed_by: The host that wrote this version.
        updated_at: When this version was written (UTC).
    """

    id: str
    open_until: UtcDatetime | None = None
    opened_at: UtcDatetime | None = None
    reopened: int = 0
    probe_by: str | None = None
    probe_until: UtcDatetime | None = None
    changed_by: str | None = None
    updated_at: UtcDatetime


class BreakerStore(Protocol):
    """Breaker documents, every write conditional (the state store's semantics, docs/design.md §3.1).

    Implementations: :class:`orderflow.stores.memory.InMemoryBreakerStore`,
    :class:`orderflow.stores.cosmos.CosmosBreakerStore`.
    """

    def find(self, dependency: str) -> Versioned[BreakerDoc] | None:
        """The dependency's document, or None when it has none (a closed breaker)."""
        ...

    def create(self, doc: BreakerDoc) -> Versioned[BreakerDoc]:
        """Insert a document.

        Raises:
            AlreadyExists: another host created it first (HTTP 409).
        """
        ...

    def replace(self, doc: BreakerDoc, *, etag: str) -> Versioned[BreakerDoc]:
        """Replace a document only if its ETag is still ``etag``.

        Raises:
            ConcurrencyConflict: someone else wrote it (HTTP 412).
        """
        ...


@dataclass(frozen=True)
class Closed:
    """Calls flow."""


@dataclass(frozen=True)
class Open:
    """No call until ``retry_at`` (UTC), when a probe may test the dependency."""

    retry_at: datetime


@dataclass(frozen=True)
class HalfOpen:
    """One probe may call: the holder of the lease (``probe_by`` until ``probe_until``), or, when no
    lease is live (``probe_by`` None), whoever takes it first."""

    probe_by: str | None
    probe_until: datetime | None


BreakerView = Closed | Open | HalfOpen
"""What a breaker lets through at one moment (:func:`breaker_view`)."""


def breaker_view(doc: BreakerDoc | None, now: datetime) -> BreakerView:
    """The state of a breaker document at ``now``: :class:`Closed`, :class:`Open` or :class:`HalfOpen`
    (an expired probe lease counts as no lease)."""
    if doc is None or doc.open_until is None:
        return Closed()
    if now < doc.open_until:
        return Open(doc.open_until)
    if doc.probe_by is not None and doc.probe_until is not None and now < doc.probe_until:
        return HalfOpen(doc.probe_by, doc.probe_until)
    return HalfOpen(None, None)


def wait_until(view: BreakerView, holder: str) -> datetime | None:
    """When ``holder`` may try again, or None when it may call now (closed, or it holds the probe)."""
    match view:
        case Open(retry_at=retry_at):
            return retry_at
        case HalfOpen(probe_by=probe_by, probe_until=probe_until) if probe_by not in (None, holder):
            return probe_until
    return None


def opened(doc: BreakerDoc | None, dependency: str, now: datetime, breakers: Breakers, by: str) -> BreakerDoc:
    """The document of a breaker that opens at ``now`` (from closed), or re-opens after a failed probe
    (from half-open), for ``BREAKER_OPEN_S`` doubled per failed probe, capped at ``BREAKER_OPEN_MAX_S``."""
    reopened = 0 if doc is None or doc.open_until is None else doc.reopened + 1
    open_s = min(breakers.BREAKER_OPEN_S * 2**reopened, breakers.BREAKER_OPEN_MAX_S)
    return BreakerDoc(
        id=dependency,
        open_until=now + timedelta(seconds=open_s),
        opened_at=now if reopened == 0 or doc is None else doc.opened_at,
        reopened=reopened,
        changed_by=by,
        updated_at=now,
    )


def probing(doc: BreakerDoc, holder: str, now: datetime, lease_s: float, by: str) -> BreakerDoc:
    """The document of a half-open breaker whose probe lease ``holder`` takes for ``lease_s`` seconds."""
    return doc.model_copy(
        update={
            "probe_by": holder,
            "probe_until": now + timedelta(seconds=lease_s),
            "changed_by": by,
            "updated_at": now,
        }
    )


def closed(dependency: str, now: datetime, by: str) -> BreakerDoc:
    """The document of a breaker that closes at ``now`` (a call succeeded)."""
    return BreakerDoc(id=dependency, changed_by=by, updated_at=now)


@dataclass
class _Known:
    """A document this host read or wrote (None: none stored), and when (``time.monotonic``)."""

    found: Versioned[BreakerDoc] | None
    at: float


class CircuitBreakers:
    """The breakers of every dependency, as one host sees and changes them (thread-safe).

    Args:
        store: Where the documents are.
        clock: Time source (UTC) of the documents' times.
        section: The ``BREAKER_*`` settings.
        host_id: This host (``HOST_ID``), named in the documents it opens.
        monotonic: Seconds for the cache's age (tests pass a fake).
    """

    def __init__(
        self,
        store: BreakerStore,
        clock: Clock,
        section: Breakers,
        host_id: str,
        *,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._clock = clock
        self.section = section
        self.host_id = host_id
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._known: dict[str, _Known] = {}
        self._failures: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(store={self._store!r})"

    def view(self, dependency: str) -> BreakerView:
        """The dependency's breaker now, from a document at most ``BREAKER_CACHE_S`` old."""
        return breaker_view(self._doc(dependency), self._clock.now())

    def admit(self, dependency: str, *, holder: str) -> datetime | None:
        """May ``holder`` (an attempt's instance id) call ``dependency``, or start a step on it, now?

        Closed: yes. Open: no. Half-open: yes for the holder of the probe lease; a holder that finds no
        live lease takes it with a conditional write (one winner across hosts) and may call.

        Returns:
            None: go ahead. Otherwise the time (UTC) from which to ask again.
        """
        try:
            return self._admit(dependency, holder)
        except OrderflowError:
            logger.warning("breaker of %s unreadable: letting the call through", dependency, exc_info=True)
            return None

    def _admit(self, dependency: str, holder: str) -> datetime | None:
        found = self._known_version(dependency)
        now = self._clock.now()
        view = breaker_view(None if found is None else found.item, now)
        if not isinstance(view, HalfOpen) or view.probe_by is not None or found is None:
            return wait_until(view, holder)
        lease_s = self.section.BREAKER_PROBE_LEASE_S
        taken = self._write(dependency, found, probing(found.item, holder, now, lease_s, self.host_id))
        if taken is None:
            # Another host wrote first: decide again on what it wrote.
            return wait_until(self.view(dependency), holder)
        telemetry.event("breaker.probe", dependency=dependency, holder=holder)
        return None

    def succeeded(self, dependency: str) -> None:
        """A call to ``dependency`` was answered (a success or a business refusal): the failures in a
        row start again from zero, and a breaker that is not closed closes."""
        with self._lock:
            self._failures[dependency] = 0
        try:
            found = self._known_version(dependency)
            if found is not None and found.item.open_until is not None:
                now = self._clock.now()
                if self._write(dependency, found, closed(dependency, now, self.host_id)) is not None:
                    telemetry.event("breaker.closed", dependency=dependency)
        except OrderflowError:
            logger.warning("breaker of %s not closed: its store failed", dependency, exc_info=True)

    def failed(self, dependency: str, *, holder: str) -> None:
        """A call by ``holder`` to ``dependency`` failed transiently: a probe's failure re-opens the
        breaker; in a closed breaker the ``BREAKER_FAILURES_TO_OPEN``-th failure in a row opens it."""
        with self._lock:
            count = self._failures.get(dependency, 0) + 1
            self._failures[dependency] = count
        try:
            found = self._known_version(dependency)
            now = self._clock.now()
            view = breaker_view(None if found is None else found.item, now)
            probe_failed = isinstance(view, HalfOpen) and view.probe_by == holder
            threshold = isinstance(view, Closed) and count >= self.section.BREAKER_FAILURES_TO_OPEN
            if not (probe_failed or threshold):
                return
            doc = opened(None if found is None else found.item, dependency, now, self.section, self.host_id)
            if self._write(dependency, found, doc) is not None:
                with self._lock:
                    self._failures[dependency] = 0
                telemetry.alert(
                    "breaker_open",
                    dependency=dependency,
                    open_until=doc.open_until.isoformat() if doc.open_until else None,
                    reopened=doc.reopened,
                )
        except OrderflowError:
            logger.warning("breaker of %s not opened: its store failed", dependency, exc_info=True)

    def _doc(self, dependency: str) -> BreakerDoc | None:
        try:
            found = self._known_version(dependency)
        except OrderflowError:
            logger.warning("breaker of %s unreadable: treated as closed", dependency, exc_info=True)
            return None
        return None if found is None else found.item

    def _known_version(self, dependency: str) -> Versioned[BreakerDoc] | None:
        """The dependency's document, from the cache when younger than ``BREAKER_CACHE_S``."""
        with self._lock:
            known = self._known.get(dependency)
        if known is not None and self._monotonic() - known.at < self.section.BREAKER_CACHE_S:
            return known.found
        return self._reread(dependency)

    def _reread(self, dependency: str) -> Versioned[BreakerDoc] | None:
        found = self._store.find(dependency)
        with self._lock:
            self._known[dependency] = _Known(found, self._monotonic())
        return found

    def _write(
        self, dependency: str, found: Versioned[BreakerDoc] | None, doc: BreakerDoc
    ) -> Versioned[BreakerDoc] | None:
        """Write ``doc`` over ``found`` (create when None); None when another writer won (re-read)."""
        try:
            written = self._store.create(doc) if found is None else self._store.replace(doc, etag=found.etag)
        except (AlreadyExists, ConcurrencyConflict):
            self._reread(dependency)
            return None
        with self._lock:
            self._known[dependency] = _Known(written, self._monotonic())
        return written


def circuit_breakers(
    store: BreakerStore, clock: Clock, section: Breakers, host_id: str
) -> CircuitBreakers | None:
    """The host's breakers over ``store``, or None when ``BREAKER_ENABLED`` is off."""
    return CircuitBreakers(store, clock, section, host_id) if section.BREAKER_ENABLED else None
