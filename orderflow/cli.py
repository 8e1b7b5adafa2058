"""``orderflow``: the command line, a thin wrapper over the client SDK (:mod:`orderflow.client`).

Connections come from the same settings the hosts read (``STORAGE_CONNECTION_STRING``,
``COSMOS_ENDPOINT``, ``COSMOS_KEY`` ...), from the environment or ``--env-file``.
"""

from __future__ import annotations

import json
import random
import sys
import time
import uuid
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from orderflow.client import FINAL_STATUSES, OrderflowClient
from orderflow.errors import InvalidMessage, NotFound, OrderflowError
from orderflow.messages import StatusReply, json_type, validate_order_id
from orderflow.settings import Settings
from orderflow.wiring import connect_queues, connect_stores

app = typer.Typer(help="Submit orders, watch their status, inspect the state store.", no_args_is_help=True)
console = Console()
errors = Console(stderr=True, soft_wrap=True)

ReplyTo = Annotated[str, typer.Option("--reply-to", help="This client's private reply queue.")]


def _fail(message: str, *, code: int) -> NoReturn:
    """Print ``message`` as one line on stderr and exit with ``code`` (2: bad input; 1: the system
    refused or could not be reached)."""
    errors.print(f"[red]error:[/red] {escape(message)}")
    raise typer.Exit(code)


def _settings(env_file: Path | None) -> Settings:
    if env_file is None:
        return Settings.load()
    try:
        values = json.loads(env_file.read_text(encoding="utf-8"))
        env = values.get("Values", values) if isinstance(values, dict) else None
        if not isinstance(env, dict):
            _fail(f"{env_file}: not a JSON object of settings (or local.settings.json)", code=2)
        return Settings.load({**env})
    except OSError as exc:
        _fail(f"{env_file}: cannot read the settings file: {exc.strerror or exc}", code=2)
    except ValueError as exc:  # not UTF-8, not JSON, or a setting of the wrong type
        _fail(f"{env_file}: not valid settings: {' '.join(str(exc).split())[:300]}", code=2)


def _own_reply_queue(reply_to: str, settings: Settings) -> None:
    """Refuse a ``--reply-to`` that names one of orderflow's own queues: replies sent there would be
    taken for requests, and watching it would dead-letter everything on it as foreign."""
    reserved = settings.reserved_queue(reply_to)
    if reserved is not None:
        _fail(f"--reply-to {reply_to!r} is {reserved}, not a client's reply queue", code=2)


def _read_orders(path: Path) -> list[dict[str, Any]]:
    """The orders in ``path``: one JSON order, a JSON array of orders, or JSON lines.

    Raises:
        typer.Exit: 2, after a one-line error, when the file cannot be read, is not UTF-8, is not JSON,
            or holds something other than JSON objects.
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        _fail(f"{path}: cannot read the order file: {exc.strerror or exc}", code=2)
    try:
        # utf-8-sig: editors on Windows write a byte-order mark.
        text = data.decode("utf-8-sig").strip()
    except UnicodeDecodeError as exc:
        _fail(
            f"{path}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
            "save the file as UTF-8",
            code=2,
        )
    try:
        whole = json.loads(text, parse_float=Decimal)
    except (ValueError, ArithmeticError, RecursionError):  # also too many digits, a huge exponent
        whole = None
    try:
        if isinstance(whole, list):
            orders = whole
        elif isinstance(whole, dict):
            orders = [whole]
        else:
            orders = [json.loads(line, parse_float=Decimal) for line in text.splitlines() if line.strip()]
    except (ValueError, ArithmeticError, RecursionError) as exc:
        _fail(
            f"{path}: not a JSON order, JSON array or JSON lines ({str(exc)[:200] or type(exc).__name__})",
            code=2,
        )
    for number, order in enumerate(orders, start=1):
        if not isinstance(order, dict):
            _fail(f"{path}: order {number} is a JSON {json_type(order)}, not an object", code=2)
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
    """Send orders to the submission queue; replies go to --reply-to. Exits 2 if any order was not sent
    (each is named with its error), 1 if the queue could not be reached."""
    if order_file is not None and generate:
        raise typer.BadParameter("give an order file or --generate N, not both")
    if order_file is None and not generate:
        raise typer.BadParameter("give an order file or --generate N")
    if seed is None:
        seed = random.SystemRandom().randrange(2**31)  # fresh order ids on every run
    settings = _settings(env_file)
    _own_reply_queue(reply_to, settings)
    orders = (
        _read_orders(order_file) if order_file else generate_orders(generate, seed=seed, reply_to=reply_to)
    )
    client = OrderflowClient(
        connect_queues(settings), reply_queue=reply_to, orders_queue=settings.ORDERS_QUEUE
    )
    sent = 0
    with typer.progressbar(orders, label="submitting") as progress:
        for order in progress:
            try:
                client.submit(order)
                sent += 1
            except (InvalidMessage, ValueError) as exc:
                console.print(
                    f"[red]not sent[/red] {escape(str(order.get('orderId', '?')))}: {escape(str(exc))}"
                )
            except OrderflowError as exc:
                _fail(f"sending failed after {sent} of {len(orders)} orders: {exc}", code=1)
    console.print(f"submitted {sent} of {len(orders)} orders; replies go to [bold]{reply_to}[/bold]")
    if sent < len(orders):
        # A script must see that some orders were not sent, not only a person reading the output.
        raise typer.Exit(2)


@app.command()
def watch(
    reply_to: ReplyTo,
    timeout: Annotated[float, typer.Option(help="Stop after this many seconds.")] = 60.0,
    env_file: Annotated[Path | None, typer.Option()] = None,
) -> None:
    """Print status replies from the reply queue as they arrive."""
    settings = _settings(env_file)
    _own_reply_queue(reply_to, settings)
    client = OrderflowClient(connect_queues(settings), reply_queue=reply_to)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for reply in client.poll():
            _print_reply(reply)
        time.sleep(0.2)
    final = sum(1 for r in client.replies.latest.values() if r.status in FINAL_STATUSES)
    console.print(
        f"{len(client.replies.latest)} orders seen, {final} settled, {client.replies.duplicates} duplicates"
    )


def _print_reply(reply: StatusReply) -> None:
    colour = {"Processed": "green", "Failed": "red", "Received": "cyan", "Rejected": "yellow"}.get(
        reply.status.value, "white"
    )
    reason = f" ({escape(reply.reason)})" if reply.reason else ""
    console.print(
        f"{reply.at:%H:%M:%S} [{colour}]{reply.status.value:<18}[/{colour}] {escape(reply.order_id)}{reason}"
    )


def _send_request(env_file: Path | None, send: Callable[[OrderflowClient], None]) -> None:
    """Send a request about an order (its answers go to the order's own reply queue); exit 2 on bad
    input, 1 when the queue could not take it."""
    settings = _settings(env_file)
    client = OrderflowClient(
        connect_queues(settings), reply_queue="unused", orders_queue=settings.ORDERS_QUEUE
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
    env_file: Annotated[Path | None, typer.Option()] = None,
) -> None:
    """Ask for an order to be cancelled; the answer (Cancelled or CancelRefused) goes to its reply queue."""
    _send_request(env_file, lambda client: client.cancel(order_id, reason=reason))
    console.print(f"cancel requested for {order_id}; watch the order's reply queue for the answer")


@app.command()
def compensate(
    order_id: str,
    operator: Annotated[str, typer.Option(help="Who decides (kept with the order).")],
    reason: Annotated[str | None, typer.Option(help="Why, kept with the order.")] = None,
    env_file: Annotated[Path | None, typer.Option()] = None,
) -> None:
    """Operator: stop an order and undo it, or retry a compensation that ended CompensationFailed."""
    _send_request(env_file, lambda client: client.compensate(order_id, operator=operator, reason=reason))
    console.print(f"compensation of {order_id} requested; `orderflow status {order_id}` shows the outcome")


@app.command()
def review(
    order_id: str,
    approve: Annotated[bool, typer.Option("--approve/--reject", help="The decision.")],
    reviewer: Annotated[str, typer.Option(help="Who decides (kept with the order).")] = "reviewer",
    env_file: Annotated[Path | None, typer.Option()] = None,
) -> None:
    """Approve or reject an order awaiting review; the order goes on, or is compensated."""
    _send_request(env_file, lambda client: client.review(order_id, approve=approve, reviewer=reviewer))
    console.print(f"{'approval' if approve else 'rejection'} of {order_id} sent")


def _row(table: Table, *cells: object) -> None:
    # Cells as plain Text: a record holds text others wrote (reasons, operator names), never markup.
    table.add_row(*(Text(str(cell)) for cell in cells))


@app.command()
def status(
    order_id: str,
    env_file: Annotated[Path | None, typer.Option()] = None,
) -> None:
    """Show an order's state record."""
    try:
        validate_order_id(order_id)
    except InvalidMessage as exc:
        _fail(exc.description, code=2)
    stores = connect_stores(_settings(env_file))
    try:
        found = stores.state.get(order_id)
    except NotFound:
        _fail(f"no order {order_id}", code=1)
    except OrderflowError as exc:
        _fail(f"cannot read order {order_id}: {exc}", code=1)
    finally:
        stores.close()
    record = found.item
    table = Table(title=f"order {order_id}")
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
        _row(table, f"undo {entry.step}", f"{undo} {entry.status} {entry.undo_result or entry.data or ''}")
    if record.compensation_error:
        error = record.compensation_error
        _row(
            table,
            "compensation_error",
            f"{error.step} {error.code}: {error.message} (stuck {record.compensation_failures} times)",
        )
    if record.review:
        review = record.review
        decided = f"{review.decision.value} by {review.decided_by}" if review.decision else "undecided"
        _row(table, "review", f"{review.step}: {decided}, deadline {review.deadline.isoformat()}")
    if record.cancel_requested_at:
        _row(
            table,
            "stop requested",
            f"{record.stop_requested_by or 'client'} at {record.cancel_requested_at.isoformat()}",
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
        errors.print(f"[red]error:[/red] {escape(_one_line(exc))}")
        sys.exit(1)
    except ValueError as exc:
        errors.print(f"[red]error:[/red] {escape(_one_line(exc))}")
        sys.exit(2)


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())[:300] or type(exc).__name__
