"""Azure Functions trigger of the operator API: one anonymous HTTP trigger under ``/api/operator/``.

Function keys are not identities, so the trigger takes no key (``ANONYMOUS``): every request must carry
an Entra ID bearer token, which :func:`operator_api.handler.handle_operator_request` checks, with the
routes, methods and status codes it answers (docs/operator-api.md). One catch-all route hands every
request to that one handler, so the routing, the 404s and 405s are the same on both hosts; the web
console's static files (``/api/operator/console/``) come from the same handler.
"""

from __future__ import annotations

import logging
from urllib.parse import urlsplit

import azure.durable_functions as df
import azure.functions as func

from function_host.wiring import app_settings, dependencies, token_validator
from operator_api.handler import handle_operator_request, internal_error
from operator_api.routing import OperatorApiSections

logger = logging.getLogger(__name__)

bp = df.Blueprint()


@bp.function_name("operator_api")
@bp.route(route="operator/{*path}", methods=list(func.HttpMethod), auth_level=func.AuthLevel.ANONYMOUS)
def operator_api(req: func.HttpRequest) -> func.HttpResponse:
    """Every operator API call: the handler authenticates it, authorizes it, answers it and encodes the
    answer, which is sent as it is. A failure to build the app's dependencies is answered as the handler
    answers its own unexpected errors (``500 InternalError`` in the error shape), never with the host's
    bare 500."""
    url = urlsplit(req.url)
    try:
        deps, validator = dependencies(), token_validator()
        sections = OperatorApiSections.of(app_settings())
    except Exception:
        logger.exception("operator API %s %s: the app's dependencies failed", req.method, url.path[:200])
        response = internal_error()
    else:
        response = handle_operator_request(
            req.method,
            url.path,
            req.headers,
            req.get_body(),
            deps=deps,
            sections=sections,
            validator=validator,
            query=url.query,
        )
    headers = response.all_headers()  # its Content-Type, with the charset, is the one sent
    return func.HttpResponse(
        response.content(),
        status_code=response.status,
        headers=headers,
        mimetype=headers["Content-Type"].partition(";")[0],  # JSON, or a console file's type
        charset="utf-8",
    )
