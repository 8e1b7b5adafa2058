"""``python -m bench`` end to end on a tiny configuration: the report's shape and exact per-order counts.

Not a benchmark: no figure of speed is asserted. It checks that every part runs against the real
emulators, devhost process, demo services and peers, and that the adapters count exactly the operations
the happy path makes.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from bench import runner
from bench.config import BenchConfig
from bench.orderflow_runs import throughput_run
from bench.report import REPORT_KEYS
from bench.runner import run_bench
from bench.sdk_calls import CLIENTS, sdk_calls_run
from bench.sdk_floor import OPERATIONS, SERIAL_PATH, SERIAL_PATH_SETTINGS, sdk_floor, serial_path_ms
from bench.stats import ratio
from demo.fleet import devhost_specs
from devhost.emulators import LocalEmulators, LocalEndpoints, start_local_emulators

# Runs devhost processes under a deadline: one xdist worker runs all such tests in turn (Makefile).
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("devhost_processes")]

TPCH_FIXTURE = Path(__file__).parents[1] / "data" / "tpch"

FAST = {"STARTER_INTERVAL_S": "2", "POLL_INTERVAL_S": "0.02", "POLL_MAX_INTERVAL_S": "0.1"}
"""Quick polling, so that three orders do not wait out idle queues' back-off. Each submission claims and
starts its own order (CLAIM_ON_SUBMIT): the starter only sweeps, at its default interval, so no sweep
races a submission's claim and every order is claimed once."""

FAST_HARD_DOWN = {
    "SUPERVISOR_INTERVAL_S": "0.1",
    "SUPERVISOR_BACKOFF_INITIAL_S": "0.05",
    "SUPERVISOR_BACKOFF_MAX_S": "0.1",
    "SUPERVISOR_EXTENDED_BACKOFF_S": "0.1",
    "AGENT_BACKOFF_INITIAL_S": "0.01",
    "AGENT_BACKOFF_MAX_S": "0.02",
    "SUPERVISOR_MAX_FAILURES": "2",
}
"""Back-offs short enough, and few enough attempts, for one order to give up and fail its compensation
in seconds."""


def roomy_dataset(target: Path) -> Path:
    """The test TPC-H tables with a thousand times the stock, so every run's orders stay in stock."""
    shutil.copytree(TPCH_FIXTURE, target)
    with (TPCH_FIXTURE / "partsupp.csv").open(newline="", encoding="utf-8") as source:
        rows = list(csv.DictReader(source))
    with (target / "partsupp.csv").open("w", newline="", encoding="utf-8") as sink:
        writer = csv.DictWriter(sink, fieldnames=list(rows[0]))
        writer.writeheader()
        for row in rows:
            writer.writerow({**row, "ps_availqty": str(int(row["ps_availqty"]) * 1000)})
    return target


def test_a_tiny_bench_run_reports_every_part(local_endpoints: LocalEndpoints, tmp_path: Path) -> None:
    config = BenchConfig(
        orders=3,
        concurrency=3,
        warmup=0,
        processes=(1,),
        count_orders=3,
        sweep_sizes=(20, 40),
        sweep_expired=5,
        sweep_load_threads=4,
        hard_down_orders=1,
        orderflow_settings=FAST,
        hard_down_settings=FAST_HARD_DOWN,
        run_timeout_s=120,
        data_dir=roomy_dataset(tmp_path / "tpch"),
        report_path=tmp_path / "bench-report.json",
        baseline=None,  # its own benchmark takes minutes: tests/unit/test_bench_baseline.py
        sdk_calls=10,
        sdk_call_repeats=1,
    )
    report = run_bench(config, endpoints=local_endpoints)

    assert tuple(report) == REPORT_KEYS
    assert json.loads(config.report_path.read_text(encoding="utf-8")) == report
    assert report["machine"]["cpu_count"] >= 1

    run = report["orderflow"]["runs"]["1"]
    assert (run["submitted"], run["finished"], run["outcomes"]) == (3, 3, {"Processed": 3})
    assert run["latency"]["count"] == 3
    assert 0 <= run["recovered_orders"] <= 3
    assert run["attempts_max"] >= 1
    assert report["orderflow"]["throughput_per_s"]["1"] > 0

    # The app imported by the worker venv's interpreter (the real language worker's Python), telemetry
    # configured: its peak resident set, the figure the Flex instance memory is chosen against.
    worker_memory = report["orderflow"]["worker_memory"]
    assert worker_memory["python"].endswith(".venv-worker/bin/python")
    assert 50 < worker_memory["peak_rss_mb"] < 512

    per_order = report["orderflow"]["per_order"]
    assert per_order["all_processed"] is True
    assert per_order["orders"] == 3
    assert per_order["state_writes_by_function"] == {
        "activities.steps.finish_order": 1.0,
        "activities.steps.start_step": 2.0,
        "intake.submission.handle_intake_message": 1.0,
        "orderflow.attempts.claim": 1.0,
        "orderflow.replies.clear_pending_reply": 1.0,
    }
    state = per_order["state_store"]
    # The starter sent each claim-started first request: no activity read a record back.
    assert (state["creates"], state["replaces"], state["point_reads"], state["replace_conflicts"]) == (
        1.0,
        5.0,
        0.0,
        0.0,
    )
    # Every role runs in this one process: the submission's create put each order in the process's order
    # cache, so no activity read an order back.
    assert per_order["order_store"] == {"writes": 1.0, "reads": 0.0}
    assert per_order["queue_sends"] == {
        "orders": 1.0,
        "agent_requests": 3.0,
        "agent_responses": 3.0,
        "replies": 2.0,
        "total": 9.0,
    }
    assert per_order["targets"]["queue_messages"] == {"value": 9.0, "target": 9, "met": True}
    # The serial path is what the counted run did, less what comes after the next hop has begun: every
    # message sent, each received on the way but the Received reply, the order's and its record's
    # creates, and every state replace but the reply outbox's clear.
    cleared = per_order["state_writes_by_function"]["orderflow.replies.clear_pending_reply"]
    on_the_path = {
        "queue send": per_order["queue_sends"]["total"],
        "queue receive": per_order["queue_sends"]["total"] - 1,
        "cosmos create": state["creates"] + per_order["order_store"]["writes"],
        "cosmos replace": state["replaces"] - cleared,
    }
    assert on_the_path == SERIAL_PATH
    assert per_order["targets"]["state_writes"]["target"] == 5
    # What each order keeps in Cosmos DB, before and after the retention purge ran on all three: the
    # purge redacts the customer's and payment data and deletes nothing.
    stored, purged = per_order["stored_bytes"], per_order["purged_bytes"]
    assert per_order["purged_orders"] == 3
    assert stored["orderhistory"] == purged["orderhistory"] == 0  # a happy path's timeline fits its record
    assert 0 < purged["orders"] < stored["orders"]
    assert 0 < purged["orderstate"] < stored["orderstate"]
    assert stored["total"] == pytest.approx(stored["orders"] + stored["orderstate"], abs=0.15)
    # What the Azure Monitor exporter sent for each order, from a devhost exporting to a local endpoint:
    # a request span for each message a role consumed (the order, three agent requests, three responses),
    # the spans of the calls under them and their event records; durabletask's and the consumer loops'
    # receives and deletes, which the Functions host does on Azure, apart.
    telemetry = per_order["telemetry"]
    assert telemetry["all_processed"] is True and telemetry["orders_traced"] == 3
    assert telemetry["items"]["RequestData"] == 7.0
    assert telemetry["items"]["RemoteDependencyData"] > 7.0 and telemetry["items"]["MessageData"] > 0
    assert telemetry["host_side"]["items"] > 0
    assert all(0 < telemetry["value_bytes"][kind] < telemetry["bytes"][kind] for kind in telemetry["bytes"])

    hard = report["hard_down"]
    assert hard["service"] == "payments"
    assert hard["budget"] == 24
    assert hard["final_states"] == {"CompensationFailed": 1}
    assert 1 <= hard["forward_calls"]["max"] <= hard["all_forward_calls_max"] <= hard["budget"]
    assert hard["budget_spent_max"] <= hard["budget"]
    assert hard["forward_calls_within_budget"]["met"] is True
    assert hard["undo_calls"]["max"] >= 1  # the refund is down too: compensation fails and says so

    sdk_calls = report["sdk_calls"]
    assert (sdk_calls["calls"], sdk_calls["repeats"]) == (10, 1)
    # Every kind of client made every call (each measurement checks that its receives got the messages
    # sent and its query a full page); a figure is CPU, never zero for ten requests.
    assert {client: set(costs) for client, costs in sdk_calls["ms_per_call"].items()} == {
        client: set(OPERATIONS) for client in CLIENTS
    }
    assert all(ms > 0 for costs in sdk_calls["ms_per_call"].values() for ms in costs.values())
    floors = sdk_calls["floor_by_processes"]["1"]
    assert floors == sdk_floor(run["measured"], sdk_calls["ms_per_call"]["orderflow"])
    assert set(floors) == {"devhost-1", "devhosts"}
    assert 0 < floors["devhosts"]["sdk_calls_ms"] < floors["devhosts"]["measured_ms"]
    # The orderflow client's wall time of every call, and one order's serial requests at it.
    walls = sdk_calls["wall_ms_per_call"]["orderflow"]
    assert set(walls) == set(OPERATIONS)
    assert all(ms > 0 for ms in walls.values())
    assert sdk_calls["serial_path"] == {
        "requests": SERIAL_PATH,
        "wall_ms": serial_path_ms(walls),
        "settings": SERIAL_PATH_SETTINGS,
        "turned_off": [],  # the counted run above took that path
    }
    assert sdk_calls["serial_path"]["wall_ms"] > 0

    for peer in ("durabletask", "dbos"):
        assert report["peers"][peer]["outcomes"] == {"Processed": 3}
        assert report["peers"][peer]["latency"]["count"] == 3
        assert report["ratios"][peer]["1_processes"]["throughput"] > 0
        # The peer's CPU over its timed orders, from its own processes, divides orderflow's.
        peer_cpu = report["peers"][peer]["cpu_ms_per_order"]
        processes = {"durabletask": {"durabletask-backend", "durabletask-worker"}, "dbos": {"dbos"}}[peer]
        assert set(peer_cpu) == {*processes, "peer"}
        assert peer_cpu["peer"] == pytest.approx(sum(peer_cpu[name] for name in processes), abs=0.11)
        own_cpu = run["measured"]["cpu_ms_per_order"]["orderflow"]
        assert report["ratios"][peer]["1_processes"]["cpu"] == ratio(own_cpu, peer_cpu["peer"])
    # durabletask, orderflow's runtime, also runs the one-at-a-time orders: the floor under that window.
    single = report["peers"]["durabletask"]["one_at_a_time"]
    assert (single["outcomes"], single["latency"]["count"]) == ({"Processed": 3}, 3)
    assert 0 < single["latency"]["p50_s"] <= single["latency"]["max_s"]
    assert "one_at_a_time" not in report["peers"]["dbos"]

    results = report["sweep"]["results"]
    assert [(r["store"], r["settled"]) for r in results] == [
        ("cosmosdb-server", 20),
        ("cosmosdb-server", 40),
        ("memory", 20),
        ("memory", 40),
    ]
    assert {(r["records_read"], r["requeued"], r["idle_pass"]["records_read"]) for r in results} == {
        (5, 5, 0)
    }
    for store in ("cosmosdb-server", "memory"):
        assert report["sweep"]["growth"][store]["records_read_ratio"]["value"] == 1.0


def test_each_timed_window_of_a_run_that_starts_its_own_emulators_gets_a_fresh_set_and_each_process_a_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[LocalEmulators] = []

    def start_and_keep() -> LocalEmulators:
        emulators = start_local_emulators()
        started.append(emulators)
        return emulators

    windows_on: list[LocalEndpoints] = []

    def throughput_run_and_keep(**kwargs: Any) -> dict[str, Any]:
        windows_on.append(kwargs["endpoints"])
        return throughput_run(**kwargs)

    sdk_calls_on: list[LocalEndpoints] = []

    def sdk_calls_and_keep(endpoints: LocalEndpoints, **kwargs: Any) -> dict[str, Any]:
        sdk_calls_on.append(endpoints)
        return sdk_calls_run(endpoints, **kwargs)

    monkeypatch.setattr(runner, "start_local_emulators", start_and_keep)
    monkeypatch.setattr(runner, "throughput_run", throughput_run_and_keep)
    monkeypatch.setattr(runner, "sdk_calls_run", sdk_calls_and_keep)
    config = BenchConfig(
        orders=3,
        concurrency=2,
        warmup=0,
        processes=(2,),
        profile_processes=2,
        profile_rate=250,
        single_processes=(1,),
        single_orders=1,
        count_orders=1,
        sweep_sizes=(),
        hard_down_orders=1,
        peers=(),
        orderflow_settings=FAST,
        hard_down_settings=FAST_HARD_DOWN,
        run_timeout_s=120,
        data_dir=roomy_dataset(tmp_path / "tpch"),
        report_path=tmp_path / "bench-report.json",
        baseline=None,
        sdk_calls=5,
        sdk_call_repeats=1,
    )
    report = run_bench(config)

    assert not [note for note in report["notes"] if note.startswith("FAILED")]
    # The run's own set, then one for each of its two timed windows and one for the SDK calls; every
    # one stopped.
    assert len(started) == 4
    assert windows_on == [started[1].endpoints, started[2].endpoints]
    assert sdk_calls_on == [started[3].endpoints]
    assert report["sdk_calls"]["calls"] == 5
    assert all(e.azurite.process.poll() is not None and e.cosmos.process.poll() is not None for e in started)
    # Each devhost process of the profiled window was sampled on its own: the scheduler process and the
    # one with the agents and the submission (py-spy needs ptrace rights: without them its log says so).
    profiles = report["orderflow"]["runs"]["2"]["measured"]["profiles"]
    assert [(p["process"], p["roles"]) for p in profiles] == [(s.name, s.roles) for s in devhost_specs(2)]
    for profile in profiles:
        log = Path(profile["file"]).with_suffix(".log").read_text(encoding="utf-8")
        assert profile["samples"] > 0 or "permission" in log.lower(), log
    # Each window's processes log in a folder of its own, so a later window overwrites none of them.
    window_logs = Path(profiles[0]["file"]).parent
    assert window_logs.name == "p2"
    assert {log.name for log in window_logs.glob("devhost-*.log")} == {"devhost-1.log", "devhost-agents.log"}
    assert (window_logs.parent / "one-at-a-time-p1" / "devhost-1.log").is_file()
    assert "profiles" not in report["orderflow"]["one_at_a_time"]["1"]["measured"]
    for window in (report["orderflow"]["runs"]["2"], report["orderflow"]["one_at_a_time"]["1"]):
        measured = window["measured"]
        # The window's own Azurite and cosmosdb-server did its work: their CPU is counted (the run's
        # first set sat idle) and the client's requests went to the ports the counter knows.
        assert measured["cpu_ms_per_order"]["azurite"] > 0
        assert measured["cpu_ms_per_order"]["cosmosdb-server"] > 0
        assert measured["http_per_order_by_process"]["load generator"]["azurite"]["send"] == 1.0
    # The parts after the windows run on the run's first set, still up.
    assert report["orderflow"]["per_order"]["http_per_order"]["azurite"]["send"] == 9.0
