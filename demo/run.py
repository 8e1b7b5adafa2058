"""``make demo``: the local demo, end to end, on real TPC-H orders.

1. Generates the TPC-H data set (scale factor 0.01) with ``tpchgen-cli`` if it is not there yet.
2. Starts Azurite and cosmosdb-server, the demo services (with injected faults) and ``--processes``
   devhost processes (the last one runs the agents and the submission, the others the scheduler
   roles; one process runs every role). The first also serves the operator API and its web console,
   trusting tokens of the local signing key (``python -m devhost.local_issuer login``), which is made
   if there is none; the console's URL and how to sign in are printed.
3. Submits ``--orders`` TPC-H orders through the client SDK, shows progress while they settle, reads
   the state store and the demo services' audit, prints a summary and writes ``demo-report.json``.
   With ``--kill-every S`` a random devhost process is SIGKILLed every S seconds and restarted, and the
   report adds ``kills`` and ``recoveries``.
4. With ``--keep`` (``make demo KEEP=1``), keeps the system and the console up until Ctrl-C.
5. Stops everything it started, whatever happened.

Besides how each order ended, the report checks that no order was driven by two attempts at once
(``overlapping_attempts``): from the state records' ``attemptHistory`` (each attempt's tenure ends before
the next one's claim) and from the demo services' audit (no call made for an attempt arrives after the
next attempt was claimed).

An order must end the way its data says: a customer with a negative balance is declined, an order
whose items ran out of stock is refused, every other order is processed — unless the injected faults
exhausted what the design allows (the supervisor's failure threshold or the retry budget), which the
report counts separately. ``mismatched`` counts orders that ended any other way.

The run is made of parts other drivers reuse (``make chaos``, :mod:`demo.chaos.run`):
:func:`demo.system.demo_system` starts and stops everything, :class:`demo.fleet.Fleet` and
:class:`demo.fleet.Killer` restart, kill and pause devhost processes, :func:`demo.system.submit_and_settle`
submits through one or more clients and waits, and :func:`demo.outcome.build_report` reads the outcome;
:mod:`demo.config` holds the demo's settings.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Annotated, Any

import typer

from demo.config import (
    DEMO_FAULTS,
    REPORT_PATH,
    TPCH_ORDERS,
    check_run_args,
    console,
    new_run_dir,
    settle_budget_s,
)
from demo.faults import FaultPlan
from demo.fleet import Killer, quiet_sdk_logs
from demo.outcome import INVARIANTS, build_report, print_summary, write_report
from demo.system import demo_system, submit_and_settle
from devhost.cli import run_driver
from operator_api.routes import CONSOLE_PATH

logger = logging.getLogger(__name__)


SIGN_IN = (
    "sign in with a token from: .venv/bin/python -m devhost.local_issuer login --name <you> "
    "--role orderflow.operator --role orderflow.reviewer"
)
"""How to get a token for the console (and the CLI): the local issuer signs with the demo's key."""


def console_url(api_url: str) -> str:
    """The web console's page on the operator API at ``api_url``."""
    return f"{api_url}{CONSOLE_PATH}/"


def print_console(api_url: str) -> None:
    """Print where the operator API and the web console are, and how to sign in."""
    console.print(f"operator API on {api_url} (ORDERFLOW_API_URL)")
    console.print(
        f"web console: [bold]{console_url(api_url)}[/bold]; {SIGN_IN} (paste it on the sign-in page)"
    )


CLIENT_SETTINGS = (
    "STORAGE_CONNECTION_STRING",
    "COSMOS_ENDPOINT",
    "COSMOS_KEY",
    "COSMOS_VERIFY_TLS",
    "CLIENTS",
)
"""What ``orderflow submit|watch|status`` and ``python -m devhost.client_credentials`` read to reach a
running demo (the emulators' well-known development keys and the registered clients)."""


def write_client_settings(env: Mapping[str, str], api_url: str, run_dir: Path) -> Path:
    """Write the running demo's :data:`CLIENT_SETTINGS` and ``ORDERFLOW_API_URL`` to ``run_dir`` as a
    flat JSON object (what ``--env-file`` reads); returns its path."""
    path = run_dir / "settings.json"
    values = {name: env[name] for name in CLIENT_SETTINGS if name in env}
    path.write_text(json.dumps({**values, "ORDERFLOW_API_URL": api_url}, indent=2) + "\n", encoding="utf-8")
    return path


def keep_up(api_url: str, settings_file: Path | None = None) -> None:
    """Wait until Ctrl-C (SIGTERM and SIGHUP arrive as one too), the system still up; then return, so the
    demo stops everything it started and exits as its report says. ``settings_file`` (from
    :func:`write_client_settings`) is named for the client commands."""
    console.print(f"the system and the console stay up at {console_url(api_url)}: Ctrl-C stops them")
    if settings_file is not None:
        console.print(
            f"its settings are in {settings_file}: `orderflow submit|watch|status --env-file "
            f"{settings_file}`, or export them for `python -m devhost.client_credentials <client id>`"
        )
    try:
        while True:
            time.sleep(1.0)
    except KeyboardInterrupt:
        console.print("stopping")


def run_demo(
    *,
    orders: int,
    processes: int,
    timeout_s: float | None,
    faults: FaultPlan,
    kill_every_s: float = 0.0,
    seed: int = 20261129,
    report_path: Path = REPORT_PATH,
    keep: bool = False,
) -> dict[str, Any]:
    """Run the whole demo; returns the report (also written to ``report_path``).

    Args:
        orders: TPC-H orders to submit (the first ``orders`` by order key).
        processes: devhost processes (see :func:`demo.fleet.devhost_specs`).
        timeout_s: Stop waiting for orders to settle after this many seconds (None: scaled to ``orders``).
        faults: Faults the demo services inject.
        kill_every_s: SIGKILL a random devhost process every this many seconds and restart it (0: never).
        seed: Seed of the choice of process to kill.
        report_path: Where the JSON report is written.
        keep: After the report, keep the system (and the console) up until Ctrl-C, SIGTERM or SIGHUP.

    Raises:
        ValueError: an argument :func:`demo.config.check_run_args` refuses (nothing was started).
        RuntimeError: a child process did not start.
    """
    check_run_args(orders=orders, processes=processes, kill_every_s=kill_every_s, timeout_s=timeout_s)
    run_dir = new_run_dir()
    chaos = f", one SIGKILLed every {kill_every_s:g} s" if kill_every_s > 0 else ""
    console.print(
        f"[bold]orderflow demo[/bold]: {orders} TPC-H orders, {processes} devhost process(es){chaos}; "
        f"logs in {run_dir}"
    )
    with ExitStack() as stack, quiet_sdk_logs():
        system = stack.enter_context(
            demo_system(orders=orders, processes=processes, faults=faults, run_dir=run_dir)
        )
        print_console(system.api_url)
        killer = Killer(system.fleet, kill_every_s, seed=seed) if kill_every_s > 0 else None
        if killer is not None:
            stack.callback(killer.stop)
        client = system.sdk_client(system.clients[0])
        if killer is not None:
            killer.start()
        settling = submit_and_settle(system, [client], budget_s=settle_budget_s(orders, timeout_s))
        if killer is not None:
            killer.stop()  # the last orders' replies and the summary are read from a quiet system
        report, mismatched = build_report(
            system,
            [client],
            settling,
            processes=processes,
            kills=len(killer.kills) if killer is not None else 0,
        )
        write_report(report, report_path)
        print_summary(report, mismatched)
        console.print(f"report written to {report_path}")
        if keep:
            keep_up(system.api_url, write_client_settings(system.env, system.api_url, run_dir))
    return report


app = typer.Typer(add_completion=False)


@app.command()
def main(
    *,
    orders: Annotated[
        int, typer.Option(help=f"How many TPC-H orders to submit, 1 to {TPCH_ORDERS} (all of them).")
    ] = 200,
    processes: Annotated[
        int,
        typer.Option(
            help="devhost processes sharing the emulators: the last runs the agents and the submission, "
            "the others the scheduler roles (1: one process runs every role)."
        ),
    ] = 3,
    kill_every: Annotated[
        float,
        typer.Option(
            help="SIGKILL a random devhost process every this many seconds and restart it (0: never)."
        ),
    ] = 0.0,
    timeout_s: Annotated[
        float | None,
        typer.Option(help="Give up waiting after this many seconds (default: scaled to --orders)."),
    ] = None,
    no_faults: Annotated[bool, typer.Option(help="Inject no faults.")] = False,
    keep: Annotated[
        bool, typer.Option(help="Keep the system and the web console up after the report, until Ctrl-C.")
    ] = False,
) -> None:
    """Run the local demo and write demo-report.json; exits 1 if any invariant fails.

    Bad arguments exit 2 and a run that cannot start exits 1, each with one line on stderr. SIGTERM and
    SIGHUP stop it as Ctrl-C does: everything it started is stopped, then it exits 128 + the signal.
    """
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    report = run_driver(
        lambda: check_run_args(
            orders=orders, processes=processes, kill_every_s=kill_every, timeout_s=timeout_s
        ),
        lambda: run_demo(
            orders=orders,
            processes=processes,
            kill_every_s=kill_every,
            timeout_s=timeout_s,
            faults=FaultPlan() if no_faults else DEMO_FAULTS,
            keep=keep,
        ),
    )
    raise typer.Exit(1 if any(report[key] for key in INVARIANTS) else 0)


if __name__ == "__main__":
    app()
