"""What one benchmark run does: sizes, concurrency and which parts to run (one typed structure)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from bench.baseline import BASELINE_REVISION
from bench.orderflow_runs import HARD_DOWN_SETTINGS
from demo.config import DATA_DIR
from devhost.emulators import REPO_ROOT

REPORT_PATH = REPO_ROOT / "bench-report.json"

PEERS = ("durabletask", "dbos")
"""The peers the benchmark can run."""


class BenchConfig(BaseModel):
    """Configuration of ``python -m bench``; every figure in the report comes from one of these.

    Attributes:
        orders: Orders per throughput run: each orderflow process count, and each peer.
        concurrency: Orders submitted and not yet finished at once (closed loop), for every system.
        warmup: Orders run through each system before it is timed, not counted.
        processes: Devhost process counts to measure orderflow with (1: every role in one process;
            2: the scheduler roles in one, the agents and the submission in the other).
        single_processes: Devhost process counts to measure one order at a time (concurrency 1) on.
        single_orders: Orders of each one-at-a-time run.
        profile_processes: The throughput run (by process count) whose devhost processes py-spy
            samples during the timed window, each on its own; 0: none.
        profile_rate: py-spy's samples per second (more samples resolve smaller costs; py-spy reads the
            process's memory from outside, so the process itself does no more work).
        count_orders: Orders of the in-process run that counts store and queue operations.
        sweep_sizes: Settled records in the state store for each supervisor-sweep measurement.
        sweep_expired: Expired ``Processing`` records beside them, which the sweep recovers.
        sweep_load_threads: Threads creating the settled records in cosmosdb-server.
        hard_down_orders: Orders run while ``hard_down_service`` answers every call 503.
        hard_down_service: The demo service that is down (``payments``, ``inventory`` or ``shipping``).
        orderflow_settings: orderflow settings over the demo's (``DEMO_SETTINGS``) for every orderflow
            run; empty by default: orderflow is measured as ``make demo`` runs it.
        hard_down_settings: Settings of the hard-down run over those (shorter back-offs).
        peers: Peers to run (:data:`PEERS`).
        run_timeout_s: Longest wait for one run's orders to finish, seconds.
        data_dir: The TPC-H data set (generated there with tpchgen-cli when missing).
        report_path: Where ``bench-report.json`` is written.
        baseline: The revision measured again beside orderflow for the CPU comparison
            (:mod:`bench.baseline`), on the throughput runs' 1- and 2-process counts; None: not run.
        cpu_pairs: Pairs of windows (orderflow's, the baseline's) measured on each of those counts: the
            throughput window and the baseline's first window are the first pair; each further pair runs
            both again, the baseline first in every second pair, so that a machine growing slower or
            faster during the run weighs on both sides. The ratio is the median of the pairs'
            (:func:`bench.baseline.cpu_ratios`).
        sdk_calls: Calls of each operation in the measurement of one SDK call's CPU
            (:mod:`bench.sdk_calls`); 0: not measured.
        sdk_call_repeats: Measurements of each operation there (the median is reported).
        sdk_call_concurrency: Calls at once of the async clients there.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    orders: int = Field(200, ge=1)
    concurrency: int = Field(32, ge=1)
    warmup: int = Field(10, ge=0)
    processes: tuple[int, ...] = (1, 2, 3)
    single_processes: tuple[int, ...] = (2,)
    single_orders: int = Field(20, ge=1)
    profile_processes: int = Field(2, ge=0)
    profile_rate: int = Field(50, ge=1, le=1000)
    count_orders: int = Field(20, ge=1)
    sweep_sizes: tuple[int, ...] = (1_000, 10_000, 100_000)
    sweep_expired: int = Field(20, ge=1)
    sweep_load_threads: int = Field(8, ge=1)
    hard_down_orders: int = Field(10, ge=1)
    hard_down_service: str = "payments"
    orderflow_settings: dict[str, str] = Field(default_factory=dict)
    hard_down_settings: dict[str, str] = Field(default_factory=lambda: dict(HARD_DOWN_SETTINGS))
    peers: tuple[str, ...] = PEERS
    run_timeout_s: float = Field(900.0, gt=0)
    data_dir: Path = DATA_DIR
    report_path: Path = REPORT_PATH
    baseline: str | None = BASELINE_REVISION
    cpu_pairs: int = Field(3, ge=1)
    sdk_calls: int = Field(300, ge=0)
    sdk_call_repeats: int = Field(3, ge=1)
    sdk_call_concurrency: int = Field(16, ge=1)

    def baseline_processes(self) -> tuple[int, ...]:
        """The process counts the baseline is measured on: the throughput runs' 1 and 2 (its 3-process
        window, at about 2 orders a second, would take minutes and compare the machine's load)."""
        return tuple(p for p in self.processes if p <= 2)

    @field_validator("processes", "single_processes", "sweep_sizes")
    @classmethod
    def _positive(cls, values: tuple[int, ...]) -> tuple[int, ...]:
        if any(value < 1 for value in values):
            raise ValueError("every value must be at least 1")
        return values

    @field_validator("processes", "single_processes", "sweep_sizes", "peers")
    @classmethod
    def _each_once(cls, values: tuple[object, ...]) -> tuple[object, ...]:
        # The report keys each run by its value: a second run of one value would replace the first.
        repeated = sorted({str(value) for value in values if values.count(value) > 1})
        if repeated:
            raise ValueError(f"{', '.join(repeated)} given more than once")
        return values

    @field_validator("peers")
    @classmethod
    def _known_peers(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        unknown = sorted(set(values) - set(PEERS))
        if unknown:
            raise ValueError(f"unknown peers {unknown}; choose from {list(PEERS)}")
        return values

    @field_validator("hard_down_service")
    @classmethod
    def _known_service(cls, value: str) -> str:
        if value not in ("inventory", "payments", "shipping"):
            raise ValueError("choose one of inventory, payments, shipping")
        return value

    def runs(self) -> int:
        """Runs that submit orders: each process count, each peer, the counting run and the hard-down run."""
        return len(self.processes) + len(self.single_processes) + len(self.peers) + 2

    def distinct_orders(self) -> int:
        """TPC-H orders the largest run needs; every run submits the same ones under ids of its own."""
        return max(self.orders, self.warmup, self.count_orders, self.hard_down_orders)
