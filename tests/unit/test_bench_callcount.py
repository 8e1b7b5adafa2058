"""Call profiles of chosen processes (bench/callcount/sitecustomize.py) and their comparison per order."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.callcount import BUILTIN, STDLIB, PerOrder, compare, key_of, per_order

SITE = Path(__file__).resolve().parents[2] / "bench" / "callcount"

WORKLOAD = """
import threading


def step(n):
    return n + 1


def worker(times):
    for n in range(times):
        step(n)


threads = [threading.Thread(target=worker, args=(7,)) for _ in range(3)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
worker(5)
"""


def run_module(tmp_path: Path, module: str, profiled: str, *args: str) -> list[Path]:
    """Run ``python -m module args...`` with the call profile on for the modules ``profiled``; its
    profiles."""
    (tmp_path / f"{module}.py").write_text(WORKLOAD, encoding="utf-8")
    out = tmp_path / "profiles"
    out.mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SITE), str(tmp_path)]),
        "CALL_PROFILE_DIR": str(out),
        "CALL_PROFILE_MODULES": profiled,
    }
    subprocess.run([sys.executable, "-m", module, *args], env=env, cwd=tmp_path, check=True, timeout=60)
    return sorted(out.glob("*.pstats"))


def test_every_thread_of_a_chosen_process_is_counted(tmp_path: Path) -> None:
    (profile,) = run_module(tmp_path, "workload", "other,workload")
    assert profile.name.startswith("workload-")
    counted = per_order(profile, 2, root=str(tmp_path), by="function")
    # Three threads call step 7 times each, the main thread 5 times: 26 calls over 2 orders.
    assert counted.calls["workload:step"] == 13.0
    assert counted.calls["workload:worker"] == 2.0
    assert counted.total_calls > counted.calls["workload:step"]


def test_a_host_process_is_named_by_its_host_id(tmp_path: Path) -> None:
    (profile,) = run_module(tmp_path, "workload", "workload", "--host-id", "demo-agents")
    assert profile.name.startswith("workload-demo-agents-")


def test_a_process_not_chosen_writes_no_profile(tmp_path: Path) -> None:
    assert run_module(tmp_path, "workload", "devhost") == []


def test_functions_are_keyed_by_package_across_checkouts() -> None:
    root = "/work/old"
    assert (
        key_of("/work/old/orderflow/protocol/conditional.py", "update", root=root, by="package")
        == "orderflow"
    )
    assert key_of("/work/old/orderflow/a.py", "update", root=root, by="function") == "orderflow:update"
    assert key_of("/x/.venv/lib/site-packages/azure/core/a.py", "f", root=root, by="package") == "azure"
    assert key_of("/x/lib/site-packages/six.py", "f", root=root, by="package") == "six"
    assert key_of("~", "<built-in method len>", root=root, by="package") == BUILTIN
    assert key_of("/usr/lib/python3.11/json/decoder.py", "f", root=root, by="package") == STDLIB
    with pytest.raises(ValueError):
        key_of("~", "f", root=root, by="line")


def test_compare_ranks_the_largest_moves_first_and_counts_a_missing_key_as_zero() -> None:
    before = PerOrder(calls={"a": 10.0, "b": 5.0, "gone": 3.0}, cpu_ms={"a": 1.0, "b": 0.5, "gone": 0.2})
    after = PerOrder(calls={"a": 11.0, "b": 1.0, "new": 2.0}, cpu_ms={"a": 1.2, "b": 0.1, "new": 0.3})
    assert compare(before, after, top=3) == [
        ("b", 5.0, 1.0, 0.5, 0.1),
        ("gone", 3.0, 0.0, 0.2, 0.0),
        ("new", 0.0, 2.0, 0.0, 0.3),
    ]
    assert before.total_calls == 18.0
    assert after.total_cpu_ms == pytest.approx(1.6)


def test_per_order_needs_an_order(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        per_order(tmp_path / "none.pstats", 0, root=str(tmp_path))
