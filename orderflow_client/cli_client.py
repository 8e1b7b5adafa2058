"""A client's commands, over its queues through the client SDK (:mod:`orderflow_client.client`):
``submit``, ``watch`` and ``cancel``. The client is a registered one (``CLIENTS``), named by its reply
queue or its id; its orders go to its inbound queue."""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer
from pydantic import TypeAdapter, ValidationError

from orderflow.clients import RegisteredClient
from orderflow.errors import InvalidMessage, OrderflowError
from orderflow.messages import QueueName, StatusReply
from orderflow.queues.base import QueueFactory
from orderflow.settings import Settings
from orderflow_client.cli_common import console, count, fail, load_settings, markup
from orderflow_client.client import FINAL_STATUSES, OrderflowClient
from orderflow_client.order_files import generate_orders, read_orders

commands = typer.Typer()
"""``submit``, ``watch`` and ``cancel``, added to the ``orderflow`` command (:mod:`orderflow_client.cli`)."""

ReplyTo = Annotated[str, typer.Option("--reply-to", help="This client's private reply queue.")]


_QUEUE_NAME: TypeAdapter[str] = TypeAdapter(QueueName)


def connect_queues(settings: Settings) -> QueueFactory:
    """The local host's Storage queues (:func:`devhost.wiring.connect_queues`), imported when a command
    sends or reads: the rest of the CLI loads no local adapter.

    Raises:
        ValueError: ``STORAGE_CONNECTION_STRING`` is empty.
    """
    from devhost.wiring import connect_queues as connect  # noqa: PLC0415 (local-only adapter)

    return connect(settings.connections, settings.clients)


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
        fail(f"--reply-to {cause or exc.errors()[0]['msg']}", code=2)
    reserved = settings.queues.reserved_queue(reply_to)
    if reserved is not None:
        fail(f"--reply-to {reply_to!r} is {reserved}, not a client's reply queue", code=2)


def _registered_client(reply_to: str, settings: Settings) -> RegisteredClient:
    """The registered client (``CLIENTS``) whose reply queue is ``--reply-to``: its inbound queue is where
    its orders go (docs/clients.md).

    Raises:
        typer.Exit: 2, after a one-line error, when no registered client has that reply queue.
    """
    for client in settings.clients.clients():
        if client.reply_queue == reply_to:
            return client
    fail(
        f"--reply-to {reply_to!r} is not the reply queue of a registered client (CLIENTS); orders naming it "
        "would be dead-lettered (ReplyToNotRegistered)",
        code=2,
    )


def _client_by_id(client_id: str | None, settings: Settings) -> RegisteredClient:
    """The registered client ``--client`` names, or the only one when it is omitted.

    Raises:
        typer.Exit: 2, after a one-line error: no such client, or ``--client`` omitted among several.
    """
    clients = list(settings.clients.clients())
    if client_id is None:
        if len(clients) == 1:
            return clients[0]
        fail(f"--client is needed: {len(clients)} clients are registered (CLIENTS)", code=2)
    for client in clients:
        if client.client_id == client_id:
            return client
    fail(f"--client {client_id!r} is not a registered client (CLIENTS)", code=2)


@commands.command()
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
        fail("give an order file or --generate N, not both", code=2)
    if order_file is None and not generate:
        fail("give an order file or --generate N", code=2)
    if seed is None:
        seed = random.SystemRandom().randrange(2**31)  # fresh order ids on every run
    settings = load_settings(env_file)
    _check_reply_to(reply_to, settings)
    registered = _registered_client(reply_to, settings)
    orders = (
        read_orders(order_file, reply_to=reply_to)
        if order_file
        else generate_orders(generate, seed=seed, reply_to=reply_to)
    )
    client = OrderflowClient(
        connect_queues(settings),
        reply_queue=reply_to,
        orders_queue=registered.inbound_queue,
    )
    sent = 0
    with typer.progressbar(orders, label="submitting") as progress:
        for order in progress:
            try:
                client.submit(order)
                sent += 1
            except (InvalidMessage, ValueError) as exc:
                console.print(f"[red]not sent[/red] {markup(order.get('orderId', '?'))}: {markup(exc)}")
            except OrderflowError as exc:
                fail(f"sending failed after {sent} of {count(len(orders), 'order')}: {exc}", code=1)
    console.print(
        f"submitted {sent} of {count(len(orders), 'order')}; replies go to [bold]{markup(reply_to)}[/bold]"
    )
    if sent < len(orders):
        # A script must see that some orders were not sent, not only a person reading the output.
        raise typer.Exit(2)


@commands.command()
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
        fail(f"--timeout must be a number of seconds, 0 or more, not {timeout}", code=2)
    settings = load_settings(env_file)
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
    foreign = f", {count(replies.foreign, 'foreign message')} dead-lettered" if replies.foreign else ""
    console.print(
        f"{count(len(replies.latest), 'order')} seen, {final} settled, "
        f"{count(replies.duplicates, 'duplicate')}{foreign}"
    )


def _print_reply(reply: StatusReply) -> None:
    colour = {"Processed": "green", "Failed": "red", "Received": "cyan", "Rejected": "yellow"}.get(
        reply.status.value, "white"
    )
    reason = f" ({markup(reply.reason)})" if reply.reason else ""
    console.print(
        f"{reply.at:%H:%M:%S} [{colour}]{reply.status.value:<18}[/{colour}] {markup(reply.order_id)}{reason}"
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
    settings = load_settings(env_file)
    registered = _client_by_id(client_id, settings)
    client = OrderflowClient(
        connect_queues(settings), reply_queue=registered.reply_queue, orders_queue=registered.inbound_queue
    )
    try:
        send(client)
    except InvalidMessage as exc:
        fail(f"not sent: {exc.description}", code=2)
    except OrderflowError as exc:
        fail(f"not sent: {exc}", code=1)


@commands.command()
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
        f"cancel request for {markup(order_id)} sent; the answer (Cancelled or CancelRefused) goes to the "
        "order's reply queue. No answer comes if the service does not know the order: the request is then "
        "dead-lettered (UnknownOrder)."
    )
