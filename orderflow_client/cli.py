"""``orderflow``: the command line, a thin wrapper over the client SDK (:mod:`orderflow_client.client`)
and the operator API's client (:mod:`orderflow_client.operator_client`).

Connections come from the same settings the hosts read (``STORAGE_CONNECTION_STRING``,
``COSMOS_ENDPOINT``, ``COSMOS_KEY`` ...), from the environment or ``--env-file``; ``review`` and
``compensate`` call the operator API at ``--api-url`` (``ORDERFLOW_API_URL``) with a bearer token from
``--token-file`` or ``ORDERFLOW_TOKEN``, which is never shown. ``bulk``
(:mod:`orderflow_client.cli_bulk`) acts on every order a filter matches.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import re
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from pydantic import TypeAdapter, ValidationError
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from orderflow import telemetry
from orderflow.client_text import visible
from orderflow.clients import RegisteredClient
from orderflow.errors import InvalidMessage, NotFound, OrderflowError
from orderflow.messages import (
    INVALID_JSON,
    NOT_AN_OBJECT,
    TOO_LARGE,
    QueueName,
    StatusReply,
    decode_json_object,
    json_type,
    validate_order_key,
)
from orderflow.records import CompensationEntry, ProcessState, UndoStatus
from orderflow.settings import Settings, describe_invalid_settings
from orderflow.wiring import connect_queues, connect_stores
from orderflow_client.alert_render import alerts_table, supervisor_panel
from orderflow_client.cli_bulk import bulk_commands
from orderflow_client.cli_options import (
    API_URL_VARIABLE,
    TOKEN_VARIABLE,
    ApiUrl,
    ClientFilter,
    FailedSinceFilter,
    StateFilter,
    StuckForFilter,
    TokenFile,
    VersionFilter,
    order_filters,
)
from orderflow_client.client import FINAL_STATUSES, OrderflowClient
from orderflow_client.operator_client import OperatorAnswer, OperatorApiClient
from orderflow_client.order_render import order_panel, orders_table, shown

app = typer.Typer(help="Submit orders, watch their status, inspect the state store.", no_args_is_help=True)
console = Console()
errors = Console(stderr=True, soft_wrap=True)

OrderKey = Annotated[str, typer.Argument(help="The order's key: <client id>:<order id>.")]
ReplyTo = Annotated[str, typer.Option("--reply-to", help="This client's private reply queue.")]


class _StderrLog(logging.Handler):
    """Writes log records as lines to the current ``sys.stderr``, looked up per record (as the standard
    library's last-resort handler does), so output redirected after start-up is followed."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
        except Exception:  # a broken stderr must not turn a log line into a crash
            self.handleError(record)


@app.callback()
def _options(
    ctx: typer.Context,
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose",
            "-v",
            help="Also print the warnings the queue and store adapters log (unreachable services, "
            "retries, dead-lettered messages).",
        ),
    ] = False,
) -> None:
    """Submit orders, watch their status, inspect the state store."""
    # Without a handler, Python prints warnings on stderr by itself; the adapters log one for a failure
    # the command then reports as its error, so by default only errors are shown, the error only once.
    telemetry.guard_log_records()  # a warning may name a message id a client chose
    handler = _StderrLog(logging.WARNING if verbose else logging.ERROR)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    ctx.call_on_close(lambda: root.removeHandler(handler))


def _markup(value: object) -> str:
    """``value`` for a rich markup string: its text made :func:`~orderflow.client_text.visible` (no
    control character reaches the terminal) and never read as markup."""
    return escape(visible(str(value)))


def _fail(message: str, *, code: int) -> NoReturn:
    """Print ``message`` as one line on stderr and exit with ``code`` (2: bad input; 1: the system
    refused or could not be reached)."""
    errors.print(f"[red]error:[/red] {_markup(message)}")
    raise typer.Exit(code)


def _count(number: int, noun: str) -> str:
    """``number`` and ``noun``, plural unless ``number`` is 1: ``1 order``, ``2 orders``, ``0 orders``."""
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _settings(env_file: Path | None) -> Settings:
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
            _fail(f"{env_file}: cannot read the settings file: {exc.strerror or exc}", code=2)
        except ValueError as exc:  # not UTF-8, or not JSON
            _fail(f"{env_file}: not valid settings: {' '.join(str(exc).split())[:300]}", code=2)
        found = values.get("Values", values) if isinstance(values, dict) else None
        if not isinstance(found, dict):
            _fail(f"{env_file}: not a JSON object of settings (or local.settings.json)", code=2)
        env = {**found}
    try:
        return Settings.load(env)
    except ValidationError as exc:
        _fail(f"{where}{describe_invalid_settings(exc)}", code=2)


_QUEUE_NAME: TypeAdapter[str] = TypeAdapter(QueueName)


def _check_reply_to(reply_to: str, settings: Settings) -> None:
    """The one check of ``--reply-to``, made before anything is read, sent or received: a valid queue
    name (the rule a submitted order's ``replyTo`` is validated by), and not one of orderflow's own
    queues (replies sent there would be taken for requests; watching it would dead-letter everything
    on it as foreign).

    Raises:
        typer.Exit: 2, after a one-line error.
    """
    try:
        _QUEUE_NAME.validate_python(reply_to)
    except ValidationError as exc:
        cause = exc.errors()[0].get("ctx", {}).get("error")
        _fail(f"--reply-to {cause or exc.errors()[0]['msg']}", code=2)
    reserved = settings.reserved_queue(reply_to)
    if reserved is not None:
        _fail(f"--reply-to {reply_to!r} is {reserved}, not a client's reply queue", code=2)


def _registered_client(reply_to: str, settings: Settings) -> RegisteredClient:
    """The registered client (``CLIENTS``) whose reply queue is ``--reply-to``: its inbound queue is where
    its orders go (docs/clients.md).

    Raises:
        typer.Exit: 2, after a one-line error, when no registered client has that reply queue.
    """
    for client in settings.clients():
        if client.reply_queue == reply_to:
            return client
    _fail(
        f"--reply-to {reply_to!r} is not the reply queue of a registered client (CLIENTS); orders naming it "
        "would be dead-lettered (ReplyToNotRegistered)",
        code=2,
    )


def _client_by_id(client_id: str | None, settings: Settings) -> RegisteredClient:
    """The registered client ``--client`` names, or the only one when it is omitted.

    Raises:
        typer.Exit: 2, after a one-line error: no such client, or ``--client`` omitted among several.
    """
    clients = list(settings.clients())
    if client_id is None:
        if len(clients) == 1:
            return clients[0]
        _fail(f"--client is needed: {len(clients)} clients are registered (CLIENTS)", code=2)
    for client in clients:
        if client.client_id == client_id:
            return client
    _fail(f"--client {client_id!r} is not a registered client (CLIENTS)", code=2)


_JSON_WHITESPACE = re.compile(r"[ \t\n\r]*")


def _skip_whitespace(text: str, pos: int) -> int:
    match = _JSON_WHITESPACE.match(text, pos)
    return match.end() if match else pos


def _array_elements(path: Path, text: str) -> list[tuple[int, str]]:
    """The source text of each element of the JSON array ``text``, with the line it starts on.

    Only finds where elements start and end: each is then decoded on its own by the service's strict
    decoder, as the service would decode it.

    Raises:
        typer.Exit: 2, after a one-line error, when ``text`` is not a JSON array.
    """
    scanner = json.JSONDecoder()  # lenient, for the extent of each element only
    elements: list[tuple[int, str]] = []
    line, counted = 1, 0
    pos = _skip_whitespace(text, 1)
    closed = text.startswith("]", pos)
    while not closed:
        try:
            _, end = scanner.raw_decode(text, pos)
        except RecursionError:
            _fail(f"{path}: order {len(elements) + 1} nests arrays or objects too deeply to be read", code=2)
        except ValueError as exc:  # JSONDecodeError (with line and column), or too many digits
            _fail(f"{path}: not a JSON array of orders: {str(exc)[:200]}", code=2)
        line += text.count("\n", counted, pos)
        counted = pos
        elements.append((line, text[pos:end]))
        pos = _skip_whitespace(text, end)
        if text.startswith(",", pos):
            pos = _skip_whitespace(text, pos + 1)
        elif text.startswith("]", pos):
            closed = True
        else:
            line_at = text.count("\n", 0, pos) + 1
            _fail(f"{path}: not a JSON array of orders: expected ',' or ']' on line {line_at}", code=2)
    pos = _skip_whitespace(text, pos + 1)
    if pos < len(text):
        line_at = text.count("\n", 0, pos) + 1
        _fail(f"{path}: not a JSON array of orders: more data after it on line {line_at}", code=2)
    return elements


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


def _decode_order(path: Path, where: str, body: str) -> dict[str, Any]:
    """One order's JSON text decoded exactly as the service decodes a message body
    (:func:`orderflow.messages.decode_json_object`: no duplicate keys, no NaN, exact decimals ...).

    Raises:
        typer.Exit: 2, after a one-line error naming the file, the order and the service's reason.
    """
    try:
        return decode_json_object(body)
    except InvalidMessage as exc:
        if exc.reason == NOT_AN_OBJECT:
            _fail(
                f"{path}: {where or 'order 1'} is a JSON {json_type(json.loads(body))}, not an object", code=2
            )
        place = f"{where}: " if where else ""
        # The service's words, of a message body: here the body is an order in a file.
        what = f"the order {exc.description[5:]}" if exc.description.startswith("body ") else exc.description
        _fail(f"{path}: {place}{what} (the service refuses this as {exc.reason})", code=2)


def _read_orders(path: Path, *, reply_to: str) -> list[dict[str, Any]]:
    """The orders in ``path``: one JSON order, a JSON array of orders, or JSON lines, each decoded as
    strictly as the service decodes a submission, so that nothing the service would dead-letter as
    ``InvalidJson`` (a duplicate key, ``NaN`` ...) is silently made valid by re-encoding it.

    An order without ``replyTo`` gets ``reply_to``; one naming another queue is refused rather than
    redirected, since ``replyTo`` is part of the order (a resubmission with another would conflict).

    Raises:
        typer.Exit: 2, after a one-line error naming the file, when it cannot be read, is not UTF-8, holds
            no orders, holds something the service would refuse as JSON or something other than JSON
            objects, or an order names a ``replyTo`` other than ``reply_to``.
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        _fail(f"{path}: cannot read the order file: {exc.strerror or exc}", code=2)
    try:
        # utf-8-sig: editors on Windows write a byte-order mark (the file's, not the order's: the CLI
        # sends each order re-encoded, without one).
        text = data.decode("utf-8-sig").strip(" \t\r\n")
    except UnicodeDecodeError as exc:
        _fail(
            f"{path}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
            "save the file as UTF-8",
            code=2,
        )
    bodies: list[tuple[str, str]]  # (where in the file, the order's JSON text)
    if text.startswith("["):
        bodies = [
            (f"order {n} (line {line})", body)
            for n, (line, body) in enumerate(_array_elements(path, text), 1)
        ]
    else:
        # "\n" only: str.splitlines() would also split at U+2028 and others, which JSON strings may hold.
        lines = [(n, line) for n, line in enumerate(text.split("\n"), 1) if line.strip(" \t\r")]
        bodies = [("", text)] if text else []
        if len(lines) > 1 and _is_json(lines[0][1]):
            try:
                decode_json_object(text)
            except InvalidMessage as exc:
                # Not one order: JSON lines, if its first line is JSON by itself.
                if exc.reason in (INVALID_JSON, TOO_LARGE):
                    bodies = [(f"order {n} (line {line})", body) for n, (line, body) in enumerate(lines, 1)]
    if not bodies:
        _fail(
            f"{path}: no orders in the file: expected a JSON order, a JSON array of orders or JSON lines",
            code=2,
        )
    orders = [_decode_order(path, where, body) for where, body in bodies]
    for (where, _), order in zip(bodies, orders, strict=True):
        named = order.get("replyTo", reply_to)
        if named != reply_to:
            _fail(
                f"{path}: {where or 'the order'} has replyTo {json.dumps(named)} but --reply-to is "
                f"{reply_to!r}; make them agree, or leave replyTo out of the file to use --reply-to",
                code=2,
            )
        order.setdefault("replyTo", reply_to)
    return orders


def generate_orders(count: int, *, seed: int, reply_to: str) -> list[dict[str, Any]]:
    """``count`` valid synthetic orders (deterministic for ``seed``), for trying the system out."""
    rng = random.Random(seed)
    run = uuid.UUID(int=rng.getrandbits(128)).hex[:8]
    orders = []
    for n in range(count):
        items = [
            {"sku": str(rng.randint(1, 2000)), "quantity": rng.randint(1, 5)}
            for _ in range(rng.randint(1, 4))
        ]
        orders.append(
            {
                "schemaVersion": 1,
                "orderId": f"gen-{run}-{n:05d}",
                "customerId": str(rng.randint(1, 1500)),
                "customerName": f"Customer#{rng.randint(1, 1500):09d}",
                "currency": "USD",
                "amount": f"{rng.randint(100, 500000) / 100:.2f}",
                "items": items,
                "carrier": rng.choice(["AIR", "MAIL", "SHIP", "TRUCK", "RAIL", "FOB", "REG AIR"]),
                "replyTo": reply_to,
            }
        )
    return orders


@app.command()
def submit(
    reply_to: ReplyTo,
    order_file: Annotated[Path | None, typer.Argument(help="JSON order, JSON array, or JSON lines.")] = None,
    generate: Annotated[int, typer.Option(min=0, help="Generate this many synthetic orders instead.")] = 0,
    seed: Annotated[int | None, typer.Option(help="Seed of --generate (random by default).")] = None,
    env_file: Annotated[
        Path | None, typer.Option(help="local.settings.json or a JSON object of settings.")
    ] = None,
) -> None:
    """Send orders to the submission queue; replies go to --reply-to.

    The file is read as strictly as the service reads an order: a duplicate key, NaN ... refuse the
    whole file, and nothing is sent. An order in the file may name --reply-to as its replyTo, but no
    other queue. Exits 2 on a file or option that cannot be used, or if any order was not sent (each is
    named with its error); 1 if the queue could not be reached.
    """
    if order_file is not None and generate:
        _fail("give an order file or --generate N, not both", code=2)
    if order_file is None and not generate:
        _fail("give an order file or --generate N", code=2)
    if seed is None:
        seed = random.SystemRandom().randrange(2**31)  # fresh order ids on every run
    settings = _settings(env_file)
    _check_reply_to(reply_to, settings)
    registered = _registered_client(reply_to, settings)
    orders = (
        _read_orders(order_file, reply_to=reply_to)
        if order_file
        else generate_orders(generate, seed=seed, reply_to=reply_to)
    )
    client = OrderflowClient(
        connect_queues(settings), reply_queue=reply_to, orders_queue=registered.inbound_queue
    )
    sent = 0
    with typer.progressbar(orders, label="submitting") as progress:
        for order in progress:
            try:
                client.submit(order)
                sent += 1
            except (InvalidMessage, ValueError) as exc:
                console.print(f"[red]not sent[/red] {_markup(order.get('orderId', '?'))}: {_markup(exc)}")
            except OrderflowError as exc:
                _fail(f"sending failed after {sent} of {_count(len(orders), 'order')}: {exc}", code=1)
    console.print(
        f"submitted {sent} of {_count(len(orders), 'order')}; replies go to [bold]{_markup(reply_to)}[/bold]"
    )
    if sent < len(orders):
        # A script must see that some orders were not sent, not only a person reading the output.
        raise typer.Exit(2)


@app.command()
def watch(
    reply_to: ReplyTo,
    timeout: Annotated[
        float, typer.Option(help="Stop after this many seconds (0: read what is there now, once).")
    ] = 60.0,
    env_file: Annotated[Path | None, typer.Option()] = None,
) -> None:
    """Print status replies from the reply queue as they arrive, then a summary.

    Exits 2 on a negative --timeout or an unusable --reply-to, 1 if the queue could not be reached.
    """
    if math.isnan(timeout) or timeout < 0:
        _fail(f"--timeout must be a number of seconds, 0 or more, not {timeout}", code=2)
    settings = _settings(env_file)
    _check_reply_to(reply_to, settings)
    registered = _registered_client(reply_to, settings)
    client = OrderflowClient(
        connect_queues(settings), reply_queue=reply_to, orders_queue=registered.inbound_queue
    )
    deadline = time.monotonic() + timeout
    while True:  # at least one poll, so that --timeout 0 reads what is on the queue now
        for reply in client.poll():
            _print_reply(reply)
        if time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    replies = client.replies
    final = sum(1 for r in replies.latest.values() if r.status in FINAL_STATUSES)
    # Foreign messages are dead-lettered by the poll; said here, since its warning is not shown.
    foreign = f", {_count(replies.foreign, 'foreign message')} dead-lettered" if replies.foreign else ""
    console.print(
        f"{_count(len(replies.latest), 'order')} seen, {final} settled, "
        f"{_count(replies.duplicates, 'duplicate')}{foreign}"
    )


def _print_reply(reply: StatusReply) -> None:
    colour = {"Processed": "green", "Failed": "red", "Received": "cyan", "Rejected": "yellow"}.get(
        reply.status.value, "white"
    )
    reason = f" ({_markup(reply.reason)})" if reply.reason else ""
    console.print(
        f"{reply.at:%H:%M:%S} [{colour}]{reply.status.value:<18}[/{colour}] {_markup(reply.order_id)}{reason}"
    )


def _send_request(
    env_file: Path | None,
    send: Callable[[OrderflowClient], None],
    *,
    client_id: str | None = None,
) -> None:
    """Send a request about one of a client's orders on that client's inbound queue, the only queue
    the intake reads (its answers go to the client's reply queue). The client is the registered one
    ``client_id`` names, or the only one. The CLI does not check that the order exists: that is decided
    when the request is handled.

    Raises:
        typer.Exit: 2, after a one-line error, on bad input or an unknown or ambiguous client; 1 when
            the queue could not take it.
    """
    settings = _settings(env_file)
    registered = _client_by_id(client_id, settings)
    client = OrderflowClient(
        connect_queues(settings), reply_queue=registered.reply_queue, orders_queue=registered.inbound_queue
    )
    try:
        send(client)
    except InvalidMessage as exc:
        _fail(f"not sent: {exc.description}", code=2)
    except OrderflowError as exc:
        _fail(f"not sent: {exc}", code=1)


@app.command()
def cancel(
    order_id: str,
    reason: Annotated[str | None, typer.Option(help="Why, kept with the order.")] = None,
    client_id: Annotated[
        str | None,
        typer.Option("--client", help="The registered client whose order it is (default: the only one)."),
    ] = None,
    env_file: Annotated[Path | None, typer.Option()] = None,
) -> None:
    """Ask for one of a client's orders to be cancelled, on that client's inbound queue; the answer
    (Cancelled or CancelRefused) goes to its reply queue.

    The request is only sent: an order the service does not know, or another client's, gets no answer
    (the request is dead-lettered, UnknownOrder).
    """
    _send_request(env_file, lambda client: client.cancel(order_id, reason=reason), client_id=client_id)
    console.print(
        f"cancel request for {_markup(order_id)} sent; the answer (Cancelled or CancelRefused) goes to the "
        "order's reply queue. No answer comes if the service does not know the order: the request is then "
        "dead-lettered (UnknownOrder)."
    )


def _token(token_file: Path | None) -> str:
    """The bearer token, from ``token_file`` or :data:`TOKEN_VARIABLE`; never shown, not even in part.

    Raises:
        typer.Exit: 2, after a one-line error, when there is none or the file cannot be read.
    """
    if token_file is not None:
        try:
            token = token_file.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            _fail(
                f"{token_file}: cannot read the token file: {getattr(exc, 'strerror', None) or exc}", code=2
            )
        if not token:
            _fail(f"{token_file}: the token file is empty", code=2)
        return token
    token = os.environ.get(TOKEN_VARIABLE, "").strip()
    if not token:
        _fail(
            f"no token: give --token-file or set {TOKEN_VARIABLE} (locally: python -m devhost.local_issuer "
            "login --name <you> --role <app role> --out <file>)",
            code=2,
        )
    return token


def _operator_client(api_url: str | None, token_file: Path | None) -> OperatorApiClient:
    """A client of the operator API at ``api_url`` with the caller's token.

    Raises:
        typer.Exit: 2, after a one-line error, when there is no URL or token, or the URL is not https
            (plain http only on a loopback host).
    """
    if not api_url:
        _fail(f"give --api-url or set {API_URL_VARIABLE} (the operator API's base URL)", code=2)
    token = _token(token_file)
    try:
        return OperatorApiClient(api_url, token=token, timeout_s=_settings(None).OPERATOR_API_TIMEOUT_S)
    except ValueError as exc:
        _fail(str(exc), code=2)


def _call_operator_api(
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
        try:
            validate_order_key(order_id)
        except InvalidMessage as exc:
            _fail(exc.description, code=2)
    with _operator_client(api_url, token_file) as client:
        try:
            answer = call(client)
        except OrderflowError as exc:
            _fail(exc.detail, code=1)
    if not answer.ok:
        refused = f"refused: {answer.status} {answer.error_code}: {answer.error_message}"
        hint = _key_hint(order_id, answer) if order_id is not None else ""
        _fail(refused + hint, code=2 if answer.status == 400 else 1)
    return answer


def _key_hint(order_id: str | None, answer: OperatorAnswer | None = None) -> str:
    """A hint for an order named by a client's own id, which is not its key (docs/clients.md)."""
    if order_id is None or ":" in order_id or (answer is not None and answer.status != 404):
        return ""
    return f" (orders are named by key, <client id>:{order_id}: see `orderflow orders list --client ID`)"


def _state_of(answer: OperatorAnswer) -> str:
    order = answer.body.get("order")
    return str(order.get("processState", "?")) if isinstance(order, dict) else "?"


@app.command()
def compensate(
    order_id: OrderKey,
    reason: Annotated[str | None, typer.Option(help="Why, kept with the order.")] = None,
    api_url: ApiUrl = None,
    token_file: TokenFile = None,
) -> None:
    """Operator: stop an order and undo it, or retry a compensation that ended CompensationFailed.

    Calls the operator API with your token (app role orderflow.operator); the API records who you are.
    Exits 1 when it refuses (the order is finished, past its point of no return ...), 2 on bad input.
    """
    answer = _call_operator_api(
        order_id, api_url, token_file, lambda client: client.compensate(order_id, reason=reason)
    )
    console.print(
        f"compensation of {_markup(order_id)} accepted ({_markup(answer.body.get('outcome'))}); the order "
        f"is {_markup(_state_of(answer))}. `orderflow orders show {_markup(order_id)}` shows how it goes on."
    )


@app.command()
def review(
    order_id: OrderKey,
    approve: Annotated[bool, typer.Option("--approve", help="Approve: the order goes on.")] = False,
    reject: Annotated[bool, typer.Option("--reject", help="Reject: the order is compensated.")] = False,
    api_url: ApiUrl = None,
    token_file: TokenFile = None,
) -> None:
    """Reviewer: approve or reject an order awaiting review; the order goes on, or is compensated.

    Give exactly one of --approve and --reject (exit 2 otherwise). Calls the operator API with your
    token (app role orderflow.reviewer); the API records who you are. The first decision wins: exits 1
    when the order is not awaiting review or another decision is in force.
    """
    if approve == reject:
        _fail(
            "give one of --approve and --reject"
            if not approve
            else "--approve and --reject exclude each other; give one",
            code=2,
        )
    answer = _call_operator_api(
        order_id, api_url, token_file, lambda client: client.review(order_id, approve=approve)
    )
    console.print(
        f"{'approval' if approve else 'rejection'} of {_markup(order_id)} recorded, decided by "
        f"{_markup(answer.body.get('decidedBy'))}; the order is {_markup(_state_of(answer))}."
    )


orders_app = typer.Typer(
    help="Operator: list and show orders through the operator API.", no_args_is_help=True
)
app.add_typer(orders_app, name="orders")

MAX_TIMELINE_PAGES = 100
"""Most timeline pages ``orders show`` reads (10 chunks of 17 entries each)."""


def _whole_timeline(client: OperatorApiClient, order_id: str) -> OperatorAnswer:
    """Every timeline entry of the order, read page by page; one answer holding them all."""
    entries: list[Any] = []
    token: str | None = None
    for _ in range(MAX_TIMELINE_PAGES):
        page = client.get_timeline(order_id, continuation=token)
        if not page.ok:
            return page
        entries += page.body.get("entries") or []
        token = page.body.get("continuation")
        if not token:
            break
    return OperatorAnswer(200, {"entries": entries})


@orders_app.command("show")
def orders_show(order_id: OrderKey, api_url: ApiUrl = None, token_file: TokenFile = None) -> None:
    """Show an order: state, steps, compensation log, retry budget, replies sent and its timeline.

    Reads it through the operator API (app role orderflow.operator or orderflow.reviewer). The ETag
    printed is the version shown: `orderflow resubmit --etag` acts only on that version.
    """
    view = _call_operator_api(order_id, api_url, token_file, lambda client: client.get_order(order_id))
    timeline = _call_operator_api(
        order_id, api_url, token_file, lambda client: _whole_timeline(client, order_id)
    )
    console.print(order_panel(view.body, timeline=timeline.body["entries"], etag=view.etag))


@orders_app.command("list")
def orders_list(  # noqa: PLR0917 - typer reads each option from a parameter
    state: StateFilter = None,
    client_id: ClientFilter = None,
    workflow_version: VersionFilter = None,
    stuck_for: StuckForFilter = None,
    failed_since: FailedSinceFilter = None,
    limit: Annotated[int, typer.Option(help="Orders per page (1-100).")] = 50,
    continuation: Annotated[str | None, typer.Option(help="The token a previous page printed.")] = None,
    api_url: ApiUrl = None,
    token_file: TokenFile = None,
) -> None:
    """List orders by state, client, workflow version, stuck or failed time, a page at a time."""
    filters = order_filters(state, client_id, workflow_version, stuck_for, failed_since)
    filters.update(limit=limit, continuation=continuation)
    answer = _call_operator_api(None, api_url, token_file, lambda client: client.list_orders(**filters))
    console.print(orders_table(answer.body.get("orders") or []))
    token = answer.body.get("continuation")
    if token:
        console.print(shown(f"more: --continuation {token}"))


def _act(
    order_id: str,
    action: str,
    etag: str | None,
    api_url: str | None,
    token_file: Path | None,
    *,
    corrected: dict[str, Any] | None = None,
) -> OperatorAnswer:
    def call(client: OperatorApiClient) -> OperatorAnswer:
        seen = etag
        if seen is None and action == "resubmit":
            current = client.get_order(order_id)
            if not current.ok:
                return current
            seen = current.etag
            console.print(shown(f"acting on {order_id} as it is now: {current.body.get('processState')}"))
        return client.act(order_id, action, if_match=seen, corrected=corrected)

    return _call_operator_api(order_id, api_url, token_file, call)


EtagOption = Annotated[
    str | None, typer.Option("--etag", help="The ETag `orders show` printed: act only on that version.")
]


def _corrected_input(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``: a resubmit's corrected input, read as strictly as the API reads the
    body (:func:`orderflow.messages.decode_json_object`: no duplicate key, no NaN, UTF-8 without a
    byte-order mark), so that the file means one thing and the API is sent what it says.

    Raises:
        typer.Exit: 2, after a one-line error, when the file cannot be read or holds no JSON object.
    """
    try:
        raw = path.read_bytes()
    except OSError as exc:
        _fail(f"cannot read {path}: {exc.strerror or exc}", code=2)
    try:
        data = decode_json_object(raw)
    except InvalidMessage as exc:
        if exc.reason == NOT_AN_OBJECT:
            _fail(f"{path} holds {json_type(json.loads(raw))}: {_INPUT_TAKES}", code=2)
        _fail(f"{path} {exc.description.removeprefix('body ')}", code=2)
    if not data:
        _fail(f"{path} holds an empty object: {_INPUT_TAKES}", code=2)
    # Sent as plain JSON values (a fraction as a float, as before): the HTTP client encodes no Decimal.
    plain: dict[str, Any] = json.loads(raw)
    return plain


_INPUT_TAKES = '--input takes a JSON object of fields, e.g. {"carrier": "UPS"}'


@app.command()
def resubmit(
    order_id: OrderKey,
    etag: EtagOption = None,
    input_file: Annotated[
        Path | None,
        typer.Option(
            "--input",
            help='A JSON object file of corrected fields for the failed step, e.g. {"carrier": "UPS"}.',
        ),
    ] = None,
    api_url: ApiUrl = None,
    token_file: TokenFile = None,
) -> None:
    """Operator: a new attempt of an Error order from its failed step (with --input, on corrected input
    where the step allows it), or a CompensationFailed order's compensation retried. Conditional on the
    version seen (--etag, else the one read now): exits 1 when someone changed the order since (412), it
    is in another state or the step takes no such correction (409), or a value is refused (422)."""
    corrected = None if input_file is None else _corrected_input(input_file)
    answer = _act(order_id, "resubmit", etag, api_url, token_file, corrected=corrected)
    fields = "" if corrected is None else f", corrected {', '.join(sorted(corrected))}"
    console.print(
        shown(
            f"resubmitted {order_id} ({answer.body.get('outcome')}{fields}); "
            f"the order is {_state_of(answer)}."
        )
    )


@app.command()
def suspend(
    order_id: OrderKey, etag: EtagOption = None, api_url: ApiUrl = None, token_file: TokenFile = None
) -> None:
    """Operator: suspend an order: it takes no new step (nothing claims or recovers it) until resumed."""
    answer = _act(order_id, "suspend", etag, api_url, token_file)
    console.print(shown(f"suspended {order_id}; the order is {_state_of(answer)}."))


@app.command()
def resume(
    order_id: OrderKey, etag: EtagOption = None, api_url: ApiUrl = None, token_file: TokenFile = None
) -> None:
    """Operator: resume a suspended order."""
    answer = _act(order_id, "resume", etag, api_url, token_file)
    console.print(shown(f"resumed {order_id}; the order is {_state_of(answer)}."))


app.add_typer(bulk_commands(_operator_client, console), name="bulk")


deadletters_app = typer.Typer(
    help="Operator: list, show, replay and purge the dead letters of the deployment's queues.",
    no_args_is_help=True,
)
app.add_typer(deadletters_app, name="deadletters")


def _dead_letters_table(queue: str, dead_letters: list[dict[str, Any]]) -> Table:
    table = Table(title=shown(f"dead letters of {queue}"))
    # The ids are what `show`, `replay` and `purge --id` take: folded, never cut short.
    table.add_column("id", overflow="fold", min_width=36)
    table.add_column("message id", overflow="fold")
    # The order the dead letter is proven to be about (its arrival queue's client), never a client's field.
    table.add_column("order", overflow="fold")
    for column in ("reason", "deliveries", "dead-lettered at", "description"):
        table.add_column(column)
    for dead in dead_letters:
        _row(
            table,
            dead.get("deadLetterId"),
            dead.get("messageId"),
            dead.get("orderId") or "not linked",
            dead.get("reason"),
            dead.get("deliveryCount"),
            dead.get("deadLetteredAt"),
            str(dead.get("description") or "")[:80],
        )
    return table


@deadletters_app.command("list")
def deadletters_list(
    queue: Annotated[str, typer.Argument(help="A queue of the deployment (orders-acme, agent-payment ...).")],
    limit: Annotated[int, typer.Option(help="Dead letters per page (1-100).")] = 20,
    continuation: Annotated[str | None, typer.Option(help="The token a previous page printed.")] = None,
    api_url: ApiUrl = None,
    token_file: TokenFile = None,
) -> None:
    """List a queue's dead letters, oldest first, a page at a time (app role orderflow.operator)."""
    answer = _call_operator_api(
        None,
        api_url,
        token_file,
        lambda c: c.list_dead_letters(queue, limit=limit, continuation=continuation),
    )
    console.print(_dead_letters_table(queue, answer.body.get("deadLetters") or []))
    token = answer.body.get("continuation")
    if token:
        console.print(shown(f"more: --continuation {token}"))


@deadletters_app.command("show")
def deadletters_show(
    queue: str, dead_letter_id: str, api_url: ApiUrl = None, token_file: TokenFile = None
) -> None:
    """Show one dead letter: why it was dead-lettered, and its body as it was."""
    answer = _call_operator_api(None, api_url, token_file, lambda c: c.get_dead_letter(queue, dead_letter_id))
    console.print(_dead_letters_table(queue, [answer.body]))
    console.print(shown(answer.body.get("body", "")))


@deadletters_app.command("replay")
def deadletters_replay(
    queue: str, dead_letter_id: str, api_url: ApiUrl = None, token_file: TokenFile = None
) -> None:
    """Re-send a dead letter to its queue once its cause is fixed, under a replay message id (which
    duplicate detection does not drop), and delete it. The API records who replayed it."""
    answer = _call_operator_api(
        None, api_url, token_file, lambda c: c.replay_dead_letter(queue, dead_letter_id)
    )
    order = answer.body.get("orderId")
    console.print(
        shown(
            f"replayed {dead_letter_id} to {queue} as {answer.body.get('replayMessageId')}"
            + (f" (order {order})" if order else " (not linked to an order)")
        )
    )


@deadletters_app.command("purge")
def deadletters_purge(  # noqa: PLR0917 - typer reads each option from a parameter
    queue: str,
    dead_letter_id: Annotated[str | None, typer.Option("--id", help="One dead letter, by id.")] = None,
    older_than: Annotated[
        str | None,
        typer.Option(help="Every dead letter dead-lettered before this time (ISO 8601, with offset)."),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="List what would be removed; remove nothing.")
    ] = False,
    api_url: ApiUrl = None,
    token_file: TokenFile = None,
) -> None:
    """Remove dead letters: one (--id) or all older than a time (--older-than); exit 2 unless one is given."""
    if (dead_letter_id is None) == (older_than is None):
        _fail("give one of --id and --older-than", code=2)
    answer = _call_operator_api(
        None,
        api_url,
        token_file,
        lambda c: c.purge_dead_letters(
            queue, dead_letter_id=dead_letter_id, older_than=older_than, dry_run=dry_run
        ),
    )
    console.print(_dead_letters_table(queue, answer.body.get("deadLetters") or []))
    verb = "would remove" if dry_run else "removed"
    console.print(shown(f"{verb} {_count(int(answer.body.get('count', 0)), 'dead letter')} of {queue}"))


@app.command()
def alerts(  # noqa: PLR0917 - typer reads each option from a parameter
    kind: Annotated[str | None, typer.Option(help="One alert kind (order_gave_up ...).")] = None,
    since: Annotated[str | None, typer.Option(help="Raised at or after this time (ISO 8601).")] = None,
    limit: Annotated[int, typer.Option(help="Alerts per page (1-100).")] = 50,
    continuation: Annotated[str | None, typer.Option(help="The token a previous page printed.")] = None,
    api_url: ApiUrl = None,
    token_file: TokenFile = None,
) -> None:
    """List the stored alerts, newest first: when last and first raised, how many times (one client's
    alerts of one kind within a window are one row), kind, order, instance, cause and the suggested action."""
    answer = _call_operator_api(
        None,
        api_url,
        token_file,
        lambda c: c.list_alerts(kind=kind, since=since, limit=limit, continuation=continuation),
    )
    console.print(alerts_table(answer.body.get("alerts") or []))
    token = answer.body.get("continuation")
    if token:
        console.print(shown(f"more: --continuation {token}"))


supervisor_app = typer.Typer(help="Operator: what the supervisor is doing.", no_args_is_help=True)
app.add_typer(supervisor_app, name="supervisor")


@supervisor_app.command("status")
def supervisor_status(
    limit: Annotated[int, typer.Option(help="Sweeps to list (1-50).")] = 10,
    api_url: ApiUrl = None,
    token_file: TokenFile = None,
) -> None:
    """Show the supervisor's leader, its last sweeps (scanned, recovered, gave up, held) and the stuck
    orders it last found."""
    answer = _call_operator_api(None, api_url, token_file, lambda c: c.get_supervisor(limit=limit))
    console.print(supervisor_panel(answer.body))


def _undo_progress(entry: CompensationEntry, state: ProcessState) -> str:
    """What ``status`` says of a compensation log entry's undo. ``Pending`` is only shown while a
    compensation is under way or stuck (the undo is still to run); otherwise the entry is a record of how
    to undo the step, which runs only if the order is compensated, or never (it ended Processed)."""
    if entry.status != UndoStatus.PENDING:
        return entry.status
    if entry.undo is None:
        return "(cannot be undone)"
    if state is ProcessState.PROCESSED:
        return "not needed (the order was Processed)"
    if state in (ProcessState.COMPENSATING, ProcessState.COMPENSATION_FAILED):
        return "Pending"
    return "not run (only if the order is compensated)"


def _row(table: Table, *cells: object) -> None:
    # A record holds text others wrote (reasons, operator names): shown as text, never as markup.
    table.add_row(*(shown(str(cell)) for cell in cells))


@app.command()
def status(
    order_id: OrderKey,
    env_file: Annotated[Path | None, typer.Option()] = None,
) -> None:
    """Show an order's state record."""
    try:
        validate_order_key(order_id)
    except InvalidMessage as exc:
        _fail(exc.description, code=2)
    settings = _settings(env_file)
    stores = connect_stores(settings)
    try:
        found = stores.state.get(order_id)
    except NotFound:
        _fail(f"no order {order_id}{_key_hint(order_id)}", code=1)
    except OrderflowError as exc:
        _fail(f"cannot read order {order_id}: {exc}", code=1)
    finally:
        stores.close()
    record = found.item
    table = Table(title=shown(f"order {order_id}"))
    table.add_column("field")
    table.add_column("value")
    for name in ("process_state", "locked_by", "complete_by", "attempt", "failure_count", "next_attempt_at"):
        _row(table, name, str(getattr(record, name)))
    _row(table, "retry_budget", f"{record.retry_budget.spent}/{record.retry_budget.limit}")
    for name, step in record.steps.items():
        _row(table, f"step {name}", f"{step.status.value} (attempts {step.attempts}) {step.result or ''}")
    if record.last_error:
        # A Processed order's lastError is history (a failure it recovered from), not its outcome.
        label = "last_error (recovered)" if record.process_state.value == "Processed" else "last_error"
        _row(table, label, f"{record.last_error.kind} {record.last_error.code}: {record.last_error.message}")
    for entry in record.compensation_log:
        undo = entry.undo or "irreversible"
        progress = _undo_progress(entry, record.process_state)
        _row(table, f"undo {entry.step}", f"{undo} {progress} {entry.undo_result or entry.data or ''}")
    if record.compensation_error:
        error = record.compensation_error
        _row(
            table,
            "compensation_error",
            f"{error.step} {error.code}: {error.message} (stuck {record.compensation_failures} times)",
        )
    if record.review:
        review = record.review
        name = f" ({review.decided_by_name})" if review.decided_by_name else ""
        decided = f"{review.decision.value} by {review.decided_by}{name}" if review.decision else "undecided"
        _row(table, "review", f"{review.step}: {decided}, deadline {review.deadline.isoformat()}")
    if record.cancel_requested_at:
        _row(
            table,
            "stop requested",
            f"{record.stop_requested_by or 'client'}"
            f"{f' ({record.stop_requested_by_name})' if record.stop_requested_by_name else ''}"
            f" at {record.cancel_requested_at.isoformat()}",
        )
    console.print(table)


def main() -> None:
    """Console-script entry point.

    A store or queue that cannot be reached (exit 1), or settings that cannot be used, such as a
    missing or malformed connection string (exit 2), end in one line on stderr, not a traceback.
    """
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
    except OrderflowError as exc:
        errors.print(f"[red]error:[/red] {_markup(_one_line(exc))}")
        sys.exit(1)
    except ValueError as exc:
        errors.print(f"[red]error:[/red] {_markup(_one_line(exc))}")
        sys.exit(2)


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())[:300] or type(exc).__name__
