"""The idempotency layer every mutating endpoint runs through, the way Stripe does it.

A request is handled in this order: key check, call counted and fault decided (``undo_refused``
answers 422 and ``transient`` 503 here, ``latency`` sleeps), body validation, tombstone check (forward
calls only), key lookup (reuse / in progress / replay), ``hang`` sleep, effect applied and response
stored under the lock, ``lost_response`` answers 500. A caller that disconnects before its body arrives
gets nothing applied (499).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from fastapi import Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError
from starlette.requests import ClientDisconnect

from demo.faults import FaultKind, FaultPlan
from demo.services.common import (
    IDEMPOTENCY_HEADER,
    INSTANCE_HEADER,
    TRACEPARENT_HEADER,
    KeyAudit,
    Outcome,
    Stored,
    Tombstone,
    error,
    fingerprint,
    jsonable_errors,
    respond,
)
from demo.services.ledger import Ledger

logger = logging.getLogger("demo.services")

ModelT = TypeVar("ModelT", bound=BaseModel)

OrderOf = Callable[[BaseModel, str | None], str | None]
"""The order a request concerns, from its body or its target (the effect id in its path)."""


@dataclass
class _Call:
    """One request under way: its key, its audit entry, its number under the key and its fault."""

    key: str
    endpoint: str
    audit: KeyAudit
    number: int
    fault: FaultKind | None
    plan: FaultPlan

    def answer(self, status: int, body: Mapping[str, Any], *, replayed: bool = False) -> JSONResponse:
        """The response, its status kept in the key's audit."""
        self.audit.status = status
        return respond(status, body, replayed=replayed)


class IdempotentCalls:
    """Runs a mutating request once per idempotency key over ``ledger``, under ``lock``."""

    def __init__(self, ledger: Ledger, lock: asyncio.Lock, order_of: OrderOf) -> None:
        self.ledger = ledger
        self.lock = lock
        self.order_of = order_of

    async def mutate(
        self,
        request: Request,
        endpoint: str,
        model: type[ModelT],
        execute: Callable[[ModelT, str], Outcome],
        *,
        target: str | None = None,
        undo: bool = False,
    ) -> JSONResponse:
        """Answer ``request`` to ``endpoint``: validate its body as ``model`` and run ``execute(body,
        key)`` under the lock, at most once per key (see the module's order of checks)."""
        key = request.headers.get(IDEMPOTENCY_HEADER, "").strip()
        if not key:
            return respond(400, error("idempotency_key_required", permanent=True, header=IDEMPOTENCY_HEADER))
        call = await self._count(request, key, endpoint, undo=undo)
        if call.fault is FaultKind.UNDO_REFUSED:
            return call.answer(422, error("undo_refused", permanent=True))
        if call.fault is FaultKind.TRANSIENT:
            return call.answer(503, error("unavailable", permanent=False))
        if call.fault is FaultKind.REFUSED:
            return call.answer(409, error("refused", permanent=True))
        if call.fault is FaultKind.LATENCY:
            await asyncio.sleep(call.plan.latency_s)
        if endpoint in call.plan.delay_s:
            await asyncio.sleep(call.plan.delay_s[endpoint])
        try:
            raw = await request.body()
        except ClientDisconnect:
            # The caller went away before its body arrived (its host was killed): nothing is applied, and
            # the answer (nginx's 499, Client Closed Request) reaches nobody but the key's audit.
            logger.info("%s call %s of key %s: the caller disconnected", endpoint, call.number, key)
            return call.answer(499, error("client_closed_request", permanent=False))
        try:
            payload: Any = json.loads(raw) if raw.strip() else {}
            body = model.model_validate(payload)
        except (ValueError, ValidationError) as exc:
            detail = jsonable_errors(exc.errors()) if isinstance(exc, ValidationError) else str(exc)
            return call.answer(422, error("invalid_request", permanent=True, detail=detail))
        digest = fingerprint(endpoint, target, payload)
        stored, tombstone = await self._look_up(call, body, digest, target, undo)
        if tombstone is not None:
            logger.info(
                "refusing %s call %s of key %s: undone by %s", endpoint, call.number, key, tombstone.undo_key
            )
            return call.answer(409, error("cancelled", permanent=True, key=key, undoKey=tombstone.undo_key))
        if stored is not None:
            return await self._replay(call, stored, digest)
        return await self._execute(call, body, execute, target)

    async def _count(self, request: Request, key: str, endpoint: str, *, undo: bool) -> _Call:
        """Count the call in the key's audit and decide its fault."""
        ledger, clock = self.ledger, self.ledger.clock
        async with self.lock:
            audit = ledger.audit.setdefault(key, KeyAudit(endpoint=endpoint, undo=undo, first_at=clock()))
            audit.calls += 1
            audit.last_at = clock()
            # Wall-clock UTC arrival, comparable with the state store's claimedAt/endedAt times.
            arrived = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            received = {"at": arrived, "instance": request.headers.get(INSTANCE_HEADER)}
            if TRACEPARENT_HEADER in request.headers:  # the caller's span, when it traces
                received["traceparent"] = request.headers[TRACEPARENT_HEADER]
            audit.received.append(received)
            number = audit.calls
            fault = ledger.faults.decide(key, number, undo=undo, service=endpoint.split(".", 1)[0])
            plan = ledger.faults
            if fault is not None:
                audit.faults.append({"call": number, "kind": fault.value})
                logger.info("injecting %s into %s call %s of key %s", fault.value, endpoint, number, key)
        return _Call(key, endpoint, audit, number, fault, plan)

    async def _look_up(
        self, call: _Call, body: BaseModel, digest: str, target: str | None, undo: bool
    ) -> tuple[Stored | None, Tombstone | None]:
        """The key's stored entry and tombstone; with neither, the key is made in flight."""
        ledger = self.ledger
        async with self.lock:
            call.audit.order_id = call.audit.order_id or self.order_of(body, target)
            stored = ledger.stored.get(call.key)
            # A tombstone and a stored entry are both only ever created under this lock, each after
            # checking for the other: a forward call either became in flight before the undo looked
            # (the undo answers request_in_progress) or finds the tombstone here and applies nothing.
            tombstone = None if undo else ledger.tombstones.get(call.key)
            if tombstone is not None:
                call.audit.refused_after_undo += 1
            elif stored is None:
                ledger.stored[call.key] = Stored(
                    fingerprint=digest, started_at=ledger.clock(), endpoint=call.endpoint
                )
        return stored, tombstone

    async def _replay(self, call: _Call, stored: Stored, digest: str) -> JSONResponse:
        """The answer to a key seen before: reuse, in progress, or its stored outcome replayed."""
        if stored.fingerprint != digest:
            return call.answer(422, error("idempotency_key_reuse", permanent=True, key=call.key))
        if stored.outcome is None:
            age = round(self.ledger.clock() - stored.started_at, 3)
            return call.answer(
                409, error("request_in_progress", permanent=False, key=call.key, inFlightForS=age)
            )
        if call.fault is FaultKind.HANG:
            await asyncio.sleep(call.plan.hang_s)
        if call.fault is FaultKind.LOST_RESPONSE:
            return call.answer(500, error("connection_reset", permanent=False))
        return call.answer(stored.outcome.status, stored.outcome.body, replayed=True)

    async def _execute(
        self, call: _Call, body: ModelT, execute: Callable[[ModelT, str], Outcome], target: str | None
    ) -> JSONResponse:
        """Run the request's effect once, store its outcome, and answer (or lose the answer)."""
        ledger = self.ledger
        outcome: Outcome | None = None
        try:
            if call.fault is FaultKind.HANG:
                # A slow service finishes its work after the client has given up.
                await asyncio.sleep(call.plan.hang_s)
            async with self.lock:
                outcome = execute(body, call.key)
                call.audit.effects += outcome.effects
                call.audit.order_id = call.audit.order_id or self.order_of(body, target)
                if outcome.store:
                    ledger.stored[call.key].outcome = outcome
                else:
                    del ledger.stored[call.key]
        finally:
            if outcome is None:
                # Cancelled before the effect (server shutdown): let a retry run it.
                ledger.stored.pop(call.key, None)
        if call.fault is FaultKind.LOST_RESPONSE:
            return call.answer(500, error("connection_reset", permanent=False))
        return call.answer(outcome.status, outcome.body)
