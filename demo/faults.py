"""Fault injection for the demo services, by configuration.

A :class:`FaultPlan` says how often each kind of fault happens. Whether a
given call is faulted is a pure function of (seed, fault kind, idempotency
key, call number of that key): a blake2b hash mapped to a uniform number in
[0, 1) and compared with the kind's rate. A demo run is therefore reproducible
no matter how requests interleave, and each kind's draw is independent of the
other kinds' rates. At most one fault applies per call; when several draws
hit, the first in :data:`FAULT_PRIORITY` wins.

Undo endpoints (release, refund, cancel, and their by-key forms) get none of
these unless ``faults_on_undo`` is set. A service named in
``unavailable_services`` is hard down: every call to it, forward or undo,
answers 503 before anything else is looked at. Two deterministic faults hit undos
only, whatever the rates, so a compensation can be made to fail while forward
calls succeed: ``undo_permanent`` (every undo call refused, checked first) and
``undo_transient_failures`` (the first N calls of every undo key answer 503).

What each fault does (the services implement it):

* ``transient``: answer 503 ``{"error": "unavailable", "permanent": false}``
  before anything else happens; nothing is applied or stored.
* ``hang``: sleep ``hang_s`` seconds (default 30, longer than any step
  deadline), *then* apply the effect and store the response, as a real slow
  service does after its client has given up.
* ``lost_response``: apply the effect and store the idempotent response, then
  answer 500 ``{"error": "connection_reset", "permanent": false}``; a retry
  with the same key gets the stored response replayed.
* ``latency``: sleep ``latency_s`` seconds, then behave normally.
* ``refused`` (forward calls only, from ``refuse_keys_containing``): answer
  409 ``{"error": "refused", "permanent": true}`` before anything else
  happens; nothing is applied or stored.
* ``undo_refused`` (undo calls only, from ``undo_permanent``): answer 422
  ``{"error": "undo_refused", "permanent": true}`` before anything else
  happens; nothing is applied, stored or tombstoned, so once the plan no longer
  refuses undos a retry with the same key runs.
"""

from __future__ import annotations

import hashlib
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["FAULT_PRIORITY", "FaultKind", "FaultPlan", "uniform"]


class FaultKind(StrEnum):
    """The kinds of injected fault; values are the names used in the audit."""

    TRANSIENT = "transient"
    HANG = "hang"
    LOST_RESPONSE = "lost_response"
    LATENCY = "latency"
    UNDO_REFUSED = "undo_refused"
    REFUSED = "refused"


FAULT_PRIORITY: tuple[FaultKind, ...] = (
    FaultKind.TRANSIENT,
    FaultKind.HANG,
    FaultKind.LOST_RESPONSE,
    FaultKind.LATENCY,
)
"""Order in which the random fault kinds are checked; the first whose draw hits is the call's only fault.

``undo_refused`` and the deterministic undo transients are not drawn: :meth:`FaultPlan.decide` checks
them before these."""


def uniform(seed: int, kind: str, key: str, call: int) -> float:
    """Map (seed, fault kind, idempotency key, call number) to a uniform float in [0, 1).

    Deterministic across processes and Python versions (no ``hash()`` randomisation).
    """
    digest = hashlib.blake2b(f"{seed}\x1f{kind}\x1f{key}\x1f{call}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


class FaultPlan(BaseModel):
    """How often the demo services misbehave. All rates are probabilities in [0, 1], default 0.

    Attributes:
        transient_rate: Share of calls answered 503 before any effect.
        latency_rate: Share of calls delayed by ``latency_s``.
        latency_s: Added delay (seconds).
        hang_rate: Share of calls that sleep ``hang_s`` before applying their effect.
        hang_s: How long a hung call sleeps (seconds); longer than any step deadline by default.
        lost_response_rate: Share of calls whose effect is applied and stored but whose answer is
            a 500 ``connection_reset``.
        seed: Seed of the deterministic fault decisions.
        faults_on_undo: Whether undo endpoints (release, refund, cancel) are faulted too, with the
            same rates as forward calls.
        undo_transient_failures: The first N calls (N >= 0, default 0) of every undo key answer a
            transient 503 ``unavailable`` before any effect; call N + 1 runs normally. Deterministic,
            independent of the rates, the seed and ``faults_on_undo``; forward calls are unaffected.
        undo_permanent: Every undo call answers a permanent 422 ``undo_refused`` before anything else
            (before ``undo_transient_failures`` and the random faults): no effect, nothing stored, no
            tombstone. Forward calls are unaffected.
        refuse_keys_containing: Forward calls whose idempotency key contains one of these texts
            (``:reacquire-``: every re-acquisition of a hold) are refused for good, 409 ``refused``,
            before anything else (after ``unavailable_services``); undos are unaffected.
        delay_s: Endpoint (``payments.authorize``) -> seconds every call to it waits before it is
            handled, whatever the rates: a slow dependency on one operation only.
        unavailable_services: Services that are hard down (``inventory``, ``payments``, ``shipping``:
            the first part of an endpoint's name): every call to them, forward or undo, answers a
            transient 503 ``unavailable`` before anything else, whatever the other settings say.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    transient_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    latency_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    latency_s: float = Field(default=0.2, ge=0.0)
    hang_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    hang_s: float = Field(default=30.0, ge=0.0)
    lost_response_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    seed: int = 0
    faults_on_undo: bool = False
    undo_transient_failures: int = Field(default=0, ge=0)
    undo_permanent: bool = False
    unavailable_services: tuple[str, ...] = ()
    refuse_keys_containing: tuple[str, ...] = ()
    delay_s: dict[str, float] = Field(default_factory=dict)

    def rate(self, kind: FaultKind) -> float:
        """The configured probability of ``kind`` (0 for ``undo_refused``, which is not drawn)."""
        rates = {
            FaultKind.TRANSIENT: self.transient_rate,
            FaultKind.HANG: self.hang_rate,
            FaultKind.LOST_RESPONSE: self.lost_response_rate,
            FaultKind.LATENCY: self.latency_rate,
            FaultKind.UNDO_REFUSED: 0.0,
            FaultKind.REFUSED: 0.0,
        }
        return rates[kind]

    def decide(
        self, key: str, call: int, *, undo: bool = False, service: str | None = None
    ) -> FaultKind | None:
        """Choose the fault, if any, for one call.

        Args:
            key: The request's idempotency key.
            call: 1-based number of this call among all calls carrying ``key``.
            undo: The call is to an undo endpoint (release, refund, cancel).
            service: The service called (``payments``), checked against ``unavailable_services``.

        Returns:
            The single fault to inject, or None. ``transient`` for any call to a service in
            ``unavailable_services``. Otherwise, for an undo call: ``undo_refused`` if
            ``undo_permanent``, else ``transient`` if ``call <= undo_transient_failures``, else the
            random draw when ``faults_on_undo`` (None otherwise). Forward calls: the random draw.
        """
        if service is not None and service in self.unavailable_services:
            return FaultKind.TRANSIENT
        if not undo and any(text in key for text in self.refuse_keys_containing):
            return FaultKind.REFUSED
        if undo:
            if self.undo_permanent:
                return FaultKind.UNDO_REFUSED
            if call <= self.undo_transient_failures:
                return FaultKind.TRANSIENT
            if not self.faults_on_undo:
                return None
        for kind in FAULT_PRIORITY:
            rate = self.rate(kind)
            if rate > 0.0 and uniform(self.seed, kind.value, key, call) < rate:
                return kind
        return None
