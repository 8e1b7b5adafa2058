"""What the demo services share: headers, money, error bodies, request-body bases and the records the
idempotency layer keeps per key (:mod:`demo.services.idempotency`)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Self

from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

IDEMPOTENCY_HEADER = "Idempotency-Key"
"""Request header every mutating endpoint requires."""

INSTANCE_HEADER = "Orderflow-Instance-Id"
"""Optional request header naming the orchestration instance (attempt) a call was made for; the audit
keeps it with each call's arrival time so a run can check that attempts never overlapped."""

TRACEPARENT_HEADER = "traceparent"
"""The W3C trace context header of a traced caller, kept in the key's audit (``received[].traceparent``)."""

REPLAYED_HEADER = "Idempotent-Replayed"
"""Response header set to ``true`` on a replayed stored response."""

CENTS = Decimal("0.01")
MAX_AMOUNT = Decimal("1000000000000")


def money(amount: Decimal) -> str:
    """``amount`` as a string with 2 dp."""
    return str(amount.quantize(CENTS))


def error(error: str, *, permanent: bool, **details: Any) -> dict[str, Any]:
    """An error body: ``{"error", "permanent", **details}``."""
    return {"error": error, "permanent": permanent, **details}


def respond(status: int, body: Mapping[str, Any], *, replayed: bool = False) -> JSONResponse:
    """A JSON response, marked with :data:`REPLAYED_HEADER` when it replays a stored one."""
    headers = {REPLAYED_HEADER: "true"} if replayed else None
    return JSONResponse(status_code=status, content=dict(body), headers=headers)


def fingerprint(endpoint: str, target: str | None, payload: Any) -> str:
    """The hash that tells a replay (same endpoint, target and JSON) from a key's reuse."""
    canonical = json.dumps([endpoint, target, payload], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def jsonable_errors(errors: Sequence[Any]) -> list[dict[str, Any]]:
    """Reduce pydantic error entries to JSON-safe ``{"loc", "msg", "type"}`` dicts."""
    return [
        {
            "loc": [str(part) for part in error.get("loc", ())],
            "msg": str(error.get("msg")),
            "type": error.get("type"),
        }
        for error in errors
    ]


# --- request bodies -------------------------------------------------------


class Body(BaseModel):
    """Base of every request body."""

    # Unknown fields are ignored (clients may send more), SKUs and ids may arrive as numbers.
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", coerce_numbers_to_str=True
    )


class Item(Body):
    """``{"sku", "quantity"}`` of a reservation or a shipment."""

    sku: str = Field(min_length=1)
    quantity: int = Field(gt=0)


class EmptyIn(Body):
    """The body of an undo by id: nothing is read from it."""


def valid_amount(value: Decimal) -> Decimal:
    """``value`` rounded to cents; ValueError unless positive, below the maximum and with at most 2 dp."""
    if not value.is_finite() or value <= 0 or value >= MAX_AMOUNT:
        raise ValueError(f"amount must be a positive number below {MAX_AMOUNT}")
    exponent = value.as_tuple().exponent
    if isinstance(exponent, int) and exponent < -2 and value != value.quantize(CENTS):
        raise ValueError("amount has more than 2 decimal places")
    return value.quantize(CENTS)


class UndoByKeyIn(Body):
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


# --- what is kept per key and per order -------------------------------------


@dataclass
class Outcome:
    """What one executed request did: the response, the number of real state changes, and whether the
    response is stored for replay (False: the key is freed and a retry runs again)."""

    status: int
    body: dict[str, Any]
    effects: int = 0
    store: bool = True


@dataclass
class Stored:
    """A key's stored request: its fingerprint, when it started, and its outcome once done."""

    fingerprint: str
    started_at: float
    endpoint: str
    outcome: Outcome | None = None  # None while the first request is in flight


@dataclass
class Tombstone:
    """A forward key made unusable by an undo-by-key call that found no effect to undo."""

    forward_key: str
    order_id: str
    undo_key: str
    reason: str  # "never_applied" (no stored entry) or "refused" (stored outcome without effect)

    def to_json(self) -> dict[str, Any]:
        """The tombstone as the order's facts show it."""
        return {
            "forwardKey": self.forward_key,
            "orderId": self.order_id,
            "undoKey": self.undo_key,
            "reason": self.reason,
        }


@dataclass
class KeyAudit:
    """Every call made under one idempotency key, as ``GET /audit`` shows it."""

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
        """The audit entry's JSON."""
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
class OrderFacts:
    """The effects, declines and tombstones of one order, across the three services."""

    reservations: list[str] = field(default_factory=list)
    charges: list[str] = field(default_factory=list)
    refunds: list[str] = field(default_factory=list)
    authorizations: list[str] = field(default_factory=list)
    shipments: list[str] = field(default_factory=list)
    declines: list[dict[str, Any]] = field(default_factory=list)
    tombstones: list[str] = field(default_factory=list)  # forward keys
    undone: int = 0  # undo-by-key calls that undid an effect
