"""The demo payment service: charges, refunds by charge id or by the charge call's key, and the
cancellation fee (:class:`RefundPolicy`).

A customer whose catalog balance is negative is declined (402 ``card_declined``); customers unknown to
the catalog are charged. A refund made more than ``fee_after_s`` seconds (by the app's monotonic clock)
after its charge keeps the policy's fee, at most once per charge in total.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, field_validator

from demo.services.common import (
    CENTS,
    MAX_AMOUNT,
    Body,
    Outcome,
    UndoByKeyIn,
    error,
    money,
    valid_amount,
)
from demo.services.idempotency import IdempotentCalls
from demo.services.ledger import Ledger
from demo.tpch import Catalog

logger = logging.getLogger("demo.services")

CURRENCIES: frozenset[str] = frozenset({"USD", "EUR", "GBP"})
"""Currencies the payment service accepts."""


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

    fee: Decimal = Field(default=Decimal("0.00"), ge=0, lt=MAX_AMOUNT, allow_inf_nan=False)
    fee_after_s: float = Field(default=0.0, ge=0.0, allow_inf_nan=False)

    @field_validator("fee")
    @classmethod
    def _cents(cls, value: Decimal) -> Decimal:
        if value != value.quantize(CENTS):
            raise ValueError("fee has more than 2 decimal places")
        return value.quantize(CENTS)

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


class Amount(Body):
    """A body with a positive ``amount`` of at most 2 dp."""

    amount: Decimal

    @field_validator("amount")
    @classmethod
    def _two_decimals(cls, value: Decimal) -> Decimal:
        return valid_amount(value)


class ChargeIn(Amount):
    """``{"orderId", "customerId", "amount", "currency"}``."""

    order_id: str = Field(min_length=1)
    customer_id: str = Field(min_length=1)
    currency: str = Field(min_length=1)


class RefundIn(Amount):
    """``{"amount"}``."""


class RefundByKeyIn(UndoByKeyIn):
    """``{"orderId", "forwardKey", "chargeId"?, "amount"?}``."""

    charge_id: str | None = None
    amount: Decimal | None = None

    @field_validator("amount")
    @classmethod
    def _two_decimals(cls, value: Decimal | None) -> Decimal | None:
        return None if value is None else valid_amount(value)

    def effect_id(self) -> str | None:
        return self.charge_id


@dataclass
class Charge:
    """Money taken from a customer for an order, and what was returned or kept of it since."""

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
        """What is left to refund: the amount less refunds and fees kept."""
        return self.amount - self.refunded - self.fee_kept


@dataclass
class Refund:
    """Money returned on a charge (``amount``), and the fee that refund kept."""

    refund_id: str
    charge_id: str
    amount: Decimal  # returned to the customer
    key: str
    fee_kept: Decimal = Decimal("0.00")


class Payments:
    """The payment service's balances, charges, refunds and policy. ``do_*`` run under the app's lock."""

    def __init__(self, ledger: Ledger, catalog: Catalog, refund_policy: RefundPolicy) -> None:
        self.ledger = ledger
        self.refund_policy = refund_policy
        self.balances = dict(catalog.balances)
        self.charges: dict[str, Charge] = {}
        self.refunds: dict[str, Refund] = {}

    def do_charge(self, body: ChargeIn, key: str) -> Outcome:
        """Charge the customer: 201 ``{"chargeId", "orderId", "amount", "currency"}``; 402
        ``card_declined`` for a negative balance; 422 ``unsupported_currency``."""
        refused = self.refusal(body, key)
        if refused is not None:
            return refused
        charge = self.charge(body.order_id, body.customer_id, body.amount, body.currency, key)
        return Outcome(
            201,
            {
                "chargeId": charge.charge_id,
                "orderId": body.order_id,
                "amount": money(charge.amount),
                "currency": charge.currency,
            },
            effects=1,
        )

    def charge(self, order_id: str, customer_id: str, amount: Decimal, currency: str, key: str) -> Charge:
        """Take ``amount`` from the customer: the charge, recorded in the order's facts."""
        charge = Charge(
            f"ch_{uuid.uuid4().hex[:16]}",
            order_id,
            customer_id,
            amount,
            currency,
            key,
            charged_at=self.ledger.clock(),
        )
        self.charges[charge.charge_id] = charge
        self.ledger.facts(order_id).charges.append(charge.charge_id)
        return charge

    def refusal(self, body: ChargeIn, key: str) -> Outcome | None:
        """Why the customer cannot be charged ``body``'s amount (402, 422), or None."""
        if body.currency not in CURRENCIES:
            return Outcome(
                422,
                error(
                    "unsupported_currency",
                    permanent=True,
                    currency=body.currency,
                    supported=sorted(CURRENCIES),
                ),
            )
        balance = self.balances.get(int(body.customer_id)) if body.customer_id.isdigit() else None
        # Customers unknown to the catalog are charged: only a known negative balance declines.
        if balance is not None and balance < 0:
            decline = error("card_declined", permanent=True, declineCode="insufficient_funds")
            self.ledger.facts(body.order_id).declines.append(
                {**decline, "customerId": body.customer_id, "balance": money(balance), "idempotencyKey": key}
            )
            logger.info("order %s card declined: customer %s", body.order_id, body.customer_id)
            return Outcome(402, decline)
        return None

    def do_refund(self, charge_id: str, body: RefundIn, key: str) -> Outcome:
        """Refund ``body.amount`` of the charge, less the cancellation fee still due (see RefundPolicy).

        Returns:
            200 ``{"refundId", "chargeId", "amount", "feeKept", "refundedTotal"}`` (``amount`` is what
            was returned, ``body.amount - feeKept``); 404 ``not_found``; 422 ``refund_exceeds_charge``
            when ``body.amount`` is more than the charge less earlier refunds and fees kept.
        """
        charge = self.charges.get(charge_id)
        if charge is None:
            return Outcome(404, error("not_found", permanent=True, chargeId=charge_id))
        refundable = charge.refundable()
        if body.amount > refundable:
            return Outcome(
                422,
                error(
                    "refund_exceeds_charge",
                    permanent=True,
                    chargeId=charge_id,
                    requested=money(body.amount),
                    refundable=money(refundable),
                ),
            )
        age = self.ledger.clock() - charge.charged_at
        fee = self.refund_policy.fee_due(age, charge.fee_kept, body.amount)
        refund = Refund(f"re_{uuid.uuid4().hex[:16]}", charge_id, body.amount - fee, key, fee_kept=fee)
        self.refunds[refund.refund_id] = refund
        charge.refunded += refund.amount
        charge.fee_kept += fee
        self.ledger.facts(charge.order_id).refunds.append(refund.refund_id)
        if fee:
            logger.info("refund of charge %s after %.3f s keeps a fee of %s", charge_id, age, money(fee))
        return Outcome(
            200,
            {
                "refundId": refund.refund_id,
                "chargeId": charge_id,
                "amount": money(refund.amount),
                "feeKept": money(fee),
                "refundedTotal": money(charge.refunded),
            },
            effects=1,
        )

    def do_refund_by_key(self, body: RefundByKeyIn, key: str) -> Outcome:
        """Refund all that is left of the charge the charge call keyed ``body.forward_key`` made, or
        tombstone the key."""
        return self.ledger.undo_by_key(
            body,
            key,
            forward_endpoint="payments.charge",
            id_field="chargeId",
            undo=lambda charge_id: self.refund_all(body, key, charge_id),
        )

    def refund_all(self, body: RefundByKeyIn, key: str, charge_id: str) -> Outcome:
        """The by-key refund of what is left of ``charge_id`` (nothing when it is all refunded)."""
        charge = self.charges[charge_id]
        refundable = charge.refundable()
        # Full refunds only: an amount, if sent, must be the charge's or what is left of it. It is a
        # consistency check: the cancellation fee, when due, still comes off what is refunded.
        if body.amount is not None and body.amount not in (charge.amount, refundable):
            mismatch = error(
                "refund_amount_mismatch",
                permanent=True,
                chargeId=charge_id,
                requested=money(body.amount),
                charged=money(charge.amount),
                refundable=money(refundable),
            )
            return Outcome(422, mismatch)
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
                "amount": money(Decimal("0")),
                "feeKept": money(Decimal("0")),
                "refundedTotal": money(charge.refunded),
                "alreadyUndone": True,
            }
            return Outcome(200, answer)
        refunded = self.do_refund(charge_id, RefundIn(amount=refundable), key)
        if refunded.status != 200:
            return refunded
        answer |= {
            "refundId": refunded.body["refundId"],
            "amount": refunded.body["amount"],
            "feeKept": refunded.body["feeKept"],
            "refundedTotal": refunded.body["refundedTotal"],
            "alreadyUndone": False,
        }
        return Outcome(200, answer, effects=refunded.effects)

    def facts_json(self, charge_ids: list[str], refund_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
        """The order's charges and refunds as its facts show them."""
        return {
            "charges": [
                {
                    "chargeId": c.charge_id,
                    "amount": money(c.amount),
                    "currency": c.currency,
                    "refunded": money(c.refunded),
                    "feeKept": money(c.fee_kept),
                    "idempotencyKey": c.key,
                }
                for c in (self.charges[cid] for cid in charge_ids)
            ],
            "refunds": [
                {
                    "refundId": refund.refund_id,
                    "chargeId": refund.charge_id,
                    "amount": money(refund.amount),
                    "feeKept": money(refund.fee_kept),
                    "idempotencyKey": refund.key,
                }
                for refund in (self.refunds[rid] for rid in refund_ids)
            ],
        }


def payments_router(payments: Payments, calls: IdempotentCalls) -> APIRouter:
    """``POST /payments/charges``, ``.../{chargeId}/refund`` and ``POST /payments/refunds`` (by key): the
    agents' calls, behind the token check."""
    router = APIRouter()

    @router.post("/payments/charges", status_code=201)
    async def charge(request: Request) -> JSONResponse:
        return await calls.mutate(request, "payments.charge", ChargeIn, payments.do_charge)

    @router.post("/payments/charges/{charge_id}/refund")
    async def refund(request: Request, charge_id: str) -> JSONResponse:
        return await calls.mutate(
            request,
            "payments.refund",
            RefundIn,
            lambda body, key: payments.do_refund(charge_id, body, key),
            target=charge_id,
            undo=True,
        )

    @router.post("/payments/refunds")
    async def refund_by_key(request: Request) -> JSONResponse:
        return await calls.mutate(
            request, "payments.refund_by_key", RefundByKeyIn, payments.do_refund_by_key, undo=True
        )

    return router


def refund_policy_router(payments: Payments, lock: asyncio.Lock) -> APIRouter:
    """``GET``/``PUT /refund-policy``: steering, like ``/faults``, for whoever runs the demo on this
    machine (the services listen on loopback only), not a call an agent makes."""
    router = APIRouter()

    @router.get("/refund-policy")
    async def get_refund_policy() -> dict[str, Any]:
        return payments.refund_policy.model_dump(mode="json")

    @router.put("/refund-policy")
    async def put_refund_policy(policy: RefundPolicy) -> dict[str, Any]:
        async with lock:
            payments.refund_policy = policy
        logger.info("refund policy replaced: %s", policy.model_dump_json())
        return policy.model_dump(mode="json")

    return router
