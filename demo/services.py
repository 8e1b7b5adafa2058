"""The demo's three remote services (inventory, payments, shipping) in one FastAPI app.

They stand in for the third-party services the agents wrap, and misbehave on
purpose (see :mod:`demo.faults`). All state lives in memory, seeded from a
TPC-H :class:`~demo.tpch.Catalog`, and every change happens under one asyncio
lock.

Every mutating endpoint requires an ``Idempotency-Key`` header and honours it
the way Stripe does:

* the first completed request's status and body are stored and replayed, with
  the header ``Idempotent-Replayed: true``, for any later request carrying the
  same key and the same body (same endpoint, same target, same JSON);
* the same key with a different body -> 422 ``idempotency_key_reuse``;
* the same key while the first request is still running -> 409
  ``request_in_progress`` (``permanent: false``: retry later);
* business outcomes (2xx and 4xx such as ``out_of_stock``) are stored; 5xx
  answers, requests that fail validation and requests refused by the key
  checks above are not, so the client may retry them.

Undo endpoints (release, refund, cancel) are also idempotent by state: undoing
something already undone changes nothing and succeeds.

An undo can be more than a reset: the payment service keeps a cancellation fee
(:class:`RefundPolicy`, default none) when a charge is refunded more than
``fee_after_s`` seconds (by the app's monotonic clock) after it was made. Such
a refund, by charge id or by forward key, returns the amount asked minus the
fee still owed on the charge, never below 0; the fee is kept at most once per
charge in total, also across partial refunds, and within the window refunds
are in full. Refund answers carry ``feeKept`` (what that call kept, a string
with 2 dp), the order's facts record it per charge and in the summary, and
``netCharged`` stays the money still charged (the fee, after a full refund
that kept one). The policy is set with ``--cancellation-fee 2.50 --fee-after-s
60`` on the command line and read or replaced at runtime with ``GET`` / ``PUT
/refund-policy`` (``{"fee": "2.50", "fee_after_s": 60.0}``).

Each service can also undo a step knowing only the forward call's idempotency
key (``{orderId}:{step}``), whatever became of that call: the undo-by-key
endpoints undo the effect the key's stored outcome names, and when the key has
no effect (never arrived, or refused) they leave a *tombstone* on it, so a
stale or hung forward call arriving later is refused (409 ``cancelled``) and
applies nothing. While the forward call is still in flight they answer 409
``request_in_progress`` (``permanent: false``, not stored). Both decisions are
taken under the lock: the forward call creates its stored entry only if the key
has no tombstone, and the undo writes a tombstone only if the key has no stored
entry or one whose outcome had no effect, so a key never gets both an effect
and a tombstone.

A request is handled in this order: key check, call counted and fault decided
(``undo_refused`` answers 422 and ``transient`` 503 here, ``latency`` sleeps), body validation,
tombstone check (forward calls only), key lookup (reuse / in progress /
replay), ``hang`` sleep, effect applied and
response stored under the lock, ``lost_response`` answers 500.

Run it with ``python -m demo.services --port 8082`` (see :func:`main` and
:func:`parse_args`; ``--faults JSON``, ``--cancellation-fee AMOUNT``,
``--fee-after-s SECONDS``), or in process with :func:`serve_in_thread` and
:func:`stop`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import logging
import os
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, Self, TypeVar

import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from demo.faults import FaultKind, FaultPlan
from demo.tpch import (
    DEFAULT_DEMO_ORDERS,
    DEFAULT_SCALE,
    DEFAULT_STOCK_DIVISOR,
    SHIP_MODES,
    Catalog,
    ensure_dataset,
    load_catalog,
)

__all__ = [
    "CURRENCIES",
    "IDEMPOTENCY_HEADER",
    "INSTANCE_HEADER",
    "REPLAYED_HEADER",
    "RefundPolicy",
    "ServiceOptions",
    "create_app",
    "main",
    "parse_args",
    "serve_in_thread",
    "server_url",
    "stop",
]

logger = logging.getLogger("demo.services")  # not __main__ under python -m

IDEMPOTENCY_HEADER = "Idempotency-Key"
"""Request header every mutating endpoint requires."""

INSTANCE_HEADER = "Orderflow-Instance-Id"
TRACEPARENT_HEADER = "traceparent"
"""The W3C trace context header of a traced caller, kept in the key's audit (``received[].traceparent``)."""
"""Optional request header naming the orchestration instance (attempt) a call was made for; the audit
keeps it with each call's arrival time so a run can check that attempts never overlapped."""

REPLAYED_HEADER = "Idempotent-Replayed"
"""Response header set to ``true`` on a replayed stored response."""

CURRENCIES: frozenset[str] = frozenset({"USD", "EUR", "GBP"})
"""Currencies the payment service accepts."""

MAX_PORT = 65535
"""Highest TCP port."""

_CENTS = Decimal("0.01")
_MAX_AMOUNT = Decimal("1000000000000")
_ModelT = TypeVar("_ModelT", bound=BaseModel)


def _money(amount: Decimal) -> str:
    return str(amount.quantize(_CENTS))


def _error(error: str, *, permanent: bool, **details: Any) -> dict[str, Any]:
    return {"error": error, "permanent": permanent, **details}


class RefundPolicy(BaseModel):
    """The payment service's cancellation fee. JSON: ``{"fee": "2.50", "fee_after_s": 60.0}``.

    The policy in force when a refund is made applies, to charges made before it was set too.

    Attributes:
        fee: Amount kept (charge currency, at most 2 dp, >= 0) when a charge is refunded more than
            ``fee_after_s`` seconds after it was made; 0 (the default) keeps no fee. The fee is kept
            at most once per charge in total and never exceeds what is refunded.
        fee_after_s: Free-cancellation window (seconds, >= 0): refunds at most this long after the
            charge are in full.

    Raises:
        pydantic.ValidationError: A negative or non-finite fee, more than 2 dp, a negative window.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    fee: Decimal = Field(default=Decimal("0.00"), ge=0, lt=_MAX_AMOUNT, allow_inf_nan=False)
    fee_after_s: float = Field(default=0.0, ge=0.0, allow_inf_nan=False)

    @field_validator("fee")
    @classmethod
    def _cents(cls, value: Decimal) -> Decimal:
        if value != value.quantize(_CENTS):
            raise ValueError("fee has more than 2 decimal places")
        return value.quantize(_CENTS)

    def fee_due(self, age_s: float, kept: Decimal, requested: Decimal) -> Decimal:
        """The fee a refund of ``requested`` keeps.

        Args:
            age_s: Seconds since the charge was made.
            kept: Fee already kept on the charge by earlier refunds.
            requested: The amount the refund would return without a fee.

        Returns:
            0 within the window; else what is still owed of the fee (``fee - kept``), at most
            ``requested`` and never below 0.
        """
        if self.fee <= 0 or age_s <= self.fee_after_s:
            return Decimal("0.00")
        return max(Decimal("0.00"), min(self.fee - kept, requested))


# --- request bodies -------------------------------------------------------


class _Body(BaseModel):
    # Unknown fields are ignored (clients may send more), SKUs and ids may arrive as numbers.
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", coerce_numbers_to_str=True
    )


class _Item(_Body):
    sku: str = Field(min_length=1)
    quantity: int = Field(gt=0)


class _ReservationIn(_Body):
    order_id: str = Field(min_length=1)
    items: list[_Item] = Field(min_length=1)


def _valid_amount(value: Decimal) -> Decimal:
    """``value`` rounded to cents; ValueError unless positive, below the maximum and with at most 2 dp."""
    if not value.is_finite() or value <= 0 or value >= _MAX_AMOUNT:
        raise ValueError(f"amount must be a positive number below {_MAX_AMOUNT}")
    exponent = value.as_tuple().exponent
    if isinstance(exponent, int) and exponent < -2 and value != value.quantize(_CENTS):
        raise ValueError("amount has more than 2 decimal places")
    return value.quantize(_CENTS)


class _Amount(_Body):
    amount: Decimal

    @field_validator("amount")
    @classmethod
    def _two_decimals(cls, value: Decimal) -> Decimal:
        return _valid_amount(value)


class _ChargeIn(_Amount):
    order_id: str = Field(min_length=1)
    customer_id: str = Field(min_length=1)
    currency: str = Field(min_length=1)


class _RefundIn(_Amount):
    pass


class _ShipmentIn(_Body):
    order_id: str = Field(min_length=1)
    carrier: str = Field(min_length=1)
    items: list[_Item] = Field(min_length=1)


class _EmptyIn(_Body):
    pass


class _UndoByKeyIn(_Body):
    """``{"orderId", "forwardKey"}``; the forward key must be one of the order's step keys."""

    order_id: str = Field(min_length=1)
    forward_key: str = Field(min_length=1)

    @model_validator(mode="after")
    def _key_of_the_order(self) -> Self:
        if not self.forward_key.startswith(f"{self.order_id}:"):
            raise ValueError("forwardKey must be a step key of the order: '{orderId}:{step}'")
        return self

    def effect_id(self) -> str | None:
        """The effect id the caller believes the forward call made, if it says (a consistency check)."""
        return None


class _ReleaseByKeyIn(_UndoByKeyIn):
    reservation_id: str | None = None

    def effect_id(self) -> str | None:
        return self.reservation_id


class _RefundByKeyIn(_UndoByKeyIn):
    charge_id: str | None = None
    amount: Decimal | None = None

    @field_validator("amount")
    @classmethod
    def _two_decimals(cls, value: Decimal | None) -> Decimal | None:
        return None if value is None else _valid_amount(value)

    def effect_id(self) -> str | None:
        return self.charge_id


class _CancelByKeyIn(_UndoByKeyIn):
    shipment_id: str | None = None

    def effect_id(self) -> str | None:
        return self.shipment_id


# --- state ----------------------------------------------------------------


@dataclass
class _Outcome:
    """What one executed request did: the response, the number of real state changes, and whether the
    response is stored for replay (False: the key is freed and a retry runs again)."""

    status: int
    body: dict[str, Any]
    effects: int = 0
    store: bool = True


@dataclass
class _Stored:
    fingerprint: str
    started_at: float
    endpoint: str
    outcome: _Outcome | None = None  # None while the first request is in flight


@dataclass
class _Tombstone:
    """A forward key made unusable by an undo-by-key call that found no effect to undo."""

    forward_key: str
    order_id: str
    undo_key: str
    reason: str  # "never_applied" (no stored entry) or "refused" (stored outcome without effect)

    def to_json(self) -> dict[str, Any]:
        return {
            "forwardKey": self.forward_key,
            "orderId": self.order_id,
            "undoKey": self.undo_key,
            "reason": self.reason,
        }


@dataclass
class _KeyAudit:
    endpoint: str
    undo: bool = False
    order_id: str | None = None
    calls: int = 0
    effects: int = 0
    refused_after_undo: int = 0  # forward calls refused because an undo tombstoned the key
    faults: list[dict[str, Any]] = field(default_factory=list)
    status: int | None = None
    first_at: float = 0.0
    last_at: float = 0.0
    received: list[dict[str, str | None]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint,
            "undo": self.undo,
            "orderId": self.order_id,
            "calls": self.calls,
            "effects": self.effects,
            "refusedAfterUndo": self.refused_after_undo,
            "faults": list(self.faults),
            "status": self.status,
            "firstAt": self.first_at,
            "lastAt": self.last_at,
            "received": list(self.received),
        }


@dataclass
class _Reservation:
    reservation_id: str
    order_id: str
    items: dict[str, int]
    key: str
    released: bool = False


@dataclass
class _Charge:
    charge_id: str
    order_id: str
    customer_id: str
    amount: Decimal
    currency: str
    key: str
    charged_at: float  # the app's monotonic clock (seconds)
    refunded: Decimal = Decimal("0.00")  # returned to the customer
    fee_kept: Decimal = Decimal("0.00")  # kept by the cancellation fee; no longer refundable

    def refundable(self) -> Decimal:
        return self.amount - self.refunded - self.fee_kept


@dataclass
class _Refund:
    refund_id: str
    charge_id: str
    amount: Decimal  # returned to the customer
    key: str
    fee_kept: Decimal = Decimal("0.00")


@dataclass
class _Shipment:
    shipment_id: str
    order_id: str
    carrier: str
    items: list[dict[str, Any]]
    key: str
    cancelled: bool = False


@dataclass
class _OrderFacts:
    reservations: list[str] = field(default_factory=list)
    charges: list[str] = field(default_factory=list)
    refunds: list[str] = field(default_factory=list)
    shipments: list[str] = field(default_factory=list)
    declines: list[dict[str, Any]] = field(default_factory=list)
    tombstones: list[str] = field(default_factory=list)  # forward keys
    undone: int = 0  # undo-by-key calls that undid an effect


class _State:
    """Everything the three services know. Methods named ``do_*`` run under the app's lock."""

    def __init__(
        self, catalog: Catalog, faults: FaultPlan, clock: Callable[[], float], refund_policy: RefundPolicy
    ) -> None:
        self.faults = faults
        self.refund_policy = refund_policy
        self.clock = clock
        self.initial_stock = {str(part): units for part, units in catalog.stock.items()}
        self.stock = dict(self.initial_stock)  # a copy: the catalog is shared and stays untouched
        self.balances = dict(catalog.balances)
        self.reservations: dict[str, _Reservation] = {}
        self.charges: dict[str, _Charge] = {}
        self.refunds: dict[str, _Refund] = {}
        self.shipments: dict[str, _Shipment] = {}
        self.orders: dict[str, _OrderFacts] = {}
        self.stored: dict[str, _Stored] = {}
        self.tombstones: dict[str, _Tombstone] = {}
        self.audit: dict[str, _KeyAudit] = {}

    def facts(self, order_id: str) -> _OrderFacts:
        return self.orders.setdefault(order_id, _OrderFacts())

    # Inventory.

    def do_reserve(self, body: _ReservationIn, key: str) -> _Outcome:
        wanted: dict[str, int] = {}
        for item in body.items:
            wanted[item.sku] = wanted.get(item.sku, 0) + item.quantity
        for sku, requested in wanted.items():
            available = self.stock.get(sku, 0)
            if available < requested:
                decline = _error(
                    "out_of_stock", permanent=True, sku=sku, requested=requested, available=available
                )
                self.facts(body.order_id).declines.append({**decline, "idempotencyKey": key})
                logger.info("order %s out of stock: sku %s %s > %s", body.order_id, sku, requested, available)
                return _Outcome(409, decline)
        for sku, requested in wanted.items():
            self.stock[sku] -= requested  # relative: concurrent reservations compose
        reservation = _Reservation(f"res_{uuid.uuid4().hex[:16]}", body.order_id, wanted, key)
        self.reservations[reservation.reservation_id] = reservation
        self.facts(body.order_id).reservations.append(reservation.reservation_id)
        items = [{"sku": item.sku, "quantity": item.quantity} for item in body.items]
        return _Outcome(
            201,
            {"reservationId": reservation.reservation_id, "orderId": body.order_id, "items": items},
            effects=1,
        )

    def do_release(self, reservation_id: str) -> _Outcome:
        reservation = self.reservations.get(reservation_id)
        if reservation is None:
            return _Outcome(404, _error("not_found", permanent=True, reservationId=reservation_id))
        body = {"reservationId": reservation_id, "orderId": reservation.order_id, "released": True}
        if reservation.released:
            return _Outcome(200, {**body, "alreadyReleased": True})
        for sku, quantity in reservation.items.items():
            self.stock[sku] = self.stock.get(sku, 0) + quantity  # relative, never a reset
        reservation.released = True
        return _Outcome(200, {**body, "alreadyReleased": False}, effects=1)

    # Payments.

    def do_charge(self, body: _ChargeIn, key: str) -> _Outcome:
        if body.currency not in CURRENCIES:
            return _Outcome(
                422,
                _error(
                    "unsupported_currency",
                    permanent=True,
                    currency=body.currency,
                    supported=sorted(CURRENCIES),
                ),
            )
        balance = self.balances.get(int(body.customer_id)) if body.customer_id.isdigit() else None
        # Customers unknown to the catalog are charged: only a known negative balance declines.
        if balance is not None and balance < 0:
            decline = _error("card_declined", permanent=True, declineCode="insufficient_funds")
            self.facts(body.order_id).declines.append(
                {**decline, "customerId": body.customer_id, "balance": _money(balance), "idempotencyKey": key}
            )
            logger.info("order %s card declined: customer %s", body.order_id, body.customer_id)
            return _Outcome(402, decline)
        charge = _Charge(
            f"ch_{uuid.uuid4().hex[:16]}",
            body.order_id,
            body.customer_id,
            body.amount,
            body.currency,
            key,
            charged_at=self.clock(),
        )
        self.charges[charge.charge_id] = charge
        self.facts(body.order_id).charges.append(charge.charge_id)
        return _Outcome(
            201,
            {
                "chargeId": charge.charge_id,
                "orderId": body.order_id,
                "amount": _money(charge.amount),
                "currency": charge.currency,
            },
            effects=1,
        )

    def do_refund(self, charge_id: str, body: _RefundIn, key: str) -> _Outcome:
        """Refund ``body.amount`` of the charge, less the cancellation fee still due (see RefundPolicy).

        Returns:
            200 ``{"refundId", "chargeId", "amount", "feeKept", "refundedTotal"}`` (``amount`` is what
            was returned, ``body.amount - feeKept``); 404 ``not_found``; 422 ``refund_exceeds_charge``
            when ``body.amount`` is more than the charge less earlier refunds and fees kept.
        """
        charge = self.charges.get(charge_id)
        if charge is None:
            return _Outcome(404, _error("not_found", permanent=True, chargeId=charge_id))
        refundable = charge.refundable()
        if body.amount > refundable:
            return _Outcome(
                422,
                _error(
                    "refund_exceeds_charge",
                    permanent=True,
                    chargeId=charge_id,
                    requested=_money(body.amount),
                    refundable=_money(refundable),
                ),
            )
        age = self.clock() - charge.charged_at
        fee = self.refund_policy.fee_due(age, charge.fee_kept, body.amount)
        refund = _Refund(f"re_{uuid.uuid4().hex[:16]}", charge_id, body.amount - fee, key, fee_kept=fee)
        self.refunds[refund.refund_id] = refund
        charge.refunded += refund.amount
        charge.fee_kept += fee
        self.facts(charge.order_id).refunds.append(refund.refund_id)
        if fee:
            logger.info("refund of charge %s after %.3f s keeps a fee of %s", charge_id, age, _money(fee))
        return _Outcome(
            200,
            {
                "refundId": refund.refund_id,
                "chargeId": charge_id,
                "amount": _money(refund.amount),
                "feeKept": _money(fee),
                "refundedTotal": _money(charge.refunded),
            },
            effects=1,
        )

    # Shipping.

    def do_ship(self, body: _ShipmentIn, key: str) -> _Outcome:
        if body.carrier not in SHIP_MODES:
            return _Outcome(
                422,
                _error("unknown_carrier", permanent=True, carrier=body.carrier, supported=sorted(SHIP_MODES)),
            )
        items = [{"sku": item.sku, "quantity": item.quantity} for item in body.items]
        shipment = _Shipment(f"shp_{uuid.uuid4().hex[:16]}", body.order_id, body.carrier, items, key)
        self.shipments[shipment.shipment_id] = shipment
        self.facts(body.order_id).shipments.append(shipment.shipment_id)
        return _Outcome(
            201,
            {"shipmentId": shipment.shipment_id, "orderId": body.order_id, "carrier": shipment.carrier},
            effects=1,
        )

    def do_cancel(self, shipment_id: str) -> _Outcome:
        shipment = self.shipments.get(shipment_id)
        if shipment is None:
            return _Outcome(404, _error("not_found", permanent=True, shipmentId=shipment_id))
        body = {"shipmentId": shipment_id, "orderId": shipment.order_id, "cancelled": True}
        if shipment.cancelled:
            return _Outcome(200, {**body, "alreadyCancelled": True})
        shipment.cancelled = True
        return _Outcome(200, {**body, "alreadyCancelled": False}, effects=1)

    # Undo by the forward call's idempotency key.

    def undo_by_key(
        self,
        body: _UndoByKeyIn,
        key: str,
        *,
        forward_endpoint: str,
        id_field: str,
        undo: Callable[[str], _Outcome],
    ) -> _Outcome:
        """Undo whatever the forward call keyed ``body.forward_key`` did, or tombstone that key.

        Args:
            body: The undo request.
            key: The undo call's own idempotency key.
            forward_endpoint: The only endpoint whose keys this undo addresses (``inventory.reserve`` ...).
            id_field: The effect id in the forward call's stored 2xx body (``reservationId`` ...).
            undo: Undoes the effect with that id; its outcome is the answer.

        Returns:
            ``undo``'s outcome (200 ``{"undone": true, ...}``) when the forward call applied an effect;
            200 ``{"undone": false, "forwardKey", "orderId", "reason"}`` with a tombstone written when it
            never arrived (``never_applied``) or was refused (``refused``); 409 ``request_in_progress``
            (``permanent: false``, not stored) while it is in flight; 422 ``forward_key_mismatch`` when
            the key belongs to another endpoint, 422 ``effect_mismatch`` when the body names another
            effect id than the key's (both permanent, nothing undone).
        """
        forward_key = body.forward_key
        stored = self.stored.get(forward_key)
        if stored is not None and stored.endpoint != forward_endpoint:
            mismatch = _error(
                "forward_key_mismatch",
                permanent=True,
                forwardKey=forward_key,
                endpoint=stored.endpoint,
                expected=forward_endpoint,
            )
            return _Outcome(422, mismatch)
        if stored is not None and stored.outcome is None:
            # The effect may still be applied: undoing now would race it. Not stored: a retry decides again.
            age = round(self.clock() - stored.started_at, 3)
            busy = _error("request_in_progress", permanent=False, forwardKey=forward_key, inFlightForS=age)
            return _Outcome(409, busy, store=False)
        if stored is not None and stored.outcome is not None and 200 <= stored.outcome.status < 300:
            effect_id = str(stored.outcome.body[id_field])
            claimed = body.effect_id()
            if claimed is not None and claimed != effect_id:
                mismatch = _error(
                    "effect_mismatch",
                    permanent=True,
                    forwardKey=forward_key,
                    sent=claimed,
                    expected=effect_id,
                )
                return _Outcome(422, mismatch)
            outcome = undo(effect_id)
            if outcome.effects:
                self.facts(str(outcome.body.get("orderId", body.order_id))).undone += 1
            return outcome
        tombstone = self.tombstones.get(forward_key)
        if tombstone is None:
            reason = "never_applied" if stored is None else "refused"
            tombstone = _Tombstone(forward_key, body.order_id, key, reason)
            self.tombstones[forward_key] = tombstone
            self.facts(body.order_id).tombstones.append(forward_key)
            logger.info("forward key %s tombstoned by %s (%s)", forward_key, key, reason)
        return _Outcome(
            200,
            {
                "undone": False,
                "forwardKey": forward_key,
                "orderId": body.order_id,
                "reason": tombstone.reason,
            },
        )

    @staticmethod
    def _undone(
        body: _UndoByKeyIn, outcome: _Outcome, id_field: str, effect_id: str, already: str
    ) -> _Outcome:
        """The by-key answer of an undo by id (release, cancel): its effect id and whether it was undone
        before; a refusal passes through."""
        if outcome.status != 200:
            return outcome
        answer = {
            "undone": True,
            "forwardKey": body.forward_key,
            "orderId": outcome.body["orderId"],
            id_field: effect_id,
            "alreadyUndone": outcome.body[already],
        }
        return _Outcome(200, answer, effects=outcome.effects)

    def do_release_by_key(self, body: _ReleaseByKeyIn, key: str) -> _Outcome:
        def release(reservation_id: str) -> _Outcome:
            released = self.do_release(reservation_id)
            return self._undone(body, released, "reservationId", reservation_id, "alreadyReleased")

        return self.undo_by_key(
            body, key, forward_endpoint="inventory.reserve", id_field="reservationId", undo=release
        )

    def do_refund_by_key(self, body: _RefundByKeyIn, key: str) -> _Outcome:
        def refund(charge_id: str) -> _Outcome:
            charge = self.charges[charge_id]
            refundable = charge.refundable()
            # Full refunds only: an amount, if sent, must be the charge's or what is left of it. It is a
            # consistency check: the cancellation fee, when due, still comes off what is refunded.
            if body.amount is not None and body.amount not in (charge.amount, refundable):
                mismatch = _error(
                    "refund_amount_mismatch",
                    permanent=True,
                    chargeId=charge_id,
                    requested=_money(body.amount),
                    charged=_money(charge.amount),
                    refundable=_money(refundable),
                )
                return _Outcome(422, mismatch)
            answer: dict[str, Any] = {
                "undone": True,
                "forwardKey": body.forward_key,
                "orderId": charge.order_id,
                "chargeId": charge_id,
            }
            if refundable <= 0:
                earlier = [r.refund_id for r in self.refunds.values() if r.charge_id == charge_id]
                answer |= {
                    "refundId": earlier[-1],
                    "amount": _money(Decimal("0")),
                    "feeKept": _money(Decimal("0")),
                    "refundedTotal": _money(charge.refunded),
                    "alreadyUndone": True,
                }
                return _Outcome(200, answer)
            refunded = self.do_refund(charge_id, _RefundIn(amount=refundable), key)
            if refunded.status != 200:
                return refunded
            answer |= {
                "refundId": refunded.body["refundId"],
                "amount": refunded.body["amount"],
                "feeKept": refunded.body["feeKept"],
                "refundedTotal": refunded.body["refundedTotal"],
                "alreadyUndone": False,
            }
            return _Outcome(200, answer, effects=refunded.effects)

        return self.undo_by_key(
            body, key, forward_endpoint="payments.charge", id_field="chargeId", undo=refund
        )

    def do_cancel_by_key(self, body: _CancelByKeyIn, key: str) -> _Outcome:
        def cancel(shipment_id: str) -> _Outcome:
            cancelled = self.do_cancel(shipment_id)
            return self._undone(body, cancelled, "shipmentId", shipment_id, "alreadyCancelled")

        return self.undo_by_key(
            body, key, forward_endpoint="shipping.ship", id_field="shipmentId", undo=cancel
        )

    # Reports.

    def order_of(self, endpoint: str, body: BaseModel, target: str | None) -> str | None:
        """The order a request concerns, for the audit."""
        order_id = getattr(body, "order_id", None)
        if isinstance(order_id, str):
            return order_id
        if target is None:
            return None
        for table in (self.reservations, self.charges, self.shipments):
            found = table.get(target)
            if found is not None:
                return found.order_id
        return None

    def audit_json(self) -> dict[str, Any]:
        keys = {key: entry.to_json() for key, entry in self.audit.items()}
        # The same effect made twice under different keys (e.g. two charges for one order) is a duplicate too.
        per_order = 0
        for facts in self.orders.values():
            per_order += max(0, len(facts.reservations) - 1)
            per_order += max(0, len(facts.charges) - 1)
            per_order += max(0, len(facts.shipments) - 1)
        return {
            "keys": keys,
            "duplicate_effects": sum(max(0, entry.effects - 1) for entry in self.audit.values()),
            "calls_per_key_max": max((entry.calls for entry in self.audit.values()), default=0),
            "effects_total": sum(entry.effects for entry in self.audit.values()),
            "calls_total": sum(entry.calls for entry in self.audit.values()),
            "faults_total": sum(len(entry.faults) for entry in self.audit.values()),
            "duplicate_order_effects": per_order,
            "undo_effects_total": sum(entry.effects for entry in self.audit.values() if entry.undo),
            "forward_after_undo": sum(entry.refused_after_undo for entry in self.audit.values()),
            "fees_kept_total": _money(
                sum((charge.fee_kept for charge in self.charges.values()), Decimal("0.00"))
            ),
        }

    def facts_json(self, order_id: str) -> dict[str, Any]:
        facts = self.orders.get(order_id, _OrderFacts())
        reservations = [self.reservations[rid] for rid in facts.reservations]
        charges = [self.charges[cid] for cid in facts.charges]
        shipments = [self.shipments[sid] for sid in facts.shipments]
        net_charged = sum((charge.amount - charge.refunded for charge in charges), Decimal("0.00"))
        fee_kept = sum((charge.fee_kept for charge in charges), Decimal("0.00"))
        return {
            "orderId": order_id,
            "reservations": [
                {
                    "reservationId": r.reservation_id,
                    "items": [{"sku": sku, "quantity": qty} for sku, qty in r.items.items()],
                    "released": r.released,
                    "idempotencyKey": r.key,
                }
                for r in reservations
            ],
            "charges": [
                {
                    "chargeId": c.charge_id,
                    "amount": _money(c.amount),
                    "currency": c.currency,
                    "refunded": _money(c.refunded),
                    "feeKept": _money(c.fee_kept),
                    "idempotencyKey": c.key,
                }
                for c in charges
            ],
            "refunds": [
                {
                    "refundId": refund.refund_id,
                    "chargeId": refund.charge_id,
                    "amount": _money(refund.amount),
                    "feeKept": _money(refund.fee_kept),
                    "idempotencyKey": refund.key,
                }
                for refund in (self.refunds[rid] for rid in facts.refunds)
            ],
            "shipments": [
                {
                    "shipmentId": s.shipment_id,
                    "carrier": s.carrier,
                    "cancelled": s.cancelled,
                    "idempotencyKey": s.key,
                }
                for s in shipments
            ],
            "declines": list(facts.declines),
            "tombstones": [self.tombstones[key].to_json() for key in facts.tombstones],
            "summary": {
                "activeReservations": sum(not r.released for r in reservations),
                "netCharged": _money(net_charged),
                "feeKept": _money(fee_kept),
                "activeShipments": sum(not s.cancelled for s in shipments),
                "declined": facts.declines[-1]["error"] if facts.declines else None,
                "undone": facts.undone,
            },
        }


# --- the app --------------------------------------------------------------


def _respond(status: int, body: Mapping[str, Any], *, replayed: bool = False) -> JSONResponse:
    headers = {REPLAYED_HEADER: "true"} if replayed else None
    return JSONResponse(status_code=status, content=dict(body), headers=headers)


def _fingerprint(endpoint: str, target: str | None, payload: Any) -> str:
    canonical = json.dumps([endpoint, target, payload], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def create_app(
    catalog: Catalog,
    faults: FaultPlan,
    *,
    clock: Callable[[], float] = time.monotonic,
    refund_policy: RefundPolicy | None = None,
) -> FastAPI:
    """Build the inventory, payment and shipping services over one in-memory state.

    Args:
        catalog: Initial stock (copied; the catalog is not modified) and customer balances.
        faults: Initial fault plan; replaceable at runtime with ``PUT /faults``.
        clock: Monotonic clock (seconds) for audit timestamps, in-flight ages and charge ages (the
            cancellation fee's window).
        refund_policy: Initial cancellation fee (default: none); replaceable at runtime with
            ``PUT /refund-policy``.

    Returns:
        The FastAPI app. Endpoints (JSON bodies, amounts as strings with 2 dp):

        * ``POST /inventory/reservations`` ``{"orderId", "items": [{"sku", "quantity"}]}`` -> 201
          ``{"reservationId", "orderId", "items"}``; 409 ``out_of_stock`` (permanent).
        * ``POST /inventory/reservations/{reservationId}/release`` -> 200 (undo).
        * ``POST /payments/charges`` ``{"orderId", "customerId", "amount", "currency"}`` -> 201
          ``{"chargeId", "orderId", "amount", "currency"}``; 402 ``card_declined``;
          422 ``unsupported_currency``.
        * ``POST /payments/charges/{chargeId}/refund`` ``{"amount"}`` -> 200
          ``{"refundId", "chargeId", "amount", "feeKept", "refundedTotal"}`` (undo; partial allowed;
          ``amount`` is what was returned: the amount asked less ``feeKept``, the cancellation fee
          this call kept, ``"0.00"`` within the policy's window or once the charge's fee is kept);
          422 ``refund_exceeds_charge`` (more than the charge less earlier refunds and fees kept).
        * ``POST /shipping/shipments`` ``{"orderId", "carrier", "items"}`` -> 201
          ``{"shipmentId", "orderId", "carrier"}``; 422 ``unknown_carrier``.
        * ``POST /shipping/shipments/{shipmentId}/cancel`` -> 200 (undo).
        * Undo by the forward call's key (``forwardKey`` = ``{orderId}:{step}``, which must start with
          ``orderId:``; other fields such as ids and currency are ignored unless noted):

          * ``POST /inventory/reservations/release`` ``{"orderId", "forwardKey", "reservationId"?}``
            -> 200 ``{"undone": true, "forwardKey", "orderId", "reservationId", "alreadyUndone"}``.
          * ``POST /payments/refunds`` ``{"orderId", "forwardKey", "chargeId"?, "amount"?}`` -> 200
            ``{"undone": true, "forwardKey", "orderId", "chargeId", "refundId", "amount", "feeKept",
            "refundedTotal", "alreadyUndone"}``: refunds all that is left of the charge, less the
            cancellation fee when due (``amount`` is what this call refunded and ``feeKept`` what it
            kept, both ``"0.00"`` when already undone, then ``refundId`` is the last earlier refund);
            an ``amount`` sent must equal the charge's or the refundable rest, else 422
            ``refund_amount_mismatch``: a consistency check, the fee still applies.
          * ``POST /shipping/shipments/cancel`` ``{"orderId", "forwardKey", "shipmentId"?}`` -> 200
            ``{"undone": true, "forwardKey", "orderId", "shipmentId", "alreadyUndone"}``.

          When the forward key has no effect: 200 ``{"undone": false, "forwardKey", "orderId",
          "reason": "never_applied" | "refused"}`` and the key is tombstoned: later forward calls with
          it answer 409 ``cancelled`` (permanent) and apply nothing. While the forward call is in
          flight: 409 ``request_in_progress`` (``permanent: false``, not stored). 422
          ``forward_key_mismatch`` (the key is another endpoint's) and ``effect_mismatch`` (the id sent
          is not the key's effect), permanent.
        * Every undo endpoint answers 503 ``unavailable`` (transient) or 422 ``undo_refused``
          (permanent) when the fault plan's ``undo_transient_failures`` / ``undo_permanent`` say so.
        * ``GET /audit`` (``effects_total``, ``undo_effects_total``, ``forward_after_undo``,
          ``fees_kept_total`` (string, 2 dp), per key ``refusedAfterUndo`` ...), ``GET /audit/{key}``,
          ``GET /orders/{orderId}/facts`` (charges and refunds with ``feeKept``; ``summary`` with
          ``activeReservations``, ``netCharged`` (still charged, fees kept included), ``feeKept``,
          ``activeShipments``, ``undone``; ``tombstones``), ``GET /stock/{sku}``, ``GET /healthz``,
          ``GET /faults``, ``PUT /faults`` (a FaultPlan), ``GET /refund-policy``,
          ``PUT /refund-policy`` (a RefundPolicy, ``{"fee": "2.50", "fee_after_s": 60.0}``; applies to
          later refunds of every charge; 422 ``invalid_request`` when invalid).
    """
    state = _State(catalog, faults, clock, refund_policy or RefundPolicy())
    lock = asyncio.Lock()
    app = FastAPI(title="orderflow demo services", version="1")

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        return _respond(422, _error("invalid_request", permanent=True, detail=_jsonable_errors(exc.errors())))

    async def mutate(
        request: Request,
        endpoint: str,
        model: type[_ModelT],
        execute: Callable[[_ModelT, str], _Outcome],
        *,
        target: str | None = None,
        undo: bool = False,
    ) -> JSONResponse:
        key = request.headers.get(IDEMPOTENCY_HEADER, "").strip()
        if not key:
            return _respond(
                400, _error("idempotency_key_required", permanent=True, header=IDEMPOTENCY_HEADER)
            )

        async with lock:
            audit = state.audit.setdefault(key, _KeyAudit(endpoint=endpoint, undo=undo, first_at=clock()))
            audit.calls += 1
            audit.last_at = clock()
            # Wall-clock UTC arrival, comparable with the state store's claimedAt/endedAt times.
            arrived = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            received = {"at": arrived, "instance": request.headers.get(INSTANCE_HEADER)}
            if TRACEPARENT_HEADER in request.headers:  # the caller's span, when it traces
                received["traceparent"] = request.headers[TRACEPARENT_HEADER]
            audit.received.append(received)
            call = audit.calls
            fault = state.faults.decide(key, call, undo=undo, service=endpoint.split(".", 1)[0])
            plan = state.faults
            if fault is not None:
                audit.faults.append({"call": call, "kind": fault.value})
                logger.info("injecting %s into %s call %s of key %s", fault.value, endpoint, call, key)

        def answer(status: int, body: Mapping[str, Any], *, replayed: bool = False) -> JSONResponse:
            audit.status = status
            return _respond(status, body, replayed=replayed)

        if fault is FaultKind.UNDO_REFUSED:
            return answer(422, _error("undo_refused", permanent=True))
        if fault is FaultKind.TRANSIENT:
            return answer(503, _error("unavailable", permanent=False))
        if fault is FaultKind.LATENCY:
            await asyncio.sleep(plan.latency_s)

        raw = await request.body()
        try:
            payload: Any = json.loads(raw) if raw.strip() else {}
            body = model.model_validate(payload)
        except (ValueError, ValidationError) as exc:
            detail = _jsonable_errors(exc.errors()) if isinstance(exc, ValidationError) else str(exc)
            return answer(422, _error("invalid_request", permanent=True, detail=detail))

        fingerprint = _fingerprint(endpoint, target, payload)
        async with lock:
            audit.order_id = audit.order_id or state.order_of(endpoint, body, target)
            stored = state.stored.get(key)
            # A tombstone and a stored entry are both only ever created under this lock, each after
            # checking for the other: a forward call either became in flight before the undo looked
            # (the undo answers request_in_progress) or finds the tombstone here and applies nothing.
            tombstone = None if undo else state.tombstones.get(key)
            if tombstone is not None:
                audit.refused_after_undo += 1
            elif stored is None:
                state.stored[key] = _Stored(fingerprint=fingerprint, started_at=clock(), endpoint=endpoint)
        if tombstone is not None:
            logger.info(
                "refusing %s call %s of key %s: undone by %s", endpoint, call, key, tombstone.undo_key
            )
            return answer(409, _error("cancelled", permanent=True, key=key, undoKey=tombstone.undo_key))
        if stored is not None:
            if stored.fingerprint != fingerprint:
                return answer(422, _error("idempotency_key_reuse", permanent=True, key=key))
            if stored.outcome is None:
                age = round(clock() - stored.started_at, 3)
                return answer(409, _error("request_in_progress", permanent=False, key=key, inFlightForS=age))
            if fault is FaultKind.HANG:
                await asyncio.sleep(plan.hang_s)
            if fault is FaultKind.LOST_RESPONSE:
                return answer(500, _error("connection_reset", permanent=False))
            return answer(stored.outcome.status, stored.outcome.body, replayed=True)

        outcome: _Outcome | None = None
        try:
            if fault is FaultKind.HANG:
                # A slow service finishes its work after the client has given up.
                await asyncio.sleep(plan.hang_s)
            async with lock:
                outcome = execute(body, key)
                audit.effects += outcome.effects
                audit.order_id = audit.order_id or state.order_of(endpoint, body, target)
                if outcome.store:
                    state.stored[key].outcome = outcome
                else:
                    del state.stored[key]
        finally:
            if outcome is None:
                # Cancelled before the effect (server shutdown): let a retry run it.
                state.stored.pop(key, None)
        if fault is FaultKind.LOST_RESPONSE:
            return answer(500, _error("connection_reset", permanent=False))
        return answer(outcome.status, outcome.body)

    @app.post("/inventory/reservations", status_code=201)
    async def reserve(request: Request) -> JSONResponse:
        return await mutate(request, "inventory.reserve", _ReservationIn, state.do_reserve)

    @app.post("/inventory/reservations/{reservation_id}/release")
    async def release(request: Request, reservation_id: str) -> JSONResponse:
        return await mutate(
            request,
            "inventory.release",
            _EmptyIn,
            lambda _body, _key: state.do_release(reservation_id),
            target=reservation_id,
            undo=True,
        )

    @app.post("/payments/charges", status_code=201)
    async def charge(request: Request) -> JSONResponse:
        return await mutate(request, "payments.charge", _ChargeIn, state.do_charge)

    @app.post("/payments/charges/{charge_id}/refund")
    async def refund(request: Request, charge_id: str) -> JSONResponse:
        return await mutate(
            request,
            "payments.refund",
            _RefundIn,
            lambda body, key: state.do_refund(charge_id, body, key),
            target=charge_id,
            undo=True,
        )

    @app.post("/shipping/shipments", status_code=201)
    async def ship(request: Request) -> JSONResponse:
        return await mutate(request, "shipping.ship", _ShipmentIn, state.do_ship)

    @app.post("/shipping/shipments/{shipment_id}/cancel")
    async def cancel(request: Request, shipment_id: str) -> JSONResponse:
        return await mutate(
            request,
            "shipping.cancel",
            _EmptyIn,
            lambda _body, _key: state.do_cancel(shipment_id),
            target=shipment_id,
            undo=True,
        )

    @app.post("/inventory/reservations/release")
    async def release_by_key(request: Request) -> JSONResponse:
        return await mutate(
            request, "inventory.release_by_key", _ReleaseByKeyIn, state.do_release_by_key, undo=True
        )

    @app.post("/payments/refunds")
    async def refund_by_key(request: Request) -> JSONResponse:
        return await mutate(
            request, "payments.refund_by_key", _RefundByKeyIn, state.do_refund_by_key, undo=True
        )

    @app.post("/shipping/shipments/cancel")
    async def cancel_by_key(request: Request) -> JSONResponse:
        return await mutate(
            request, "shipping.cancel_by_key", _CancelByKeyIn, state.do_cancel_by_key, undo=True
        )

    @app.get("/audit")
    async def audit() -> dict[str, Any]:
        async with lock:
            return state.audit_json()

    @app.get("/audit/{key:path}")
    async def audit_key(key: str) -> JSONResponse:
        async with lock:
            entry = state.audit.get(key)
            if entry is None:
                return _respond(404, _error("not_found", permanent=True, key=key))
            return _respond(200, {"key": key, **entry.to_json()})

    @app.get("/orders/{order_id}/facts")
    async def order_facts(order_id: str) -> dict[str, Any]:
        async with lock:
            return state.facts_json(order_id)

    @app.get("/stock/{sku}")
    async def stock(sku: str) -> JSONResponse:
        async with lock:
            if sku not in state.stock:
                return _respond(404, _error("not_found", permanent=True, sku=sku))
            return _respond(
                200, {"sku": sku, "available": state.stock[sku], "initial": state.initial_stock[sku]}
            )

    @app.get("/healthz")
    async def healthz() -> dict[str, Any]:
        return {"status": "ok", "skus": len(state.stock), "customers": len(state.balances)}

    @app.get("/faults")
    async def get_faults() -> dict[str, Any]:
        return state.faults.model_dump()

    @app.put("/faults")
    async def put_faults(plan: FaultPlan) -> dict[str, Any]:
        async with lock:
            state.faults = plan
        logger.info("fault plan replaced: %s", plan.model_dump_json())
        return plan.model_dump()

    @app.get("/refund-policy")
    async def get_refund_policy() -> dict[str, Any]:
        return state.refund_policy.model_dump(mode="json")

    @app.put("/refund-policy")
    async def put_refund_policy(policy: RefundPolicy) -> dict[str, Any]:
        async with lock:
            state.refund_policy = policy
        logger.info("refund policy replaced: %s", policy.model_dump_json())
        return policy.model_dump(mode="json")

    return app


def _jsonable_errors(errors: Sequence[Any]) -> list[dict[str, Any]]:
    """Reduce pydantic error entries to JSON-safe ``{"loc", "msg", "type"}`` dicts."""
    return [
        {
            "loc": [str(part) for part in error.get("loc", ())],
            "msg": str(error.get("msg")),
            "type": error.get("type"),
        }
        for error in errors
    ]


# --- running it -----------------------------------------------------------


def server_url(server: uvicorn.Server) -> str:
    """The ``http://host:port`` a started server listens on (the real port when started with port 0)."""
    host, port = server.servers[0].sockets[0].getsockname()[:2]
    return f"http://{host}:{port}"


def serve_in_thread(
    app: FastAPI, host: str = "127.0.0.1", port: int = 0, *, startup_timeout_s: float = 10.0
) -> tuple[uvicorn.Server, threading.Thread]:
    """Start ``app`` on a uvicorn server in a daemon thread and wait until it accepts connections.

    Args:
        app: The ASGI app, usually from :func:`create_app`.
        host: Interface to bind.
        port: TCP port; 0 picks a free one (read it back with :func:`server_url`).
        startup_timeout_s: How long to wait for the server to start (seconds).

    Returns:
        ``(server, thread)``; pass both to :func:`stop`.

    Raises:
        RuntimeError: The server did not start in time or exited during start-up (e.g. port in use).
    """
    # Requests still running at shutdown (a hang fault) are cancelled after one second.
    config = uvicorn.Config(
        app, host=host, port=port, log_level="warning", workers=1, lifespan="off", timeout_graceful_shutdown=1
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=f"demo-services-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout_s
    while not server.started:
        if not thread.is_alive():
            raise RuntimeError(f"demo services failed to start on {host}:{port}")
        if time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"demo services did not start on {host}:{port} within {startup_timeout_s} s")
        time.sleep(0.01)
    return server, thread


def stop(server: uvicorn.Server, thread: threading.Thread, *, timeout_s: float = 10.0) -> None:
    """Shut down a server started by :func:`serve_in_thread` and join its thread.

    Args:
        server: The server.
        thread: Its thread.
        timeout_s: How long to wait for a graceful exit before forcing it (seconds).
    """
    server.should_exit = True
    thread.join(timeout_s)
    if thread.is_alive():
        server.force_exit = True
        thread.join(timeout_s)
    if thread.is_alive():
        logger.warning("demo services thread %s did not stop within %s s", thread.name, 2 * timeout_s)


async def _serve_until_stopped(server: uvicorn.Server, sock: socket.socket) -> None:
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            await task  # start-up failed: let its exception out
            return
        await asyncio.sleep(0.01)
    print(f"demo services listening on {server_url(server)}", flush=True)
    await task


@dataclass(frozen=True)
class ServiceOptions:
    """The command line of ``python -m demo.services``, parsed and validated by :func:`parse_args`."""

    host: str
    port: int
    data_dir: Path
    scale: float
    orders: int  # 0 = all
    stock_divisor: int
    faults: FaultPlan
    refund_policy: RefundPolicy
    log_level: str


def listen_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` and listening, for uvicorn to serve on.

    Bound here rather than by uvicorn, whose failure to bind ends in a traceback and exit status 3.

    Raises:
        OSError: the address cannot be bound (the port is taken, the host is not this machine's, or the
            port needs privileges).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family, backlog=2048)


def parse_args(argv: Sequence[str] | None = None) -> ServiceOptions:
    """Parse the command line of ``python -m demo.services``.

    Flags: ``--host``, ``--port``, ``--data-dir``, ``--scale``, ``--orders``, ``--stock-divisor``,
    ``--faults JSON`` (a FaultPlan), ``--cancellation-fee AMOUNT`` (the RefundPolicy's ``fee``, e.g.
    ``2.50``; default 0 = no fee), ``--fee-after-s SECONDS`` (its ``fee_after_s``; default 0),
    ``--log-level``.

    Args:
        argv: The arguments without the program name; None reads ``sys.argv``.

    Raises:
        SystemExit: Status 2 with a message on stderr for an unknown flag or an invalid value (e.g. a
            malformed ``--faults``, a negative ``--cancellation-fee`` or a ``--port`` above 65535);
            status 0 after ``--help``.
    """
    parser = argparse.ArgumentParser(
        prog="python -m demo.services", description="Run the demo inventory, payment and shipping services."
    )
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8082, help="TCP port; 0 picks a free one (default 8082)")
    parser.add_argument("--data-dir", type=Path, default=Path(".data/tpch"), help="TPC-H CSV directory")
    parser.add_argument("--scale", type=float, default=DEFAULT_SCALE, help="TPC-H scale factor if generating")
    parser.add_argument("--orders", type=int, default=DEFAULT_DEMO_ORDERS, help="orders to load (0 = all)")
    parser.add_argument("--stock-divisor", type=int, default=DEFAULT_STOCK_DIVISOR)
    parser.add_argument("--faults", default="{}", help="FaultPlan as JSON, e.g. '{\"transient_rate\": 0.1}'")
    parser.add_argument(
        "--cancellation-fee",
        default="0",
        metavar="AMOUNT",
        help="fee kept when a charge is refunded after --fee-after-s, e.g. 2.50 (default 0: no fee)",
    )
    parser.add_argument(
        "--fee-after-s",
        default="0",
        metavar="SECONDS",
        help="free-cancellation window after a charge, in seconds (default 0)",
    )
    parser.add_argument("--log-level", default="WARNING", help="level of the demo's own loggers")
    args = parser.parse_args(argv)

    if not 0 <= args.port <= MAX_PORT:
        parser.error(f"--port must be 0 (a free port) to {MAX_PORT}, not {args.port}")
    if args.orders < 0:
        parser.error(f"--orders must be 0 (all) or more, not {args.orders}")
    if args.stock_divisor < 1:
        parser.error(f"--stock-divisor must be at least 1, not {args.stock_divisor}")
    try:
        plan = FaultPlan.model_validate_json(args.faults)
    except ValidationError as exc:
        parser.error(f"--faults: {exc}")
    try:
        policy = RefundPolicy.model_validate({"fee": args.cancellation_fee, "fee_after_s": args.fee_after_s})
    except ValidationError as exc:
        parser.error(f"--cancellation-fee / --fee-after-s: {exc}")
    return ServiceOptions(
        host=args.host,
        port=args.port,
        data_dir=args.data_dir,
        scale=args.scale,
        orders=args.orders,
        stock_divisor=args.stock_divisor,
        faults=plan,
        refund_policy=policy,
        log_level=args.log_level,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo services from the command line (flags: :func:`parse_args`); returns the exit status.

    Example: ``python -m demo.services --port 8082 --orders 200 --faults '{"transient_rate": 0.1}'
    --cancellation-fee 2.50 --fee-after-s 60``.
    Prints ``demo services listening on http://HOST:PORT`` once ready; stops on SIGINT/SIGTERM.

    Returns:
        0 once stopped; 1, after one line on stderr, when the address cannot be bound (e.g. the port is
        taken) or the TPC-H data cannot be read or generated.
    """
    options = parse_args(argv)
    logging.basicConfig(
        level=options.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    prog = "python -m demo.services"
    try:
        # Bound before the data loads: a taken port is reported at once.
        sock = listen_socket(options.host, options.port)
    except OSError as exc:
        # socket.create_server's own message repeats the address.
        reason = os.strerror(exc.errno) if exc.errno else exc
        print(f"{prog}: error: cannot listen on {options.host}:{options.port}: {reason}", file=sys.stderr)
        return 1
    with sock:
        try:
            data_dir = ensure_dataset(options.data_dir, options.scale)
            catalog = load_catalog(
                data_dir, orders=options.orders or None, stock_divisor=options.stock_divisor
            )
        except (OSError, RuntimeError) as exc:  # tpchgen-cli missing or failed, a table unreadable
            print(f"{prog}: error: {' '.join(str(exc).split())[:300]}", file=sys.stderr)
            return 1
        app = create_app(catalog, options.faults, refund_policy=options.refund_policy)
        config = uvicorn.Config(
            app, host=options.host, port=options.port, log_level="warning", workers=1, lifespan="off"
        )
        with contextlib.suppress(KeyboardInterrupt):  # uvicorn re-raises the SIGINT it handled
            asyncio.run(_serve_until_stopped(uvicorn.Server(config), sock))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
