"""The demo payment service's authorisations: amounts held on a card for a while, captured as charges.

An authorisation holds an amount for ``holdS`` seconds on the service's own clock; ``capture`` turns it
into a charge before then, else it expires (voided by the service). A capture of an expired authorisation
is refused for good (409 ``hold_expired``); a void of one answers that it was already undone; a void of a
captured one refunds the charge. An authorisation naming ``replacesKey`` re-acquires a hold: the live
authorisation made under that key is voided first.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import Field

from demo.services.common import Body, Outcome, UndoByKeyIn, error, money
from demo.services.idempotency import IdempotentCalls
from demo.services.payments import ChargeIn, Payments, RefundByKeyIn

logger = logging.getLogger("demo.services")


class AuthorizeIn(ChargeIn):
    """``{"orderId", "customerId", "amount", "currency", "holdS", "replacesKey"?}``."""

    hold_s: float = Field(gt=0, le=86_400)
    replaces_key: str | None = None


class CaptureIn(Body):
    """``{"orderId", "holdId"}``: capture an authorisation."""

    order_id: str = Field(min_length=1)
    hold_id: str = Field(min_length=1)


class VoidByKeyIn(UndoByKeyIn):
    """``{"orderId", "forwardKey", "authorizationId"?}``."""

    authorization_id: str | None = None

    def effect_id(self) -> str | None:
        return self.authorization_id


@dataclass
class Authorization:
    """An amount held on a customer's card until ``expires_after`` (the ledger's clock), then voided."""

    authorization_id: str
    order_id: str
    customer_id: str
    amount: Decimal
    currency: str
    key: str
    expires_at: datetime
    expires_after: float
    charge_id: str | None = None  # once captured
    voided: bool = False
    expired: bool = False

    def held(self) -> bool:
        """Still holding the amount: neither captured, voided nor expired."""
        return self.charge_id is None and not self.voided


class Authorizations:
    """The payment service's authorisations, over its charges and refunds. ``do_*`` run under the app's
    lock."""

    def __init__(self, payments: Payments) -> None:
        self.payments = payments
        self.held: dict[str, Authorization] = {}

    def expire_holds(self) -> None:
        """Void every authorisation whose expiry has passed on the service's clock."""
        now = self.payments.ledger.clock()
        for held in self.held.values():
            if held.held() and now >= held.expires_after:
                held.voided = held.expired = True
                self.payments.ledger.holds_expired += 1
                logger.info("authorization %s of order %s expired", held.authorization_id, held.order_id)

    def do_authorize(self, body: AuthorizeIn, key: str) -> Outcome:
        """Hold the amount for ``holdS`` seconds: 201 ``{"authorizationId", "holdId", "expiresAt",
        "orderId", "amount", "currency"}``; the charge's refusals otherwise."""
        self.expire_holds()
        for replaced in self.held.values():
            if body.replaces_key is not None and replaced.key == body.replaces_key and replaced.held():
                replaced.voided = True
        refused = self.payments.refusal(body, key)
        if refused is not None:
            return refused
        hold_s = self.payments.ledger.faults.hold_lifetime_s(body.hold_s)
        held = Authorization(
            f"auth_{uuid.uuid4().hex[:16]}",
            body.order_id,
            body.customer_id,
            body.amount,
            body.currency,
            key,
            expires_at=datetime.now(UTC) + timedelta(seconds=hold_s),
            expires_after=self.payments.ledger.clock() + hold_s,
        )
        self.held[held.authorization_id] = held
        self.payments.ledger.facts(body.order_id).authorizations.append(held.authorization_id)
        self.payments.ledger.holds_acquired += 1
        answer = {
            "authorizationId": held.authorization_id,
            "holdId": held.authorization_id,
            "expiresAt": held.expires_at.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "orderId": body.order_id,
            "amount": money(held.amount),
            "currency": held.currency,
        }
        return Outcome(201, answer, effects=1)

    def do_capture(self, body: CaptureIn, key: str) -> Outcome:
        """Capture the authorisation ``body.hold_id`` as a charge: 200 ``{"authorizationId", "chargeId",
        "amount"}``; 404 ``not_found``; 409 ``hold_expired`` or ``hold_released`` (permanent)."""
        self.expire_holds()
        held = self.held.get(body.hold_id)
        if held is None or held.order_id != body.order_id:
            return Outcome(404, error("not_found", permanent=True, holdId=body.hold_id))
        if held.charge_id is None and held.voided:
            self.payments.ledger.commits_refused += 1
            late = held.expired and self.payments.ledger.arrived_after(key, held.expires_after)
            self.payments.ledger.commits_on_expired += int(late)
            code = "hold_expired" if held.expired else "hold_released"
            return Outcome(409, error(code, permanent=True, holdId=body.hold_id))
        effects = 0
        if held.charge_id is None:
            held.charge_id = self.payments.charge(
                held.order_id, held.customer_id, held.amount, held.currency, key
            ).charge_id
            self.payments.ledger.holds_committed += 1
            effects = 1
        answer = {
            "authorizationId": held.authorization_id,
            "chargeId": held.charge_id,
            "amount": money(held.amount),
        }
        return Outcome(200, answer, effects=effects)

    def do_void_by_key(self, body: VoidByKeyIn, key: str) -> Outcome:
        """Undo what the authorise call keyed ``body.forward_key`` did, or tombstone the key: void the
        authorisation, refund its charge once captured, or say it expired (already undone)."""
        self.expire_holds()
        return self.payments.ledger.undo_by_key(
            body,
            key,
            forward_endpoint="payments.authorize",
            id_field="authorizationId",
            undo=lambda authorization_id: self._void(body, key, authorization_id),
        )

    def _void(self, body: VoidByKeyIn, key: str, authorization_id: str) -> Outcome:
        held = self.held[authorization_id]
        answer: dict[str, Any] = {
            "undone": True,
            "forwardKey": body.forward_key,
            "orderId": held.order_id,
            "authorizationId": authorization_id,
            "expired": held.expired,
        }
        if held.charge_id is not None:
            refunded = self.payments.refund_all(
                RefundByKeyIn(orderId=held.order_id, forwardKey=body.forward_key), key, held.charge_id
            )
            if refunded.status != 200:
                return refunded
            refund = {k: refunded.body[k] for k in ("refundId", "amount", "alreadyUndone")}
            return Outcome(200, {**answer, **refund}, effects=refunded.effects)
        if held.voided:
            return Outcome(200, {**answer, "alreadyUndone": True})
        held.voided = True
        return Outcome(200, {**answer, "alreadyUndone": False}, effects=1)

    def authorizations_json(self, authorization_ids: list[str]) -> list[dict[str, Any]]:
        """The order's authorisations as its facts show them."""
        return [
            {
                "authorizationId": a.authorization_id,
                "amount": money(a.amount),
                "expiresAt": a.expires_at.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                "chargeId": a.charge_id,
                "voided": a.voided,
                "expired": a.expired,
                "idempotencyKey": a.key,
            }
            for a in (self.held[aid] for aid in authorization_ids)
        ]


def authorizations_router(authorizations: Authorizations, calls: IdempotentCalls) -> APIRouter:
    """``POST /payments/authorizations``, ``.../capture`` and ``.../void`` (by key)."""
    router = APIRouter()

    @router.post("/payments/authorizations", status_code=201)
    async def authorize(request: Request) -> JSONResponse:
        return await calls.mutate(request, "payments.authorize", AuthorizeIn, authorizations.do_authorize)

    @router.post("/payments/authorizations/capture")
    async def capture(request: Request) -> JSONResponse:
        return await calls.mutate(request, "payments.capture", CaptureIn, authorizations.do_capture)

    @router.post("/payments/authorizations/void")
    async def void_by_key(request: Request) -> JSONResponse:
        return await calls.mutate(
            request, "payments.void", VoidByKeyIn, authorizations.do_void_by_key, undo=True
        )

    return router
