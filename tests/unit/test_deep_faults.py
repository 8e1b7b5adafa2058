"""The deeper faults of the chaos run: outage windows from the seed, the scheduler that runs them, the
skewed host, long handlers counted at the queue seam, and the report's new counts (demo.chaos.outages,
demo.chaos.faults, demo.chaos.run)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from demo import fleet as fleet_module
from demo.chaos import outages
from demo.chaos.config import check_chaos_args
from demo.chaos.delivery import DeliveryFault, DeliveryFaults, FaultLog, FaultyQueueFactory
from demo.chaos.faults import (
    CHAOS_SETTINGS,
    LONG_CALL_S,
    SKEW_S,
    count_alerts,
    draw_skewed_host,
    long_handler_faults,
)
from demo.chaos.outages import (
    DEPENDENCY_WINDOW_S,
    EMULATOR_OUTAGE_EXTRA_S,
    SLOT_MARGIN_S,
    OutageKind,
    OutageScheduler,
    OutageWindow,
    plan_window,
    slot_length_s,
)
from demo.chaos.report import unexercised, unexercised_hints
from demo.config import DEMO_SETTINGS
from demo.faults import FaultPlan
from demo.fleet import Child, DevhostSpec, Fleet, Killer
from demo.outcome import attempt_overlaps
from demo.system import _submit_some
from devhost.__main__ import CLOCK_OFFSET_ENV, host_clock
from orderflow.clock import OffsetClock
from orderflow.errors import TransientError
from orderflow.queues.memory import InMemoryQueueFactory
from orderflow.records import AttemptEntry, RetryBudget, StateRecord
from orderflow.settings import Settings

pytestmark = pytest.mark.unit

KINDS = tuple(OutageKind)
STEP_S = 5.0
T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def windows(seed: int, slots: int, *, every_s: float = 45.0) -> list[OutageWindow]:
    return [
        plan_window(
            seed,
            slot,
            every_s=every_s,
            step_timeout_s=STEP_S,
            kinds=KINDS,
            services=("inventory", "payments", "shipping"),
        )
        for slot in range(slots)
    ]


# --- outage windows ------------------------------------------------------------------------------------


def test_windows_are_a_function_of_the_seed() -> None:
    assert windows(11, 9) == windows(11, 9)
    assert windows(11, 9) != windows(12, 9)


def test_every_kind_comes_once_in_each_round_of_slots() -> None:
    plan = windows(20261129, 9)

    for round_start in (0, 3, 6):
        assert {w.kind for w in plan[round_start : round_start + 3]} == set(KINDS)
    # The rounds repeat one order drawn from the seed.
    assert [w.kind for w in plan[:3]] == [w.kind for w in plan[3:6]] == [w.kind for w in plan[6:9]]


def test_emulator_outages_outlast_a_step_deadline_and_are_bounded() -> None:
    plan = [w for w in windows(3, 60) if w.kind is not OutageKind.DEPENDENCY]

    assert plan
    for window in plan:
        assert STEP_S + EMULATOR_OUTAGE_EXTRA_S[0] <= window.duration_s <= STEP_S + EMULATOR_OUTAGE_EXTRA_S[1]
        assert window.service == ""


def test_dependency_windows_take_one_service_down_for_a_bounded_window() -> None:
    plan = [w for w in windows(3, 60) if w.kind is OutageKind.DEPENDENCY]

    assert {w.service for w in plan} == {"inventory", "payments", "shipping"}
    assert all(DEPENDENCY_WINDOW_S[0] <= w.duration_s <= DEPENDENCY_WINDOW_S[1] for w in plan)


def test_a_slot_fits_the_longest_window_of_the_kinds_asked_for() -> None:
    assert slot_length_s(10.0, STEP_S) == DEPENDENCY_WINDOW_S[1] + 2 * SLOT_MARGIN_S
    emulators_only = [OutageKind.STORE, OutageKind.QUEUE]
    assert (
        slot_length_s(10.0, STEP_S, emulators_only) == STEP_S + EMULATOR_OUTAGE_EXTRA_S[1] + 2 * SLOT_MARGIN_S
    )
    assert slot_length_s(60.0, STEP_S, emulators_only) == 60.0


@pytest.mark.parametrize("every_s", [45.0, 10.0])
def test_windows_stay_inside_their_slot_and_never_overlap(every_s: float) -> None:
    slot_s = slot_length_s(every_s, STEP_S)
    plan = windows(5, 30, every_s=every_s)

    assert slot_s >= every_s
    for slot, window in enumerate(plan):
        assert window.start_s >= slot * slot_s + SLOT_MARGIN_S - 1e-6
        assert window.start_s + window.duration_s <= (slot + 1) * slot_s - SLOT_MARGIN_S + 1e-3
    for earlier, later in pairwise(plan):
        assert earlier.start_s + earlier.duration_s < later.start_s


def test_a_plan_without_kinds_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one kind"):
        plan_window(1, 0, every_s=45, step_timeout_s=STEP_S, kinds=(), services=())


def test_the_scheduler_runs_each_window_ends_it_and_counts_it_by_kind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Windows of 0.05 s in slots of 0.07 s: two of them in well under a second.
    monkeypatch.setattr(outages, "EMULATOR_OUTAGE_EXTRA_S", (0.05, 0.05))
    monkeypatch.setattr(outages, "DEPENDENCY_WINDOW_S", (0.05, 0.05))
    monkeypatch.setattr(outages, "SLOT_MARGIN_S", 0.01)
    events: list[str] = []
    done = threading.Event()

    def outage(kind: str) -> Callable[[OutageWindow], Callable[[], None]]:
        def start(window: OutageWindow) -> Callable[[], None]:
            events.append(f"start {kind}")

            def end() -> None:
                events.append(f"end {kind}")
                if len(events) >= 4:
                    done.set()

            return end

        return start

    scheduler = OutageScheduler(
        {OutageKind.STORE: outage("store"), OutageKind.QUEUE: outage("queue")},
        seed=1,
        every_s=0.0,
        step_timeout_s=0.0,
    )
    scheduler.start()
    assert done.wait(10.0)
    scheduler.stop()

    assert events[:4] in (
        ["start store", "end store", "start queue", "end queue"],
        ["start queue", "end queue", "start store", "end store"],
    )
    counts = scheduler.counts()
    assert counts["store_outages"] >= 1 and counts["queue_outages"] >= 1
    assert counts["dependency_windows"] == 0
    assert all(entry["ended_after_s"] >= entry["duration_s"] for entry in scheduler.windows if entry["whole"])


def test_stopping_the_scheduler_ends_the_outage_under_way_and_does_not_count_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(outages, "SLOT_MARGIN_S", 0.0)  # the first window starts at once
    started = threading.Event()
    ended: list[float] = []

    def start(_window: OutageWindow) -> Callable[[], None]:
        started.set()
        return lambda: ended.append(time.monotonic())

    scheduler = OutageScheduler({OutageKind.STORE: start}, seed=2, every_s=0.0, step_timeout_s=60.0)
    scheduler.start()
    # The window (over 60 s) fills its slot, so it starts at the slot's start.
    assert started.wait(5.0)
    stopped_at = time.monotonic()
    scheduler.stop()

    assert len(ended) == 1 and ended[0] - stopped_at < 5.0
    assert scheduler.counts() == {"store_outages": 0, "queue_outages": 0, "dependency_windows": 0}
    assert [entry["whole"] for entry in scheduler.windows] == [False]


def test_an_outage_that_cannot_start_is_skipped_and_the_scheduler_goes_on() -> None:
    calls: list[str] = []

    def broken(_window: OutageWindow) -> Callable[[], None]:
        calls.append("tried")
        raise RuntimeError("the services refused the plan")

    scheduler = OutageScheduler({OutageKind.DEPENDENCY: broken}, seed=3, every_s=0.0, step_timeout_s=0.0)
    scheduler._run_window(OutageWindow(OutageKind.DEPENDENCY, 0.0, 0.01, "payments"))

    assert calls == ["tried"]
    assert scheduler.windows == []


# --- the skewed host and the chaos cadences --------------------------------------------------------------


def test_the_skewed_host_is_a_drawn_supervisor_ahead_or_behind_by_tens_of_seconds() -> None:
    drawn = [draw_skewed_host(seed, ["devhost-1", "devhost-2"]) for seed in range(40)]

    assert {h.process for h in drawn} == {"devhost-1", "devhost-2"}
    assert all(SKEW_S[0] <= abs(h.offset_s) <= SKEW_S[1] for h in drawn)
    assert {h.offset_s > 0 for h in drawn} == {True, False}
    assert draw_skewed_host(7, ["devhost-2", "devhost-1"]) == draw_skewed_host(7, ["devhost-1", "devhost-2"])
    with pytest.raises(ValueError, match="a process to skew"):
        draw_skewed_host(1, [])


def test_a_devhost_clock_runs_off_by_the_offset_its_environment_gives() -> None:
    clock = host_clock({CLOCK_OFFSET_ENV: "0.75"})

    assert isinstance(clock, OffsetClock)
    drift = (clock.now() - datetime.now(UTC)).total_seconds()
    assert 0.7 < drift < 0.8
    assert not isinstance(host_clock({CLOCK_OFFSET_ENV: " "}), OffsetClock)
    for bad in ("soon", "nan", "inf"):
        with pytest.raises(ValueError, match=f"{CLOCK_OFFSET_ENV}='{bad}' is not valid"):
            host_clock({CLOCK_OFFSET_ENV: bad})


def test_the_chaos_cadences_make_a_long_call_outlast_the_lock_but_not_the_call_or_the_step() -> None:
    settings = Settings.load(env={**DEMO_SETTINGS, **CHAOS_SETTINGS})

    assert (
        settings.consumers.QUEUE_LOCK_S
        < LONG_CALL_S
        < settings.agents.AGENT_CALL_TIMEOUT_S
        <= settings.steps.STEP_TIMEOUT_S
    )
    assert settings.connections.QUEUE_READ_TIMEOUT_S < settings.consumers.QUEUE_LOCK_S / 2
    plan = long_handler_faults(FaultPlan(transient_rate=0.1, latency_rate=0.05, latency_s=0.3), 0.02)
    assert (plan.latency_rate, plan.latency_s, plan.transient_rate) == (0.02, LONG_CALL_S, 0.1)
    unchanged = FaultPlan(latency_rate=0.05)
    assert long_handler_faults(unchanged, 0.0) is unchanged


# --- long handlers at the queue seam ----------------------------------------------------------------------


def test_a_completed_message_whose_lock_was_renewed_counts_as_one_long_handler() -> None:
    log = FaultLog()
    queues = FaultyQueueFactory(InMemoryQueueFactory(), DeliveryFaults(long_handlers=True), log)
    queue = queues.queue("agent-requests-payments")
    for n in range(3):
        queue.send(f"body {n}", message_id=f"m{n}")
    renewed, short, abandoned = queue.receive(max_messages=3, lock_s=3.0)

    queue.renew_lock(renewed, lock_s=3.0)
    queue.renew_lock(renewed, lock_s=3.0)
    queue.complete(renewed)
    queue.complete(short)
    queue.renew_lock(abandoned, lock_s=3.0)
    queue.abandon(abandoned)
    again = queue.receive(max_messages=1, lock_s=3.0)
    queue.complete(again[0])

    assert log.counts == {DeliveryFault.LONG_HANDLER.value: 1}


def test_renewals_are_not_counted_unless_the_plan_asks() -> None:
    log = FaultLog()
    queues = FaultyQueueFactory(InMemoryQueueFactory(), DeliveryFaults(duplicate_share=0.0), log)
    queue = queues.queue("replies-a")
    queue.send("body", message_id="m")
    (message,) = queue.receive(max_messages=1, lock_s=3.0)
    queue.renew_lock(message, lock_s=3.0)
    queue.complete(message)

    assert log.counts == {}
    assert DeliveryFaults(long_handlers=True).active and not DeliveryFaults().active


# --- the report's counts and hints ------------------------------------------------------------------------

ASKED: dict[str, Any] = {
    "kill_every_s": 5.0,
    "duplicate_share": 0.05,
    "late_share": 0.03,
    "pause_every_s": 30.0,
    "outage_every_s": 45.0,
    "long_share": 0.03,
    "skew": True,
}
HAPPENED = {
    "orders": 120,
    "kills": 20,
    "duplicates_delivered": 9,
    "late_responses": 4,
    "leader_pauses": 2,
    "store_outages": 1,
    "queue_outages": 1,
    "dependency_windows": 1,
    "skewed_hosts": 1,
    "long_handlers": 5,
}


def test_each_new_fault_that_did_not_happen_is_unexercised_when_asked_for() -> None:
    assert unexercised(HAPPENED, **ASKED) == []
    quiet = {**HAPPENED, "store_outages": 0, "dependency_windows": 0, "long_handlers": 0, "skewed_hosts": 0}

    assert unexercised(quiet, **ASKED) == [
        "store_outages",
        "dependency_windows",
        "skewed_hosts",
        "long_handlers",
    ]
    not_asked = {**ASKED, "outage_every_s": 0.0, "long_share": 0.0, "skew": False}
    assert unexercised(quiet, **not_asked) == []
    # A run that asks for some kinds of outage only is not faulted for the others.
    no_store = {**HAPPENED, "store_outages": 0}
    assert unexercised(no_store, **{**ASKED, "outage_kinds": ["queue_outages", "dependency_windows"]}) == []
    assert unexercised(no_store, **ASKED) == ["store_outages"]


def test_outage_kinds_a_run_cannot_have_are_refused_before_it_starts() -> None:
    args: dict[str, Any] = {
        "orders": 10,
        "processes": 3,
        "clients": 1,
        "timeout_s": None,
        **{key: value for key, value in ASKED.items() if key != "skew"},
    }
    check_chaos_args(**args, outage_kinds=["store_outages"])
    with pytest.raises(ValueError, match=r"outage kinds must be some of store_outages, .*; not disk_outages"):
        check_chaos_args(**args, outage_kinds=["store_outages", "disk_outages"])
    with pytest.raises(ValueError, match="--long-share \\(LONG_SHARE\\) must be a share between 0 and 1"):
        check_chaos_args(**{**args, "long_share": 1.5})
    with pytest.raises(ValueError, match="--outage-every \\(OUTAGE_EVERY\\) must be seconds"):
        check_chaos_args(**{**args, "outage_every_s": -1.0})


def test_each_unexercised_new_fault_names_the_argument_to_change() -> None:
    hints = unexercised_hints(
        ["queue_outages", "dependency_windows", "long_handlers", "skewed_hosts"], **ASKED
    )

    assert "no queue outage ran to its end" in hints[0] and "--outage-every (OUTAGE_EVERY) 45 s" in hints[0]
    assert "OUTAGE_EVERY=0 to run without outages" in hints[0]
    assert "no dependency window ran to its end" in hints[1]
    assert "--long-share (LONG_SHARE) 0.03" in hints[2] and "LONG_SHARE=0" in hints[2]
    assert "--no-skew" in hints[3]


def test_clock_skew_alerts_are_counted_from_every_devhost_log(tmp_path: Path) -> None:
    (tmp_path / "devhost-1.log").write_text(
        "x ERROR orderflow.alerts ALERT clock_skew host=demo-1 offset_low_s=1.2\n"
        "x ERROR orderflow.alerts ALERT order_gave_up order_id=o1\n",
        encoding="utf-8",
    )
    (tmp_path / "devhost-1.2.log").write_text("ALERT clock_skew host=demo-1\n", encoding="utf-8")
    (tmp_path / "demo-services.log").write_text("ALERT clock_skew host=nobody\n", encoding="utf-8")

    assert count_alerts(tmp_path, "clock_skew") == 2
    assert count_alerts(tmp_path, "order_gave_up") == 1
    assert count_alerts(tmp_path / "missing", "clock_skew") == 0


def record_with_history(ended_after_s: float) -> StateRecord:
    """An order whose attempt 1 ended ``ended_after_s`` seconds after attempt 2 was claimed (at T0 + 10 s)."""
    return StateRecord(
        id="chaos-1:o1",
        order_id="chaos-1:o1",
        client_id="chaos-1",
        reply_to="replies-chaos-1",
        retry_budget=RetryBudget(limit=24),
        workflow_version="order-v2",
        attempt=2,
        attempt_history=[
            AttemptEntry(
                attempt=1,
                instance_id="chaos-1:o1:1",
                claimed_at=T0,
                ended_at=T0 + timedelta(seconds=10 + ended_after_s),
            ),
            AttemptEntry(attempt=2, instance_id="chaos-1:o1:2", claimed_at=T0 + timedelta(seconds=10)),
        ],
        created_at=T0,
        updated_at=T0,
    )


def test_stamps_off_by_the_slack_are_allowed_for_but_an_overlap_beyond_it_is_not() -> None:
    # The attempt ended 0.5 s "after" the next claim, by stamps that may be up to 0.9 s off.
    records = {"o1": record_with_history(0.5)}

    assert attempt_overlaps(records, {}) == {
        "o1": "attempt 1 still owned the record when attempt 2 was claimed"
    }
    assert attempt_overlaps(records, {}, clock_slack_s=0.9) == {}
    assert attempt_overlaps({"o1": record_with_history(1.5)}, {}, clock_slack_s=0.9) != {}
    late_call = {
        "k": {
            "orderId": "chaos-1:o1",
            "received": [{"instance": "chaos-1:o1:1", "at": "2026-11-29T12:00:10.600Z"}],
        }
    }
    assert attempt_overlaps({"o1": record_with_history(0.0)}, late_call, clock_slack_s=0.9) == {}
    assert attempt_overlaps({"o1": record_with_history(0.0)}, late_call) != {}


# --- the driver under outages -------------------------------------------------------------------------------


class FlakyClient:
    """A client whose queue refuses every send after the first ``ok`` ones."""

    def __init__(self, name: str, ok: int) -> None:
        self.reply_queue = f"replies-{name}"
        self.ok = ok
        self.sent: list[str] = []

    def submit(self, submission: dict[str, str]) -> str:
        if len(self.sent) >= self.ok:
            raise TransientError("the queue is down")
        self.sent.append(submission["orderId"])
        return submission["orderId"]


class Order:
    def __init__(self, order_id: str) -> None:
        self.order_id = order_id

    def to_submission(self, reply_queue: str) -> dict[str, str]:
        return {"orderId": self.order_id, "replyTo": reply_queue}


def test_a_submission_the_queue_refuses_stays_first_and_is_sent_next_tick() -> None:
    client = FlakyClient("a", ok=2)
    pending = [Order(f"o{n}") for n in range(5)]
    owners: dict[str, str] = {}

    sent = _submit_some([client], pending, owners, room=10)  # type: ignore[list-item, arg-type]

    assert sent == 2
    assert [o.order_id for o in pending] == ["o2", "o3", "o4"]
    assert owners == {"o0": "replies-a", "o1": "replies-a"}
    client.ok = 10  # the queue is back
    assert _submit_some([client], pending, owners, room=2) == 2  # type: ignore[list-item, arg-type]
    assert [o.order_id for o in pending] == ["o4"]
    assert client.sent == ["o0", "o1", "o2", "o3"]


# --- restarts during an outage ------------------------------------------------------------------------------


def test_a_process_whose_restart_fails_during_an_outage_is_started_again_until_it_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(fleet_module, "RESTART_RETRY_S", 0.01)
    starts: list[int] = []
    sleepers: list[subprocess.Popen[str]] = []

    def start(spec: DevhostSpec, run: int) -> Child:
        starts.append(run)
        if run in (2, 3):  # the store is down: the process exits during its start-up
            raise RuntimeError(f"{spec.name} exited with 1")
        sleepers.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], text=True))
        return Child(spec.name, sleepers[-1], "", Path("/dev/null"))

    fleet = Fleet([DevhostSpec("p1", "h1", "all")], {}, Path("/dev/null"), start=start)
    killer = Killer(fleet, 0.05, seed=1)
    try:
        killer.start()
        deadline = time.monotonic() + 10
        while len(starts) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        killer.stop()
        # Killed once, its restart failed twice, the third start ran it; kills went on from there.
        assert starts[:4] == [1, 2, 3, 4]
        assert fleet.children["p1"].process.poll() is None
        assert killer.kills[0]["process"] == "p1"
    finally:
        fleet.stop()
        for sleeper in sleepers:
            sleeper.kill()
            sleeper.wait()
