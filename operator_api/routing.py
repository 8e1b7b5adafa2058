"""How a route is declared and how a request finds it: :class:`Route`, :class:`Call` and :func:`match`.

A route is declared once (:data:`operator_api.routes.ROUTES`): method, path template, the app roles of
which the caller needs one, its handler, and what the OpenAPI document says of it (the document is
generated from the same declarations, :mod:`operator_api.openapi`). A template's segments are literals,
``{name}`` (one non-empty segment, percent-decoded) or a last ``{*name}`` (the rest of the path as sent).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from pydantic import BaseModel

from operator_api.answers import OperatorResponse, Refused
from orderflow.dependencies import Dependencies
from orderflow.errors import InvalidMessage
from orderflow.operator_auth import Principal
from orderflow.settings import Clients, OperatorApi, Queues, Settings, Starter, Steps, Supervisor

API_PREFIX = "/api/operator"
"""Where the routes are: the Functions host's ``api`` route prefix, then ``operator``."""


@dataclass(frozen=True)
class Call:
    """One call, as a route's handler gets it.

    Attributes:
        path: The path as sent (percent-encoded), without its query string.
        params: The template's variables, decoded (``orderId``, ``queue``, ``deadLetterId``; a ``{*name}``
            as sent).
        order_id: The validated order key of a route with ``{orderId}``, else None.
        body: The raw body.
        principal: The verified caller; None on a route that takes no token.
        query: The query parameters (each given once).
        headers: The request headers (names in any case).
    """

    path: str
    params: Mapping[str, str]
    order_id: str | None = None
    body: bytes = b""
    principal: Principal | None = None
    query: Mapping[str, str] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """The order key of an order's route."""
        assert self.order_id is not None, "a route of one order"
        return self.order_id

    @property
    def caller(self) -> Principal:
        """The verified caller of a route that takes a token."""
        assert self.principal is not None, "a route that takes a token"
        return self.principal

    def if_match(self) -> str | None:
        """The ``If-Match`` header, if given."""
        return header(self.headers, "If-Match")

    def only(self, *names: str) -> None:
        """Refuse a query parameter other than ``names``.

        Raises:
            InvalidMessage: ``UnexpectedField``, naming the first in order.
        """
        unexpected = sorted(set(self.query) - set(names))
        if unexpected:
            raise InvalidMessage("UnexpectedField", f"unknown query parameter {unexpected[0]!r}")

    def limit(self, name: str, *, default: int, most: int) -> int:
        """The whole-number query parameter ``name``, from 1 to ``most``; ``default`` when absent.

        Raises:
            InvalidMessage: ``InvalidValue``.
        """
        text = self.query.get(name)
        if text is None:
            return default
        if not text.isascii() or not text.isdigit() or not 1 <= int(text) <= most:
            raise InvalidMessage("InvalidValue", f"{name}: a whole number from 1 to {most}")
        return int(text)


@dataclass(frozen=True, slots=True)
class OperatorApiSections:
    """What the operator API's routes read of the settings, one section each, handed to every handler
    beside the dependencies.

    Attributes:
        starter: The claim's timeout, the grace an operator's action gives the next attempt.
        steps: The retry budget a resubmission restores.
        clients: The client registry (whose queues, whose orders).
        queues: The deployment's own queue names.
        supervisor: How long a replayed dead letter's order waits for its reply.
        operator_api: The console's sign-in settings.
    """

    starter: Starter
    steps: Steps
    clients: Clients
    queues: Queues
    supervisor: Supervisor
    operator_api: OperatorApi

    @classmethod
    def of(cls, settings: Settings) -> OperatorApiSections:
        """The operator API's sections of ``settings``."""
        return cls(
            starter=settings.starter,
            steps=settings.steps,
            clients=settings.clients,
            queues=settings.queues,
            supervisor=settings.supervisor,
            operator_api=settings.operator_api,
        )


Handler = Callable[[Call, Dependencies, OperatorApiSections], OperatorResponse]
"""A route's handler: (the call, dependencies, the API's settings sections) -> response; a refusal is
raised as :class:`Refused`."""


@dataclass(frozen=True)
class Param:
    """A query or header parameter, as the OpenAPI document declares it."""

    name: str
    schema: Mapping[str, Any]
    description: str
    where: str = "query"

    def spec(self) -> dict[str, Any]:
        """The OpenAPI parameter object (never required: an absence is answered by the route)."""
        return {
            "name": self.name,
            "in": self.where,
            "required": False,
            "schema": dict(self.schema),
            "description": self.description,
        }


@dataclass(frozen=True)
class Route:
    """One route.

    Attributes:
        name: For logs and the 405 message (``review``, ``deadletters.replay``).
        method: The one method it takes.
        path: Its template under :data:`API_PREFIX` (``/orders/{orderId}/review``).
        roles: The app roles of which the caller needs one; empty: no token is read.
        handler: Answers the call.
        summary: The OpenAPI operation's summary.
        status: The status of its answer (200, 202, 308 ...).
        model: The pydantic model of its answer (``StateRecord``: the order view), None for none.
        answered: The OpenAPI description of its answer.
        body: The pydantic model of its request body, None for none.
        parameters: Its query and header parameters.
        refusals: The refusals (status, description) it answers besides those of every route with a token.
        documented: Whether the OpenAPI document lists it (the document and the console's files do not).
        not_allowed: The 405 message, when not ``<name> takes <method>``.
    """

    name: str
    method: str
    path: str
    roles: tuple[str, ...]
    handler: Handler
    summary: str = ""
    status: int = 200
    model: type[BaseModel] | None = None
    answered: str = ""
    body: type[BaseModel] | None = None
    parameters: tuple[Param, ...] = ()
    refusals: tuple[tuple[int, str], ...] = ()
    documented: bool = True
    not_allowed: str = ""

    @property
    def segments(self) -> tuple[str, ...]:
        """The template's segments."""
        return tuple(self.path.removeprefix("/").split("/"))

    @property
    def variables(self) -> tuple[str, ...]:
        """The names of its ``{name}`` segments, in order."""
        return tuple(s[1:-1] for s in self.segments if s.startswith("{") and not s.startswith("{*"))

    def fit(self, raw: list[str], parts: list[str]) -> dict[str, str] | None:
        """The template's variables if the path's segments (``raw`` as sent, ``parts`` decoded) fit it."""
        segments = self.segments
        rest = segments[-1].startswith("{*")
        if len(parts) != len(segments) and not (rest and len(parts) >= len(segments)):
            return None
        params: dict[str, str] = {}
        for i, segment in enumerate(segments):
            if segment.startswith("{*"):
                params[segment[2:-1]] = "/".join(raw[i:])
            elif segment.startswith("{"):
                if not parts[i]:
                    return None
                params[segment[1:-1]] = parts[i]
            elif segment != parts[i]:
                return None
        return params

    def literals(self) -> int:
        """How many literal segments it has: the more, the more specific."""
        return sum(not s.startswith("{") for s in self.segments)


def match(routes: tuple[Route, ...], method: str, path: str) -> tuple[Route, dict[str, str]]:
    """The route of ``method`` and ``path`` (as sent, without its query string) and its variables.

    Of the routes whose template fits the path, the most specific one that takes the method; when none
    takes it, the 405 names the most general one.

    Raises:
        Refused: ``404 NoSuchRoute``, or ``405 MethodNotAllowed`` with ``Allow``.
    """
    prefix = API_PREFIX + "/"
    # Split first, then decode each segment: "a:o-1%2Freview" is one (invalid) key, not a route.
    raw = path.removeprefix(prefix).split("/") if path.startswith(prefix) else []
    parts = [unquote(p) for p in raw]
    fitting = [(route, params) for route in routes if (params := route.fit(raw, parts)) is not None]
    if not raw or not fitting:
        raise Refused(404, "NoSuchRoute", f"no operator API route {path[:200]!r}; see docs/operator-api.md")
    taking = [found for found in fitting if found[0].method == method.upper()]
    if taking:
        return max(taking, key=lambda found: found[0].literals())
    route = min(fitting, key=lambda found: found[0].literals())[0]
    message = route.not_allowed or f"{route.name} takes {route.method}"
    raise Refused(405, "MethodNotAllowed", message, headers={"Allow": route.method})


def header(headers: Mapping[str, str], name: str) -> str | None:
    """The header ``name`` (any case), or None."""
    wanted = name.lower()
    return next((value for key, value in headers.items() if key.lower() == wanted), None)
