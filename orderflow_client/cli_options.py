"""Options the ``orderflow`` commands share (:mod:`orderflow_client.cli`,
:mod:`orderflow_client.cli_bulk`): where the operator API is, the token, and the order filters of
``orders list``, which the bulk commands take with the same names and meaning."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

API_URL_VARIABLE = "ORDERFLOW_API_URL"
"""Where the operator API commands find the API when ``--api-url`` is not given."""
TOKEN_VARIABLE = "ORDERFLOW_TOKEN"
"""Where the operator API commands find the bearer token when ``--token-file`` is not given."""

ApiUrl = Annotated[
    str | None,
    typer.Option(
        "--api-url",
        envvar=API_URL_VARIABLE,
        help="The operator API's base URL: the Function App's, or the local host's http://127.0.0.1:<port>.",
    ),
]
TokenFile = Annotated[
    Path | None,
    typer.Option(help=f"A file holding an access token for the operator API (else ${TOKEN_VARIABLE})."),
]

StateFilter = Annotated[str | None, typer.Option(help="processState values, comma-separated.")]
ClientFilter = Annotated[str | None, typer.Option("--client", help="A client id.")]
VersionFilter = Annotated[str | None, typer.Option(help="A workflow version.")]
StuckForFilter = Annotated[int | None, typer.Option(help="Not written for this many seconds.")]
FailedSinceFilter = Annotated[str | None, typer.Option(help="Error or CompensationFailed since (ISO 8601).")]


def order_filters(
    state: str | None,
    client_id: str | None,
    workflow_version: str | None,
    stuck_for: int | None,
    failed_since: str | None,
) -> dict[str, str | int | None]:
    """The filter options as ``GET /orders`` query parameters (None ones are left out when sent)."""
    return {
        "state": state,
        "client": client_id,
        "workflowVersion": workflow_version,
        "stuckFor": stuck_for,
        "failedSince": failed_since,
    }
