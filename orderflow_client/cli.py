"""``orderflow``: the command line, a thin wrapper over the client SDK (:mod:`orderflow_client.client`)
and the operator API's client (:mod:`orderflow_client.operator_client`).

A client's commands reach its queues with the settings the hosts read (``STORAGE_CONNECTION_STRING``,
``CLIENTS`` ...), from the environment or ``--env-file``. Every command that reads or acts on an order
(``status`` included) calls the operator API at ``--api-url`` (``ORDERFLOW_API_URL``) with a bearer token
from ``--token-file`` or ``ORDERFLOW_TOKEN``, which is never shown: no command reads a store.

The commands, by module: a client's (:mod:`~orderflow_client.cli_client`: ``submit``, ``watch``,
``cancel``), those on orders (:mod:`~orderflow_client.cli_orders`), ``bulk``
(:mod:`~orderflow_client.cli_bulk`: every order a filter matches) and those on the deployment
(:mod:`~orderflow_client.cli_operations`: dead letters, alerts, the supervisor); what they share is
:mod:`~orderflow_client.cli_common`.
"""

from __future__ import annotations

import logging
import sys
from typing import Annotated

import typer

from orderflow import telemetry
from orderflow.errors import OrderflowError
from orderflow_client import cli_client, cli_demo, cli_operations, cli_orders
from orderflow_client.cli_bulk import bulk_commands
from orderflow_client.cli_common import connect_operator_api, console, errors, markup

app = typer.Typer(
    help="Submit orders, watch their replies, read and act on orders through the operator API.",
    no_args_is_help=True,
)
app.add_typer(cli_client.commands)
app.add_typer(cli_orders.commands)
app.add_typer(bulk_commands(connect_operator_api, console), name="bulk")
app.add_typer(cli_operations.commands)
app.add_typer(cli_demo.commands)


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
            help="Also print the warnings the queue adapters log (unreachable services, "
            "retries, dead-lettered messages).",
        ),
    ] = False,
) -> None:
    """Submit orders, watch their replies, read and act on orders through the operator API."""
    # Without a handler, Python prints warnings on stderr by itself; the adapters log one for a failure
    # the command then reports as its error, so by default only errors are shown, the error only once.
    telemetry.guard_log_records()  # a warning may name a message id a client chose
    handler = _StderrLog(logging.WARNING if verbose else logging.ERROR)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    ctx.call_on_close(lambda: root.removeHandler(handler))


def main() -> None:
    """Console-script entry point.

    A queue or the operator API that cannot be reached (exit 1), or settings that cannot be used, such as a
    missing or malformed connection string (exit 2), end in one line on stderr, not a traceback.
    """
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)
    except OrderflowError as exc:
        errors.print(f"[red]error:[/red] {markup(_one_line(exc))}")
        sys.exit(1)
    except ValueError as exc:
        errors.print(f"[red]error:[/red] {markup(_one_line(exc))}")
        sys.exit(2)


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())[:300] or type(exc).__name__


if __name__ == "__main__":
    main()
