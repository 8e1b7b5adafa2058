"""Remote-service clients the agents wrap, and how their failures are classified.

A :class:`RemoteService` performs one operation with an idempotency key and either returns a small
result summary or raises :class:`TransientError` (may succeed on retry: 5xx, 408, 429, a request with the
same key still in flight, timeouts, connection failures) or :class:`PermanentError` (a business refusal
no retry changes: out of stock, card declined, invalid carrier). The HTTP client sends the key in the
``Idempotency-Key`` header, as payment APIs expect, the same on every try (docs/design.md §3.6).

Where a service answers and how each operation maps onto a request is its :class:`ServiceBinding`
(``SERVICE_BINDINGS``, :mod:`orderflow.bindings`), never this code. A service that refuses the agent's
credential (401, 403) raises :class:`ServiceAuthRefused`: a configuration fault, not a business refusal.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Protocol

import httpx

from orderflow import tracing
from orderflow.bindings import CachedTokens, EntraAuth, OperationBinding, ServiceBinding
from orderflow.errors import PermanentError, ServiceAuthRefused, TransientError

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


_TRANSIENT_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})


def _text(value: Any) -> str:
    """A result value as a string; booleans the JSON way (``true``/``false``), the rest with ``str``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


_AUTH_STATUS = frozenset({401, 403})


def classify_http(
    status: int, body: Mapping[str, Any], *, service: str = ""
) -> TransientError | PermanentError:
    """Turn a non-2xx answer into the error to raise.

    401 and 403 are :class:`ServiceAuthRefused` (transient: a credential to fix, not an order to undo),
    whatever the body says. A body that says ``"permanent": false`` is transient whatever the status
    (``409 request_in_progress``); otherwise 408, 425, 429 and 5xx are transient and every other 4xx is
    permanent.
    """
    code = str(body.get("error") or f"http_{status}")
    if status in _AUTH_STATUS:
        return ServiceAuthRefused(service, status, code[:100])
    message = str(body.get("message") or body.get("detail") or code)[:300]
    permanent_flag = body.get("permanent")
    if permanent_flag is False or (permanent_flag is None and (status in _TRANSIENT_STATUS or status >= 500)):
        return TransientError(f"{code} (HTTP {status})")
    return PermanentError(code, f"{message} (HTTP {status})")


class HttpRemoteService:
    """A :class:`RemoteService` over HTTP (httpx, one pooled client per service), as its binding says.

    Args:
        name: Service name (the agent's: ``inventory``, ``payment``, ``shipping``).
        binding: Where the service answers, how to authenticate, its timeouts and operations.
        tokens: Bearer tokens of the host's credential; required when the binding's auth is ``entra``.
        client: Optional shared ``httpx.Client``.

    Raises:
        ValueError: the binding asks for tokens and none are given.
    """

    def __init__(
        self,
        name: str,
        binding: ServiceBinding,
        *,
        tokens: CachedTokens | None = None,
        client: httpx.Client | None = None,
    ) -> None:
        if isinstance(binding.auth, EntraAuth) and tokens is None:
            raise ValueError(f"{name}: the binding's auth is entra and the host gave no credential")
        self.name = name
        self.binding = binding
        self._tokens = tokens
        self._client = client or httpx.Client(
            base_url=binding.base_url, limits=httpx.Limits(max_connections=64)
        )

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
        """Make the operation's request (its binding's method and path, body ``{"orderId", **payload}``)
        with the ``Idempotency-Key``, ``Authorization`` (an ``entra`` binding) and ``Orderflow-Instance-Id``
        headers; see :meth:`RemoteService.call`. The call's timeout is ``timeout_s`` capped by the binding's.

        The call is a CLIENT span ``<METHOD> <path template>`` (HTTP semantic conventions, with the
        order's ids) whose W3C ``traceparent`` goes in the request headers; the HTTP client's own
        instrumentation (the Azure Monitor distro's) is suppressed inside it, so the call is one span.
        """
        route = self.binding.operations.get(operation)
        if route is None:
            raise PermanentError("unknown_operation", f"{self.name} has no operation {operation!r}")
        forward_key = payload.get("forwardKey")
        path = route.path_for(
            order_id=order_id,
            idempotency_key=idempotency_key,
            forward_key=forward_key if isinstance(forward_key, str) else None,
        )
        body = {"orderId": order_id, **payload}
        headers = {"Idempotency-Key": idempotency_key, **self._auth_headers()}
        if instance_id is not None:
            headers[INSTANCE_HEADER] = instance_id
        timeout = min(timeout_s, self.binding.timeout_s)
        with self._client_span(route, path, order_id, instance_id) as span:
            traceparent = tracing.current_traceparent()
            if traceparent is not None:
                headers[tracing.TRACEPARENT_HEADER] = traceparent
            try:
                response = self._client.request(
                    route.method,
                    path,
                    json=body,
                    headers=headers,
                    timeout=httpx.Timeout(timeout, connect=min(timeout, self.binding.connect_timeout_s)),
                )
            except httpx.TimeoutException as exc:
                raise TransientError(f"{self.name} timed out after {timeout:.1f} s") from exc
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
            return {key: _text(answer[key]) for key in route.result if key in answer}
        error = classify_http(response.status_code, answer, service=self.name)
        if isinstance(error, ServiceAuthRefused) and isinstance(self.binding.auth, EntraAuth):
            assert self._tokens is not None  # checked in __init__
            self._tokens.forget(self.binding.auth.scope)  # the next call asks for a new token
        raise error

    def _auth_headers(self) -> dict[str, str]:
        """``Authorization: Bearer <token>`` for an ``entra`` binding, nothing for ``none``.

        Raises:
            TransientError: the credential gave no token (the identity endpoint failed or refused).
        """
        auth = self.binding.auth
        if not isinstance(auth, EntraAuth):
            return {}
        assert self._tokens is not None  # checked in __init__
        try:
            return {"Authorization": f"Bearer {self._tokens.token(auth.scope)}"}
        except Exception as exc:  # azure-identity raises ClientAuthenticationError and others
            raise TransientError(f"{self.name}: no token for {auth.scope}: {type(exc).__name__}") from exc

    @contextmanager
    def _client_span(
        self, route: OperationBinding, path: str, order_id: str, instance_id: str | None
    ) -> Iterator[tracing.OpenSpan]:
        """The CLIENT span of one call to ``route`` (a non-recording one while tracing is off)."""
        if not tracing.enabled():
            yield tracing.NOT_RECORDING
            return
        url = httpx.URL(self.binding.base_url + path)
        attributes: dict[str, str | int] = {
            **tracing.order_attributes(order_id, instance_id, service=self.name),
            "http.request.method": route.method,
            "url.full": str(url),
            "url.template": route.path,
            "server.address": url.host,
        }
        if url.port is not None:
            attributes["server.port"] = url.port
        with (
            tracing.span(f"{route.method} {route.path}", kind=tracing.CLIENT, attributes=attributes) as span,
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
