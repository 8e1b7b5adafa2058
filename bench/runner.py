"""Run every benchmark once, with one demo-services process: each timed orderflow window on a fresh set of
emulators of its own, every other part on the run's first set.

Order of the parts: orderflow's throughput runs (one per process count), the baseline revision's own
benchmark on the same orders (:mod:`bench.baseline`), the one-at-a-time runs, the CPU of one SDK call
(:mod:`bench.sdk_calls`, on emulators of its own too), the in-process counting run, the hard-down run,
the peers, then the supervisor sweeps (last: the large sweep fills cosmosdb-server's memory, and its
database is dropped before the emulators stop).

A part that fails does not lose the others: its figures are left out of the report, a note starting
with :data:`FAILED` says why, and the report is still written (``python -m bench`` then exits 1).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from decimal import Decimal
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from bench.baseline import BaselineUnavailable, baseline_run
from bench.config import BenchConfig
from bench.counting.http import HttpCounter, install_http_counter
from bench.measure import LOAD_GENERATOR, counts_between, http_targets, per_order_by_target
from bench.orderflow_runs import Measuring, counting_run, hard_down_comparison, throughput_run
from bench.peer_runs import dbos_run, durabletask_run
from bench.report import NOTES, build_report, core_speed, machine_info
from bench.sdk_calls import sdk_calls_run
from bench.sweep import cosmos_sweeps, growth, memory_sweeps
from bench.workload import STOCK_DIVISOR, happy_orders, submissions
from demo.config import DEMO_SETTINGS, new_run_dir
from demo.faults import FaultPlan
from demo.fleet import quiet_sdk_logs, start_demo_services
from demo.tpch import ensure_dataset, load_catalog
from devhost.emulators import LocalEmulators, LocalEndpoints, start_local_emulators
from orderflow.settings import Settings

logger = logging.getLogger(__name__)

T = TypeVar("T")
Progress = Callable[[str], None]

FAILED = "FAILED: "
"""Start of a note saying that a part of the run failed (its figures are missing)."""


def _quiet(_message: str) -> None:
    return None


def failures(report: Mapping[str, Any]) -> list[str]:
    """What makes a report a failed run: the notes that say a part failed, then every happy-path load
    (any ``outcomes`` outside ``hard_down``, whose orders are meant to fail) with an order that did not
    end ``Processed``: figures of such a run would compare unlike work."""
    failed = [str(note) for note in report.get("notes", []) if str(note).startswith(FAILED)]
    return failed + [
        f"{FAILED}{path}: orders not Processed: {outcomes}" for path, outcomes in _unprocessed(report, "")
    ]


def _unprocessed(node: Any, path: str) -> list[tuple[str, dict[str, Any]]]:
    found: list[tuple[str, dict[str, Any]]] = []
    if isinstance(node, Mapping):
        for key, value in node.items():
            where = f"{path}.{key}" if path else str(key)
            if key == "hard_down":
                continue
            if key == "outcomes" and isinstance(value, Mapping):
                if any(outcome != "Processed" and n for outcome, n in value.items()):
                    found.append((path, dict(value)))
                continue
            found += _unprocessed(value, where)
    elif isinstance(node, list):  # the CPU comparison's further pairs
        for index, value in enumerate(node):
            found += _unprocessed(value, f"{path}.{index}")
    return found


class _Parts:
    """Runs the parts of a benchmark, keeping the failures instead of stopping at the first."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress
        self.failed: list[str] = []

    def say(self, message: str) -> None:
        """Tell ``message`` to the run's progress (a note as it is taken, not only in the report)."""
        self._progress(message)

    def run(
        self, name: str, part: Callable[[], T], *, expected: tuple[type[Exception], ...] = ()
    ) -> T | None:
        """``part()``, or None when it raised (noted as failed); ``expected`` errors are raised."""
        self._progress(name)
        try:
            return part()
        except expected:
            raise
        except Exception as exc:
            logger.exception("%s failed", name)
            self.failed.append(f"{FAILED}{name}: {type(exc).__name__}: {str(exc)[:300]}")
            self._progress(f"{name} failed: {type(exc).__name__}")
            return None


def run_bench(
    config: BenchConfig, *, endpoints: LocalEndpoints | None = None, progress: Progress = _quiet
) -> dict[str, Any]:
    """Run the benchmarks ``config`` asks for; returns the report, also written to ``config.report_path``.

    Args:
        config: What to run.
        endpoints: Emulators already running (each run makes its own databases and queues there);
            None starts Azurite and cosmosdb-server for the run and stops them after it.
        progress: Told what is starting, as a line of text.

    Raises:
        RuntimeError: the emulators or the demo services did not start (a failure within one part is
            noted in the report instead: see :func:`failures`).
        ValueError: the data set has too few happy-path orders for ``config``.
    """
    run_dir = new_run_dir("bench-")
    load_before = os.getloadavg()
    speed_before = core_speed()
    progress(f"logs in {run_dir}")
    data_dir = ensure_dataset(config.data_dir)
    catalog = load_catalog(data_dir, orders=None, stock_divisor=STOCK_DIVISOR)
    review_above = Decimal(DEMO_SETTINGS["REVIEW_AMOUNT_ABOVE"])
    orders = happy_orders(catalog, config.distinct_orders(), review_above=review_above, runs=config.runs())
    timed, warmup = orders[: config.orders], orders[: config.warmup]
    parts = _Parts(progress)
    notes: list[str] = []

    with ExitStack() as stack, quiet_sdk_logs():
        emulators: LocalEmulators | None = None
        if endpoints is None:
            progress("starting Azurite and cosmosdb-server")
            emulators = start_local_emulators()
            stack.callback(emulators.stop)
            endpoints = emulators.endpoints
        services = start_demo_services(
            data_dir, run_dir, orders=0, stock_divisor=STOCK_DIVISOR, faults=FaultPlan()
        )
        stack.callback(services.stop)
        services_url = services.ready_line.rsplit(" ", 1)[-1]
        local = endpoints
        # This process's requests (the load generator's client, the in-process counting run).
        counter = HttpCounter(http_targets(local, services_url))
        stack.callback(install_http_counter(counter))
        pids = {"demo-services": services.process.pid, LOAD_GENERATOR: os.getpid()}
        if emulators is not None:
            pids.update(
                {"azurite": emulators.azurite.process.pid, "cosmosdb-server": emulators.cosmos.process.pid}
            )

        def measuring(processes: int, *, profiled: bool) -> Measuring:
            """How a window is measured, with copies of the emulators' pids and targets as they are now;
            ``profiled``: py-spy too, when ``processes`` is the count the run profiles."""
            return Measuring(
                dict(pids),
                dict(counter.targets),
                counter,
                profile=profiled and processes == config.profile_processes,
                profile_rate=config.profile_rate,
            )

        @contextmanager
        def window_endpoints() -> Iterator[LocalEndpoints]:
            """The emulators of one timed window: a fresh set when the run starts its own, else the
            ones given. A window on an Azurite that earlier windows used often ran at 3-8x its CPU per
            request (docs/benchmarks.md); on a fresh one it has not."""
            if emulators is None:
                yield local
                return
            fresh = start_local_emulators()
            try:
                pids.update(
                    {"azurite": fresh.azurite.process.pid, "cosmosdb-server": fresh.cosmos.process.pid}
                )
                counter.targets.update(http_targets(fresh.endpoints))
                yield fresh.endpoints
            finally:
                fresh.stop()

        def window(
            processes: int,
            *,
            orders: list[Any],
            warmup: list[Any],
            concurrency: int,
            profiled: bool,
            logs: Path,
        ) -> dict[str, Any]:
            """One timed window (:func:`throughput_run`) on its own emulators, its processes' logs (and
            profiles) in the folder ``logs``, made here; ``profiled``: measured with the run's profile
            settings, else without a profile."""
            logs.mkdir(parents=True, exist_ok=True)
            with window_endpoints() as endpoints:
                measured = measuring(processes, profiled=profiled)  # now: this window's emulators
                return throughput_run(
                    processes=processes,
                    orders=orders,
                    warmup=warmup,
                    endpoints=endpoints,
                    services_url=services_url,
                    run_dir=logs,
                    concurrency=concurrency,
                    timeout_s=config.run_timeout_s,
                    overrides=config.orderflow_settings,
                    measuring=measured,
                )

        orderflow_runs: dict[str, dict[str, Any]] = {}
        one_at_a_time: dict[str, dict[str, Any]] = {}
        # A throughput window as the CPU comparison's pairs run it again: the same orders, unprofiled.
        throughput_window = partial(window, orders=timed, warmup=warmup, concurrency=config.concurrency)
        for processes in config.processes:
            run = parts.run(
                f"orderflow: {len(timed)} orders on {processes} devhost process(es)",
                partial(throughput_window, processes, profiled=True, logs=run_dir / f"p{processes}"),
            )
            if run is not None:
                orderflow_runs[str(processes)] = run
        baseline = _baseline(config, run_dir, parts, notes)
        if baseline is not None and config.cpu_pairs > 1:
            baseline["more_pairs"] = _more_cpu_pairs(
                config,
                paired_counts(config, orderflow_runs, baseline),
                run_dir,
                parts,
                now_window=lambda processes, logs: throughput_window(processes, profiled=False, logs=logs),
            )
        for processes in config.single_processes:
            run = parts.run(
                f"orderflow: {config.single_orders} orders one at a time on {processes} devhost process(es)",
                partial(
                    window,
                    processes,
                    orders=timed[: config.single_orders],
                    warmup=warmup[:2],
                    concurrency=1,
                    profiled=False,
                    logs=run_dir / f"one-at-a-time-p{processes}",
                ),
            )
            if run is not None:
                one_at_a_time[str(processes)] = run

        sdk_calls = None
        if config.sdk_calls:

            def measure_sdk_calls() -> dict[str, Any]:
                with window_endpoints() as endpoints:
                    return sdk_calls_run(
                        endpoints,
                        calls=config.sdk_calls,
                        repeats=config.sdk_call_repeats,
                        concurrency=config.sdk_call_concurrency,
                        report_path=run_dir / "sdk-calls.json",
                        timeout_s=config.run_timeout_s,
                    )

            sdk_calls = parts.run(
                f"CPU of one SDK call: {config.sdk_calls} calls of each operation", measure_sdk_calls
            )

        before_counting = counter.counts.snapshot()
        per_order = parts.run(
            f"orderflow: counting the store and queue operations of {config.count_orders} orders",
            lambda: counting_run(
                orders=orders[: config.count_orders],
                endpoints=local,
                services_url=services_url,
                concurrency=min(config.concurrency, config.count_orders),
                timeout_s=config.run_timeout_s,
                overrides=config.orderflow_settings,
            ),
        )
        if per_order is not None:
            # The same run counted on the wire: every adapter call above is one request or more.
            counted = counts_between(before_counting, counter.counts.snapshot())
            per_order["http_per_order"] = per_order_by_target([counted], max(per_order["orders"], 1))
        hard_down = parts.run(
            f"orderflow: {config.hard_down_orders} orders while {config.hard_down_service} is down",
            lambda: hard_down_comparison(
                orders=orders[: config.hard_down_orders],
                endpoints=local,
                services_url=services_url,
                service=config.hard_down_service,
                timeout_s=config.run_timeout_s,
                overrides={**config.orderflow_settings, **config.hard_down_settings},
            ),
        )

        peers: dict[str, dict[str, Any]] = {}
        runners = {"durabletask": durabletask_run, "dbos": dbos_run}
        for peer in config.peers:
            result = parts.run(
                f"{peer}: {len(timed)} orders",
                partial(
                    runners[peer],
                    submissions(timed, run=peer[:2] + "x", reply_to="unused"),
                    submissions(warmup, run=peer[:2] + "w", reply_to="unused"),
                    services_url=services_url,
                    run_dir=run_dir,
                    concurrency=config.concurrency,
                    timeout_s=config.run_timeout_s,
                ),
            )
            if result is not None:
                peers[peer] = result

        settings = Settings()
        cosmos = parts.run(
            "supervisor sweeps on cosmosdb-server",
            lambda: cosmos_sweeps(
                local,
                config.sweep_sizes,
                expired=config.sweep_expired,
                threads=config.sweep_load_threads,
                settings=settings,
                progress=progress,
            ),
        )
        memory = parts.run(
            "supervisor sweeps on the in-memory store",
            lambda: memory_sweeps(
                config.sweep_sizes, expired=config.sweep_expired, settings=settings, progress=progress
            ),
        )

    report = build_report(
        config,
        machine=machine_info(load_before, os.getloadavg(), (speed_before, core_speed())),
        orderflow_runs=orderflow_runs,
        one_at_a_time=one_at_a_time,
        per_order=per_order,
        sweep_results=[*(cosmos or []), *(memory or [])],
        sweep_growth={"cosmosdb-server": growth(cosmos or []), "memory": growth(memory or [])},
        hard_down=hard_down,
        peers=peers,
        baseline=baseline,
        sdk_calls=sdk_calls,
        notes=[*NOTES, *notes, *parts.failed],
    )
    write_report(report, config.report_path)
    return report


def _baseline(config: BenchConfig, run_dir: Path, parts: _Parts, notes: list[str]) -> dict[str, Any] | None:
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


def _more_cpu_pairs(
    config: BenchConfig,
    counts: Sequence[int],
    run_dir: Path,
    parts: _Parts,
    *,
    now_window: Callable[[int, Path], dict[str, Any]],
) -> dict[str, list[dict[str, Any]]]:
    """The pairs of the CPU comparison after the first (``config.cpu_pairs``), by process count.

    For each of ``counts`` (:func:`paired_counts`), orderflow's window (``now_window(count, logs)``, as
    the throughput window ran, without a profile) and the baseline's benchmark run again, the baseline
    first in every second pair; the logs of pair ``k`` on ``n`` processes go to
    ``run_dir/cpu-pair-<k>/p<n>``. Each pair is ``{"pair": k, "first", "now_ms", "baseline_ms",
    "orderflow": {"outcomes", "recovered_orders"}, "baseline": {"outcomes"}}``; a side that fails is a
    failed part (:class:`_Parts`), runs no later side, and leaves its figure out of the pair, which keeps
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
    parts: _Parts,
    now_window: Callable[[int, Path], dict[str, Any]],
) -> dict[str, Any]:
    """Pair ``pair`` of the CPU comparison on ``count`` processes (:func:`_more_cpu_pairs`)."""
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


def write_report(report: dict[str, Any], path: Path) -> None:
    """Write the report as indented JSON."""
    path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
