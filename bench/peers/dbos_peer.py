"""Peer: the order saga as a DBOS Transact workflow on a SQLite system database.

A ``@DBOS.workflow`` runs three ``@DBOS.step``s, each calling a demo service over httpx with the step's
idempotency key; a failed step undoes the completed reversible ones in reverse order (one step each)
and the workflow returns ``Compensated``, otherwise ``Processed``. DBOS checkpoints the workflow's
input, every step's output and the result in SQLite: that is its durability, in place of orderflow's
state record, queues and supervisor.

DBOS is a library: an application starts workflows in its own process. So this module is a whole
process, ``python -m bench.peers.dbos_peer``, that launches DBOS, drives its orders closed-loop
(:func:`bench.load.run_closed_loop`, ``DBOS.start_workflow`` then ``get_result``) and prints one line,
``result {json}``, a :class:`bench.load.LoadResult`.

With ``--wal`` (the default) the database file is switched to write-ahead logging and DBOS gets a
connection pool of one: SQLite serialises writers anyway, and on two cores this ran the saga about
1.7 times as fast as DBOS's defaults (docs/design.md §8).
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from dbos import DBOS, DBOSConfig

from bench.load import RESULT_PREFIX, run_closed_loop
from bench.peers.saga import COMPENSATED, PROCESSED, SAGA_STEPS, CompletedStep, SagaServices

_services: SagaServices | None = None


def _saga_services() -> SagaServices:
    if _services is None:
        raise RuntimeError("the saga's services are not configured")
    return _services


@DBOS.step(retries_allowed=False)
def run_step(step: str, order: dict[str, Any]) -> dict[str, str]:
    """One forward step: a remote call with the step's idempotency key."""
    return _saga_services().run_step(step, order)


@DBOS.step(retries_allowed=False)
def undo_step(step: str, result: dict[str, str], order_id: str) -> dict[str, str]:
    """Undo a completed step by its forward key."""
    return _saga_services().undo_step(CompletedStep(step, result), order_id)


@DBOS.workflow()
def order_saga(order: dict[str, Any]) -> str:
    """The saga: the steps in order; on a failure, undo the completed ones in reverse."""
    done: list[CompletedStep] = []
    try:
        for step in SAGA_STEPS:
            done.append(CompletedStep(step.name, run_step(step.name, order)))
    except Exception:
        for entry in reversed(done):
            undo_step(entry.step, entry.result, str(order["orderId"]))
        return COMPENSATED
    return PROCESSED


def _run_one(order: dict[str, Any]) -> str:
    return DBOS.start_workflow(order_saga, order).get_result()


cli = typer.Typer(add_completion=False)


@cli.command()
def main(
    *,
    services_url: Annotated[str, typer.Option(help="Base URL of the demo services.")],
    orders_file: Annotated[Path, typer.Option(help="JSON list of order messages (camelCase).")],
    database: Annotated[Path, typer.Option(help="SQLite file of DBOS's system database (created).")],
    concurrency: Annotated[int, typer.Option(help="Orders in flight at once.")] = 32,
    warmup_file: Annotated[
        Path | None, typer.Option(help="JSON list of orders run first, not measured.")
    ] = None,
    wal: Annotated[bool, typer.Option(help="Write-ahead logging and a pool of one connection.")] = True,
) -> None:
    """Run the orders through the saga on DBOS and print ``result {json}``: the load's result and
    ``cpu_s``, this process's CPU seconds (every thread) over the timed orders."""
    global _services  # noqa: PLW0603 (the steps are module functions, as DBOS registers them)
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    orders: list[dict[str, Any]] = json.loads(orders_file.read_text(encoding="utf-8"))
    database.unlink(missing_ok=True)
    if wal:
        with sqlite3.connect(database) as connection:
            connection.execute("PRAGMA journal_mode=WAL")  # persists in the file
    config: DBOSConfig = {
        "name": "orderflow-bench-peer",
        "system_database_url": f"sqlite:///{database}",
        "log_level": "WARNING",
    }
    if wal:
        config["sys_db_pool_size"] = 1
    _services = SagaServices(services_url)
    DBOS(config=config)
    DBOS.launch()
    try:
        if warmup_file is not None:
            warmup: list[dict[str, Any]] = json.loads(warmup_file.read_text(encoding="utf-8"))
            run_closed_loop(warmup, _run_one, concurrency=concurrency)
        started = time.process_time()
        result = run_closed_loop(orders, _run_one, concurrency=concurrency)
        cpu_s = time.process_time() - started
    finally:
        DBOS.destroy()
        _services.close()
    print(RESULT_PREFIX + json.dumps({**result.to_json(), "cpu_s": round(cpu_s, 3)}), flush=True)


if __name__ == "__main__":
    cli()
