"""Three devhost processes, 300 TPC-H orders, the demo faults, and a random process SIGKILLed every 5 s.

This is ``make demo PROCESSES=3 KILL_EVERY=5 ORDERS=300`` run as a test: its own Azurite and
cosmosdb-server, the demo services injecting their faults, three devhost processes (two running the
scheduler roles, one the agents), one of them killed at random every 5 seconds and restarted under the same
host id. Every order must settle, no effect may be applied twice, no order that did not complete may
keep an effect (it is compensated), every settled order's client must hear its final status, and no
order may be driven by two attempts at once, which is checked both from
the state records' ``attemptHistory`` and from the demo services' audit (devhost.demo.attempt_overlaps).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from devhost.demo import DEMO_FAULTS, run_demo

pytestmark = pytest.mark.faults

ORDERS = 300
KILL_EVERY_S = 5.0


def test_orders_survive_a_process_killed_every_five_seconds(tmp_path: Path) -> None:
    report_path = tmp_path / "demo-report.json"

    report = run_demo(
        orders=ORDERS,
        processes=3,
        kill_every_s=KILL_EVERY_S,
        timeout_s=480.0,
        faults=DEMO_FAULTS,
        report_path=report_path,
    )

    assert json.loads(report_path.read_text(encoding="utf-8")) == report
    assert report["submitted"] == ORDERS
    assert report["timed_out"] == 0  # settled while the killing went on, not after it stopped
    # Kills really happened while orders were in flight, and the supervisor really recovered some.
    assert report["kills"] >= 5
    assert report["recoveries"] > 0
    assert report["not_terminal"] == 0
    assert report["duplicate_effects"] == 0
    assert report["uncompensated_effects"] == 0
    assert report["overlapping_attempts"] == 0
    assert report["mismatched"] == 0
    assert report["missing_final_replies"] == 0
    assert report["final_replies"] == ORDERS
