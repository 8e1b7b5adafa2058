"""Remote-service clients the agents wrap, and how their failures are classified.

A :class:`RemoteService` performs one operation with an idempotency key and either returns a small
result summary or raises :class:`TransientError` (may succeed on retry: 5xx, 408, 429, a request with the
same key still in flight, timeouts, connection failures) or :class:`PermanentError` (a business refusal
no retry changes: out of stock, card declined, invalid carrier). The HTTP client sends the key in the
``Idempotency-Key`` header, as payment APIs expect, the same on every try (docs/design.md §3.6).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from orderflow import tracing
from orderflow.errors import PermanentError, TransientError

logger = logging.getLogger(__name__)

INSTANCE_HEADER = "Orderflow-Instance-Id"
"""Request header naming the orchestration instance (attempt) a call is made for: lets the remote side,
and its audit, tell the attempts of one step apart (the idempotency key is the same in all of them)."""


class RemoteService(Protocol):
    """One remote service behind an agent."""

    name: str

    def call(
        self,
        operation: str,
        payload: Mapping[str, Any],
        *,
        order_id: str,
        idempotency_key: str,
        timeout_s: float,
        instance_id: str | None = None,
    ) -> dict[str, str]:
        """Perform ``operation`` once.

        Args:
            operation: The agent operation (``reserve``, ``charge``, ``ship``, or an undo: ``release``,
                ``refund``, ``cancel``, whose payload names the forward call's key as ``forwardKey``).
            payload: The request payload from the orchestration.
            order_id: The order.
            idempotency_key: Stable key of the step (or of its undo).
            timeout_s: Seconds this call may take in total.
            instance_id: The attempt the call is made for (correlation only, never part of the key).

        Returns:
            A small result summary (ids, amounts), every value a string (booleans as ``true``/``false``).

        Raises:
            TransientError: retrying may succeed.
            PermanentError: retrying never succeeds.
        """
        ...


@dataclass(frozen=True)
class Route:
    """How an operation maps onto HTTP: method, path template, request body builder and result fields."""

    path: str
    result_fields: tuple[str, ...]


ROUTES: Mapping[tuple[str, str], Route] = {
    ("inventory", "reserve"): Route("/inventory/reservations", ("reservationId",)),
    ("inventory", "release"): Route("/inventory/reservations/release", ("undone", "reason", "reservationId")),
    ("payment", "charge"): Route("/payments/charges", ("chargeId", "amount", "currency")),
    ("payment", "refund"): Route("/payments/refunds", ("undone", "reason", "chargeId", "refundId", "amount")),
    ("shipping", "ship"): Route("/shipping/shipments", ("shipmentId", "carrier")),
    # The second carrier: a courier posting to the same demo shipping service.
    ("courier", "ship"): Route("/shipping/shipments", ("shipmentId", "carrier")),
    ("courier", "cancel"): Route("/shipping/shipments/cancel", ("undone", "reason", "shipmentId")),
    ("shipping", "cancel"): Route("/shipping/shipments/cancel", ("undone", "reason", "shipmentId")),
}
"""(service, operation) → HTTP route of the demo services. The undo routes address the forward call by its
idempotency key (payload ``{"forwardKey": "{orderId}:{step}", ...}``) and answer ``undone`` true with the
effect's ids, or false (``never_applied`` / ``refused``: the key is then unusable for forward calls)."""

_TRANSIENT_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})


def _text(value: Any) -> str:
    """A result value as a string; booleans the JSON way (``true``/``false``), the rest with ``str``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def classify_http(status: int, body: Mapping[str, Any]) -> TransientError | PermanentError:
    """Turn a non-2xx answer into the error to raise.

    A body that says ``"permanent": false`` is transient whatever the status (``409 request_in_progress``);
    otherwise 408, 425, 429 and 5xx are transient and every other 4xx is permanent.
    """
    code = str(body.get("error") or f"http_{status}")
    message = str(body.get("message") or body.get("detail") or code)[:300]
    permanent_flag = body.get("permanent")
    if permanent_flag is False or (permanent_flag is None and (status in _TRANSIENT_STATUS or status >= 500)):
        return TransientError(f"{code} (HTTP {status})")
    return PermanentError(code, f"{message} (HTTP {status})")


class HttpRemoteService:
    """A :class:`RemoteService` over HTTP (httpx, one pooled client per service).

    Args:
        name: Service name (``inventory``, ``payment``, ``shipping``).
        base_url: Base URL of the service.
        client: Optional shared ``httpx.Client``.
    """

    def __init__(self, name: str, base_url: str, *, client: httpx.Client | None = None) -> None:
        self.name = name
        self._client = client or httpx.Client(base_url=base_url, limits=httpx.Limits(max_connections=64))

    def call(
        self,
        operation: str,
        payload: Mapping[str, Any],
        *,
        order_id: str,
        idempotency_key: str,
        timeout_s: float,
        instance_id: str | None = None,
    ) -> dict[str, str]:
        """POST the operation with the ``Idempotency-Key`` (and ``Orderflow-Instance-Id``) header; see
        :meth:`RemoteService.call`.

        The call is a CLIENT span ``POST <path>`` (HTTP semantic conventions, with the order's ids) whose
        W3C ``traceparent`` goes in the request headers; the HTTP client's own instrumentation (the Azure
        Monitor distro's) is suppressed inside it, so the call is one span, not two.
        """
        route = ROUTES.get((self.name, operation))
        if route is None:
            raise PermanentError("unknown_operation", f"{self.name} has no operation {operation!r}")
        body = {"orderId": order_id, **payload}
        headers = {"Idempotency-Key": idempotency_key}
        if instance_id is not None:
            headers[INSTANCE_HEADER] = instance_id
        with self._client_span(route, order_id, instance_id) as span:
            traceparent = tracing.current_traceparent()
            if traceparent is not None:
                headers[tracing.TRACEPARENT_HEADER] = traceparent
            try:
                response = self._client.post(
                    route.path,
                    json=body,
                    headers=headers,
                    timeout=httpx.Timeout(timeout_s),
                )
            except httpx.TimeoutException as exc:
                raise TransientError(f"{self.name} timed out after {timeout_s:.1f} s") from exc
            except httpx.TransportError as exc:
                raise TransientError(f"{self.name} unreachable: {type(exc).__name__}") from exc
            if span.is_recording():
                span.set_attribute("http.response.status_code", response.status_code)
                if not response.is_success:
                    span.set_attribute("error.type", str(response.status_code))
                    tracing.mark_outcome(span, f"http_{response.status_code}", error=True)
        try:
            answer: Any = response.json()
        except ValueError:
            answer = {}
        if not isinstance(answer, dict):
            answer = {}
        if response.is_success:
            return {key: _text(answer[key]) for key in route.result_fields if key in answer}
        raise classify_http(response.status_code, answer)

    @contextmanager
    def _client_span(
        self, route: Route, order_id: str, instance_id: str | None
    ) -> Iterator[tracing.OpenSpan]:
        """The CLIENT span of one call to ``route`` (a non-recording one while tracing is off)."""
        if not tracing.enabled():
            yield tracing.NOT_RECORDING
            return
        url = self._client.base_url.join(route.path)
        attributes: dict[str, str | int] = {
            **tracing.order_attributes(order_id, instance_id, service=self.name),
            "http.request.method": "POST",
            "url.full": str(url),
            "url.template": route.path,
            "server.address": url.host,
        }
        if url.port is not None:
            attributes["server.port"] = url.port
        with (
            tracing.span(f"POST {route.path}", kind=tracing.CLIENT, attributes=attributes) as span,
            _suppressed_http_instrumentation(),
        ):
            yield span

    def close(self) -> None:
        """Close the connection pool."""
        self._client.close()


@contextmanager
def _suppressed_http_instrumentation() -> Iterator[None]:
    """Keep httpx's OpenTelemetry instrumentation, if any is installed, from opening a second span."""
    try:
        from opentelemetry.instrumentation.utils import suppress_http_instrumentation  # noqa: PLC0415
    except ImportError:  # pragma: no cover - the Azure Monitor distro brings it
        yield
        return
    with suppress_http_instrumentation():
        yield
