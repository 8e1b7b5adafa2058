"""The operator API's HTTP trigger invoked through the worker: the ``RpcHttp`` the host sends, the one the
worker answers, and a store in memory to run it over.

:func:`answer` hands the worker the ``TypedData.http`` the Functions host sends for an HTTP trigger
(method, URL, headers, body, the route's ``{*path}`` parameter) and returns the ``RpcHttp`` the worker
encodes from the trigger's ``func.HttpResponse``; :class:`Answer` reads it as a client would.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from function_host.blueprints import operator_api as operator_api_blueprint
from operator_api.answers import OperatorResponse
from operator_api.handler import handle_operator_request
from operator_api.routing import OperatorApiSections
from orderflow.clock import FakeClock
from tests.host_deps import HostDeps
from tests.operator_tokens import TrustedIssuer
from tests.unit.fakes import memory_deps
from tests.worker.rpc import protos
from tests.worker.worker import FunctionsWorker, failure

HOST = "https://orderflow-func.azurewebsites.net"
"""The app's URL as the host's front end passes it."""


def http_request(method: str, path: str, headers: dict[str, str], body: bytes = b"") -> Any:
    """The trigger's ``TypedData``, as the host sends an HTTP request to ``path`` (perhaps with its query
    string; the route's ``{*path}`` among its parameters)."""
    return protos.TypedData(
        http=protos.RpcHttp(
            method=method,
            url=f"{HOST}{path}",
            headers={"host": HOST.removeprefix("https://"), **{k.lower(): v for k, v in headers.items()}},
            body=protos.TypedData(bytes=body),
            params={"path": path.partition("?")[0].removeprefix("/api/operator/")},
        )
    )


def raw_body(body: Any) -> bytes:
    """``body`` as sent: bytes as they are, None as nothing, anything else as its JSON."""
    if isinstance(body, bytes):
        return body
    return b"" if body is None else json.dumps(body).encode()


def answer(worker: FunctionsWorker, method: str, path: str, headers: dict[str, str], body: Any = None) -> Any:
    """Invoke ``operator_api`` and return the HTTP response (``RpcHttp``) the worker hands the host.

    Raises:
        AssertionError: the worker answered the invocation with a failure (the function raised).
    """
    response = worker.invoke("operator_api", {"req": http_request(method, path, headers, raw_body(body))})
    assert failure(response) is None, failure(response)
    return response.return_value.http


def header(http: Any, name: str) -> str:
    """A response header, by name in any case (as HTTP reads them)."""
    [value] = [v for k, v in http.headers.items() if k.lower() == name.lower()]
    return str(value)


def content(http: Any) -> bytes:
    """The response body's bytes, whichever ``TypedData`` kind the worker encoded them as."""
    kind = http.body.WhichOneof("data")
    return bytes(http.body.bytes) if kind == "bytes" else str(http.body.string).encode()


def body_of(http: Any) -> dict[str, Any]:
    """The response body's JSON object."""
    data: dict[str, Any] = json.loads(content(http))
    return data


@dataclass(frozen=True)
class Answer:
    """A response the worker handed the host: status, headers (names lower-cased) and body."""

    status: int
    headers: dict[str, str]
    content: bytes

    @classmethod
    def of(cls, http: Any) -> Answer:
        """The ``RpcHttp`` response, read."""
        return cls(int(http.status_code), {k.lower(): v for k, v in http.headers.items()}, content(http))

    @property
    def body(self) -> dict[str, Any]:
        """The JSON body."""
        data: dict[str, Any] = json.loads(self.content)
        return data

    @property
    def code(self) -> str:
        """``error.code`` of a refusal."""
        return str(self.body["error"]["code"])


def as_handler_answers(response: OperatorResponse) -> Answer:
    """What the handler answers, in the form :class:`Answer` reads the worker's response in."""
    return Answer(
        response.status, {k.lower(): v for k, v in response.all_headers().items()}, response.content()
    )


@dataclass(frozen=True)
class OperatorCall:
    """Calls the operator API through the worker, and the same request through the handler alone.

    Attributes:
        worker: The worker.
        deps: The dependencies the trigger runs on.
        trusted: The local issuer whose tokens the trigger trusts.
    """

    worker: FunctionsWorker
    deps: HostDeps
    trusted: TrustedIssuer

    def __call__(
        self, method: str, path: str, headers: dict[str, str] | None = None, body: Any = None
    ) -> Answer:
        """The worker's answer to one request (``path`` under ``/api/operator``, with any query string)."""
        return Answer.of(answer(self.worker, method, f"/api/operator{path}", headers or {}, body))

    def handler(
        self, method: str, path: str, headers: dict[str, str] | None = None, body: Any = None
    ) -> Answer:
        """The handler's answer to the same request, without the worker (for a request that writes
        nothing: it runs on the same store)."""
        bare, _, query = f"/api/operator{path}".partition("?")
        response = handle_operator_request(
            method,
            bare,
            headers or {},
            raw_body(body),
            deps=self.deps,
            sections=OperatorApiSections.of(self.deps.settings),
            validator=self.trusted.validator,
            query=query,
        )
        return as_handler_answers(response)


def operator_dependencies(clock: FakeClock, **settings: Any) -> HostDeps:
    """The trigger's dependencies in memory (with dead-letter queues and an alert store) on ``clock``, with
    the settings the Azure host loads (``function_host.wiring.load_settings``: one response queue) and
    ``settings`` over them; the registry holds ``tests.unit.fakes``' test client unless ``CLIENTS`` is
    given."""
    return memory_deps(clock, HOST_ID="", AGENT_RESPONSES_PER_HOST=False, **settings)


def wire_operator_api(monkeypatch: pytest.MonkeyPatch, deps: HostDeps, trusted: TrustedIssuer) -> None:
    """Make the trigger run on ``deps`` and trust ``trusted``'s tokens, at the seams the Azure host wires."""
    monkeypatch.setattr(operator_api_blueprint, "dependencies", lambda: deps)
    monkeypatch.setattr(operator_api_blueprint, "app_settings", lambda: deps.settings)
    monkeypatch.setattr(operator_api_blueprint, "token_validator", lambda: trusted.validator)


def operator_call(
    monkeypatch: pytest.MonkeyPatch, worker: FunctionsWorker, deps: HostDeps, trusted: TrustedIssuer
) -> Iterator[OperatorCall]:
    """An :class:`OperatorCall` on ``deps`` for the length of a fixture."""
    wire_operator_api(monkeypatch, deps, trusted)
    yield OperatorCall(worker, deps, trusted)
