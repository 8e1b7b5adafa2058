"""``orderflow demo --azure``: the demo's TPC-H orders against a deployment (:mod:`demo.azure`), from a
checkout of the repository (the demo is not part of the installed command)."""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import ModuleType
from typing import Annotated

import typer

from orderflow_client.cli_common import console, fail, markup

commands = typer.Typer()
"""``demo``, added to the ``orderflow`` command (:mod:`orderflow_client.cli`)."""


def _driver() -> ModuleType:
    """:mod:`demo.azure`, imported when the command runs: the demo ships only with the repository.

    Raises:
        typer.Exit: 2, after a one-line error, outside a checkout.
    """
    try:
        return importlib.import_module("demo.azure")
    except ImportError as exc:
        fail(f"orderflow demo runs from a checkout of the repository (make demo-azure): {exc}", code=2)


def _environment(driver: ModuleType, env_file: Path | None, environment: str | None) -> dict[str, str]:
    """The deployment's settings: ``env_file``'s, else azd's environment under the working directory,
    else (no azd environment at all) this process's environment when it registers clients (``CLIENTS``:
    the local host's settings).

    Raises:
        typer.Exit: 2, after a one-line error, when a file cannot be read or parsed, or when there is no
            azd environment and this process's environment registers no client.
    """
    try:
        path = env_file or driver.azd_env_file(Path.cwd(), environment)
    except FileNotFoundError as exc:
        if environment is not None or not os.environ.get("CLIENTS", "").strip():
            fail(str(exc), code=2)
        return dict(os.environ)
    try:
        values: dict[str, str] = driver.parse_env_text(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        fail(f"{path}: cannot read the settings: {' '.join(str(exc).split())[:300]}", code=2)
    return values


@commands.command()
def demo(  # noqa: PLR0917 (typer passes options by position)
    azure: Annotated[
        bool, typer.Option("--azure", help="Against the deployment azd's environment (or --env-file) names.")
    ] = False,
    orders: Annotated[int, typer.Option(min=1, max=15000, help="TPC-H orders to submit.")] = 50,
    timeout_s: Annotated[
        float | None, typer.Option(min=1, help="Stop waiting after this many seconds (default: by --orders).")
    ] = None,
    env_file: Annotated[
        Path | None, typer.Option(help="The deployment's settings: azd env get-values output, or JSON.")
    ] = None,
    environment: Annotated[
        str | None, typer.Option("--environment", "-e", help="azd environment (default: azd's default).")
    ] = None,
    client_id: Annotated[
        str | None,
        typer.Option("--client", help="The registered client to submit as (default: the only one)."),
    ] = None,
    report: Annotated[Path, typer.Option(help="Where the JSON report goes.")] = Path(
        "demo-azure-report.json"
    ),
) -> None:
    """Submit TPC-H orders to a registered client's queue, watch its reply queue and print the summary
    make demo prints; exits 1 if any invariant fails, 2 on settings that cannot be used.

    The deployer's own sign-in (DefaultAzureCredential: azd or az login) sends, receives and reads: the
    template grants it the client's two queue roles (GRANT_DEPLOYER_DEMO_CLIENT_ACCESS) and read access
    to the state records (GRANT_DEPLOYER_READ_ACCESS). Against the local host's settings the same code
    runs on its emulators.
    """
    if not azure:
        fail("orderflow demo needs --azure (the local demo is make demo)", code=2)
    driver = _driver()
    env = _environment(driver, env_file, environment)
    try:
        result = driver.run_azure_demo(
            env, orders=orders, timeout_s=timeout_s, client_id=client_id, report_path=report
        )
    except ValueError as exc:
        fail(f"{' '.join(str(exc).split())[:300]}", code=2)
    failed: list[str] = driver.failed_invariants(result)
    if failed:
        console.print(f"[red]invariants not 0:[/red] {markup(', '.join(failed))}")
        raise typer.Exit(1)
