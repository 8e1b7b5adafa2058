"""``make chaos`` as a test: every chaos feature at once, on a small scale.

Its own Azurite and cosmosdb-server, the demo services with their faults (hangs past the deadline
included), three devhost processes (two running the scheduler roles, one the agents and the submission)
and three clients with private reply queues, while at the same time a random devhost process is SIGKILLed
and restarted, 5% of all messages are delivered twice, 5% of agent responses arrive after their step's
deadline, and the supervisor leader is SIGSTOPped for longer than its lease and then woken up
(demo.chaos.run). The state store and then the queues are each SIGSTOPped for longer than a step's
deadline, 5% of the services' calls take longer than a queue lock (so the agents' handlers must keep
their locks by renewal), and one scheduler process runs with its clock 20-40 s off the others' (every
deadline is on the state store's time; the submission's clock is never skewed). A dependency down for a
window is left to ``make chaos``: its breaker's open period alone is longer than this test should take.

Every order must settle, no effect may be applied twice or left behind by an order that did not complete,
no reply may reach a client that did not submit its order, every settled order's client must hear its
final status, and no order may be driven by two attempts at once. An intruder (one more registered
client, demo.intruder.attacks) attacks the others' orders in every way it can, hostile text, correlation
ids naming their orders (replayed by an operator through the operator API) and a flood of conflicting
resends included: none of its attacks may have an effect on them, nor on what an operator sees of them.
And the chaos must really have happened.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from demo.chaos.report import CHAOS_INVARIANTS, failed_invariants
from demo.chaos.run import run_chaos
from demo.config import DEMO_FAULTS
from demo.intruder.attacks import AttackKind

# Runs devhost processes under a deadline: one xdist worker runs all such tests in turn (Makefile).
pytestmark = [pytest.mark.faults, pytest.mark.xdist_group("devhost_processes")]

ORDERS = 90
CLIENTS = 3


def test_orders_settle_and_every_invariant_holds_under_every_chaos_at_once(tmp_path: Path) -> None:
    report_path = tmp_path / "chaos-report.json"

    report = run_chaos(
        orders=ORDERS,
        processes=3,
        kill_every_s=15.0,
        duplicate_share=0.05,
        late_share=0.05,
        # One pause, early, while orders are in flight: a pause lasts longer than the lease (20 s).
        first_pause_after_s=10.0,
        pause_every_s=600.0,
        # With the default seed: the store down from 7.0 s to 16.2 s of the run, the queues from 25.6 s
        # to 35.5 s (demo.chaos.outages.plan_window); 90 orders cannot all settle before then.
        outage_every_s=20.0,
        outage_kinds=("store_outages", "queue_outages"),
        long_share=0.05,
        skew=True,
        clients=CLIENTS,
        timeout_s=240.0,
        faults=DEMO_FAULTS,
        report_path=report_path,
    )

    assert json.loads(report_path.read_text(encoding="utf-8")) == report
    assert (report["orders"], report["submitted"], report["settled"]) == (ORDERS, ORDERS, ORDERS)
    assert report["clients"] == CLIENTS
    # Settled while the chaos went on, not after it stopped.
    assert report["timed_out"] == 0
    assert {key: report[key] for key in CHAOS_INVARIANTS} == dict.fromkeys(CHAOS_INVARIANTS, 0)
    assert failed_invariants(report) == []
    assert report["final_replies"] == ORDERS
    # Each kind of chaos really happened, and the supervisor really recovered orders.
    assert report["unexercised"] == []  # every chaos feature asked for happened
    assert report["kills"] >= 1
    assert report["duplicates_delivered"] >= 1
    assert report["late_responses"] >= 1
    assert report["leader_pauses"] >= 1
    assert report["store_outages"] >= 1 and report["queue_outages"] >= 1
    assert report["dependency_windows"] == 0  # not asked for
    assert report["long_handlers"] >= 1
    assert report["skewed_hosts"] == 1 and 20.0 <= abs(report["clock_offset_s"]) <= 40.0
    assert report["clock_skew_alerts"] >= 1  # far past half the tolerance: the host says so
    assert report["recoveries"] > 0
    assert report["max_recovery_s"] > 0
    # The intruder tried every kind of attack, Azurite refused every foreign-queue send, and nothing it
    # did reached another client's orders; its own orders (same ids as victims') settled apart.
    assert report["cross_client_effects"] == 0
    assert report["cross_client_effects_by_kind"] == dict.fromkeys(report["cross_client_effects_by_kind"], 0)
    attacks = report["intruder_attacks"]
    assert set(attacks) == {kind.value for kind in AttackKind}
    assert all(count > 0 for count in attacks.values()), attacks
    assert report["intruder_refusals"] == attacks[AttackKind.FOREIGN_QUEUE]
    assert report["intruder_orders"] == attacks[AttackKind.SAME_ID]
    assert report["intruder_orders_settled"] == report["intruder_orders"]
    # Every correlation-id dead letter was replayed by the operator, and the flood is one counted alert.
    assert report["intruder_replays"] == attacks[AttackKind.CORRELATION_ID]
    flood = report["intruder_conflict_alerts"]
    assert flood["stored"] >= 1 and flood["count"] >= attacks[AttackKind.CONFLICT_FLOOD], flood
