"""The peers' CPU per order, measured in the same run as orderflow's: over the timed orders only, from
the peers' own processes (durabletask) or the process's own counter (DBOS)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from bench import peer_runs
from bench.counting.cpu import CpuClock
from bench.load import RESULT_PREFIX, LoadResult


class FakeChild:
    """A started child process of the peer: its pid, stopped once."""

    def __init__(self, pid: int) -> None:
        self.process = SimpleNamespace(pid=pid)
        self.stopped = 0

    def stop(self) -> None:
        self.stopped += 1


def test_durabletask_cpu_is_its_backends_and_workers_over_the_timed_orders_only(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    children = {"durabletask-backend": FakeChild(101), "durabletask-worker": FakeChild(202)}
    cpu_s = {101: 1.0, 202: 5.0}  # each process's CPU so far, moved on by every load

    def start_child(name: str, *_args: Any, **_kwargs: Any) -> FakeChild:
        return children[name]

    def load(_address: str, orders: Sequence[Mapping[str, Any]], **_kwargs: Any) -> LoadResult:
        # The warm-up's 2 orders spend 10 s each: not counted. The timed 4 spend 0.1 / 0.3 s each.
        per_order = {101: 10.0, 202: 10.0} if len(orders) == 2 else {101: 0.1, 202: 0.3}
        for pid, seconds in per_order.items():
            cpu_s[pid] += seconds * len(orders)
        return LoadResult(
            submitted=len(orders), latencies_s=[0.1] * len(orders), elapsed_s=1.0, outcomes={"Processed": 4}
        )

    monkeypatch.setattr(peer_runs, "start_child", start_child)
    monkeypatch.setattr(peer_runs, "run_durabletask_load", load)
    monkeypatch.setattr(peer_runs, "CpuClock", lambda pids: CpuClock(pids, sample=lambda pid: cpu_s[pid]))
    run = peer_runs.durabletask_run(
        [{}] * 4, [{}] * 2, services_url="http://x", run_dir=tmp_path, concurrency=2, timeout_s=5.0
    )
    assert run["cpu_ms_per_order"] == {
        "durabletask-backend": 100.0,
        "durabletask-worker": 300.0,
        "peer": 400.0,
    }
    assert run["processes"] == 2
    assert [child.stopped for child in children.values()] == [1, 1]


def test_durabletask_runs_the_single_orders_one_at_a_time_after_the_timed_ones_outside_their_cpu(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    children = {"durabletask-backend": FakeChild(101), "durabletask-worker": FakeChild(202)}
    cpu_s = {101: 0.0, 202: 0.0}
    loads: list[tuple[int, int]] = []  # (orders, concurrency) of each load, in order

    def load(_address: str, orders: Sequence[Mapping[str, Any]], *, concurrency: int, **_: Any) -> LoadResult:
        loads.append((len(orders), concurrency))
        for pid in cpu_s:
            cpu_s[pid] += 0.1 * len(orders)  # the single orders spend CPU too: not in the figure
        latency = 0.5 if concurrency > 1 else 0.02
        return LoadResult(
            submitted=len(orders),
            latencies_s=[latency] * len(orders),
            elapsed_s=1.0,
            outcomes={"Processed": len(orders)},
        )

    monkeypatch.setattr(peer_runs, "start_child", lambda name, *_a, **_k: children[name])
    monkeypatch.setattr(peer_runs, "run_durabletask_load", load)
    monkeypatch.setattr(peer_runs, "CpuClock", lambda pids: CpuClock(pids, sample=lambda pid: cpu_s[pid]))
    run = peer_runs.durabletask_run(
        [{}] * 4,
        [],
        services_url="http://x",
        run_dir=tmp_path,
        concurrency=2,
        timeout_s=5.0,
        single=[{}] * 3,
    )
    assert loads == [(4, 2), (3, 1)]
    assert run["latency"]["p50_s"] == 0.5
    assert run["one_at_a_time"]["finished"] == 3
    assert run["one_at_a_time"]["latency"]["p50_s"] == 0.02
    assert run["cpu_ms_per_order"]["peer"] == 200.0  # the timed four only: 0.1 s each, two processes
    assert [child.stopped for child in children.values()] == [1, 1]

    without = peer_runs.durabletask_run(
        [{}] * 4, [], services_url="http://x", run_dir=tmp_path, concurrency=2, timeout_s=5.0
    )
    assert "one_at_a_time" not in without


def test_dbos_cpu_is_what_its_process_reports_for_the_timed_orders(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    result = LoadResult(submitted=5, latencies_s=[0.2] * 5, elapsed_s=2.0, outcomes={"Processed": 5})
    printed = RESULT_PREFIX + json.dumps({**result.to_json(), "cpu_s": 0.125})

    def run(args: list[str], **_kwargs: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(args, 0, stdout=f"noise\n{printed}\n")

    monkeypatch.setattr(subprocess, "run", run)
    measured = peer_runs.dbos_run(
        [{}] * 5, [], services_url="http://x", run_dir=tmp_path, concurrency=2, timeout_s=5.0
    )
    assert measured["cpu_ms_per_order"] == {"dbos": 25.0, "peer": 25.0}
    assert measured["finished"] == 5


def test_a_dbos_result_without_its_cpu_leaves_the_figure_out(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    result = LoadResult(submitted=1, latencies_s=[0.2], elapsed_s=1.0, outcomes={"Processed": 1})

    def run(args: list[str], **_kwargs: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(args, 0, stdout=RESULT_PREFIX + json.dumps(result.to_json()))

    monkeypatch.setattr(subprocess, "run", run)
    measured = peer_runs.dbos_run(
        [{}], [], services_url="http://x", run_dir=tmp_path, concurrency=1, timeout_s=5.0
    )
    assert measured["cpu_ms_per_order"] is None
