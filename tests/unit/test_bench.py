"""The benchmark's pure parts: its arithmetic, the closed loop, the counts breakdown and the report."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from bench import orderflow_runs
from bench.config import BenchConfig
from bench.counting import OperationCounts
from bench.load import LoadResult, run_closed_loop, run_orderflow_load
from bench.orderflow_runs import CLIENT_WAKEUP_ID, count_breakdown, hard_down_calls, queue_role, reply_wakeups
from bench.parts import FAILED, Parts, failures
from bench.peer_runs import peer_cpu_ms
from bench.peers.durabletask_peer import backend_timestamp
from bench.probe import FILE_ENV
from bench.report import REPORT_KEYS, build_report, markdown_tables, peer_ratios
from bench.report.rows import one_at_a_time_lines
from bench.stats import at_most, below, latency_summary, per_order, percentile, ratio, throughput
from bench.sweep import expired_record, growth, memory_sweeps, settled_record
from bench.workload import happy_orders, submissions
from demo.fleet import DevhostSpec
from demo.tpch import load_catalog
from devhost.wakeup_channel import WakeupChannel
from orderflow.errors import TransientError
from orderflow.messages import OrderStatus, StatusReply, reply_message_id
from orderflow.queues.memory import InMemoryQueueFactory
from orderflow.settings import Settings
from orderflow.stores.memory import matches
from orderflow_client.client import OrderflowClient
from supervisor.recovery import expired_query
from tests.unit.fakes import received

pytestmark = pytest.mark.unit

TPCH_FIXTURE = Path(__file__).parents[1] / "data" / "tpch"


# --- arithmetic -----------------------------------------------------------------------------------


def test_percentile_interpolates_between_closest_ranks() -> None:
    values = [4.0, 1.0, 3.0, 2.0]
    assert percentile(values, 0) == 1.0
    assert percentile(values, 50) == 2.5
    assert percentile(values, 100) == 4.0
    assert percentile(values, 95) == pytest.approx(3.85)
    assert percentile([7.0], 99) == 7.0
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile(values, 101)


def test_latency_summary_rounds_to_the_millisecond() -> None:
    summary = latency_summary([0.1, 0.2, 0.3, 0.4, 1.0])
    assert summary == {
        "count": 5,
        "mean_s": 0.4,
        "p50_s": 0.3,
        "p95_s": 0.88,
        "p99_s": 0.976,
        "max_s": 1.0,
    }
    assert latency_summary([])["p50_s"] is None


def test_throughput_ratio_per_order_and_targets() -> None:
    assert throughput(300, 12.0) == 25.0
    assert throughput(5, 0.0) is None
    assert ratio(3.0, 4.0) == 0.75
    assert ratio(3.0, 0.0) is None
    assert ratio(None, 2.0) is None
    assert per_order(21, 3) == 7.0
    assert per_order(2, 3) == 0.67
    with pytest.raises(ValueError):
        per_order(1, 0)
    assert at_most(7.0, 5) == {"value": 7.0, "target": 5, "met": False}
    assert at_most(5.0, 5) == {"value": 5.0, "target": 5, "met": True}
    assert below(2.0, 2.0)["met"] is False
    assert below(None, 2.0)["met"] is None


# --- closed loop ----------------------------------------------------------------------------------


def test_closed_loop_runs_every_item_with_bounded_concurrency() -> None:
    running, peak = 0, 0
    lock = threading.Lock()

    def run_one(item: int) -> str:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.01)
        with lock:
            running -= 1
        if item == 3:
            raise RuntimeError("boom")
        return "Processed" if item % 2 else "Compensated"

    result = run_closed_loop(list(range(8)), run_one, concurrency=3)
    assert result.submitted == 8
    assert result.finished == 8
    assert result.outcomes == {"Processed": 3, "Compensated": 4, "error:RuntimeError": 1}
    assert peak == 3
    assert result.elapsed_s >= 0.01 * 8 / 3
    with pytest.raises(ValueError):
        run_closed_loop([1], run_one, concurrency=0)


def test_load_result_round_trips_through_json() -> None:
    result = LoadResult(3, [0.5, 0.25], 1.5, {"Processed": 2, "TimedOut": 1})
    assert LoadResult.from_json(result.to_json()) == result


def test_orderflow_load_times_each_order_until_its_final_reply() -> None:
    queues = InMemoryQueueFactory()
    client = OrderflowClient(queues, reply_queue="client-a", orders_queue="orders-a")
    stop = threading.Event()

    def system() -> None:
        # Answers each order Received, then Processed (or Compensated for tpch-3), like the real roles.
        orders = queues.queue("orders-a")
        while not stop.is_set():
            for message in orders.receive(max_messages=8, lock_s=30):
                order_id = message.correlation_id or ""
                final = OrderStatus.COMPENSATED if order_id.endswith("tpch-3") else OrderStatus.PROCESSED
                for status in (OrderStatus.RECEIVED, final):
                    reply = StatusReply(order_id=order_id, status=status, at=datetime.now(UTC))
                    queues.queue("client-a").send(
                        reply.to_json(), message_id=reply_message_id(order_id, status)
                    )
                orders.complete(message)
            time.sleep(0.005)

    worker = threading.Thread(target=system)
    worker.start()
    catalog = load_catalog(TPCH_FIXTURE, orders=None, stock_divisor=1)
    try:
        result = run_orderflow_load(
            client,
            submissions(catalog.orders, run="t1", reply_to="client-a"),
            concurrency=2,
            timeout_s=10,
            idle_poll_s=0.001,
        )
    finally:
        stop.set()
        worker.join()
    assert result.submitted == 4
    assert result.outcomes == {"Processed": 3, "Compensated": 1}
    assert len(result.latencies_s) == 4
    assert all(0 <= latency < 10 for latency in result.latencies_s)


def test_a_woken_load_notices_each_reply_when_it_is_announced_not_at_its_poll() -> None:
    queues = InMemoryQueueFactory()
    client = OrderflowClient(queues, reply_queue="client-a", orders_queue="orders-a")
    stop, wakeup = threading.Event(), threading.Event()
    announced: list[str] = []

    def system() -> None:
        orders = queues.queue("orders-a")
        while not stop.is_set():
            for message in orders.receive(max_messages=8, lock_s=30):
                order_id = message.correlation_id or ""
                reply = StatusReply(order_id=order_id, status=OrderStatus.PROCESSED, at=datetime.now(UTC))
                queues.queue("client-a").send(reply.to_json(), message_id=f"{order_id}-done")
                orders.complete(message)
                wakeup.set()  # what a devhost's announcement of the send does
            time.sleep(0.005)

    worker = threading.Thread(target=system)
    worker.start()
    catalog = load_catalog(TPCH_FIXTURE, orders=3, stock_divisor=1)
    try:
        # An idle wait of a minute: without the wake-ups not one order would finish within 10 s.
        result = run_orderflow_load(
            client,
            submissions(catalog.orders, run="t3", reply_to="client-a"),
            concurrency=1,
            timeout_s=10,
            idle_poll_s=60,
            wakeup=wakeup,
            announce=announced.append,
        )
    finally:
        stop.set()
        worker.join()
    assert result.outcomes == {"Processed": 3}
    assert announced == ["orders-a"] * 3  # each submission wakes the submission's loop


class _CountingPolls:
    """A client SDK that counts its receives and what each returned."""

    def __init__(self, client: OrderflowClient) -> None:
        self.client = client
        self.orders_queue = client.orders_queue
        self.polled: list[int] = []

    def submit(self, order: Any) -> str:
        return self.client.submit(order)

    def poll(self, *, max_messages: int = 32) -> Any:
        replies = self.client.poll(max_messages=max_messages)
        self.polled.append(len(replies))
        return replies


def test_a_woken_load_receives_only_when_woken_never_right_after_a_submission() -> None:
    queues = InMemoryQueueFactory()
    client = _CountingPolls(OrderflowClient(queues, reply_queue="client-a", orders_queue="orders-a"))
    stop, wakeup = threading.Event(), threading.Event()

    def system() -> None:
        orders = queues.queue("orders-a")
        while not stop.is_set():
            for message in orders.receive(max_messages=8, lock_s=30):
                order_id = message.correlation_id or ""
                for status in (OrderStatus.RECEIVED, OrderStatus.PROCESSED):
                    reply = StatusReply(order_id=order_id, status=status, at=datetime.now(UTC))
                    queues.queue("client-a").send(reply.to_json(), message_id=f"{order_id}-{status.value}")
                    wakeup.set()  # what a devhost's announcement of the send does
                    time.sleep(0.05)  # the final reply comes later than the first
                orders.complete(message)
            time.sleep(0.005)

    worker = threading.Thread(target=system, daemon=True)
    worker.start()
    catalog = load_catalog(TPCH_FIXTURE, orders=3, stock_divisor=1)
    try:
        result = run_orderflow_load(
            client,  # type: ignore[arg-type]
            submissions(catalog.orders, run="t5", reply_to="client-a"),
            concurrency=1,
            timeout_s=10,
            idle_poll_s=60,  # a lost wake-up would hold the run for a minute
            wakeup=wakeup,
        )
    finally:
        stop.set()
        worker.join()
    assert result.outcomes == {"Processed": 3}
    # One receive per reply, each after its wake-up: none right after a send, none after a batch that
    # emptied the queue.
    assert client.polled == [1] * 6


def test_the_load_generator_is_woken_by_sends_to_its_reply_queue_only(tmp_path: Path) -> None:
    wakeups = reply_wakeups(tmp_path, "replies-a")
    devhost = WakeupChannel(tmp_path, "devhost-1", lambda name: None)
    devhost.start()
    try:
        assert devhost.announce("agent-requests") == 1
        assert not wakeups.replied.wait(0.2)
        devhost.announce("replies-a")
        assert wakeups.replied.wait(5)
        assert wakeups.channel.announce("orders-a") == 1  # the devhost is told of a submission
    finally:
        devhost.stop()
        wakeups.channel.stop()
    assert not (tmp_path / f"{CLIENT_WAKEUP_ID}.sock").exists()


class _Flaky:
    """A client SDK whose first submit and first poll time out, as against an emulator's slow spell."""

    def __init__(self, client: OrderflowClient) -> None:
        self.client = client
        self.orders_queue = client.orders_queue
        self.failures = {"submit": 1, "poll": 1}

    def _fail_once(self, call: str) -> None:
        if self.failures[call]:
            self.failures[call] -= 1
            raise TransientError(f"{call} timed out")

    def submit(self, order: Any) -> str:
        self._fail_once("submit")
        return self.client.submit(order)

    def poll(self, *, max_messages: int = 32) -> Any:
        self._fail_once("poll")
        return self.client.poll(max_messages=max_messages)


def test_a_load_whose_sends_and_receives_time_out_tries_them_again_and_loses_no_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("bench.load.TRANSIENT_PAUSE_S", 0.0)
    queues = InMemoryQueueFactory()
    client = OrderflowClient(queues, reply_queue="client-a", orders_queue="orders-a")
    catalog = load_catalog(TPCH_FIXTURE, orders=2, stock_divisor=1)
    now = [0.0]

    def clock() -> float:
        now[0] += 1.0  # one second a call: every latency counts the calls since the first send
        return now[0]

    for order in submissions(catalog.orders, run="t4", reply_to="client-a"):
        reply = StatusReply(order_id=order["orderId"], status=OrderStatus.PROCESSED, at=datetime.now(UTC))
        queues.queue("client-a").send(reply.to_json(), message_id=f"{order['orderId']}-done")
    result = run_orderflow_load(
        _Flaky(client),  # type: ignore[arg-type]
        submissions(catalog.orders, run="t4", reply_to="client-a"),
        concurrency=2,
        timeout_s=60,
        idle_poll_s=0,
        clock=clock,
    )
    assert result.outcomes == {"Processed": 2}
    assert result.transient_errors == 2
    assert [m.correlation_id for m in received(queues.queue("orders-a"))] == [
        o["orderId"] for o in submissions(catalog.orders, run="t4", reply_to="client-a")
    ]
    # The first order's latency runs from its first, failed send (clock 2), not from its second.
    assert max(result.latencies_s) >= 4
    assert LoadResult.from_json(result.to_json()) == result


def test_orderflow_load_counts_unanswered_orders_as_timed_out() -> None:
    client = OrderflowClient(InMemoryQueueFactory(), reply_queue="client-a", orders_queue="orders-a")
    catalog = load_catalog(TPCH_FIXTURE, orders=2, stock_divisor=1)
    result = run_orderflow_load(
        client, submissions(catalog.orders, run="t2", reply_to="client-a"), concurrency=1, timeout_s=0.05
    )
    assert result.submitted == 1  # the window of one never freed
    assert result.outcomes == {"TimedOut": 2}
    assert result.latencies_s == []


# --- workload -------------------------------------------------------------------------------------


def test_happy_orders_leave_out_declined_customers_and_reviewable_amounts() -> None:
    catalog = load_catalog(TPCH_FIXTURE, orders=None, stock_divisor=1)
    chosen = happy_orders(catalog, 3, review_above=Decimal("0"), runs=1)
    assert [o.order_id for o in chosen] == ["tpch-1", "tpch-3", "tpch-32"]  # tpch-2's card is declined
    cheap = happy_orders(catalog, 2, review_above=Decimal("1000.50"), runs=1)
    assert [o.order_id for o in cheap] == ["tpch-1", "tpch-3"]  # tpch-32 would pause for review


def test_happy_orders_leave_out_orders_that_would_run_out_of_stock_by_the_last_run() -> None:
    catalog = load_catalog(TPCH_FIXTURE, orders=None, stock_divisor=1)
    # Part 20 holds 100 units: tpch-3 takes 50 a run; part 30 holds 9: tpch-1 takes 2, tpch-32 takes 4.
    assert [o.order_id for o in happy_orders(catalog, 1, review_above=Decimal("0"), runs=2)] == ["tpch-1"]
    with pytest.raises(ValueError):
        happy_orders(catalog, 3, review_above=Decimal("0"), runs=2)


def test_submissions_give_each_run_its_own_order_ids() -> None:
    catalog = load_catalog(TPCH_FIXTURE, orders=2, stock_divisor=1)
    messages = submissions(catalog.orders, run="p1abc", reply_to="client-x")
    assert [m["orderId"] for m in messages] == ["p1abc-tpch-1", "p1abc-tpch-2"]
    assert {m["replyTo"] for m in messages} == {"client-x"}
    with pytest.raises(ValueError):
        submissions(catalog.orders, run="a:b", reply_to="client-x")


# --- per-order counts -----------------------------------------------------------------------------


def test_queue_roles_follow_the_settings_names() -> None:
    settings = Settings.load(
        {}, CLIENTS=json.dumps([{"id": "x"}]), AGENT_QUEUE_PREFIX="agent-x-", AGENT_RESPONSES_QUEUE="resp-x"
    )
    role_of = queue_role(settings)
    assert role_of("orders-x") == "orders"
    assert role_of("agent-x-payment") == "agent_requests"
    assert role_of("resp-x-h1") == "agent_responses"
    assert role_of("client-x") == "replies"
    assert role_of("orders-x-deadletter") == "dead_letters"


def happy_path_counts(orders: int) -> tuple[OperationCounts, OperationCounts, OperationCounts]:
    """What the adapters count for ``orders`` happy-path orders of the current workflow."""
    state, documents, queues = OperationCounts(), OperationCounts(), OperationCounts()
    state.add("create", "intake.submission.handle_intake_message", orders)
    state.add("replace", "orchestrators.starter.claim", orders)
    state.add("replace", "activities.steps.start_step", 3 * orders)
    state.add("replace", "activities.steps.finish_order", orders)
    state.add("replace", "orderflow.replies.clear_pending_reply", orders)
    state.add("query_page", "orchestrators.starter.run_starter_pass", 40)
    state.add("query_item", "orchestrators.starter.run_starter_pass", orders)
    documents.add("create", "intake.submission.handle_intake_message", orders)
    documents.add("read", "activities.steps.start_step", orders)
    for role, n in (("orders", 1), ("agent_requests", 3), ("agent_responses", 3), ("replies", 2)):
        queues.add("send", role, n * orders)
    queues.add("receive", "replies", 99)  # receives are not sends
    return state, documents, queues


def test_count_breakdown_per_order_with_targets() -> None:
    breakdown = count_breakdown(*happy_path_counts(10), processed=10)
    assert breakdown["state_store"] == {
        "point_reads": 0.0,
        "creates": 1.0,
        "replaces": 6.0,
        "writes": 7.0,
        "replace_conflicts": 0.0,
        "query_pages": 4.0,
        "query_items": 1.0,
        "counts": 0.0,
    }
    assert breakdown["state_writes_by_function"] == {
        "activities.steps.finish_order": 1.0,
        "activities.steps.start_step": 3.0,
        "intake.submission.handle_intake_message": 1.0,
        "orchestrators.starter.claim": 1.0,
        "orderflow.replies.clear_pending_reply": 1.0,
    }
    assert breakdown["queue_sends"] == {
        "orders": 1.0,
        "agent_requests": 3.0,
        "agent_responses": 3.0,
        "replies": 2.0,
        "total": 9.0,
    }
    assert breakdown["order_store"] == {"writes": 1.0, "reads": 1.0}
    assert breakdown["targets"] == {
        "state_writes": {"value": 7.0, "target": 5, "met": False},
        "point_reads": {"value": 0.0, "target": 1, "met": True},
        "queue_messages": {"value": 9.0, "target": 9, "met": True},
    }


def test_hard_down_calls_are_read_from_the_audit_by_key() -> None:
    audit = {
        # Keyed as the agents key their calls: {clientId}:{orderId}:{step}[:undo].
        "bench-a:h-tpch-1:charge_payment": {"endpoint": "payments.charge", "calls": 23, "undo": False},
        "bench-a:h-tpch-1:charge_payment:undo": {
            "endpoint": "payments.refund_by_key",
            "calls": 24,
            "undo": True,
        },
        "bench-a:h-tpch-1:reserve_inventory": {"endpoint": "inventory.reserve", "calls": 1, "undo": False},
        "bench-a:h-tpch-3:charge_payment": {"endpoint": "payments.charge", "calls": 20, "undo": False},
        "bench-a:other-tpch-1:charge_payment": {"endpoint": "payments.charge", "calls": 5, "undo": False},
    }
    calls = hard_down_calls(audit, service="payments", order_ids=["h-tpch-1", "h-tpch-3"])
    assert calls == {"h-tpch-1": {"forward": 23, "undo": 24}, "h-tpch-3": {"forward": 20, "undo": 0}}
    every = hard_down_calls(audit, service=None, order_ids=["h-tpch-1", "h-tpch-3"])
    assert every == {"h-tpch-1": {"forward": 24, "undo": 24}, "h-tpch-3": {"forward": 20, "undo": 0}}


# --- sweep ----------------------------------------------------------------------------------------


def test_only_the_expired_records_match_the_sweep_query() -> None:
    now = datetime.now(UTC)
    assert matches(expired_query(now), expired_record("x-1", now).to_json_dict())
    assert not matches(expired_query(now), settled_record("s-1", now).to_json_dict())


def test_memory_sweeps_read_only_the_expired_records_at_every_size() -> None:
    results = memory_sweeps([30, 10], expired=4, settings=Settings.load({}))
    assert [(r["store"], r["settled"], r["expired"]) for r in results] == [
        ("memory", 10, 4),
        ("memory", 30, 4),
    ]
    assert [(r["records_read"], r["requeued"], r["query_pages"]) for r in results] == [(4, 4, 1), (4, 4, 1)]
    assert [r["idle_pass"]["records_read"] for r in results] == [0, 0]
    grown = growth(results)
    assert grown is not None
    assert grown["sizes"] == [10, 30]
    assert grown["records_read_ratio"] == {"value": 1.0, "target": 2.0, "met": True}


def test_growth_needs_two_sizes_and_compares_smallest_with_largest() -> None:
    def result(size: int, time_s: float) -> dict[str, Any]:
        return {"settled": size, "time_s": time_s, "records_read": 20, "idle_pass": {"time_s": time_s / 2}}

    assert growth([result(1000, 0.1)]) is None
    grown = growth([result(100_000, 0.5), result(1000, 0.1), result(10_000, 0.2)])
    assert grown is not None
    assert grown["sizes"] == [1000, 100_000]
    assert grown["time_ratio"] == {"value": 5.0, "target": 2.0, "met": False}
    assert grown["idle_time_ratio"] == 5.0


# --- report ---------------------------------------------------------------------------------------


def run_summary(throughput_per_s: float, p50: float) -> dict[str, Any]:
    return {
        "submitted": 10,
        "finished": 10,
        "outcomes": {"Processed": 10},
        "elapsed_s": 10 / throughput_per_s,
        "throughput_per_s": throughput_per_s,
        "latency": {
            "count": 10,
            "mean_s": p50,
            "p50_s": p50,
            "p95_s": 2 * p50,
            "p99_s": 3 * p50,
            "max_s": 4 * p50,
        },
    }


def test_peer_ratios_divide_orderflow_by_the_peer() -> None:
    ratios = peer_ratios({"1": run_summary(10.0, 1.0)}, {"dbos": run_summary(40.0, 0.25)})
    assert ratios == {
        "dbos": {"1_processes": {"throughput": 0.25, "p50": 4.0, "p95": 4.0, "p99": 4.0, "cpu": None}}
    }


def test_the_cpu_ratio_divides_orderflows_own_processes_by_the_peers_in_the_same_run() -> None:
    orderflow = {**run_summary(10.0, 1.0), "measured": {"cpu_ms_per_order": {"orderflow": 60.0, "all": 90.0}}}
    peer = {**run_summary(40.0, 0.25), "cpu_ms_per_order": peer_cpu_ms({"worker": 0.3, "backend": 0.1}, 20)}
    assert peer["cpu_ms_per_order"] == {"backend": 5.0, "worker": 15.0, "peer": 20.0}
    ratios = peer_ratios({"2": orderflow}, {"durabletask": peer, "dbos": run_summary(40.0, 0.25)})
    assert ratios["durabletask"]["2_processes"]["cpu"] == 3.0
    assert ratios["dbos"]["2_processes"]["cpu"] is None  # the peer's CPU was not measured


def test_a_peer_that_finished_no_order_is_charged_its_whole_cpu() -> None:
    assert peer_cpu_ms({"dbos": 0.25}, 0) == {"dbos": 250.0, "peer": 250.0}


def test_the_report_has_its_keys_and_its_tables_their_rows() -> None:
    breakdown = count_breakdown(*happy_path_counts(5), processed=5)
    sweep = [
        {
            "store": "memory",
            "settled": 10,
            "expired": 2,
            "time_s": 0.01,
            "records_read": 2,
            "query_pages": 1,
            "idle_pass": {"time_s": 0.005, "records_read": 0},
        }
    ]
    report = build_report(
        BenchConfig(orders=10),
        machine={"cpu_count": 2},
        orderflow_runs={"1": {**run_summary(10.0, 1.0), "recovered_orders": 2, "attempts_max": 2}},
        per_order=breakdown,
        sweep_results=sweep,
        sweep_growth={"memory": None},
        hard_down=None,
        peers={"durabletask": {**run_summary(50.0, 0.2), "cpu_ms_per_order": {"peer": 25.0}}},
        generated_at=datetime(2026, 11, 29, 12, 0, tzinfo=UTC),
    )
    assert tuple(report) == REPORT_KEYS
    assert report["generated_at"] == "2026-11-29T12:00:00+00:00"
    assert report["config"]["orders"] == 10
    assert report["orderflow"]["throughput_per_s"] == {"1": 10.0}
    assert report["orderflow"]["latency"]["1"]["p50_s"] == 1.0
    assert report["ratios"]["durabletask"]["1_processes"]["throughput"] == 0.2
    assert report["notes"]
    table = markdown_tables(report)
    assert "| orderflow, 1 devhost process(es) | 10 | 1 | 2 | 3 | 2 |" in table
    assert "| durabletask | 50 | 0.2 | 0.4 | 0.6 | – |" in table
    # No measured window for orderflow here: its CPU ratio is "–", the peer's own figure is shown.
    assert "| durabletask | 1 | 0.2 | 5 | 5 | 5 | – | 25 |" in table
    assert (
        "| orderflow / peer | processes | throughput | p50 | p95 | p99 | CPU per order | peer CPU ms |"
        in table
    )
    assert "| state-store writes (creates + replaces) | 7 (target 5: not met) |" in table
    assert "| memory | 10 | 2 | 0.01 | 0.005 | 2 |" in table
    assert "one order at a time" not in table.lower()


def test_the_one_at_a_time_p50s_of_orderflow_and_of_durabletask_are_printed_side_by_side() -> None:
    single = {**run_summary(1.0, 0.079), "finished": 20}
    report = build_report(
        BenchConfig(orders=10),
        machine={"cpu_count": 2},
        orderflow_runs={"2": run_summary(10.0, 1.0)},
        one_at_a_time={"2": single},
        per_order=None,
        sweep_results=[],
        sweep_growth={},
        hard_down=None,
        peers={
            "durabletask": {
                **run_summary(50.0, 0.2),
                "one_at_a_time": {**run_summary(1.0, 0.021), "finished": 20},
            },
            "dbos": run_summary(60.0, 0.1),
        },
        generated_at=datetime(2026, 12, 7, 12, 0, tzinfo=UTC),
    )
    assert one_at_a_time_lines(report) == [
        "one order at a time on 2 devhost process(es): p50 0.079 s, p95 0.158 s (20 orders)",
        "durabletask, the same saga one order at a time: p50 0.021 s, p95 0.042 s (20 orders, to the "
        "completion its backend recorded)",
    ]
    table = markdown_tables(report)
    assert "One order at a time on 2 devhost process(es): p50 0.079 s" in table
    assert "Durabletask, the same saga one order at a time: p50 0.021 s" in table


def test_config_rejects_unknown_peers_and_services() -> None:
    with pytest.raises(ValueError):
        BenchConfig(peers=("temporal",))
    with pytest.raises(ValueError):
        BenchConfig(hard_down_service="email")
    with pytest.raises(ValueError):
        BenchConfig(sweep_sizes=(0,))
    with pytest.raises(ValueError):
        BenchConfig(profile_rate=0)
    assert BenchConfig().profile_rate == 50
    config = BenchConfig(orders=50, warmup=5, count_orders=20, hard_down_orders=80, processes=(1,), peers=())
    assert config.distinct_orders() == 80
    assert config.runs() == 4  # one process count, one one-at-a-time run, counting and hard-down


def test_a_failed_part_is_noted_and_the_others_still_run() -> None:
    said: list[str] = []
    parts = Parts(said.append)

    def broken() -> int:
        raise RuntimeError("emulator went away")

    assert parts.run("sweeps", broken) is None
    assert parts.run("peers", lambda: 42) == 42
    assert parts.failed == [f"{FAILED}sweeps: RuntimeError: emulator went away"]
    assert said == ["sweeps", "sweeps failed: RuntimeError", "peers"]
    assert failures({"notes": ["a note", *parts.failed]}) == parts.failed


def test_a_happy_path_load_with_an_order_not_processed_fails_the_run() -> None:
    # A peer pointed at the wrong services compensates every order, quickly: its figures must not be
    # compared as if it did the same work. The hard-down part's orders are meant to fail.
    report = {
        "notes": ["a note"],
        "orderflow": {
            "runs": {"1": {"outcomes": {"Processed": 60}}},
            "per_order": {"outcomes": {"Processed": 20}},
        },
        "peers": {"durabletask": {"outcomes": {"Processed": 2, "Compensated": 58}}, "dbos": {"outcomes": {}}},
        "hard_down": {"outcomes": {"CompensationFailed": 10}},
    }

    assert failures(report) == [
        f"{FAILED}peers.durabletask: orders not Processed: {{'Processed': 2, 'Compensated': 58}}"
    ]


def test_a_durabletask_time_without_a_zone_is_utc_whatever_the_local_zone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    try:
        naive = datetime(2026, 11, 30, 1, 0, 0)
        assert backend_timestamp(naive) == datetime(2026, 11, 30, 1, 0, 0, tzinfo=UTC).timestamp()
        aware = datetime(2026, 11, 30, 10, 0, 0, tzinfo=timezone(timedelta(hours=9)))
        assert backend_timestamp(aware) == aware.timestamp()
    finally:
        monkeypatch.undo()
        time.tzset()


@pytest.mark.parametrize(
    "fields",
    [{"processes": (1, 1)}, {"peers": ("dbos", "dbos")}, {"sweep_sizes": (1000, 10000, 1000)}],
)
def test_a_value_given_twice_is_refused(fields: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match="given more than once"):
        BenchConfig(**fields)


def test_a_probed_devhost_gets_its_own_environment_and_options_like_an_unprobed_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[tuple[list[str], dict[str, str]]] = []

    def fake_start_child(_name: str, args: list[str], env: dict[str, str], *_rest: Any, **_kw: Any) -> Any:
        started.append((args, env))
        return None

    monkeypatch.setattr(orderflow_runs.throughput, "start_child", fake_start_child)
    spec = DevhostSpec("devhost-1", "h1", "all", api_port=8123, env=(("POLL_INTERVAL_S", "0.3"),))
    orderflow_runs.probed_start({"POLL_INTERVAL_S": "0.1", "A": "b"}, tmp_path, {})(spec, 2)
    ((args, env),) = started
    assert args == ["-m", "bench.probe", "--host-id", "h1", "--roles", "all", "--api-port", "8123"]
    assert env["POLL_INTERVAL_S"] == "0.3" and env["A"] == "b"
    assert env[FILE_ENV] == str(tmp_path / "devhost-1.2.counts.json")
    assert spec.arguments() == args[2:]
