"""The baseline revision's figures and the CPU comparison's further pairs: orderflow's throughput window
and the baseline revision's own benchmark run again on the same orders, alternating which goes first."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from bench.baseline import BaselineUnavailable, baseline_run
from bench.config import BenchConfig
from bench.parts import FAILED, Parts


def measure_baseline(
    config: BenchConfig, run_dir: Path, parts: Parts, notes: list[str]
) -> dict[str, Any] | None:
    """The baseline revision's figures, or None: not asked for, or not available here (a note says
    why; a clone without the revision's history is not a failed run)."""
    processes = config.baseline_processes()
    if config.baseline is None or not processes:
        return None
    revision = config.baseline
    try:
        measured = parts.run(
            f"baseline {revision}: {config.orders} orders on {','.join(map(str, processes))} devhost "
            "process(es), its own benchmark",
            partial(_baseline_windows, config, processes, run_dir),
            expected=(BaselineUnavailable,),
        )
    except BaselineUnavailable as exc:
        notes.append(f"baseline {revision} not measured: {exc}")
        parts.say(notes[-1])
        return None
    if measured is not None:
        missing = _missing_windows(measured, processes, run_dir)
        if missing:
            # The comparison the run promises is missing: a failed part, as for orderflow's own windows.
            parts.failed.append(f"{FAILED}baseline {revision}: {missing}")
    return measured


def _baseline_windows(config: BenchConfig, processes: Sequence[int], run_dir: Path) -> dict[str, Any]:
    """:func:`bench.baseline.baseline_run` of ``config.baseline`` on ``processes``, with the run's orders,
    concurrency, warm-up and timeout, its logs in ``run_dir``."""
    assert config.baseline is not None
    return baseline_run(
        revision=config.baseline,
        orders=config.orders,
        concurrency=config.concurrency,
        warmup=config.warmup,
        processes=processes,
        run_dir=run_dir,
        timeout_s=config.run_timeout_s,
    )


def _missing_windows(measured: Mapping[str, Any], processes: Sequence[int], run_dir: Path) -> str | None:
    """What :func:`bench.baseline.baseline_run`'s result lacks of ``processes`` (its windows), with its
    failures or exit code and the logs to read; None when every window is there."""
    missing = [str(p) for p in processes if str(p) not in measured["windows"]]
    if not missing:
        return None
    detail = "; ".join(measured.get("failed") or []) or f"exit code {measured.get('exit_code')}"
    logs = ", ".join(str(run_dir / f"baseline-{n}.log") for n in missing)
    return f"no {', '.join(missing)}-process window ({detail}; see {logs})"


def paired_counts(
    config: BenchConfig, orderflow_runs: Mapping[str, Any], baseline: Mapping[str, Any]
) -> tuple[int, ...]:
    """The process counts the CPU comparison's further pairs run on: those the baseline is measured on
    whose first pair has both windows (a count missing one is not compared, so more pairs of it would
    be measured for nothing)."""
    windows = baseline.get("windows") or {}
    return tuple(n for n in config.baseline_processes() if str(n) in orderflow_runs and str(n) in windows)


def more_cpu_pairs(
    config: BenchConfig,
    counts: Sequence[int],
    run_dir: Path,
    parts: Parts,
    *,
    now_window: Callable[[int, Path], dict[str, Any]],
) -> dict[str, list[dict[str, Any]]]:
    """The pairs of the CPU comparison after the first (``config.cpu_pairs``), by process count.

    For each of ``counts`` (:func:`paired_counts`), orderflow's window (``now_window(count, logs)``, as
    the throughput window ran, without a profile) and the baseline's benchmark run again, the baseline
    first in every second pair; the logs of pair ``k`` on ``n`` processes go to
    ``run_dir/cpu-pair-<k>/p<n>``. Each pair is ``{"pair": k, "first", "now_ms", "baseline_ms",
    "orderflow": {"outcomes", "recovered_orders"}, "baseline": {"outcomes"}}``; a side that fails is a
    failed part (:class:`Parts`), runs no later side, and leaves its figure out of the pair, which keeps
    what the other side measured. :func:`failures` checks every pair's outcomes like any window's.
    """
    pairs: dict[str, list[dict[str, Any]]] = {}
    for pair in range(2, config.cpu_pairs + 1):
        for count in counts:
            logs = run_dir / f"cpu-pair-{pair}" / f"p{count}"
            logs.mkdir(parents=True, exist_ok=True)  # the baseline side may run first
            measured = _cpu_pair(config, count, pair=pair, logs=logs, parts=parts, now_window=now_window)
            pairs.setdefault(str(count), []).append(measured)
    return pairs


def _cpu_pair(
    config: BenchConfig,
    count: int,
    *,
    pair: int,
    logs: Path,
    parts: Parts,
    now_window: Callable[[int, Path], dict[str, Any]],
) -> dict[str, Any]:
    """Pair ``pair`` of the CPU comparison on ``count`` processes (:func:`more_cpu_pairs`)."""
    assert config.baseline is not None
    revision = config.baseline

    def now() -> dict[str, Any]:
        run = now_window(count, logs)
        return {
            "now_ms": run["measured"]["cpu_ms_per_order"]["orderflow"],
            "orderflow": {"outcomes": run["outcomes"], "recovered_orders": run.get("recovered_orders")},
        }

    def before() -> dict[str, Any]:
        measured = _baseline_windows(config, (count,), logs)
        missing = _missing_windows(measured, (count,), logs)
        if missing:
            raise RuntimeError(missing)
        window = measured["windows"][str(count)]
        return {
            "baseline_ms": window["cpu_ms_per_order"]["orderflow"],
            "baseline": {"outcomes": window["outcomes"]},
        }

    baseline_first = pair % 2 == 0
    name = f"CPU pair {pair} of {config.cpu_pairs} on {count} devhost process(es)"
    sides = [(f"{name}: baseline {revision}", before), (f"{name}: orderflow", now)]
    measured: dict[str, Any] = {"pair": pair, "first": "baseline" if baseline_first else "orderflow"}
    for side_name, side in sides if baseline_first else reversed(sides):
        got = parts.run(side_name, side)
        if got is None:
            break
        measured.update(got)
    return measured
