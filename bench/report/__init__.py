"""``bench-report.json``: its shape, the ratios between systems, and the tables printed from it.

Top-level keys: ``generated_at`` (UTC, ISO 8601), ``machine``, ``config``, ``orderflow``, ``sweep``,
``hard_down``, ``peers``, ``ratios``, ``baseline`` (:mod:`bench.baseline`, or null), ``sdk_calls``
(:mod:`bench.sdk_calls`, with each window's SDK floor, or null), ``notes``. Times are seconds,
throughputs orders per second, CPU milliseconds.

The package's modules: :mod:`.build` (the report), :mod:`.rows` (its figures as rows) and
:mod:`.printing` (console and Markdown tables).
"""

from __future__ import annotations

from bench.report.build import (
    CALIBRATION_LOOP,
    LATENCY_FIGURES,
    NOTES,
    REPORT_KEYS,
    build_report,
    core_speed,
    machine_info,
    peer_ratios,
)
from bench.report.printing import markdown_tables, print_tables
from bench.report.rows import (
    BASELINE_COLUMNS,
    baseline_rows,
    cost_rows,
    count_rows,
    profile_tables,
    sdk_call_rows,
    speed_line,
    system_rows,
)

__all__ = [
    "BASELINE_COLUMNS",
    "CALIBRATION_LOOP",
    "LATENCY_FIGURES",
    "NOTES",
    "REPORT_KEYS",
    "baseline_rows",
    "build_report",
    "core_speed",
    "cost_rows",
    "count_rows",
    "machine_info",
    "markdown_tables",
    "peer_ratios",
    "print_tables",
    "profile_tables",
    "sdk_call_rows",
    "speed_line",
    "system_rows",
]
