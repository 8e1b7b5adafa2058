"""The demo shipping service: shipments by one of the TPC-H ship modes, cancelled by id or by the ship
call's key."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import Field

from demo.services.common import Body, EmptyIn, Item, Outcome, UndoByKeyIn, error
from demo.services.idempotency import IdempotentCalls
from demo.services.ledger import Ledger, undone
from demo.tpch import SHIP_MODES


class ShipmentIn(Body):
    """``{"orderId", "carrier", "items"}``."""

    order_id: str = Field(min_length=1)
    carrier: str = Field(min_length=1)
    items: list[Item] = Field(min_length=1)


class CancelByKeyIn(UndoByKeyIn):
    """``{"orderId", "forwardKey", "shipmentId"?}``."""

    shipment_id: str | None = None

    def effect_id(self) -> str | None:
        return self.shipment_id


@dataclass
class Shipment:
    """An order's items sent by ``carrier`` under the ship call's key."""

    shipment_id: str
    order_id: str
    carrier: str
    items: list[dict[str, Any]]
    key: str
    cancelled: bool = False


class Shipping:
    """The shipping service's shipments. Methods named ``do_*`` run under the app's lock."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.shipments: dict[str, Shipment] = {}

    def do_ship(self, body: ShipmentIn, key: str) -> Outcome:
        """Ship: 201 ``{"shipmentId", "orderId", "carrier"}``, or 422 ``unknown_carrier``."""
        if body.carrier not in SHIP_MODES:
            return Outcome(
                422,
                error("unknown_carrier", permanent=True, carrier=body.carrier, supported=sorted(SHIP_MODES)),
            )
        items = [{"sku": item.sku, "quantity": item.quantity} for item in body.items]
        shipment = Shipment(f"shp_{uuid.uuid4().hex[:16]}", body.order_id, body.carrier, items, key)
        self.shipments[shipment.shipment_id] = shipment
        self.ledger.facts(body.order_id).shipments.append(shipment.shipment_id)
        return Outcome(
            201,
            {"shipmentId": shipment.shipment_id, "orderId": body.order_id, "carrier": shipment.carrier},
            effects=1,
        )

    def do_cancel(self, shipment_id: str) -> Outcome:
        """Cancel a shipment (idempotent by state: ``alreadyCancelled`` says whether it was)."""
        shipment = self.shipments.get(shipment_id)
        if shipment is None:
            return Outcome(404, error("not_found", permanent=True, shipmentId=shipment_id))
        body = {"shipmentId": shipment_id, "orderId": shipment.order_id, "cancelled": True}
        if shipment.cancelled:
            return Outcome(200, {**body, "alreadyCancelled": True})
        shipment.cancelled = True
        return Outcome(200, {**body, "alreadyCancelled": False}, effects=1)

    def do_cancel_by_key(self, body: CancelByKeyIn, key: str) -> Outcome:
        """Cancel the shipment the ship call keyed ``body.forward_key`` made, or tombstone the key."""

        def cancel(shipment_id: str) -> Outcome:
            cancelled = self.do_cancel(shipment_id)
            return undone(body, cancelled, "shipmentId", shipment_id, "alreadyCancelled")

        return self.ledger.undo_by_key(
            body, key, forward_endpoint="shipping.ship", id_field="shipmentId", undo=cancel
        )

    def facts_json(self, shipment_ids: list[str]) -> list[dict[str, Any]]:
        """The order's shipments as its facts show them."""
        return [
            {
                "shipmentId": s.shipment_id,
                "carrier": s.carrier,
                "cancelled": s.cancelled,
                "idempotencyKey": s.key,
            }
            for s in (self.shipments[sid] for sid in shipment_ids)
        ]


def shipping_router(shipping: Shipping, calls: IdempotentCalls) -> APIRouter:
    """``POST /shipping/shipments``, ``.../{shipmentId}/cancel`` and ``.../cancel`` (by key)."""
    router = APIRouter()

    @router.post("/shipping/shipments", status_code=201)
    async def ship(request: Request) -> JSONResponse:
        return await calls.mutate(request, "shipping.ship", ShipmentIn, shipping.do_ship)

    @router.post("/shipping/shipments/{shipment_id}/cancel")
    async def cancel(request: Request, shipment_id: str) -> JSONResponse:
        return await calls.mutate(
            request,
            "shipping.cancel",
            EmptyIn,
            lambda _body, _key: shipping.do_cancel(shipment_id),
            target=shipment_id,
            undo=True,
        )

    @router.post("/shipping/shipments/cancel")
    async def cancel_by_key(request: Request) -> JSONResponse:
        return await calls.mutate(
            request, "shipping.cancel_by_key", CancelByKeyIn, shipping.do_cancel_by_key, undo=True
        )

    return router
