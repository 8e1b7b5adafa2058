"""The operator API on the local host: the same handler the Azure trigger calls, served over HTTP.

:func:`create_operator_app` is an ASGI app that hands every request to
:func:`operator_api.handler.handle_operator_request` (in a worker thread: the handler reads and writes
the stores) and sends the bytes the handler encoded, so routes, status codes, refusals and the encoding
of a client's text are the Azure host's. When the
local issuer is given, the app also publishes its JWKS at the Entra-shaped path, so the operator API's
token check (``OPERATOR_JWKS_URI``) and ``python -m devhost.local_issuer login`` need nothing else.
"""

from __future__ import annotations

import logging
from collections.abc import MutableMapping
from typing import Any

from fastapi import FastAPI, Request, Response
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from devhost.local_issuer import LocalIssuer
from operator_api.answers import Refused
from operator_api.handler import MAX_BODY_BYTES, handle_operator_request
from operator_api.routes import CONSOLE_PATH
from operator_api.routing import OperatorApiSections
from orderflow.dependencies import Dependencies
from orderflow.operator_auth import TokenValidator, validator_from_settings
from orderflow.settings import Settings

METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
"""Every method is handed on, so the handler answers 405 for the ones a route does not take."""


logger = logging.getLogger(__name__)


def _untraced(scope: MutableMapping[str, Any]) -> bool:
    """FastAPI's own request spans (when tracing is on) leave out the console's files: they hold no data,
    the page polls them, and its sign-in lands there with the authorization code in the query."""
    path = str(scope.get("path", ""))
    return path == CONSOLE_PATH or path.startswith(CONSOLE_PATH + "/")


def create_operator_app(
    deps: Dependencies,
    sections: OperatorApiSections,
    validator: TokenValidator | None,
    *,
    issuer: LocalIssuer | None = None,
) -> FastAPI:
    """The local host's operator API.

    Args:
        deps: The host process's dependencies.
        sections: The settings sections the routes read.
        validator: Checks bearer tokens (None: the API is not configured and refuses every call).
        issuer: The local issuer whose JWKS the app also serves, or None.
    """
    app = FastAPI(
        title="orderflow operator API",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        telemetry={"operation_spans": False, "exclude": _untraced},
    )

    if issuer is not None:
        local = issuer

        @app.get(local.jwks_path)
        def keys() -> dict[str, Any]:
            return local.jwks()

    @app.exception_handler(HTTPException)
    async def refused(request: Request, exc: HTTPException) -> Response:
        if exc.status_code == 405:
            # A method the catch-all route does not list (TRACE, a made-up one): the handler answers
            # 404 for an unknown path and 405 with Allow for a route's, as for any other method.
            return await operator_api(request)
        # A path the catch-all route cannot match (a newline in it, say): answered as the handler answers
        # an unknown route, never in the framework's own shape.
        refused = Refused(exc.status_code, "NoSuchRoute", "no operator API route; see docs/operator-api.md")
        answer = refused.response()
        return Response(answer.content(), status_code=answer.status, headers=answer.all_headers())

    @app.api_route("/{path:path}", methods=METHODS)
    async def operator_api(request: Request) -> Response:
        # Read no more than the handler can take: it answers 413 for anything longer, and what lies
        # beyond the limit is never held in memory (nor read at all, before the token is checked).
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_BODY_BYTES:
                break
        answer = await run_in_threadpool(
            handle_operator_request,
            request.method,
            # The path as sent, still percent-encoded (as the Functions host passes it): the handler splits
            # it on "/" before it decodes a segment, so an encoded "/" cannot make a route.
            request.scope.get("raw_path", b"").decode("latin-1") or request.url.path,
            dict(request.headers),
            bytes(body[: MAX_BODY_BYTES + 1]),
            deps=deps,
            sections=sections,
            validator=validator,
            query=request.url.query,
        )
        return Response(answer.content(), status_code=answer.status, headers=answer.all_headers())

    return app


def local_operator_app(
    deps: Dependencies, settings: Settings, *, issuer: LocalIssuer | None = None
) -> FastAPI:
    """The local host's operator API on ``settings``: its token check, and the sections its routes read.

    Raises:
        ValueError: the settings configure the API only in part.
    """
    validator = validator_from_settings(settings.operator_api, settings.clients)
    if validator is None:
        logger.warning(
            "devhost %s operator API is not configured: it refuses every call", settings.queues.HOST_ID
        )
    return create_operator_app(deps, OperatorApiSections.of(settings), validator, issuer=issuer)
