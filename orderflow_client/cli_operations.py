"""The operator's commands on the deployment as a whole, through the operator API: ``deadletters``
(``list``, ``show``, ``replay``, ``purge``), ``alerts`` and ``supervisor status``."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table

from orderflow_client.alert_render import alerts_table, supervisor_panel
from orderflow_client.cli_common import call_operator_api, console, count, fail, row
from orderflow_client.cli_options import ApiUrl, TokenFile
from orderflow_client.order_render import shown

commands = typer.Typer()
"""``deadletters``, ``alerts`` and ``supervisor``, added to the ``orderflow`` command
(:mod:`orderflow_client.cli`)."""


deadletters_app = typer.Typer(
    help="Operator: list, show, replay and purge the dead letters of the deployment's queues.",
    no_args_is_help=True,
)
commands.add_typer(deadletters_app, name="deadletters")


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
        row(
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
    answer = call_operator_api(
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
    answer = call_operator_api(None, api_url, token_file, lambda c: c.get_dead_letter(queue, dead_letter_id))
    console.print(_dead_letters_table(queue, [answer.body]))
    console.print(shown(answer.body.get("body", "")))


@deadletters_app.command("replay")
def deadletters_replay(
    queue: str, dead_letter_id: str, api_url: ApiUrl = None, token_file: TokenFile = None
) -> None:
    """Re-send a dead letter to its queue once its cause is fixed, under a replay message id (which
    duplicate detection does not drop), and delete it. The API records who replayed it."""
    answer = call_operator_api(
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
        fail("give one of --id and --older-than", code=2)
    answer = call_operator_api(
        None,
        api_url,
        token_file,
        lambda c: c.purge_dead_letters(
            queue, dead_letter_id=dead_letter_id, older_than=older_than, dry_run=dry_run
        ),
    )
    console.print(_dead_letters_table(queue, answer.body.get("deadLetters") or []))
    verb = "would remove" if dry_run else "removed"
    console.print(shown(f"{verb} {count(int(answer.body.get('count', 0)), 'dead letter')} of {queue}"))


@commands.command()
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
    answer = call_operator_api(
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
commands.add_typer(supervisor_app, name="supervisor")


@supervisor_app.command("status")
def supervisor_status(
    limit: Annotated[int, typer.Option(help="Sweeps to list (1-50).")] = 10,
    api_url: ApiUrl = None,
    token_file: TokenFile = None,
) -> None:
    """Show the supervisor's leader, its last sweeps (scanned, recovered, gave up, held) and the stuck
    orders it last found."""
    answer = call_operator_api(None, api_url, token_file, lambda c: c.get_supervisor(limit=limit))
    console.print(supervisor_panel(answer.body))
