"""The report printed: rich tables for the console, and Markdown tables for the README."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.report.rows import (
    BASELINE_COLUMNS,
    RATIO_COLUMNS,
    baseline_rows,
    cost_rows,
    count_rows,
    fmt,
    met_cell,
    one_at_a_time_lines,
    profile_tables,
    ratio_rows,
    sdk_call_rows,
    speed_line,
    sweep_cells,
    system_rows,
)


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


def _print_sdk_calls(report: Mapping[str, Any], console: Console) -> None:
    title, header, rows, lines = sdk_call_rows(report)
    if not rows:
        return
    table = Table(title=title)
    for n, column in enumerate(header):
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

    ratios = Table(
        title="orderflow / peer (throughput > 1: orderflow faster; latency > 1: orderflow slower; "
        "CPU per order > 1: orderflow's processes spend more)"
    )
    for column in RATIO_COLUMNS:
        ratios.add_column(column, justify="left" if column == "peer" else "right")
    for row in ratio_rows(report):
        ratios.add_row(*row)
    console.print(ratios)
    speed = speed_line(report)
    if speed:
        console.print(speed)
    for line in one_at_a_time_lines(report):
        console.print(line)


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
        sweep.add_row(*sweep_cells(result), fmt(result["query_pages"]))
    console.print(sweep)
    for store, grown in report["sweep"]["growth"].items():
        if grown:
            console.print(
                f"sweep growth on {store}, {grown['sizes'][0]:,} → {grown['sizes'][1]:,} settled: "
                f"time {met_cell(grown['time_ratio'])}, records read {met_cell(grown['records_read_ratio'])}"
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
        f"| orderflow / {' | '.join(RATIO_COLUMNS)} |",
        "|---|" + "---:|" * (len(RATIO_COLUMNS) - 1),
        *(f"| {' | '.join(row)} |" for row in ratio_rows(report)),
    ]
    speed = speed_line(report)
    if speed:
        lines += ["", speed + "."]
    for line in one_at_a_time_lines(report):
        lines += ["", line[0].upper() + line[1:] + "."]
    header, rows = cost_rows(report)
    if rows[:-1]:
        lines += ["", f"| {' | '.join(header)} |", "|---|" + "---:|" * (len(header) - 1)]
        lines += [f"| {' | '.join(row)} |" for row in rows]
    title, rows = baseline_rows(report)
    if rows:
        lines += ["", f"{title}:", "", f"| {' | '.join(BASELINE_COLUMNS)} |"]
        lines += ["|---|" + "---:|" * (len(BASELINE_COLUMNS) - 1)]
        lines += [f"| {' | '.join(row)} |" for row in rows]
    title, header, rows, floors = sdk_call_rows(report)
    if rows:
        lines += ["", f"{title}:", "", f"| {' | '.join(header)} |", "|---|" + "---:|" * (len(header) - 1)]
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
        lines.append(f"| {' | '.join(sweep_cells(result))} |")
    return "\n".join(lines) + "\n"
