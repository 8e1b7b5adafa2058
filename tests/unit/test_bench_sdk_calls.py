"""The SDK floor's arithmetic and how the report shows the CPU of one SDK call."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from bench.config import BenchConfig
from bench.report import build_report, markdown_tables
from bench.sdk_calls import CLIENTS
from bench.sdk_floor import OPERATIONS, SERIAL_PATH, floor_ms_per_order, sdk_floor, serial_path_ms

pytestmark = pytest.mark.unit

COSTS = {
    "queue send": 1.0,
    "queue receive": 0.5,
    "queue delete": 0.3,
    "cosmos create": 2.0,
    "cosmos read": 0.1,
    "cosmos replace": 0.2,
    "cosmos query": 3.0,
}

WINDOW: dict[str, Any] = {
    "cpu_ms_per_order": {"devhost-1": 40.0, "devhost-agents": 20.0, "load generator": 9.0, "azurite": 30.0},
    "http_per_order_by_process": {
        "devhost-1": {
            "azurite": {"send": 4.0, "receive": 2.0, "delete": 3.0, "update": 7.0},
            "cosmosdb-server": {"read": 2.0, "replace": 5.0, "query": 0.5, "metadata": 3.0},
        },
        "devhost-agents": {"azurite": {"send": 4.0, "receive": 4.0}, "cosmosdb-server": {"create": 2.0}},
        "load generator": {"azurite": {"send": 1.0, "receive": 2.0, "delete": 2.0}},
    },
    "http_per_order": {},
    "grpc_per_order": {},
    "limited_by": "the machine's CPU",
}


def test_the_floor_sums_requests_times_cost_and_leaves_out_unmeasured_operations() -> None:
    requests = WINDOW["http_per_order_by_process"]["devhost-1"]
    # 4x1 + 2x0.5 + 3x0.3 + 2x0.1 + 5x0.2 + 0.5x3; the lock renewals (update) and metadata are not measured.
    assert floor_ms_per_order(COSTS, requests) == 8.6
    assert floor_ms_per_order(COSTS, {}) == 0.0


def test_each_devhost_gets_its_floor_beside_its_measured_cpu_and_the_load_generator_none() -> None:
    floors = sdk_floor(WINDOW, COSTS)

    assert floors == {
        "devhost-1": {"sdk_calls_ms": 8.6, "measured_ms": 40.0},
        "devhost-agents": {"sdk_calls_ms": 10.0, "measured_ms": 20.0},
        "devhosts": {"sdk_calls_ms": 18.6, "measured_ms": 60.0},
    }


def test_the_serial_path_is_each_request_on_it_times_its_wall_time() -> None:
    walls = {
        "queue send": 1.5,
        "queue receive": 2.0,
        "queue delete": 9.0,
        "cosmos create": 0.7,
        "cosmos replace": 0.6,
    }
    # 9 sends x 1.5 + 8 receives x 2 + 2 creates x 0.7 + 4 replaces x 0.6; deletes are off the path.
    assert serial_path_ms(walls) == 33.3
    assert serial_path_ms({}) == 0.0
    assert set(SERIAL_PATH) <= set(OPERATIONS)  # each call on the path is one the step measures


def report_of(sdk_calls: dict[str, Any], config: BenchConfig | None = None, **more: Any) -> dict[str, Any]:
    """The report of a run of :data:`WINDOW` on 2 processes with these SDK call figures (and ``config``,
    10 orders by default)."""
    return build_report(
        config or BenchConfig(orders=10),
        machine={"cpu_count": 2},
        orderflow_runs={"2": {"throughput_per_s": 10.0, "measured": WINDOW}},
        per_order=None,
        sweep_results=[],
        sweep_growth={},
        hard_down=None,
        peers={},
        sdk_calls=sdk_calls,
        generated_at=datetime(2026, 12, 2, tzinfo=UTC),
        **more,
    )


def test_the_report_adds_each_window_s_floor_and_prints_the_call_table() -> None:
    figures = {
        "calls": 300,
        "repeats": 3,
        "concurrency": 16,
        "ms_per_call": {
            client: {call: COSTS[call] * (n + 1) for call in OPERATIONS} for n, client in enumerate(CLIENTS)
        },
    }
    report = report_of(figures)

    assert report["sdk_calls"]["floor_by_processes"]["2"]["devhosts"] == {
        "sdk_calls_ms": 18.6,
        "measured_ms": 60.0,
    }
    table = markdown_tables(report)
    assert "| queue send | 1 | 2 | 3 |" in table
    assert "| cosmos query | 3 | 6 | 9 |" in table
    assert (
        "SDK floor, 2 proc: the devhosts' SDK calls alone cost 18.6 ms per order of the 60 ms they cost "
        "in all (devhost-1 8.6 of 40, devhost-agents 10 of 20)." in table
    )
    # Figures without wall times (a report of before they were measured) have no wall column.
    assert "| call | orderflow | sdk default | async |" in table
    assert "serial_path" not in report["sdk_calls"]
    assert "Serial path" not in table


def test_wall_times_add_a_column_and_the_serial_path_beside_the_one_at_a_time_p50() -> None:
    walls = {call: 1.0 for call in OPERATIONS} | {"queue receive": 2.0}
    figures = {
        "calls": 300,
        "repeats": 3,
        "concurrency": 16,
        "ms_per_call": {client: dict(COSTS) for client in CLIENTS},
        "wall_ms_per_call": {"orderflow": walls},
    }
    report = report_of(figures, one_at_a_time={"2": {"latency": {"p50_s": 0.082}}})

    # 9 sends x 1 + 8 receives x 2 + 2 creates x 1 + 4 replaces x 1.
    assert report["sdk_calls"]["serial_path"] == {
        "requests": SERIAL_PATH,
        "wall_ms": 31.0,
        "settings": {"CLAIM_ON_SUBMIT": True, "STARTER_SENDS_FIRST_REQUEST": True},
        "turned_off": [],
    }
    table = markdown_tables(report)
    assert "| call | orderflow | sdk default | async | orderflow wall |" in table
    assert "| queue receive | 0.5 | 0.5 | 0.5 | 2 |" in table
    assert (
        "Serial path: one order's emulator requests made one after another (9 x queue send, "
        "8 x queue receive, 2 x cosmos create, 4 x cosmos replace; CLAIM_ON_SUBMIT and "
        "STARTER_SENDS_FIRST_REQUEST on) take 31 ms at one call's wall time, of the one-at-a-time p50 "
        "(82 ms on 2 proc)." in table
    )


@pytest.mark.parametrize(
    ("settings", "off"),
    [
        ({"CLAIM_ON_SUBMIT": "false"}, "CLAIM_ON_SUBMIT"),
        ({"STARTER_SENDS_FIRST_REQUEST": "0", "CLAIM_ON_SUBMIT": "true"}, "STARTER_SENDS_FIRST_REQUEST"),
    ],
)
def test_a_run_that_turns_off_a_setting_the_serial_path_counts_on_says_its_path_is_longer(
    settings: dict[str, str], off: str
) -> None:
    figures = {
        "calls": 300,
        "repeats": 3,
        "concurrency": 16,
        "ms_per_call": {client: dict(COSTS) for client in CLIENTS},
        "wall_ms_per_call": {"orderflow": {call: 1.0 for call in OPERATIONS}},
    }
    report = report_of(
        figures,
        BenchConfig(orders=10, orderflow_settings=settings),
        one_at_a_time={"2": {"latency": {"p50_s": 0.082}}},
    )
    serial = report["sdk_calls"]["serial_path"]
    assert serial["turned_off"] == [off]
    assert serial["settings"] == {"CLAIM_ON_SUBMIT": True, "STARTER_SENDS_FIRST_REQUEST": True}
    table = markdown_tables(report)
    assert f"this run turned {off} off, so its orders' path has more requests than these" in table
    assert "of the one-at-a-time p50" not in table


def test_a_report_without_the_measurement_says_nothing_of_it() -> None:
    report = build_report(
        BenchConfig(orders=10),
        machine={},
        orderflow_runs={},
        per_order=None,
        sweep_results=[],
        sweep_growth={},
        hard_down=None,
        peers={},
    )
    assert report["sdk_calls"] is None
    assert "SDK" not in markdown_tables(report)
