"""``python -m bench`` (``make bench``): run the benchmarks, print the tables, write ``bench-report.json``."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.console import Console

from bench.baseline import BASELINE_REVISION
from bench.config import PEERS, REPORT_PATH, BenchConfig
from bench.parts import failures
from bench.report import markdown_tables, print_tables
from bench.runner import run_bench
from devhost.cli import RUNTIME_ERRORS, driver_signals, fail, one_line

console = Console()
app = typer.Typer(add_completion=False)


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part.replace("_", "")) for part in text.split(",") if part.strip())
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not a comma-separated list of integers") from None


def _names(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _config(**fields: object) -> BenchConfig:
    return BenchConfig.model_validate(fields)


@app.command()
def main(
    *,
    orders: Annotated[int, typer.Option(help="Orders per throughput run (orderflow and each peer).")] = 200,
    concurrency: Annotated[int, typer.Option(help="Orders outstanding at once, for every system.")] = 32,
    warmup: Annotated[int, typer.Option(help="Orders run first through each system, not counted.")] = 10,
    processes: Annotated[str, typer.Option(help="Devhost process counts to measure, e.g. 1,2,3.")] = "1,2,3",
    single_processes: Annotated[
        str, typer.Option(help="Process counts to measure one order at a time on (empty: none).")
    ] = "2",
    single_orders: Annotated[int, typer.Option(help="Orders of each one-at-a-time run.")] = 20,
    profile_processes: Annotated[
        int, typer.Option(help="Profile (py-spy) each devhost process of this run; 0: none.")
    ] = 2,
    profile_rate: Annotated[int, typer.Option(help="py-spy samples per second of the profile.")] = 50,
    count_orders: Annotated[int, typer.Option(help="Orders of the in-process counting run.")] = 20,
    sweep_sizes: Annotated[
        str, typer.Option(help="Settled records for the sweep, e.g. 1000,10000 for a quick run.")
    ] = "1000,10000,100000",
    sweep_expired: Annotated[int, typer.Option(help="Expired records beside them.")] = 20,
    hard_down_orders: Annotated[int, typer.Option(help="Orders run while a service is down.")] = 10,
    hard_down_service: Annotated[str, typer.Option(help="inventory, payments or shipping.")] = "payments",
    peers: Annotated[str, typer.Option(help=f"Peers to run: {','.join(PEERS)} (empty: none).")] = ",".join(
        PEERS
    ),
    timeout_s: Annotated[float, typer.Option(help="Longest wait for one run's orders, seconds.")] = 900.0,
    report: Annotated[Path, typer.Option(help="Where to write the JSON report.")] = REPORT_PATH,
    markdown: Annotated[bool, typer.Option(help="Also print the headline tables as Markdown.")] = False,
    baseline: Annotated[
        str,
        typer.Option(help="Revision measured again for the CPU comparison (empty: none)."),
    ] = BASELINE_REVISION,
    cpu_pairs: Annotated[
        int,
        typer.Option(
            help="Pairs of windows (orderflow, baseline) on each compared process count, in alternating "
            "order; the CPU ratio is their median."
        ),
    ] = 3,
    sdk_calls: Annotated[
        int, typer.Option(help="Calls of each SDK operation when measuring one call's CPU; 0: not measured.")
    ] = 300,
) -> None:
    """Benchmark orderflow against bare durabletask and DBOS; write bench-report.json.

    Bad arguments exit 2 and a benchmark that cannot start exits 1, each with one line on stderr.
    SIGTERM and SIGHUP stop it as Ctrl-C does (everything it started is stopped), then it exits
    128 + the signal.
    """
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    # Expected and already counted in the report: hard-down alerts, cancelled timers, SDK chatter.
    for noisy in ("orderflow", "durabletask", "azure", "httpx", "urllib3", "demo"):
        logging.getLogger(noisy).setLevel(logging.CRITICAL)
    try:
        config = _config(
            orders=orders,
            concurrency=concurrency,
            warmup=warmup,
            processes=_ints(processes),
            single_processes=_ints(single_processes),
            single_orders=single_orders,
            profile_processes=profile_processes,
            profile_rate=profile_rate,
            count_orders=count_orders,
            sweep_sizes=_ints(sweep_sizes),
            sweep_expired=sweep_expired,
            hard_down_orders=hard_down_orders,
            hard_down_service=hard_down_service,
            peers=_names(peers),
            run_timeout_s=timeout_s,
            report_path=report,
            baseline=baseline.strip() or None,
            cpu_pairs=cpu_pairs,
            sdk_calls=sdk_calls,
        )
    except ValidationError as exc:
        fail(one_line(exc), code=2)
    if not config.report_path.resolve().parent.is_dir():
        # Found now, not after a quarter of an hour of measuring.
        fail(f"no directory for the report: {config.report_path.parent}", code=2)
    with driver_signals():
        try:
            result = run_bench(config, progress=lambda message: console.print(f"[dim]{message}[/dim]"))
        except ValueError as exc:  # the data set cannot supply what the arguments ask for
            fail(one_line(exc), code=2)
        except RUNTIME_ERRORS as exc:  # the emulators or the demo services did not start
            fail(one_line(exc), code=1)
    print_tables(result, console)
    if markdown:
        console.print(markdown_tables(result), markup=False, highlight=False)
    console.print(f"report written to {config.report_path}")
    failed = failures(result)
    for note in failed:
        console.print(f"[red]{note}[/red]")
    if failed:
        raise typer.Exit(1)


if __name__ == "__main__":
    app()
