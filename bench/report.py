"""``bench-report.json``: its shape, the ratios between systems, and the tables printed from it.

Top-level keys: ``generated_at`` (UTC, ISO 8601), ``machine``, ``config``, ``orderflow``, ``sweep``,
``hard_down``, ``peers``, ``ratios``, ``baseline`` (:mod:`bench.baseline`, or null), ``sdk_calls``
(:mod:`bench.sdk_calls`, with each window's SDK floor, or null), ``notes``. Times are seconds,
throughputs orders per second, CPU milliseconds.
"""

from __future__ import annotations

import os
import platform
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.baseline import CPU_TARGET, cpu_ratios
from bench.config import BenchConfig
from bench.measure import DEVHOSTS_ONLY
from bench.sdk_calls import CLIENTS, OPERATIONS, sdk_floor
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
    orderflow's orders take longer.

    Returns:
        ``{peer: {"<n>_processes": {throughput, p50, p95, p99}}}``.
    """
    out: dict[str, dict[str, dict[str, float | None]]] = {}
    for peer, peer_run in peers.items():
        out[peer] = {}
        for processes, run in orderflow_runs.items():
            figures: dict[str, float | None] = {
                "throughput": ratio(run.get("throughput_per_s"), peer_run.get("throughput_per_s"))
            }
            for figure in LATENCY_FIGURES:
                figures[figure.removesuffix("_s")] = ratio(
                    run.get("latency", {}).get(figure), peer_run.get("latency", {}).get(figure)
                )
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
            SDK floor (:func:`bench.sdk_calls.sdk_floor`) is added under ``floor_by_processes``.
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
        },
        "sweep": {"results": [dict(r) for r in sweep_results], "growth": dict(sweep_growth)},
        "hard_down": dict(hard_down) if hard_down is not None else None,
        "peers": {name: dict(run) for name, run in peers.items()},
        "ratios": peer_ratios(orderflow_runs, peers),
        "baseline": (
            {**baseline, "cpu_ratio": cpu_ratios(baseline, orderflow_runs)} if baseline is not None else None
        ),
        "sdk_calls": _with_floors(sdk_calls, orderflow_runs) if sdk_calls is not None else None,
        "notes": list(notes),
    }


def _with_floors(sdk_calls: Mapping[str, Any], runs: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    costs = sdk_calls["ms_per_call"]["orderflow"]
    floors = {p: sdk_floor(run["measured"], costs) for p, run in runs.items() if run.get("measured")}
    return {**sdk_calls, "floor_by_processes": floors}


def _sweep_cells(result: dict[str, Any]) -> tuple[str, ...]:
    """One sweep result as the cells both tables show: store, settled, expired, time, scan-only time,
    records read."""
    return (
        result["store"],
        _fmt(result["settled"]),
        _fmt(result["expired"]),
        _fmt(result["time_s"]),
        _fmt(result["idle_pass"]["time_s"]),
        _fmt(result["records_read"]),
    )


def _fmt(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".") if abs(value) < 100 else f"{value:,.1f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _met(target: Mapping[str, Any] | None) -> str:
    if not target:
        return "–"
    met = target.get("met")
    mark = "met" if met else ("not met" if met is False else "–")
    return f"{_fmt(target.get('value'))} (target {_fmt(target.get('target'))}: {mark})"


def system_rows(report: Mapping[str, Any]) -> list[list[str]]:
    """One row per system: name, orders/s, p50, p95, p99 (seconds), orders recovered by orderflow's
    supervisor (a step past its deadline), outcomes."""
    rows = []
    for processes, run in report["orderflow"]["runs"].items():
        rows.append(_row(f"orderflow, {processes} devhost process(es)", run))
    for name, run in report["peers"].items():
        rows.append(_row(name, run))
    return rows


def _row(name: str, run: Mapping[str, Any]) -> list[str]:
    latency = run.get("latency") or {}
    outcomes = ", ".join(f"{k} {v}" for k, v in (run.get("outcomes") or {}).items())
    return [
        name,
        _fmt(run.get("throughput_per_s")),
        *(_fmt(latency.get(f)) for f in LATENCY_FIGURES),
        _fmt(run.get("recovered_orders")),
        outcomes,
    ]


def count_rows(per_order: Mapping[str, Any]) -> list[list[str]]:
    """The per-order counts worth a table row: label and value (or target verdict)."""
    state = per_order["state_store"]
    sends = per_order["queue_sends"]
    targets = per_order["targets"]
    rows = [
        ["state-store writes (creates + replaces)", _met(targets["state_writes"])],
        ["state-store point reads", _met(targets["point_reads"])],
        ["queue messages sent", _met(targets["queue_messages"])],
        ["state-store creates / replaces", f"{_fmt(state['creates'])} / {_fmt(state['replaces'])}"],
        [
            "state-store query pages / items (loops)",
            f"{_fmt(state['query_pages'])} / {_fmt(state['query_items'])}",
        ],
        [
            "order-store writes / reads",
            f"{_fmt(per_order['order_store']['writes'])} / {_fmt(per_order['order_store']['reads'])}",
        ],
        *(
            [f"  sent to {role}", _fmt(sends[role])]
            for role in ("orders", "agent_requests", "agent_responses", "replies")
        ),
        *(
            [f"  state write by {label}", _fmt(n)]
            for label, n in per_order["state_writes_by_function"].items()
        ),
    ]
    return rows


def _measured(report: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
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
    measured = _measured(report)
    header = ["per order", *measured]
    processes = sorted({name for m in measured.values() for name in m["cpu_ms_per_order"]}, key=_cpu_order)
    rows = [
        [f"CPU ms: {name}", *(_fmt(m["cpu_ms_per_order"].get(name)) for m in measured.values())]
        for name in processes
    ]
    targets = sorted(
        {(t, op) for m in measured.values() for t, ops in m["http_per_order"].items() for op in ops}
    )
    rows += [
        [f"requests: {t} {op}", *(_fmt(m["http_per_order"].get(t, {}).get(op)) for m in measured.values())]
        for t, op in targets
    ]
    methods = sorted({method for m in measured.values() for method in m["grpc_per_order"]})
    rows += [
        [f"gRPC: {method}", *(_fmt(m["grpc_per_order"].get(method)) for m in measured.values())]
        for method in methods
    ]
    rows.append(["limited by", *(str(m["limited_by"]) for m in measured.values())])
    return header, rows


def _cpu_order(name: str) -> tuple[int, str]:
    rank = {"orderflow": 0, DEVHOSTS_ONLY: 0, "all": 9}.get(name, 1 if name.startswith("devhost") else 5)
    return rank, name


def profile_tables(report: Mapping[str, Any]) -> list[tuple[str, list[list[str]]]]:
    """Each profiled process's busy samples by package (share, inclusive share): a title and rows per
    process, from the one window that was profiled."""
    for name, measured in _measured(report).items():
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


def print_tables(report: Mapping[str, Any], console: Console) -> None:
    """Print the report's figures as rich tables."""
    _print_systems(report, console)
    header, rows = cost_rows(report)
    if rows[:-1]:
        cost = Table(title="cost of an order in each measured window (CPU from each process's counters)")
        for n, column in enumerate(header):
            cost.add_column(column, justify="left" if n == 0 else "right")
        for row in rows:
            cost.add_row(*row)
        console.print(cost)
    for title, rows in profile_tables(report):
        profile = Table(title=title)
        for column in ("package (innermost non-stdlib frame)", "share", "inclusive"):
            profile.add_column(column, justify="left" if column.startswith("package") else "right")
        for row in rows:
            profile.add_row(*row)
        console.print(profile)
    _print_baseline(report, console)
    _print_sdk_calls(report, console)
    _print_rest(report, console)


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
                _fmt(figures["baseline_ms"]),
                _fmt(figures["now_ms"]),
                f"{_fmt(figures['ratio'])} ({'met' if figures['met'] else 'not met'})",
                ", ".join(f"{pair}: {_fmt(ratio)}" for pair, ratio in figures["pairs"].items()),
                _fmt(before.get("throughput_per_s")),
                _fmt(now.get("throughput_per_s")),
            ]
        )
    title = (
        f"CPU ms per order in orderflow's processes: {baseline['revision']} (before every cut, measured in "
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


def _print_baseline(report: Mapping[str, Any], console: Console) -> None:
    title, rows = baseline_rows(report)
    if not rows:
        return
    table = Table(title=title)
    for column in BASELINE_COLUMNS:
        table.add_column(column, justify="left" if column == "processes" else "right")
    for row in rows:
        table.add_row(*row)
    console.print(table)


def sdk_call_rows(report: Mapping[str, Any]) -> tuple[str, list[list[str]], list[str]]:
    """The CPU of one SDK call by client (a title, one row per call), and a sentence per throughput
    window saying what its devhosts' SDK calls alone cost per order beside what they cost in all."""
    figures = report.get("sdk_calls")
    if not figures:
        return "", [], []
    costs = figures["ms_per_call"]
    title = (
        f"CPU ms of one SDK call (median of {figures['repeats']} x {figures['calls']} calls; async: "
        f"{figures['concurrency']} at once on one event loop)"
    )
    rows = [[call, *(_fmt(costs[client].get(call)) for client in CLIENTS)] for call in OPERATIONS]
    lines = []
    for processes, floors in figures.get("floor_by_processes", {}).items():
        each = ", ".join(
            f"{name} {_fmt(floor['sdk_calls_ms'])} of {_fmt(floor['measured_ms'])}"
            for name, floor in floors.items()
            if name != "devhosts"
        )
        total = floors["devhosts"]
        lines.append(
            f"SDK floor, {processes} proc: the devhosts' SDK calls alone cost {_fmt(total['sdk_calls_ms'])} "
            f"ms per order of the {_fmt(total['measured_ms'])} ms they cost in all ({each})"
        )
    return title, rows, lines


def _print_sdk_calls(report: Mapping[str, Any], console: Console) -> None:
    title, rows, lines = sdk_call_rows(report)
    if not rows:
        return
    table = Table(title=title)
    for n, column in enumerate(("call", *CLIENTS)):
        table.add_column(column, justify="left" if n == 0 else "right")
    for row in rows:
        table.add_row(*row)
    console.print(table)
    for line in lines:
        console.print(line)


def _print_systems(report: Mapping[str, Any], console: Console) -> None:
    systems = Table(title="throughput and latency (closed loop, faults off)")
    for column in ("system", "orders/s", "p50 s", "p95 s", "p99 s", "recovered", "outcomes"):
        systems.add_column(column, justify="left" if column in ("system", "outcomes") else "right")
    for row in system_rows(report):
        systems.add_row(*row)
    console.print(systems)

    ratios = Table(title="orderflow / peer (throughput > 1: orderflow faster; latency > 1: orderflow slower)")
    for column in ("peer", "orderflow processes", "throughput", "p50", "p95", "p99"):
        ratios.add_column(column, justify="left" if column == "peer" else "right")
    for peer, by_processes in report["ratios"].items():
        for processes, figures in by_processes.items():
            ratios.add_row(
                peer,
                processes.split("_")[0],
                *(_fmt(figures.get(k)) for k in ("throughput", "p50", "p95", "p99")),
            )
    console.print(ratios)
    speed = speed_line(report)
    if speed:
        console.print(speed)
    for processes, run in (report["orderflow"].get("one_at_a_time") or {}).items():
        latency = run.get("latency") or {}
        console.print(
            f"one order at a time on {processes} devhost process(es): p50 {_fmt(latency.get('p50_s'))} s, "
            f"p95 {_fmt(latency.get('p95_s'))} s ({run.get('finished')} orders)"
        )


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


def _print_rest(report: Mapping[str, Any], console: Console) -> None:
    per_order = report["orderflow"].get("per_order")
    if per_order:
        counts = Table(title=f"per order, happy path (n = {per_order['remote_steps']} remote steps)")
        counts.add_column("operation")
        counts.add_column("per order", justify="right")
        for row in count_rows(per_order):
            counts.add_row(*row)
        console.print(counts)

    sweep = Table(title="one supervisor sweep")
    for column in ("store", "settled", "expired", "time s", "scan-only s", "records read", "pages"):
        sweep.add_column(column, justify="left" if column == "store" else "right")
    for result in report["sweep"]["results"]:
        sweep.add_row(*_sweep_cells(result), _fmt(result["query_pages"]))
    console.print(sweep)
    for store, grown in report["sweep"]["growth"].items():
        if grown:
            console.print(
                f"sweep growth on {store}, {grown['sizes'][0]:,} → {grown['sizes'][1]:,} settled: "
                f"time {_met(grown['time_ratio'])}, records read {_met(grown['records_read_ratio'])}"
            )

    hard = report.get("hard_down")
    if hard:
        console.print(
            f"hard-down {hard['service']}: forward calls per order max {hard['forward_calls']['max']}, "
            f"mean {hard['forward_calls']['mean']} against a budget of {hard['budget']} "
            f"({'met' if hard['forward_calls_within_budget']['met'] else 'not met'}); undo calls max "
            f"{hard['undo_calls']['max']}; final states {hard['final_states']}"
        )
        cut = hard.get("calls_to_dead_service")
        if cut:
            console.print(
                f"hard-down {hard['service']}, calls to it in total (per order): without the circuit "
                f"breaker {cut['total']['without_breaker']} ({cut['per_order']['without_breaker']}), with "
                f"it {cut['total']['with_breaker']} ({cut['per_order']['with_breaker']})"
            )


def markdown_tables(report: Mapping[str, Any]) -> str:
    """The headline figures as Markdown tables (the README's Benchmarks section quotes them)."""
    lines = [
        "| system | orders/s | p50 s | p95 s | p99 s | recovered |",
        "|---|---:|---:|---:|---:|---:|",
        *(f"| {' | '.join(row[:6])} |" for row in system_rows(report)),
        "",
        "| orderflow / peer | processes | throughput | p50 | p95 | p99 |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for peer, by_processes in report["ratios"].items():
        for processes, figures in by_processes.items():
            values = " | ".join(_fmt(figures.get(k)) for k in ("throughput", "p50", "p95", "p99"))
            lines.append(f"| {peer} | {processes.split('_')[0]} | {values} |")
    speed = speed_line(report)
    if speed:
        lines += ["", speed + "."]
    for processes, run in (report["orderflow"].get("one_at_a_time") or {}).items():
        latency = run.get("latency") or {}
        lines += ["", f"One order at a time on {processes} process(es): p50 {_fmt(latency.get('p50_s'))} s."]
    header, rows = cost_rows(report)
    if rows[:-1]:
        lines += ["", f"| {' | '.join(header)} |", "|---|" + "---:|" * (len(header) - 1)]
        lines += [f"| {' | '.join(row)} |" for row in rows]
    title, rows = baseline_rows(report)
    if rows:
        lines += ["", f"{title}:", "", f"| {' | '.join(BASELINE_COLUMNS)} |"]
        lines += ["|---|" + "---:|" * (len(BASELINE_COLUMNS) - 1)]
        lines += [f"| {' | '.join(row)} |" for row in rows]
    title, rows, floors = sdk_call_rows(report)
    if rows:
        lines += ["", f"{title}:", "", f"| call | {' | '.join(CLIENTS)} |", "|---|" + "---:|" * len(CLIENTS)]
        lines += [f"| {' | '.join(row)} |" for row in rows]
        lines += ["", *(f"{floor}." for floor in floors)]
    per_order = report["orderflow"].get("per_order")
    if per_order:
        lines += ["", "| per order (happy path) | value |", "|---|---|"]
        lines += [f"| {label.strip()} | {value} |" for label, value in count_rows(per_order)]
    lines += [
        "",
        "| sweep store | settled | expired | time s | scan-only s | records read |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for result in report["sweep"]["results"]:
        lines.append(f"| {' | '.join(_sweep_cells(result))} |")
    return "\n".join(lines) + "\n"
