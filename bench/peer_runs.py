"""Run the peers against the benchmark's demo services: start their processes, drive them, stop them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.counting.cpu import CpuClock, cpu_between
from bench.load import RESULT_PREFIX, LoadResult
from bench.orderflow_runs import summarise_load
from bench.peers.durabletask_peer import run_durabletask_load
from demo.fleet import start_child
from devhost.durabletask_backend import free_port
from devhost.emulators import REPO_ROOT


def durabletask_run(
    orders: Sequence[Mapping[str, Any]],
    warmup: Sequence[Mapping[str, Any]],
    *,
    services_url: str,
    run_dir: Path,
    concurrency: int,
    timeout_s: float,
    single: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The saga on bare durabletask: backend and worker in processes of their own, the client here.

    Args:
        single: Orders run after the timed ones, one at a time (concurrency 1), on the same processes:
            the saga's latency with nothing else in flight, beside orderflow's one-at-a-time window.

    Returns:
        :func:`bench.orderflow_runs.summarise_load` fields plus ``processes`` and ``cpu_ms_per_order``
        (:func:`peer_cpu_ms`: the backend's and the worker's CPU over the timed orders, not the warm-up
        or the single orders; the client is the benchmark's process, as orderflow's is), and with
        ``single`` given, ``one_at_a_time``: their :func:`~bench.orderflow_runs.summarise_load` fields.

    Raises:
        RuntimeError: the backend or the worker did not start.
    """
    port = free_port()
    env = dict(os.environ)
    module = "bench.peers.durabletask_peer"
    backend = start_child(
        "durabletask-backend", ["-m", module, "backend", "--port", str(port)], env, "ready", run_dir
    )
    try:
        worker = start_child(
            "durabletask-worker",
            ["-m", module, "worker", "--address", f"localhost:{port}", "--services-url", services_url],
            env,
            "ready",
            run_dir,
        )
        try:
            address = f"localhost:{port}"
            if warmup:
                run_durabletask_load(address, warmup, concurrency=concurrency, timeout_s=timeout_s)
            clock = CpuClock(
                {"durabletask-backend": backend.process.pid, "durabletask-worker": worker.process.pid}
            )
            before = clock.sample()
            result = run_durabletask_load(address, orders, concurrency=concurrency, timeout_s=timeout_s)
            used = cpu_between(before, clock.sample())
            one_at_a_time = (
                summarise_load(run_durabletask_load(address, single, concurrency=1, timeout_s=timeout_s))
                if single
                else None
            )
        finally:
            worker.stop()
    finally:
        backend.stop()
    run = {"processes": 2, **summarise_load(result), "cpu_ms_per_order": peer_cpu_ms(used, result.finished)}
    return run if one_at_a_time is None else {**run, "one_at_a_time": one_at_a_time}


def peer_cpu_ms(cpu_s: Mapping[str, float], finished: int) -> dict[str, float]:
    """CPU ms per finished order of each of a peer's processes (``cpu_s``: CPU seconds over its timed
    orders, by process), plus ``peer``, their sum: the figure orderflow's own processes are divided by.
    Per order of at least one order, so a run that finished none gives its whole CPU."""
    orders = max(finished, 1)
    per_order = {name: round(1000 * seconds / orders, 1) for name, seconds in sorted(cpu_s.items())}
    per_order["peer"] = round(1000 * sum(cpu_s.values()) / orders, 1)
    return per_order


def dbos_run(
    orders: Sequence[Mapping[str, Any]],
    warmup: Sequence[Mapping[str, Any]],
    *,
    services_url: str,
    run_dir: Path,
    concurrency: int,
    timeout_s: float,
) -> dict[str, Any]:
    """The saga on DBOS with a SQLite system database, in one process of its own.

    Returns:
        :func:`bench.orderflow_runs.summarise_load` fields plus ``processes`` and ``cpu_ms_per_order``
        (:func:`peer_cpu_ms` of the process's own CPU over the timed orders, its load generator included:
        DBOS runs its client in the same process).

    Raises:
        RuntimeError: the process failed or printed no result (its stderr is in ``run_dir``).
        subprocess.TimeoutExpired: it ran longer than ``timeout_s`` (plus a minute to start and stop).
    """
    orders_file = run_dir / "dbos-orders.json"
    warmup_file = run_dir / "dbos-warmup.json"
    orders_file.write_text(json.dumps(list(orders)), encoding="utf-8")
    warmup_file.write_text(json.dumps(list(warmup)), encoding="utf-8")
    log_path = run_dir / "dbos.log"
    with log_path.open("w", encoding="utf-8") as log:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "bench.peers.dbos_peer",
                "--services-url",
                services_url,
                "--orders-file",
                str(orders_file),
                "--warmup-file",
                str(warmup_file),
                "--database",
                str(run_dir / "dbos.sqlite"),
                "--concurrency",
                str(concurrency),
            ],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            timeout=timeout_s + 60,
            check=False,
        )
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"the DBOS peer exited with {done.returncode} and no result; see {log_path}")
    data = json.loads(lines[-1].removeprefix(RESULT_PREFIX))
    result = LoadResult.from_json(data)
    cpu = peer_cpu_ms({"dbos": float(data["cpu_s"])}, result.finished) if "cpu_s" in data else None
    return {"processes": 1, **summarise_load(result), "cpu_ms_per_order": cpu}
