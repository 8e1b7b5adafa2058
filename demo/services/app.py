"""The demo services' FastAPI app: the inventory, payment and shipping routers over one ledger and one
lock, and the endpoints that report on them (audit, order facts, stock, health, the fault plan)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from demo.faults import FaultPlan
from demo.services.auth import AgentAuth, CallerRefused
from demo.services.authorizations import Authorizations, authorizations_router
from demo.services.common import OrderFacts, error, jsonable_errors, money, respond
from demo.services.idempotency import IdempotentCalls
from demo.services.inventory import Inventory, inventory_router
from demo.services.ledger import Ledger
from demo.services.payments import Payments, RefundPolicy, payments_router, refund_policy_router
from demo.services.shipping import Shipping, shipping_router
from demo.tpch import Catalog

logger = logging.getLogger("demo.services")


class DemoServices:
    """The three services over one :class:`Ledger`: what the reporting endpoints read."""

    def __init__(
        self, catalog: Catalog, faults: FaultPlan, clock: Callable[[], float], refund_policy: RefundPolicy
    ) -> None:
        self.ledger = Ledger(faults, clock)
        self.inventory = Inventory(self.ledger, catalog)
        self.payments = Payments(self.ledger, catalog, refund_policy)
        self.authorizations = Authorizations(self.payments)
        self.shipping = Shipping(self.ledger)

    def order_of(self, body: BaseModel, target: str | None) -> str | None:
        """The order a request concerns, for the audit: its body's, or its target effect's."""
        order_id = getattr(body, "order_id", None)
        if isinstance(order_id, str):
            return order_id
        if target is None:
            return None
        tables = (
            self.inventory.reservations,
            self.payments.charges,
            self.authorizations.held,
            self.shipping.shipments,
        )
        for table in tables:
            found = table.get(target)
            if found is not None:
                return found.order_id
        return None

    def audit_json(self) -> dict[str, Any]:
        """``GET /audit``: every key's entry and the totals over them."""
        self.expire_holds()
        audit = self.ledger.audit
        keys = {key: entry.to_json() for key, entry in audit.items()}
        # The same effect made twice under different keys (e.g. two charges for one order) is a duplicate too.
        per_order = 0
        for facts in self.ledger.orders.values():
            kept = [rid for rid in facts.reservations if not self.inventory.reservations[rid].replaced]
            per_order += max(0, len(kept) - 1)
            per_order += max(0, len(facts.charges) - 1)
            per_order += max(0, len(facts.shipments) - 1)
        return {
            "keys": keys,
            "duplicate_effects": sum(max(0, entry.effects - 1) for entry in audit.values()),
            "calls_per_key_max": max((entry.calls for entry in audit.values()), default=0),
            "effects_total": sum(entry.effects for entry in audit.values()),
            "calls_total": sum(entry.calls for entry in audit.values()),
            "faults_total": sum(len(entry.faults) for entry in audit.values()),
            "duplicate_order_effects": per_order,
            "undo_effects_total": sum(entry.effects for entry in audit.values() if entry.undo),
            "forward_after_undo": sum(entry.refused_after_undo for entry in audit.values()),
            "holds": self.holds_json(),
            "fees_kept_total": money(
                sum((charge.fee_kept for charge in self.payments.charges.values()), Decimal("0.00"))
            ),
        }

    def expire_holds(self) -> None:
        """Expire the holds whose time has passed, in every service, before a report reads them."""
        self.inventory.expire_holds()
        self.authorizations.expire_holds()

    def holds_json(self) -> dict[str, int]:
        """Holds acquired, expired (by the services' clocks), committed and still live, commits refused
        because their hold was gone, and those of them whose hold had expired."""
        ledger = self.ledger
        return {
            "acquired": ledger.holds_acquired,
            "expired": ledger.holds_expired,
            "committed": ledger.holds_committed,
            "commitsRefused": ledger.commits_refused,
            "commitsOnExpired": ledger.commits_on_expired,
            "live": sum(r.held() for r in self.inventory.reservations.values())
            + sum(a.held() for a in self.authorizations.held.values()),
        }

    def facts_json(self, order_id: str) -> dict[str, Any]:
        """``GET /orders/{orderId}/facts``: the order's effects in each service and a summary."""
        self.expire_holds()
        facts = self.ledger.orders.get(order_id, OrderFacts())
        reservations = [self.inventory.reservations[rid] for rid in facts.reservations]
        charges = [self.payments.charges[cid] for cid in facts.charges]
        shipments = [self.shipping.shipments[sid] for sid in facts.shipments]
        net_charged = sum((charge.amount - charge.refunded for charge in charges), Decimal("0.00"))
        fee_kept = sum((charge.fee_kept for charge in charges), Decimal("0.00"))
        return {
            "orderId": order_id,
            "reservations": self.inventory.facts_json(facts.reservations),
            **self.payments.facts_json(facts.charges, facts.refunds),
            "authorizations": self.authorizations.authorizations_json(facts.authorizations),
            "shipments": self.shipping.facts_json(facts.shipments),
            "declines": list(facts.declines),
            "tombstones": [self.ledger.tombstones[key].to_json() for key in facts.tombstones],
            "summary": {
                "activeReservations": sum(not r.released for r in reservations),
                "netCharged": money(net_charged),
                "feeKept": money(fee_kept),
                "activeShipments": sum(not s.cancelled for s in shipments),
                "activeAuthorizations": sum(
                    self.authorizations.held[aid].held() for aid in facts.authorizations
                ),
                "declined": facts.declines[-1]["error"] if facts.declines else None,
                "undone": facts.undone,
            },
        }


def create_app(
    catalog: Catalog,
    faults: FaultPlan,
    *,
    auth: AgentAuth | None,
    clock: Callable[[], float] = time.monotonic,
    refund_policy: RefundPolicy | None = None,
    report_auth: AgentAuth | None = None,
) -> FastAPI:
    """Build the inventory, payment and shipping services over one in-memory state.

    Args:
        auth: The check every call to a service endpoint passes first (:mod:`demo.services.auth`: a
            bearer token of orderflow's agents; 401 / 403 otherwise); None: no check, for tests of
            the services' own behaviour only (``python -m demo.services`` always checks).
        catalog: Initial stock (copied; the catalog is not modified) and customer balances.
        faults: Initial fault plan; replaceable at runtime with ``PUT /faults``.
        clock: Monotonic clock (seconds) for audit timestamps, in-flight ages and charge ages (the
            cancellation fee's window).
        refund_policy: Initial cancellation fee (default: none); replaceable at runtime with
            ``PUT /refund-policy``.
        report_auth: The check the reporting and steering endpoints pass first (on Azure: a token with
            the app role :data:`demo.services.auth.DEMO_DRIVER_ROLE`); None: none, loopback only.

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
    services = DemoServices(catalog, faults, clock, refund_policy or RefundPolicy())
    calls = IdempotentCalls(services.ledger, asyncio.Lock(), services.order_of)
    # No slash redirects (they answer before the token check) and no CDN-hosted docs pages.
    app = FastAPI(
        title="orderflow demo services", version="1", redirect_slashes=False, docs_url=None, redoc_url=None
    )

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        return respond(422, error("invalid_request", permanent=True, detail=jsonable_errors(exc.errors())))

    @app.exception_handler(CallerRefused)
    async def _refused(_: Request, exc: CallerRefused) -> JSONResponse:
        return exc.response()

    checked = [Depends(auth)] if auth is not None else []
    app.include_router(inventory_router(services.inventory, calls), dependencies=checked)
    app.include_router(payments_router(services.payments, calls), dependencies=checked)
    app.include_router(authorizations_router(services.authorizations, calls), dependencies=checked)
    app.include_router(shipping_router(services.shipping, calls), dependencies=checked)
    reporting = [Depends(report_auth)] if report_auth is not None else []
    app.include_router(report_router(services, calls.lock), dependencies=reporting)
    app.include_router(refund_policy_router(services.payments, calls.lock), dependencies=reporting)
    return app


def report_router(services: DemoServices, lock: asyncio.Lock) -> APIRouter:
    """``GET /audit``, ``/audit/{key}``, ``/orders/{orderId}/facts``, ``/stock/{sku}``, ``/healthz``
    and ``GET``/``PUT /faults``."""
    router = APIRouter()
    ledger, units = services.ledger, services.inventory.stock

    @router.get("/audit")
    async def audit() -> dict[str, Any]:
        async with lock:
            return services.audit_json()

    @router.get("/audit/{key:path}")
    async def audit_key(key: str) -> JSONResponse:
        async with lock:
            entry = ledger.audit.get(key)
            if entry is None:
                return respond(404, error("not_found", permanent=True, key=key))
            return respond(200, {"key": key, **entry.to_json()})

    @router.get("/orders/{order_id}/facts")
    async def order_facts(order_id: str) -> dict[str, Any]:
        async with lock:
            return services.facts_json(order_id)

    @router.get("/stock/{sku}")
    async def stock(sku: str) -> JSONResponse:
        async with lock:
            services.expire_holds()
            if sku not in units:
                return respond(404, error("not_found", permanent=True, sku=sku))
            initial = services.inventory.initial_stock[sku]
            return respond(200, {"sku": sku, "available": units[sku], "initial": initial})

    @router.get("/healthz")
    async def healthz() -> dict[str, Any]:
        return {"status": "ok", "skus": len(units), "customers": len(services.payments.balances)}

    @router.get("/faults")
    async def get_faults() -> dict[str, Any]:
        return ledger.faults.model_dump()

    @router.put("/faults")
    async def put_faults(plan: FaultPlan) -> dict[str, Any]:
        async with lock:
            ledger.faults = plan
        logger.info("fault plan replaced: %s", plan.model_dump_json())
        return plan.model_dump()

    return router
