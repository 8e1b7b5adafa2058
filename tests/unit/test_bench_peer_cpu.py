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
