"""A small ``notify`` service: the worked example of docs/extending.md, "Add a step".

It implements what a service taking part in an orderflow workflow must, and nothing more:

* every call carries a bearer token: :class:`demo.services.auth.AgentAuth` checks its issuer, audience
  (:data:`NOTIFY_AUDIENCE`, this service's own), expiry and app role before anything else (401 / 403);
* ``POST /notifications`` ``{"orderId"}`` with an ``Idempotency-Key`` header -> 201
  ``{"notificationId", "orderId"}``; 422 ``recipient_unreachable`` (``permanent: true``) for an order in
  :attr:`Notifier.unreachable`;
* ``POST /notifications/retract`` ``{"orderId", "forwardKey", "notificationId"?}`` (the undo, addressed
  by the forward call's key) -> 200 ``{"undone": true, "notificationId", "orderId"}``, or 200
  ``{"undone": false, "reason": "never_applied" | "refused", "orderId"}`` when that key made nothing, the
  key then tombstoned: a notify arriving later with it answers 409 ``cancelled`` (permanent), nothing sent;
* ``GET /notifications``: every notification sent, for a person to look at (unchecked, as the demo
  services' reporting endpoints are: it listens on loopback only);
* a key seen before gets its first answer again (a retry after a lost response), the same key with
  another body 422 ``idempotency_key_reuse``, no key 400 ``idempotency_key_required``: both permanent.

Each handler reads its body, then decides and records without awaiting anything, so on the event loop
a call's check-and-store is atomic and no key is ever in flight. A service whose effect takes time must
instead answer 409 ``request_in_progress`` with ``"permanent": false`` while a key's first call runs.
"""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse

from demo.services.auth import AgentAuth, CallerRefused
from devhost.local_issuer import LocalIssuer

NOTIFY_AUDIENCE = "api://orderflow-notify"
"""The service's app ID URI: the ``aud`` it accepts; its binding asks for ``<this>/.default``."""

Answer = tuple[int, dict[str, Any]]
"""A status code and a JSON body."""


def _refusal(status: int, code: str, **details: Any) -> Answer:
    return status, {"error": code, "permanent": True, **details}


@dataclass
class Notifier:
    """The service's state: each key's first answer, the notifications sent, the tombstoned keys."""

    unreachable: set[str] = field(default_factory=set)
    """Order ids whose customer cannot be notified (the business refusal)."""
    answers: dict[str, tuple[str, Answer]] = field(default_factory=dict)
    """Idempotency key -> (the body's fingerprint, the first answer)."""
    notifications: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Notification id -> ``{"orderId", "key", "retracted"}``."""
    tombstones: set[str] = field(default_factory=set)
    """Forward keys an undo found nothing for: a notify with one of them sends nothing."""

    def _replay(self, key: str, body: dict[str, Any]) -> Answer | None:
        """The answer stored under ``key`` (None: a new key); a reuse with another body is refused."""
        stored = self.answers.get(key)
        if stored is None:
            return None
        fingerprint, answer = stored
        if fingerprint != json.dumps(body, sort_keys=True):
            return _refusal(422, "idempotency_key_reuse", key=key)
        return answer

    def _keep(self, key: str, body: dict[str, Any], answer: Answer) -> Answer:
        self.answers[key] = (json.dumps(body, sort_keys=True), answer)
        return answer

    def notify(self, key: str, body: dict[str, Any]) -> Answer:
        """``POST /notifications``: notify the order's customer once per key."""
        order_id = body.get("orderId")
        if not key:
            return _refusal(400, "idempotency_key_required", header="Idempotency-Key")
        if not isinstance(order_id, str) or not order_id:
            return _refusal(422, "invalid_request", detail="orderId is required")
        replayed = self._replay(key, body)
        if replayed is not None:
            return replayed
        if key in self.tombstones:
            return self._keep(key, body, _refusal(409, "cancelled", key=key))
        if order_id in self.unreachable:
            return self._keep(key, body, _refusal(422, "recipient_unreachable", orderId=order_id))
        notification_id = f"ntf_{uuid.uuid4().hex[:16]}"
        self.notifications[notification_id] = {"orderId": order_id, "key": key, "retracted": False}
        return self._keep(key, body, (201, {"notificationId": notification_id, "orderId": order_id}))

    def retract(self, key: str, body: dict[str, Any]) -> Answer:
        """``POST /notifications/retract``: undo what the notify keyed ``forwardKey`` did, or tombstone it."""
        forward_key, order_id = body.get("forwardKey"), body.get("orderId")
        if not key:
            return _refusal(400, "idempotency_key_required", header="Idempotency-Key")
        if not isinstance(forward_key, str) or not isinstance(order_id, str):
            return _refusal(422, "invalid_request", detail="orderId and forwardKey are required")
        replayed = self._replay(key, body)
        if replayed is not None:
            return replayed
        stored = self.answers.get(forward_key)
        if stored is not None and stored[1][0] == 201:
            notification_id = str(stored[1][1]["notificationId"])
            self.notifications[notification_id]["retracted"] = True
            undone = {"undone": True, "notificationId": notification_id, "orderId": order_id}
            return self._keep(key, body, (200, undone))
        self.tombstones.add(forward_key)
        reason = "never_applied" if stored is None else "refused"
        return self._keep(key, body, (200, {"undone": False, "reason": reason, "orderId": order_id}))

    def active(self, order_id: str) -> int:
        """How many notifications of ``order_id`` stand (sent and not retracted)."""
        return sum(1 for n in self.notifications.values() if n["orderId"] == order_id and not n["retracted"])


def notify_router(notifier: Notifier) -> APIRouter:
    """``POST /notifications`` and ``POST /notifications/retract``."""
    router = APIRouter()

    @router.post("/notifications")
    async def notify(request: Request) -> JSONResponse:
        status, body = notifier.notify(request.headers.get("Idempotency-Key", ""), await request.json())
        return JSONResponse(status_code=status, content=body)

    @router.post("/notifications/retract")
    async def retract(request: Request) -> JSONResponse:
        status, body = notifier.retract(request.headers.get("Idempotency-Key", ""), await request.json())
        return JSONResponse(status_code=status, content=body)

    return router


def notify_app(notifier: Notifier, auth: AgentAuth) -> FastAPI:
    """The service: :func:`notify_router` behind ``auth``'s token check."""
    app = FastAPI(title="notify")

    @app.exception_handler(CallerRefused)
    async def _refused(_: Request, exc: CallerRefused) -> JSONResponse:
        return exc.response()

    app.include_router(notify_router(notifier), dependencies=[Depends(auth)])

    @app.get("/notifications")
    async def notifications() -> dict[str, Any]:
        return {"notifications": notifier.notifications}

    return app


def local_app() -> FastAPI:
    """The service as a person runs it beside the local host (docs/extending.md):
    ``uvicorn --factory tests.notify_service:local_app --port 8083``. It trusts the local issuer's key file
    (``.data/local-issuer/``), whose tokens the devhost's agents get, and refuses the orders (their keys,
    ``a:<orderId>``) listed, comma-separated, in ``NOTIFY_UNREACHABLE``."""
    unreachable = {key.strip() for key in os.environ.get("NOTIFY_UNREACHABLE", "").split(",") if key.strip()}
    auth = AgentAuth.trusting(LocalIssuer.from_key_file(), audience=NOTIFY_AUDIENCE)
    return notify_app(Notifier(unreachable=unreachable), auth)
