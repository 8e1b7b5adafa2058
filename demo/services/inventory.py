"""The demo inventory service: reservations of stock, released by id or by the reserve call's key.

Stock moves relatively (a reservation subtracts, a release adds back), so concurrent reservations
compose; a reservation asking for more than is left is refused with 409 ``out_of_stock``.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import Field

from demo.services.common import Body, EmptyIn, Item, Outcome, UndoByKeyIn, error
from demo.services.idempotency import IdempotentCalls
from demo.services.ledger import Ledger, undone
from demo.tpch import Catalog

logger = logging.getLogger("demo.services")


class ReservationIn(Body):
    """``{"orderId", "items": [{"sku", "quantity"}]}``."""

    order_id: str = Field(min_length=1)
    items: list[Item] = Field(min_length=1)


class ReleaseByKeyIn(UndoByKeyIn):
    """``{"orderId", "forwardKey", "reservationId"?}``."""

    reservation_id: str | None = None

    def effect_id(self) -> str | None:
        return self.reservation_id


@dataclass
class Reservation:
    """Stock held for an order (``items``: SKU -> units) under the reserve call's key."""

    reservation_id: str
    order_id: str
    items: dict[str, int]
    key: str
    released: bool = False


class Inventory:
    """The inventory's stock and reservations. Methods named ``do_*`` run under the app's lock."""

    def __init__(self, ledger: Ledger, catalog: Catalog) -> None:
        self.ledger = ledger
        self.initial_stock = {str(part): units for part, units in catalog.stock.items()}
        self.stock = dict(self.initial_stock)  # a copy: the catalog is shared and stays untouched
        self.reservations: dict[str, Reservation] = {}

    def do_reserve(self, body: ReservationIn, key: str) -> Outcome:
        """Reserve the items: 201 ``{"reservationId", "orderId", "items"}``, or 409 ``out_of_stock``."""
        wanted: dict[str, int] = {}
        for item in body.items:
            wanted[item.sku] = wanted.get(item.sku, 0) + item.quantity
        for sku, requested in wanted.items():
            available = self.stock.get(sku, 0)
            if available < requested:
                decline = error(
                    "out_of_stock", permanent=True, sku=sku, requested=requested, available=available
                )
                self.ledger.facts(body.order_id).declines.append({**decline, "idempotencyKey": key})
                logger.info("order %s out of stock: sku %s %s > %s", body.order_id, sku, requested, available)
                return Outcome(409, decline)
        for sku, requested in wanted.items():
            self.stock[sku] -= requested  # relative: concurrent reservations compose
        reservation = Reservation(f"res_{uuid.uuid4().hex[:16]}", body.order_id, wanted, key)
        self.reservations[reservation.reservation_id] = reservation
        self.ledger.facts(body.order_id).reservations.append(reservation.reservation_id)
        items = [{"sku": item.sku, "quantity": item.quantity} for item in body.items]
        return Outcome(
            201,
            {"reservationId": reservation.reservation_id, "orderId": body.order_id, "items": items},
            effects=1,
        )

    def do_release(self, reservation_id: str) -> Outcome:
        """Release a reservation (idempotent by state: ``alreadyReleased`` says whether it was)."""
        reservation = self.reservations.get(reservation_id)
        if reservation is None:
            return Outcome(404, error("not_found", permanent=True, reservationId=reservation_id))
        body = {"reservationId": reservation_id, "orderId": reservation.order_id, "released": True}
        if reservation.released:
            return Outcome(200, {**body, "alreadyReleased": True})
        for sku, quantity in reservation.items.items():
            self.stock[sku] = self.stock.get(sku, 0) + quantity  # relative, never a reset
        reservation.released = True
        return Outcome(200, {**body, "alreadyReleased": False}, effects=1)

    def do_release_by_key(self, body: ReleaseByKeyIn, key: str) -> Outcome:
        """Release what the reserve call keyed ``body.forward_key`` reserved, or tombstone the key."""

        def release(reservation_id: str) -> Outcome:
            released = self.do_release(reservation_id)
            return undone(body, released, "reservationId", reservation_id, "alreadyReleased")

        return self.ledger.undo_by_key(
            body, key, forward_endpoint="inventory.reserve", id_field="reservationId", undo=release
        )

    def facts_json(self, reservation_ids: list[str]) -> list[dict[str, Any]]:
        """The order's reservations as its facts show them."""
        return [
            {
                "reservationId": r.reservation_id,
                "items": [{"sku": sku, "quantity": qty} for sku, qty in r.items.items()],
                "released": r.released,
                "idempotencyKey": r.key,
            }
            for r in (self.reservations[rid] for rid in reservation_ids)
        ]


def inventory_router(inventory: Inventory, calls: IdempotentCalls) -> APIRouter:
    """``POST /inventory/reservations``, ``.../{reservationId}/release`` and ``.../release`` (by key)."""
    router = APIRouter()

    @router.post("/inventory/reservations", status_code=201)
    async def reserve(request: Request) -> JSONResponse:
        return await calls.mutate(request, "inventory.reserve", ReservationIn, inventory.do_reserve)

    @router.post("/inventory/reservations/{reservation_id}/release")
    async def release(request: Request, reservation_id: str) -> JSONResponse:
        return await calls.mutate(
            request,
            "inventory.release",
            EmptyIn,
            lambda _body, _key: inventory.do_release(reservation_id),
            target=reservation_id,
            undo=True,
        )

    @router.post("/inventory/reservations/release")
    async def release_by_key(request: Request) -> JSONResponse:
        return await calls.mutate(
            request, "inventory.release_by_key", ReleaseByKeyIn, inventory.do_release_by_key, undo=True
        )

    return router
