"""What the ``orderflow`` commands share: the consoles, one-line errors, the settings, and calls to the
operator API with the caller's token (:func:`call_operator_api`)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from orderflow.client_text import visible
from orderflow.errors import InvalidMessage, OrderflowError
from orderflow.messages import validate_order_key
from orderflow.settings import Settings, describe_invalid_settings
from orderflow_client.cli_options import API_URL_VARIABLE, TOKEN_VARIABLE
from orderflow_client.operator_client import OperatorAnswer, OperatorApiClient
from orderflow_client.order_render import shown

console = Console()
errors = Console(stderr=True, soft_wrap=True)

OrderKey = Annotated[str, typer.Argument(help="The order's key: <client id>:<order id>.")]


def markup(value: object) -> str:
    """``value`` for a rich markup string: its text made :func:`~orderflow.client_text.visible` (no
    control character reaches the terminal) and never read as markup."""
    return escape(visible(str(value)))


def fail(message: str, *, code: int) -> NoReturn:
    """Print ``message`` as one line on stderr and exit with ``code`` (2: bad input; 1: the system
    refused or could not be reached)."""
    errors.print(f"[red]error:[/red] {markup(message)}")
    raise typer.Exit(code)


def count(number: int, noun: str) -> str:
    """``number`` and ``noun``, plural unless ``number`` is 1: ``1 order``, ``2 orders``, ``0 orders``."""
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def load_settings(env_file: Path | None) -> Settings:
    """The settings, from the environment or from ``env_file`` (``local.settings.json`` or a flat JSON
    object of settings).

    Raises:
        typer.Exit: 2, after a one-line error, when the file cannot be read or is not a JSON object, or a
            setting has a value of the wrong type (named, with the value and what it should be).
    """
    env: dict[str, Any] | None = None
    where = ""
    if env_file is not None:
        where = f"{env_file}: "
        try:
            values = json.loads(env_file.read_text(encoding="utf-8"))
        except OSError as exc:
            fail(f"{env_file}: cannot read the settings file: {exc.strerror or exc}", code=2)
        except ValueError as exc:  # not UTF-8, or not JSON
            fail(f"{env_file}: not valid settings: {' '.join(str(exc).split())[:300]}", code=2)
        found = values.get("Values", values) if isinstance(values, dict) else None
        if not isinstance(found, dict):
            fail(f"{env_file}: not a JSON object of settings (or local.settings.json)", code=2)
        env = {**found}
    try:
        return Settings.load(env)
    except ValidationError as exc:
        fail(f"{where}{describe_invalid_settings(exc)}", code=2)


def row(table: Table, *cells: object) -> None:
    """Add a row of ``cells`` to ``table``, each as :func:`~orderflow_client.order_render.shown` text."""
    # A record holds text others wrote (reasons, operator names): shown as text, never as markup.
    table.add_row(*(shown(str(cell)) for cell in cells))


def _token(token_file: Path | None) -> str:
    """The bearer token, from ``token_file`` or :data:`TOKEN_VARIABLE`; never shown, not even in part.

    Raises:
        typer.Exit: 2, after a one-line error, when there is none or the file cannot be read.
    """
    if token_file is not None:
        try:
            token = token_file.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            fail(f"{token_file}: cannot read the token file: {getattr(exc, 'strerror', None) or exc}", code=2)
        if not token:
            fail(f"{token_file}: the token file is empty", code=2)
        return token
    token = os.environ.get(TOKEN_VARIABLE, "").strip()
    if not token:
        fail(
            f"no token: give --token-file or set {TOKEN_VARIABLE} (locally: python -m devhost.local_issuer "
            "login --name <you> --role <app role> --out <file>)",
            code=2,
        )
    return token


def connect_operator_api(api_url: str | None, token_file: Path | None) -> OperatorApiClient:
    """A client of the operator API at ``api_url`` with the caller's token.

    Raises:
        typer.Exit: 2, after a one-line error, when there is no URL or token, or the URL is not https
            (plain http only on a loopback host).
    """
    if not api_url:
        fail(f"give --api-url or set {API_URL_VARIABLE} (the operator API's base URL)", code=2)
    token = _token(token_file)
    try:
        return OperatorApiClient(
            api_url, token=token, timeout_s=load_settings(None).operator_api.OPERATOR_API_TIMEOUT_S
        )
    except ValueError as exc:
        fail(str(exc), code=2)


def call_operator_api(
    order_id: str | None,
    api_url: str | None,
    token_file: Path | None,
    call: Callable[[OperatorApiClient], OperatorAnswer],
) -> OperatorAnswer:
    """Call the operator API (about ``order_id``, if given) with the caller's token and return a
    successful answer.

    Raises:
        typer.Exit: 2, after a one-line error, on bad input (a bad order id, no URL or token, a 400); 1
            when the API refused (401, 403, 404, 409, 412 ...) or could not be reached.
    """
    if order_id is not None:
        check_order_key(order_id)
    with connect_operator_api(api_url, token_file) as client:
        try:
            answer = call(client)
        except OrderflowError as exc:
            fail(exc.detail, code=1)
    if not answer.ok:
        refused = f"refused: {answer.status} {answer.error_code}: {answer.error_message}"
        fail(refused, code=2 if answer.status == 400 else 1)
    return answer


def check_order_key(order_id: str) -> None:
    """Refuse text that is not an order key before anything is asked of the API.

    Raises:
        typer.Exit: 2, after a one-line error; for a client's own order id, which is not a key
            (docs/clients.md), the error says what to name the order by.
    """
    try:
        validate_order_key(order_id)
    except InvalidMessage as exc:
        hint = f" (orders are named by key, <client id>:{order_id}: see `orderflow orders list --client ID`)"
        fail(exc.description + ("" if ":" in order_id else hint), code=2)


def state_of(answer: OperatorAnswer) -> str:
    """The ``processState`` of the order an action's answer holds, or ``?``."""
    order = answer.body.get("order")
    return str(order.get("processState", "?")) if isinstance(order, dict) else "?"
