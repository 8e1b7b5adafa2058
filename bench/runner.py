"""Run every benchmark once, with one demo-services process: each timed orderflow window on a fresh set of
emulators of its own, every other part on the run's first set.

Order of the parts: orderflow's throughput runs (one per process count), the baseline revision's own
benchmark on the same orders (:mod:`bench.baseline`), the one-at-a-time runs, the CPU of one SDK call
(:mod:`bench.sdk_calls`, on emulators of its own too), the in-process counting run, the hard-down run,
the peers, then the supervisor sweeps (last: the large sweep fills cosmosdb-server's memory, and its
database is dropped before the emulators stop).

A part that fails does not lose the others: its figures are left out of the report, a note starting
with :data:`bench.parts.FAILED` says why, and the report is still written (``python -m bench`` then exits 1).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from decimal import Decimal
from functools import partial
from pathlib import Path
from typing import Any

from bench.config import BenchConfig
from bench.counting.http import HttpCounter, install_http_counter
from bench.cpu_pairs import measure_baseline, more_cpu_pairs, paired_counts
from bench.measure import LOAD_GENERATOR, counts_between, http_targets, per_order_by_target
from bench.orderflow_runs import Measuring, counting_run, hard_down_comparison, throughput_run
from bench.orderflow_runs.telemetry import telemetry_run
from bench.parts import Parts, Progress
from bench.peer_runs import dbos_run, durabletask_run
from bench.report import NOTES, build_report, core_speed, machine_info
from bench.sdk_calls import sdk_calls_run
from bench.sweep import cosmos_sweeps, growth, memory_sweeps
from bench.worker_memory import WORKER_VENV_PYTHON, worker_footprint
from bench.workload import STOCK_DIVISOR, happy_orders, submissions
from demo.config import DEMO_SETTINGS, new_run_dir
from demo.faults import FaultPlan
from demo.fleet import quiet_sdk_logs, start_demo_services
from demo.tpch import ensure_dataset, load_catalog
from devhost.emulators import REPO_ROOT, LocalEmulators, LocalEndpoints, start_local_emulators
from orderflow.settings import Settings


def _quiet(_message: str) -> None:
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
    parts = Parts(progress)
    notes: list[str] = []

    with ExitStack() as stack, quiet_sdk_logs():
        bench = _start(stack, config, endpoints, data_dir=data_dir, run_dir=run_dir, parts=parts)
        orderflow_runs, baseline = _throughput_and_baseline(bench, timed, warmup, notes)
        one_at_a_time = _one_at_a_time(bench, timed, warmup)
        sdk_calls = _sdk_calls(bench)
        worker_memory = bench.parts.run(
            "the worker's memory: the app imported by the worker venv's interpreter",
            lambda: worker_footprint(REPO_ROOT / WORKER_VENV_PYTHON, REPO_ROOT),
        )
        per_order = _counting(bench, orders)
        if per_order is not None:
            per_order["telemetry"] = _telemetry(bench, orders)
        hard_down = _hard_down(bench, orders)
        peers = _peers(bench, timed, warmup)
        cosmos, memory = _sweeps(bench, progress)

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
        worker_memory=worker_memory,
        notes=[*NOTES, *notes, *parts.failed],
    )
    write_report(report, config.report_path)
    return report


@dataclass
class _Bench:
    """What the parts of one run share: its configuration, its logs folder, its parts' failures, the
    emulators (``emulators`` when the run started its own, else None; ``local`` either way), the demo
    services' URL, this process's HTTP counter and the pids whose CPU a window samples."""

    config: BenchConfig
    run_dir: Path
    parts: Parts
    emulators: LocalEmulators | None
    local: LocalEndpoints
    services_url: str
    counter: HttpCounter
    pids: dict[str, int]

    def measuring(self, processes: int, *, profiled: bool) -> Measuring:
        """How a window is measured, with copies of the emulators' pids and targets as they are now;
        ``profiled``: py-spy too, when ``processes`` is the count the run profiles."""
        return Measuring(
            dict(self.pids),
            dict(self.counter.targets),
            self.counter,
            profile=profiled and processes == self.config.profile_processes,
            profile_rate=self.config.profile_rate,
        )

    @contextmanager
    def window_endpoints(self) -> Iterator[LocalEndpoints]:
        """The emulators of one timed window: a fresh set when the run starts its own, else the
        ones given. A window on an Azurite that earlier windows used often ran at 3-8x its CPU per
        request (docs/benchmarks.md); on a fresh one it has not."""
        if self.emulators is None:
            yield self.local
            return
        fresh = start_local_emulators()
        try:
            self.pids.update(
                {"azurite": fresh.azurite.process.pid, "cosmosdb-server": fresh.cosmos.process.pid}
            )
            self.counter.targets.update(http_targets(fresh.endpoints))
            yield fresh.endpoints
        finally:
            fresh.stop()

    def window(
        self,
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
        with self.window_endpoints() as endpoints:
            measured = self.measuring(processes, profiled=profiled)  # now: this window's emulators
            return throughput_run(
                processes=processes,
                orders=orders,
                warmup=warmup,
                endpoints=endpoints,
                services_url=self.services_url,
                run_dir=logs,
                concurrency=concurrency,
                timeout_s=self.config.run_timeout_s,
                overrides=self.config.orderflow_settings,
                measuring=measured,
            )


def _start(
    stack: ExitStack,
    config: BenchConfig,
    endpoints: LocalEndpoints | None,
    *,
    data_dir: Path,
    run_dir: Path,
    parts: Parts,
) -> _Bench:
    """Start what every part uses, each stopped by ``stack``: the emulators (unless ``endpoints`` are
    given), the demo services and this process's HTTP counter."""
    emulators: LocalEmulators | None = None
    if endpoints is None:
        parts.say("starting Azurite and cosmosdb-server")
        emulators = start_local_emulators()
        stack.callback(emulators.stop)
        endpoints = emulators.endpoints
    services = start_demo_services(
        data_dir, run_dir, orders=0, stock_divisor=STOCK_DIVISOR, faults=FaultPlan()
    )
    stack.callback(services.stop)
    services_url = services.ready_line.rsplit(" ", 1)[-1]
    # This process's requests (the load generator's client, the in-process counting run).
    counter = HttpCounter(http_targets(endpoints, services_url))
    stack.callback(install_http_counter(counter))
    pids = {"demo-services": services.process.pid, LOAD_GENERATOR: os.getpid()}
    if emulators is not None:
        pids.update(
            {"azurite": emulators.azurite.process.pid, "cosmosdb-server": emulators.cosmos.process.pid}
        )
    return _Bench(config, run_dir, parts, emulators, endpoints, services_url, counter, pids)


def _throughput_and_baseline(
    bench: _Bench, timed: list[Any], warmup: list[Any], notes: list[str]
) -> tuple[dict[str, dict[str, Any]], dict[str, Any] | None]:
    """orderflow's throughput windows, one per process count, then the baseline revision's (with the CPU
    comparison's further pairs): the windows by process count, and the baseline's figures or None."""
    config, parts = bench.config, bench.parts
    orderflow_runs: dict[str, dict[str, Any]] = {}
    # A throughput window as the CPU comparison's pairs run it again: the same orders, unprofiled.
    throughput_window = partial(bench.window, orders=timed, warmup=warmup, concurrency=config.concurrency)
    for processes in config.processes:
        run = parts.run(
            f"orderflow: {len(timed)} orders on {processes} devhost process(es)",
            partial(throughput_window, processes, profiled=True, logs=bench.run_dir / f"p{processes}"),
        )
        if run is not None:
            orderflow_runs[str(processes)] = run
    baseline = measure_baseline(config, bench.run_dir, parts, notes)
    if baseline is not None and config.cpu_pairs > 1:
        baseline["more_pairs"] = more_cpu_pairs(
            config,
            paired_counts(config, orderflow_runs, baseline),
            bench.run_dir,
            parts,
            now_window=lambda processes, logs: throughput_window(processes, profiled=False, logs=logs),
        )
    return orderflow_runs, baseline


def _one_at_a_time(bench: _Bench, timed: list[Any], warmup: list[Any]) -> dict[str, dict[str, Any]]:
    """The one-at-a-time windows, by process count."""
    config = bench.config
    one_at_a_time: dict[str, dict[str, Any]] = {}
    for processes in config.single_processes:
        run = bench.parts.run(
            f"orderflow: {config.single_orders} orders one at a time on {processes} devhost process(es)",
            partial(
                bench.window,
                processes,
                orders=timed[: config.single_orders],
                warmup=warmup[:2],
                concurrency=1,
                profiled=False,
                logs=bench.run_dir / f"one-at-a-time-p{processes}",
            ),
        )
        if run is not None:
            one_at_a_time[str(processes)] = run
    return one_at_a_time


def _sdk_calls(bench: _Bench) -> dict[str, Any] | None:
    """The CPU of one SDK call, on emulators of its own; None when not asked for or failed."""
    config = bench.config
    if not config.sdk_calls:
        return None

    def measure_sdk_calls() -> dict[str, Any]:
        with bench.window_endpoints() as endpoints:
            return sdk_calls_run(
                endpoints,
                calls=config.sdk_calls,
                repeats=config.sdk_call_repeats,
                concurrency=config.sdk_call_concurrency,
                report_path=bench.run_dir / "sdk-calls.json",
                timeout_s=config.run_timeout_s,
            )

    return bench.parts.run(
        f"CPU of one SDK call: {config.sdk_calls} calls of each operation", measure_sdk_calls
    )


def _counting(bench: _Bench, orders: list[Any]) -> dict[str, Any] | None:
    """The in-process run that counts the store and queue operations per order, and its requests counted
    on the wire (``http_per_order``); None when it failed."""
    config, counter = bench.config, bench.counter
    before_counting = counter.counts.snapshot()
    per_order = bench.parts.run(
        f"orderflow: counting the store and queue operations of {config.count_orders} orders",
        lambda: counting_run(
            orders=orders[: config.count_orders],
            endpoints=bench.local,
            services_url=bench.services_url,
            concurrency=min(config.concurrency, config.count_orders),
            timeout_s=config.run_timeout_s,
            overrides=config.orderflow_settings,
        ),
    )
    if per_order is not None:
        # The same run counted on the wire: every adapter call above is one request or more.
        counted = counts_between(before_counting, counter.counts.snapshot())
        per_order["http_per_order"] = per_order_by_target([counted], max(per_order["orders"], 1))
    return per_order


def _telemetry(bench: _Bench, orders: list[Any]) -> dict[str, Any] | None:
    """Telemetry bytes per order from the exporter (:mod:`bench.orderflow_runs.telemetry`); None when it
    failed."""
    config = bench.config
    return bench.parts.run(
        f"orderflow: telemetry exported for {config.count_orders} orders",
        lambda: telemetry_run(
            orders=orders[: config.count_orders],
            warmup=orders[config.count_orders : config.count_orders + 2],
            endpoints=bench.local,
            services_url=bench.services_url,
            run_dir=bench.run_dir,
            timeout_s=config.run_timeout_s,
            overrides=config.orderflow_settings,
        ),
    )


def _hard_down(bench: _Bench, orders: list[Any]) -> dict[str, Any] | None:
    """The hard-down comparison; None when it failed."""
    config = bench.config
    return bench.parts.run(
        f"orderflow: {config.hard_down_orders} orders while {config.hard_down_service} is down",
        lambda: hard_down_comparison(
            orders=orders[: config.hard_down_orders],
            endpoints=bench.local,
            services_url=bench.services_url,
            service=config.hard_down_service,
            timeout_s=config.run_timeout_s,
            overrides={**config.orderflow_settings, **config.hard_down_settings},
        ),
    )


def _peers(bench: _Bench, timed: list[Any], warmup: list[Any]) -> dict[str, dict[str, Any]]:
    """The peers' runs on the timed orders, by peer (a failed one is left out)."""
    config = bench.config
    peers: dict[str, dict[str, Any]] = {}
    runners = {"durabletask": durabletask_run, "dbos": dbos_run}
    for peer in config.peers:
        # durabletask, the runtime orderflow's scheduler runs on, also one order at a time: the floor
        # under orderflow's one-at-a-time window.
        single = (
            {"single": submissions(timed[: config.single_orders], run=peer[:2] + "s", reply_to="unused")}
            if peer == "durabletask" and config.single_processes
            else {}
        )
        result = bench.parts.run(
            f"{peer}: {len(timed)} orders",
            partial(
                runners[peer],
                submissions(timed, run=peer[:2] + "x", reply_to="unused"),
                submissions(warmup, run=peer[:2] + "w", reply_to="unused"),
                services_url=bench.services_url,
                run_dir=bench.run_dir,
                concurrency=config.concurrency,
                timeout_s=config.run_timeout_s,
                **single,
            ),
        )
        if result is not None:
            peers[peer] = result
    return peers


def _sweeps(bench: _Bench, progress: Progress) -> tuple[list[Any] | None, list[Any] | None]:
    """The supervisor sweeps on cosmosdb-server and on the in-memory store (None for one that failed)."""
    config = bench.config
    settings = Settings.load({})
    cosmos = bench.parts.run(
        "supervisor sweeps on cosmosdb-server",
        lambda: cosmos_sweeps(
            bench.local,
            config.sweep_sizes,
            expired=config.sweep_expired,
            threads=config.sweep_load_threads,
            settings=settings,
            progress=progress,
        ),
    )
    memory = bench.parts.run(
        "supervisor sweeps on the in-memory store",
        lambda: memory_sweeps(
            config.sweep_sizes, expired=config.sweep_expired, settings=settings, progress=progress
        ),
    )
    return cosmos, memory


def write_report(report: dict[str, Any], path: Path) -> None:
    """Write the report as indented JSON."""
    path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
