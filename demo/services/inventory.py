"""The demo inventory service: reservations of stock, released by id or by the reserve call's key.

Stock moves relatively (a reservation subtracts, a release adds back), so concurrent reservations
compose; a reservation asking for more than is left is refused with 409 ``out_of_stock``.

A reservation asked with ``holdS`` is a hold: it expires ``holdS`` seconds later on the service's own
clock, when its stock goes back, unless ``commit`` made it permanent first. A commit of an expired hold
is refused for good (409 ``hold_expired``); a release of one answers that it was already released. A
reservation naming ``replacesKey`` re-acquires a hold: the hold reserved under that key is released first.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
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
    hold_s: float | None = Field(default=None, gt=0, le=86_400)
    replaces_key: str | None = None


class CommitIn(Body):
    """``{"orderId", "holdId"}``: make a hold permanent."""

    order_id: str = Field(min_length=1)
    hold_id: str = Field(min_length=1)


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
    expires_at: datetime | None = None  # a hold's expiry (UTC)
    expires_after: float | None = None  # the same, on the ledger's monotonic clock
    committed: bool = False
    expired: bool = False
    replaced: bool = False  # a re-acquisition (replacesKey) took its place

    def held(self) -> bool:
        """A hold still live: neither released, committed nor expired."""
        return self.expires_after is not None and not (self.released or self.committed)


class Inventory:
    """The inventory's stock and reservations. Methods named ``do_*`` run under the app's lock."""

    def __init__(self, ledger: Ledger, catalog: Catalog) -> None:
        self.ledger = ledger
        self.initial_stock = {str(part): units for part, units in catalog.stock.items()}
        self.stock = dict(self.initial_stock)  # a copy: the catalog is shared and stays untouched
        self.reservations: dict[str, Reservation] = {}

    def expire_holds(self) -> None:
        """Release every hold whose expiry has passed on the service's clock (its stock goes back)."""
        now = self.ledger.clock()
        for reservation in self.reservations.values():
            if (
                reservation.held()
                and reservation.expires_after is not None
                and now >= reservation.expires_after
            ):
                self.do_release(reservation.reservation_id)
                reservation.expired = True
                self.ledger.holds_expired += 1
                logger.info("hold %s of order %s expired", reservation.reservation_id, reservation.order_id)

    def do_reserve(self, body: ReservationIn, key: str) -> Outcome:
        """Reserve the items: 201 ``{"reservationId", "orderId", "items"}`` (and ``holdId``, ``expiresAt``
        for a hold), or 409 ``out_of_stock``."""
        self.expire_holds()
        for replaced in self.reservations.values():
            if body.replaces_key is not None and replaced.key == body.replaces_key:
                replaced.replaced = True  # not a second reservation of the order: its successor
                if replaced.held():
                    self.do_release(replaced.reservation_id)
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
        answer: dict[str, Any] = {"reservationId": reservation.reservation_id, "orderId": body.order_id}
        if body.hold_s is not None:
            hold_s = self.ledger.faults.hold_lifetime_s(body.hold_s)
            reservation.expires_after = self.ledger.clock() + hold_s
            reservation.expires_at = datetime.now(UTC) + timedelta(seconds=hold_s)
            answer |= {"holdId": reservation.reservation_id, "expiresAt": _utc(reservation.expires_at)}
            self.ledger.holds_acquired += 1
        self.reservations[reservation.reservation_id] = reservation
        self.ledger.facts(body.order_id).reservations.append(reservation.reservation_id)
        items = [{"sku": item.sku, "quantity": item.quantity} for item in body.items]
        return Outcome(201, {**answer, "items": items}, effects=1)

    def do_commit(self, body: CommitIn, key: str) -> Outcome:
        """Make the hold ``body.hold_id`` permanent: 200 ``{"reservationId", "orderId", "committed"}``;
        404 ``not_found``; 409 ``hold_expired`` or ``hold_released`` (permanent: nothing is held)."""
        self.expire_holds()
        reservation = self.reservations.get(body.hold_id)
        if reservation is None or reservation.order_id != body.order_id:
            return Outcome(404, error("not_found", permanent=True, holdId=body.hold_id))
        answer = {
            "reservationId": reservation.reservation_id,
            "orderId": reservation.order_id,
            "committed": True,
        }
        if reservation.committed:
            return Outcome(200, answer)
        if reservation.expired or reservation.released:
            code = "hold_expired" if reservation.expired else "hold_released"
            self.ledger.commits_refused += 1
            expiry = reservation.expires_after
            late = reservation.expired and expiry is not None and self.ledger.arrived_after(key, expiry)
            self.ledger.commits_on_expired += int(late)
            return Outcome(409, error(code, permanent=True, holdId=body.hold_id))
        reservation.committed = True
        self.ledger.holds_committed += 1
        return Outcome(200, answer, effects=1)

    def do_release(self, reservation_id: str) -> Outcome:
        """Release a reservation (idempotent by state: ``alreadyReleased`` says whether it was)."""
        reservation = self.reservations.get(reservation_id)
        if reservation is None:
            return Outcome(404, error("not_found", permanent=True, reservationId=reservation_id))
        body = {"reservationId": reservation_id, "orderId": reservation.order_id, "released": True}
        if reservation.released:
            # An expired hold was released by the service itself: already undone.
            return Outcome(200, {**body, "alreadyReleased": True, "expired": reservation.expired})
        for sku, quantity in reservation.items.items():
            self.stock[sku] = self.stock.get(sku, 0) + quantity  # relative, never a reset
        reservation.released = True
        return Outcome(200, {**body, "alreadyReleased": False}, effects=1)

    def do_release_by_key(self, body: ReleaseByKeyIn, key: str) -> Outcome:
        """Release what the reserve call keyed ``body.forward_key`` reserved, or tombstone the key."""

        def release(reservation_id: str) -> Outcome:
            self.expire_holds()
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
                **(
                    {"expiresAt": _utc(r.expires_at), "committed": r.committed, "expired": r.expired}
                    if r.expires_at
                    else {}
                ),
            }
            for r in (self.reservations[rid] for rid in reservation_ids)
        ]


def _utc(at: datetime) -> str:
    """``at`` as the ISO 8601 UTC text the services answer with."""
    return at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def inventory_router(inventory: Inventory, calls: IdempotentCalls) -> APIRouter:
    """``POST /inventory/reservations``, ``.../commit``, ``.../{reservationId}/release`` and ``.../release``
    (by key)."""
    router = APIRouter()

    @router.post("/inventory/reservations", status_code=201)
    async def reserve(request: Request) -> JSONResponse:
        return await calls.mutate(request, "inventory.reserve", ReservationIn, inventory.do_reserve)

    @router.post("/inventory/reservations/commit")
    async def commit(request: Request) -> JSONResponse:
        return await calls.mutate(request, "inventory.commit", CommitIn, inventory.do_commit)

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
