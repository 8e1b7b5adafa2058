"""What one timed window cost: CPU seconds per process, HTTP requests per emulator and operation, gRPC
calls to the durabletask backend, and what limited the throughput.

A throughput run takes a :func:`snapshot` just before its timed orders and one just after them;
:func:`window_figures` turns the two into per-order figures. CPU times come from each process's own
counters (:mod:`bench.counting.cpu`), request counts from the devhost processes' probes
(:mod:`bench.probe`) and from this process's own counter (the load generator's client).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bench.counting.cpu import CpuClock, cpu_between, machine_busy_s, peak_rss_mb
from bench.counting.http import HttpCounter
from bench.probe import read_counts
from devhost.emulators import LocalEndpoints

LOAD_GENERATOR = "load generator"
"""The benchmark's own process (the client SDK submitting orders and reading replies)."""

BACKEND_SUFFIX = "durabletask backend"
"""Name suffix of a devhost's durabletask backend process (its child) among the measured processes."""

DEVHOSTS_ONLY = "orderflow devhosts"
"""orderflow's own CPU without the backends: the share that runs in the Functions worker on Azure."""

BUSY_CORE = 0.9
"""A process using at least this share of one core is CPU-bound (one interpreter runs on one core)."""

Counts = dict[str, dict[str, int]]


def http_targets(endpoints: LocalEndpoints, services_url: str | None = None) -> dict[str, str]:
    """``"host:port"`` -> emulator name for the run's endpoints: Azurite (queues and blobs),
    cosmosdb-server and, when given, the demo services."""
    targets: dict[str, str] = {}
    for part in endpoints.storage_connection_string.split(";"):
        key, _, value = part.partition("=")
        if key in ("QueueEndpoint", "BlobEndpoint"):
            split = urlsplit(value)
            targets[f"{split.hostname}:{split.port}"] = "azurite"
    cosmos = urlsplit(endpoints.cosmos_endpoint)
    targets[f"{cosmos.hostname}:{cosmos.port}"] = "cosmosdb-server"
    if services_url:
        services = urlsplit(services_url)
        targets[f"{services.hostname}:{services.port}"] = "demo-services"
    return targets


@dataclass
class Probed:
    """A devhost process started through :mod:`bench.probe`: its pid and its counts file."""

    pid: int
    counts_file: Path


@dataclass
class Instruments:
    """Everything a window is measured with.

    Attributes:
        cpu: The processes whose CPU is sampled, by name (devhost processes, emulators, the rest).
        probes: The devhost processes' probes, by process name.
        local: This process's HTTP counter (the load generator's requests).
        own: Names of orderflow's own processes (the devhost processes) among ``cpu``'s.
    """

    cpu: CpuClock
    probes: dict[str, Probed] = field(default_factory=dict)
    local: HttpCounter | None = None
    own: tuple[str, ...] = ()


def snapshot(instruments: Instruments) -> dict[str, Any]:
    """CPU seconds of every process, the machine's busy seconds, every process's request counts, and
    orderflow's own processes' peak resident memory since each started (MB; start-up included).

    Raises:
        TimeoutError: a probe did not answer.
    """
    counts = {name: read_counts(p.pid, p.counts_file) for name, p in instruments.probes.items()}
    if instruments.local is not None:
        counts[LOAD_GENERATOR] = {"http": instruments.local.counts.snapshot(), "grpc": {}}
    return {
        "at": time.monotonic(),
        "cpu_s": instruments.cpu.sample(),
        "machine_busy_s": machine_busy_s(),
        "counts": counts,
        "peak_rss_mb": {
            name: mb
            for name in instruments.own
            if (pid := instruments.cpu.pids.get(name)) is not None and (mb := peak_rss_mb(pid)) is not None
        },
    }


def counts_between(before: Counts, after: Counts) -> Counts:
    """``{operation: {label: n}}`` after minus before (zero differences left out)."""
    out: Counts = {}
    for operation, labels in after.items():
        for label, n in labels.items():
            delta = n - before.get(operation, {}).get(label, 0)
            if delta:
                out.setdefault(operation, {})[label] = delta
    return out


def per_order_by_target(counts: Sequence[Counts], orders: int) -> dict[str, dict[str, float]]:
    """Summed ``{operation: {target: n}}`` tallies as ``{target: {operation: n / orders, "total": ...}}``."""
    summed: dict[str, dict[str, int]] = {}
    for tally in counts:
        for operation, targets in tally.items():
            for target, n in targets.items():
                by_op = summed.setdefault(target, {})
                by_op[operation] = by_op.get(operation, 0) + n
    out: dict[str, dict[str, float]] = {}
    for target, by_op in sorted(summed.items()):
        row = {op: round(n / orders, 2) for op, n in sorted(by_op.items())}
        row["total"] = round(sum(by_op.values()) / orders, 2)
        out[target] = row
    return out


def limited_by(cores: Mapping[str, float], machine_cores_busy: float, cpu_count: int) -> str:
    """What held a window's throughput, read from the CPU counters.

    The machine when its cores were (nearly) all busy; else a process that used a whole core (one
    Python interpreter's GIL, or one Node event loop); else neither: the orders waited (on polls,
    timers or each other), the throughput is concurrency over latency.
    """
    busiest = max(cores, key=lambda name: cores[name]) if cores else None
    top = f"{busiest} at {cores[busiest]:.2f} cores" if busiest else "no process"
    if machine_cores_busy >= BUSY_CORE * cpu_count:
        others = max(0.0, machine_cores_busy - sum(cores.values()))
        return (
            f"the machine's CPU ({machine_cores_busy:.2f} of {cpu_count} cores busy, {others:.2f} of them "
            f"outside the run; busiest: {top})"
        )
    if busiest is not None and cores[busiest] >= BUSY_CORE:
        return f"{busiest}'s CPU ({cores[busiest]:.2f} cores: one interpreter's worth)"
    return f"waiting, not CPU ({machine_cores_busy:.2f} of {cpu_count} cores busy; busiest: {top})"


def window_figures(
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    *,
    orders: int,
    own: Sequence[str],
    cpu_count: int | None = None,
) -> dict[str, Any]:
    """Per-order figures of the window between two :func:`snapshot` results.

    Args:
        before, after: The snapshots.
        orders: Orders finished in the window (must be positive).
        own: orderflow's own processes (summed as ``orderflow``; with durabletask backends among them,
            the devhost processes alone also as :data:`DEVHOSTS_ONLY`).
        cpu_count: Cores of the machine (default: ``os.cpu_count()``).

    Returns:
        ``elapsed_s``; ``cpu_ms_per_order`` (per process, plus ``orderflow`` and ``all``); ``cores``
        (CPU seconds per second of each process, and ``machine``); ``http_per_order``
        (``{emulator: {operation: n, total}}`` over every process); ``http_per_order_by_process``;
        ``grpc_per_order`` (``{method: n, total}``); ``limited_by`` (:func:`limited_by`);
        ``peak_rss_mb``, each of orderflow's processes' peak resident memory since it started, read at
        the window's end (MB: what an instance must hold, start-up and warm-up included).

    Raises:
        ValueError: ``orders`` is not positive.
    """
    if orders < 1:
        raise ValueError("orders must be positive")
    cores_total = cpu_count or os.cpu_count() or 1
    elapsed = max(after["at"] - before["at"], 1e-9)
    cpu = cpu_between(before["cpu_s"], after["cpu_s"])
    cpu_ms = {name: round(1000 * s / orders, 1) for name, s in sorted(cpu.items())}
    cpu_ms["orderflow"] = round(sum(cpu_ms.get(name, 0.0) for name in own), 1)
    if any(name.endswith(BACKEND_SUFFIX) for name in own):
        devhosts = [name for name in own if not name.endswith(BACKEND_SUFFIX)]
        cpu_ms[DEVHOSTS_ONLY] = round(sum(cpu_ms.get(name, 0.0) for name in devhosts), 1)
    cpu_ms["all"] = round(1000 * sum(cpu.values()) / orders, 1)
    cores = {name: round(s / elapsed, 2) for name, s in sorted(cpu.items())}
    machine = round((after["machine_busy_s"] - before["machine_busy_s"]) / elapsed, 2)
    # Whatever else ran on the machine meanwhile (other users' work shares the cores).
    unmeasured = round(max(0.0, machine - sum(cores.values())), 2)
    http = {
        name: counts_between(before["counts"].get(name, {}).get("http", {}), c.get("http", {}))
        for name, c in after["counts"].items()
    }
    grpc = [
        counts_between(before["counts"].get(name, {}).get("grpc", {}), c.get("grpc", {}))
        for name, c in after["counts"].items()
    ]
    grpc_rows = per_order_by_target(grpc, orders).get("durabletask", {"total": 0.0})
    return {
        "elapsed_s": round(elapsed, 3),
        "cpu_ms_per_order": cpu_ms,
        "cores": {**cores, "machine": machine, "unmeasured": unmeasured},
        "http_per_order": per_order_by_target(list(http.values()), orders),
        "http_per_order_by_process": {
            name: per_order_by_target([tally], orders) for name, tally in sorted(http.items())
        },
        "grpc_per_order": grpc_rows,
        "limited_by": limited_by(cores, machine, cores_total),
        "peak_rss_mb": dict(sorted(after.get("peak_rss_mb", {}).items())),
    }
