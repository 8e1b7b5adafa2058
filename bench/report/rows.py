"""The report's figures as table rows and sentences: systems, per-order counts, costs and profiles,
the CPU baseline comparison, SDK call costs and the machine's core speed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bench.baseline import CPU_TARGET
from bench.measure import DEVHOSTS_ONLY
from bench.report.build import (
    LATENCY_FIGURES,
)
from bench.sdk_calls import CLIENTS
from bench.sdk_floor import OPERATIONS


def sweep_cells(result: dict[str, Any]) -> tuple[str, ...]:
    """One sweep result as the cells both tables show: store, settled, expired, time, scan-only time,
    records read."""
    return (
        result["store"],
        fmt(result["settled"]),
        fmt(result["expired"]),
        fmt(result["time_s"]),
        fmt(result["idle_pass"]["time_s"]),
        fmt(result["records_read"]),
    )


def fmt(value: Any) -> str:
    """A table cell of a figure: "–" for none, floats to at most three places (one from 100 on),
    thousands grouped."""
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".") if abs(value) < 100 else f"{value:,.1f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def met_cell(target: Mapping[str, Any] | None) -> str:
    """A table cell of a target: its value, the target and whether it was met."""
    if not target:
        return "–"
    met = target.get("met")
    mark = "met" if met else ("not met" if met is False else "–")
    return f"{fmt(target.get('value'))} (target {fmt(target.get('target'))}: {mark})"


def system_rows(report: Mapping[str, Any]) -> list[list[str]]:
    """One row per system: name, orders/s, p50, p95, p99 (seconds), orders recovered by orderflow's
    supervisor (a step past its deadline), outcomes."""
    rows = []
    for processes, run in report["orderflow"]["runs"].items():
        rows.append(system_row(f"orderflow, {processes} devhost process(es)", run))
    for name, run in report["peers"].items():
        rows.append(system_row(name, run))
    return rows


def system_row(name: str, run: Mapping[str, Any]) -> list[str]:
    """One system's row of :func:`system_rows`."""
    latency = run.get("latency") or {}
    outcomes = ", ".join(f"{k} {v}" for k, v in (run.get("outcomes") or {}).items())
    return [
        name,
        fmt(run.get("throughput_per_s")),
        *(fmt(latency.get(f)) for f in LATENCY_FIGURES),
        fmt(run.get("recovered_orders")),
        outcomes,
    ]


RATIO_COLUMNS = ("peer", "processes", "throughput", "p50", "p95", "p99", "CPU per order", "peer CPU ms")
"""Columns of :func:`ratio_rows`."""


def ratio_rows(report: Mapping[str, Any]) -> list[list[str]]:
    """orderflow over each peer, one row per peer and orderflow process count: throughput, latency and
    CPU per order ratios (:func:`bench.report.build.peer_ratios`), and the peer's own CPU ms per order
    measured in the same run."""
    rows = []
    for peer, by_processes in report["ratios"].items():
        peer_cpu = (report["peers"].get(peer, {}).get("cpu_ms_per_order") or {}).get("peer")
        for processes, figures in by_processes.items():
            rows.append(
                [
                    peer,
                    processes.split("_")[0],
                    *(fmt(figures.get(k)) for k in ("throughput", "p50", "p95", "p99", "cpu")),
                    fmt(peer_cpu),
                ]
            )
    return rows


def count_rows(per_order: Mapping[str, Any]) -> list[list[str]]:
    """The per-order counts worth a table row: label and value (or target verdict)."""
    state = per_order["state_store"]
    sends = per_order["queue_sends"]
    targets = per_order["targets"]
    rows = [
        ["state-store writes (creates + replaces)", met_cell(targets["state_writes"])],
        ["state-store point reads", met_cell(targets["point_reads"])],
        ["queue messages sent", met_cell(targets["queue_messages"])],
        ["state-store creates / replaces", f"{fmt(state['creates'])} / {fmt(state['replaces'])}"],
        [
            "state-store query pages / items (loops)",
            f"{fmt(state['query_pages'])} / {fmt(state['query_items'])}",
        ],
        [
            "order-store writes / reads",
            f"{fmt(per_order['order_store']['writes'])} / {fmt(per_order['order_store']['reads'])}",
        ],
        *(
            [f"  sent to {role}", fmt(sends[role])]
            for role in ("orders", "agent_requests", "agent_responses", "replies")
        ),
        *(
            [f"  state write by {label}", fmt(n)]
            for label, n in per_order["state_writes_by_function"].items()
        ),
    ]
    return rows


def measured_runs(report: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """The measured windows by run name (``2 processes``, ``2 processes, 1 at a time``)."""
    out: dict[str, Mapping[str, Any]] = {}
    for key, suffix in (("runs", ""), ("one_at_a_time", ", 1 at a time")):
        for processes, run in (report["orderflow"].get(key) or {}).items():
            if run.get("measured"):
                out[f"{processes} proc{suffix}"] = run["measured"]
    return out


def cost_rows(report: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """CPU ms per order of each process, requests per order to each emulator by operation, gRPC calls
    per order and what limited each run: a header (one column per measured run) and the rows."""
    measured = measured_runs(report)
    header = ["per order", *measured]
    processes = sorted({name for m in measured.values() for name in m["cpu_ms_per_order"]}, key=cpu_order)
    rows = [
        [f"CPU ms: {name}", *(fmt(m["cpu_ms_per_order"].get(name)) for m in measured.values())]
        for name in processes
    ]
    targets = sorted(
        {(t, op) for m in measured.values() for t, ops in m["http_per_order"].items() for op in ops}
    )
    rows += [
        [f"requests: {t} {op}", *(fmt(m["http_per_order"].get(t, {}).get(op)) for m in measured.values())]
        for t, op in targets
    ]
    methods = sorted({method for m in measured.values() for method in m["grpc_per_order"]})
    rows += [
        [f"gRPC: {method}", *(fmt(m["grpc_per_order"].get(method)) for m in measured.values())]
        for method in methods
    ]
    rows.append(["limited by", *(str(m["limited_by"]) for m in measured.values())])
    return header, rows


def cpu_order(name: str) -> tuple[int, str]:
    """Sort key of a process name in the CPU rows: orderflow first, then devhosts, others, then all."""
    rank = {"orderflow": 0, DEVHOSTS_ONLY: 0, "all": 9}.get(name, 1 if name.startswith("devhost") else 5)
    return rank, name


def profile_tables(report: Mapping[str, Any]) -> list[tuple[str, list[list[str]]]]:
    """Each profiled process's busy samples by package (share, inclusive share): a title and rows per
    process, from the one window that was profiled."""
    for name, measured in measured_runs(report).items():
        profiles = measured.get("profiles")
        if profiles:
            return [
                (
                    f"py-spy profile of {profile['process']} ({profile['roles']}; {name}), "
                    f"{profile['samples']} busy samples",
                    [
                        [package, f"{share:.0%}", f"{profile['inclusive'].get(package, 0):.0%}"]
                        for package, share in profile["by_package"].items()
                    ],
                )
                for profile in profiles
            ]
    return []


def baseline_rows(report: Mapping[str, Any]) -> tuple[str, list[list[str]]]:
    """The CPU comparison with the baseline revision: a title and one row per process count (baseline
    ms, now ms and their ratio, each the median of the pairs of windows; whether the target is met; each
    pair's ratio by its number; both throughput windows' orders/s)."""
    baseline = report.get("baseline")
    if not baseline:
        return "", []
    rows = []
    for processes, figures in baseline["cpu_ratio"].items():
        before = baseline["windows"][processes]
        now = report["orderflow"]["runs"].get(processes) or {}
        rows.append(
            [
                processes,
                fmt(figures["baseline_ms"]),
                fmt(figures["now_ms"]),
                f"{fmt(figures['ratio'])} ({'met' if figures['met'] else 'not met'})",
                ", ".join(f"{pair}: {fmt(ratio)}" for pair, ratio in figures["pairs"].items()),
                fmt(before.get("throughput_per_s")),
                fmt(now.get("throughput_per_s")),
            ]
        )
    title = (
        f"CPU ms per order in orderflow's processes: {baseline['revision']} (the baseline, measured in "
        f"this run) and now, medians of the pairs of windows; target ratio <= {CPU_TARGET}"
    )
    return title, rows


BASELINE_COLUMNS = (
    "processes",
    "median baseline ms",
    "median now ms",
    "median of the ratios",
    "each pair: ratio",
    "baseline orders/s",
    "orders/s",
)


def sdk_call_rows(report: Mapping[str, Any]) -> tuple[str, list[str], list[list[str]], list[str]]:
    """The cost of one SDK call by client: a title, the columns (the CPU of each client, then the
    orderflow client's wall time when measured), one row per call; then a sentence per throughput window
    saying what its devhosts' SDK calls alone cost per order beside what they cost in all, and one saying
    how long one order's serial requests take at one call's wall time beside the one-at-a-time p50."""
    figures = report.get("sdk_calls")
    if not figures:
        return "", [], [], []
    costs = figures["ms_per_call"]
    walls = (figures.get("wall_ms_per_call") or {}).get("orderflow")
    title = (
        f"CPU ms of one SDK call (median of {figures['repeats']} x {figures['calls']} calls; async: "
        f"{figures['concurrency']} at once on one event loop)"
        + ("; wall ms of one orderflow call, one at a time" if walls else "")
    )
    header = ["call", *CLIENTS, *(["orderflow wall"] if walls else [])]
    rows = [[call, *(fmt(costs[client].get(call)) for client in CLIENTS)] for call in OPERATIONS]
    if walls:
        rows = [[*row, fmt(walls.get(call))] for row, call in zip(rows, OPERATIONS, strict=True)]
    lines = []
    for processes, floors in figures.get("floor_by_processes", {}).items():
        each = ", ".join(
            f"{name} {fmt(floor['sdk_calls_ms'])} of {fmt(floor['measured_ms'])}"
            for name, floor in floors.items()
            if name != "devhosts"
        )
        total = floors["devhosts"]
        lines.append(
            f"SDK floor, {processes} proc: the devhosts' SDK calls alone cost {fmt(total['sdk_calls_ms'])} "
            f"ms per order of the {fmt(total['measured_ms'])} ms they cost in all ({each})"
        )
    serial = figures.get("serial_path")
    if serial:
        lines.append(_serial_path_line(serial, report["orderflow"].get("one_at_a_time") or {}))
    return title, header, rows, lines


def _serial_path_line(serial: Mapping[str, Any], one_at_a_time: Mapping[str, Mapping[str, Any]]) -> str:
    requests = ", ".join(f"{count} x {call}" for call, count in serial["requests"].items())
    settings = serial.get("settings") or {}  # every one on: the counted path
    counted = f"; {' and '.join(settings)} on" if settings else ""
    line = (
        f"Serial path: one order's emulator requests made one after another ({requests}{counted}) take "
        f"{fmt(serial['wall_ms'])} ms at one call's wall time"
    )
    turned_off = serial.get("turned_off") or []
    if turned_off:
        # Beside this run's p50 the figure would mislead: its orders made more requests on the way.
        changed = " and ".join(turned_off)
        return line + f"; this run turned {changed} off, so its orders' path has more requests than these"
    p50s = [
        f"{fmt(1000 * run['latency']['p50_s'])} ms on {processes} proc"
        for processes, run in one_at_a_time.items()
        if (run.get("latency") or {}).get("p50_s") is not None
    ]
    return line + (f", of the one-at-a-time p50 ({', '.join(p50s)})" if p50s else "")


def one_at_a_time_lines(report: Mapping[str, Any]) -> list[str]:
    """One sentence per one-at-a-time run: orderflow's on each process count, then each peer's.

    orderflow's latency runs from the client's send to its receive of the final reply; durabletask's
    from the schedule to the completion its backend recorded, with no queue and no state store.
    """
    lines = []
    for processes, run in (report["orderflow"].get("one_at_a_time") or {}).items():
        latency = run.get("latency") or {}
        lines.append(
            f"one order at a time on {processes} devhost process(es): p50 {fmt(latency.get('p50_s'))} s, "
            f"p95 {fmt(latency.get('p95_s'))} s ({run.get('finished')} orders)"
        )
    for peer, run in (report.get("peers") or {}).items():
        single = run.get("one_at_a_time")
        if not single:
            continue
        latency = single.get("latency") or {}
        lines.append(
            f"{peer}, the same saga one order at a time: p50 {fmt(latency.get('p50_s'))} s, "
            f"p95 {fmt(latency.get('p95_s'))} s ({single.get('finished')} orders, to the completion its "
            "backend recorded)"
        )
    return lines


def speed_line(report: Mapping[str, Any]) -> str:
    """The machine's core speed before and after the run, as a sentence ('' when not measured)."""
    speed = (report.get("machine") or {}).get("core_speed_s") or {}
    measured = speed.get("before_after") or []
    if len(measured) != 2:
        return ""
    return (
        f"core speed: {speed['loop']:,} iterations of a fixed loop took {measured[0]} s of CPU before the "
        f"run and {measured[1]} s after it (more: a slower machine)"
    )
