"""The report assembled: its keys and standing notes, the machine it ran on (with a core-speed
calibration), the ratios between systems and the SDK floor of each window."""

from __future__ import annotations

import os
import platform
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from bench.baseline import cpu_ratios
from bench.config import BenchConfig
from bench.sdk_floor import (
    SERIAL_PATH,
    SERIAL_PATH_SETTINGS,
    sdk_floor,
    serial_path_ms,
    serial_path_settings_off,
)
from bench.stats import ratio

REPORT_KEYS = (
    "generated_at",
    "machine",
    "config",
    "orderflow",
    "sweep",
    "hard_down",
    "peers",
    "ratios",
    "baseline",
    "sdk_calls",
    "notes",
)
"""The report's top-level keys, in order."""

LATENCY_FIGURES = ("p50_s", "p95_s", "p99_s")

NOTES = (
    "Every system runs on this one machine with the emulators, the demo services and the load generator "
    "(see machine.cpu_count and machine.load_average): the figures compare the systems with each other "
    "here, they are not what any of them does on its own hardware. machine.core_speed_s is the CPU time "
    "of one fixed loop before and after the run: on a shared machine the same work takes more CPU at "
    "times, and so does an order.",
    "Closed loop for every system: config.concurrency orders outstanding, a new one submitted when one "
    "finishes; the same TPC-H orders (faults off, no review, nothing out of stock) against one "
    "demo-services process, under run-specific order ids; config.warmup orders first, not counted.",
    "orderflow's latency runs from the client SDK's send to the orders queue until its final reply is "
    "received from the client's reply queue (Azurite). The load generator takes part in the devhosts' "
    "wake-ups: each submission wakes the submission's idle loop, and a send to its reply queue ends its "
    "own idle wait (at most 0.25 s without one), as Service Bus pushes both on Azure. Between them every "
    "order crosses six more queue hops (three agent requests, three responses) and makes its state "
    "writes to cosmosdb-server; the peers have no queues and no state store of their own.",
    "orderflow runs with make demo's settings (demo.config.DEMO_SETTINGS: a 4 s step deadline, "
    "MAX_IN_FLIGHT_PER_HOST=32): a step that overruns its deadline under load is recovered by the "
    "supervisor and retried (recovered_orders), which shows in the latency's tail, not in the outcomes.",
    "durabletask: bare orchestrations on the SDK's in-memory backend (durabletask.testing) in a process "
    "of its own, the worker in another, the client in the benchmark's process; latency ends at the "
    "completion time the backend recorded. No retries, no timers, no state store, no supervisor: an "
    "instance lives in the backend's memory only.",
    "dbos: DBOS Transact with a SQLite system database (WAL, a pool of one connection), a workflow of "
    "three steps without retries; the orders are started in DBOS's own process (DBOS.start_workflow, "
    "then get_result), DBOS being a library, so there is no client hop. Its durability is the SQLite "
    "checkpoint of each step.",
    "Operation counts come from one in-process run (orderflow.per_order.method); point reads, writes and "
    "queue sends are exact per order, query pages and items come from the roles' loops and grow with the "
    "run's length.",
    "Sweep: records read are the items the supervisor's queries returned. cosmosdb-server has no index "
    "and filters every document for every page, so its sweep time grows with the container, faster than "
    "linearly; Cosmos DB serves the same query from its range index, at a cost that follows the records "
    "returned, and so does the in-memory store, which indexes processState. Neither local store's time "
    "says what Cosmos DB's would be; the records read and the pages are the same on Cosmos DB.",
    "Hard-down: the demo service answers every call 503; supervisor back-offs are shortened (the calls "
    "made do not depend on them). Forward calls are held to the order's retry budget; undo calls "
    "(compensation) spend no budget and are bounded by SUPERVISOR_MAX_FAILURES compensation attempts.",
)


CALIBRATION_LOOP = 2_000_000
"""Iterations of :func:`core_speed`'s fixed loop."""


def core_speed(repeats: int = 3) -> float:
    """CPU seconds this thread takes for a fixed pure-Python loop (the fastest of ``repeats``): the same
    work, so a larger figure is a slower machine at that moment. CPU per order measured on a slower
    machine is larger too; this says how much slower it was."""
    best = float("inf")
    for _ in range(repeats):
        started = time.thread_time()
        total = 0
        for i in range(CALIBRATION_LOOP):
            total += i * i
        best = min(best, time.thread_time() - started)
    return round(best, 3)


def machine_info(
    load_before: Sequence[float],
    load_after: Sequence[float],
    core_speed_s: Sequence[float] = (),
) -> dict[str, Any]:
    """CPU count, Python, platform, the 1/5/15-minute load averages before and after the run, and
    :func:`core_speed` before and after it (seconds; empty when not measured)."""
    return {
        "cpu_count": os.cpu_count(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "load_average": {
            "before": [round(x, 2) for x in load_before],
            "after": [round(x, 2) for x in load_after],
        },
        "core_speed_s": {"loop": CALIBRATION_LOOP, "before_after": list(core_speed_s)},
    }


def peer_ratios(
    orderflow_runs: Mapping[str, Mapping[str, Any]], peers: Mapping[str, Mapping[str, Any]]
) -> dict[str, dict[str, dict[str, float | None]]]:
    """orderflow's figure over the peer's, for each peer and each orderflow process count.

    ``throughput`` above 1 means orderflow moves more orders per second; a latency ratio above 1 means
    orderflow's orders take longer; ``cpu`` above 1 means orderflow's own processes spend more CPU per
    order than the peer's processes (``cpu_ms_per_order``: ``orderflow`` of the window's measured
    figures over the peer's ``peer``, both from the same run; None when either was not measured).

    Returns:
        ``{peer: {"<n>_processes": {throughput, p50, p95, p99, cpu}}}``.
    """
    out: dict[str, dict[str, dict[str, float | None]]] = {}
    for peer, peer_run in peers.items():
        out[peer] = {}
        peer_cpu = (peer_run.get("cpu_ms_per_order") or {}).get("peer")
        for processes, run in orderflow_runs.items():
            figures: dict[str, float | None] = {
                "throughput": ratio(run.get("throughput_per_s"), peer_run.get("throughput_per_s"))
            }
            for figure in LATENCY_FIGURES:
                figures[figure.removesuffix("_s")] = ratio(
                    run.get("latency", {}).get(figure), peer_run.get("latency", {}).get(figure)
                )
            own_cpu = ((run.get("measured") or {}).get("cpu_ms_per_order") or {}).get("orderflow")
            figures["cpu"] = ratio(own_cpu, peer_cpu)
            out[peer][f"{processes}_processes"] = figures
    return out


def build_report(
    config: BenchConfig,
    *,
    machine: Mapping[str, Any],
    orderflow_runs: Mapping[str, Mapping[str, Any]],
    per_order: Mapping[str, Any] | None,
    one_at_a_time: Mapping[str, Mapping[str, Any]] | None = None,
    sweep_results: Sequence[Mapping[str, Any]],
    sweep_growth: Mapping[str, Any],
    hard_down: Mapping[str, Any] | None,
    peers: Mapping[str, Mapping[str, Any]],
    baseline: Mapping[str, Any] | None = None,
    sdk_calls: Mapping[str, Any] | None = None,
    worker_memory: Mapping[str, Any] | None = None,
    generated_at: datetime | None = None,
    notes: Sequence[str] = NOTES,
) -> dict[str, Any]:
    """Assemble the report (see the module docstring for its keys).

    Args:
        config: The run's configuration.
        machine: :func:`machine_info`.
        orderflow_runs: Throughput runs by process count (``"1"``, ``"2"``).
        per_order: The counting run, or None when it was not run.
        one_at_a_time: Runs at concurrency 1, by process count.
        sweep_results: One entry per store and size.
        sweep_growth: Growth per store (:func:`bench.sweep.growth`).
        hard_down: The hard-down run, or None.
        peers: Runs by peer name.
        baseline: The baseline revision's figures (:func:`bench.baseline.summarise`), or None.
        sdk_calls: :func:`bench.sdk_calls.sdk_calls_run`'s figures, or None; each throughput window's
            SDK floor (:func:`bench.sdk_floor.sdk_floor`) is added under ``floor_by_processes``, and,
            when they hold wall times, one order's serial requests at them under ``serial_path``
            (``requests``, :data:`bench.sdk_floor.SERIAL_PATH`; ``wall_ms``; ``settings``, what the
            requests are counted with, :data:`bench.sdk_floor.SERIAL_PATH_SETTINGS`; ``turned_off``, those
            this run turned off: :func:`bench.sdk_floor.serial_path_settings_off`).
        worker_memory: :func:`bench.worker_memory.worker_footprint`'s figures, or None.
        generated_at: When (UTC); now by default.
        notes: What a reader must know to read the figures.
    """
    when = generated_at or datetime.now(UTC)
    return {
        "generated_at": when.isoformat(timespec="seconds"),
        "machine": dict(machine),
        "config": config.model_dump(mode="json"),
        "orderflow": {
            "throughput_per_s": {p: run.get("throughput_per_s") for p, run in orderflow_runs.items()},
            "latency": {p: run.get("latency") for p, run in orderflow_runs.items()},
            "runs": {p: dict(run) for p, run in orderflow_runs.items()},
            "one_at_a_time": {p: dict(run) for p, run in (one_at_a_time or {}).items()},
            "per_order": dict(per_order) if per_order is not None else None,
            "worker_memory": dict(worker_memory) if worker_memory is not None else None,
        },
        "sweep": {"results": [dict(r) for r in sweep_results], "growth": dict(sweep_growth)},
        "hard_down": dict(hard_down) if hard_down is not None else None,
        "peers": {name: dict(run) for name, run in peers.items()},
        "ratios": peer_ratios(orderflow_runs, peers),
        "baseline": (
            {**baseline, "cpu_ratio": cpu_ratios(baseline, orderflow_runs)} if baseline is not None else None
        ),
        "sdk_calls": (
            _with_floors(sdk_calls, orderflow_runs, config.orderflow_settings)
            if sdk_calls is not None
            else None
        ),
        "notes": list(notes),
    }


def _with_floors(
    sdk_calls: Mapping[str, Any], runs: Mapping[str, Mapping[str, Any]], settings: Mapping[str, str]
) -> dict[str, Any]:
    costs = sdk_calls["ms_per_call"]["orderflow"]
    floors = {p: sdk_floor(run["measured"], costs) for p, run in runs.items() if run.get("measured")}
    figures = {**sdk_calls, "floor_by_processes": floors}
    walls = (sdk_calls.get("wall_ms_per_call") or {}).get("orderflow")
    if walls:
        figures["serial_path"] = {
            "requests": dict(SERIAL_PATH),
            "wall_ms": serial_path_ms(walls),
            "settings": dict(SERIAL_PATH_SETTINGS),
            "turned_off": serial_path_settings_off(settings),
        }
    return figures
