"""The chaos run's pure parts: delivery faults at the queue seam, and the report's counts (demo.chaos.run)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from demo.chaos import run as chaos
from demo.chaos.config import check_chaos_args
from demo.chaos.delivery import (
    CHAOS_ENV,
    DeliveryFault,
    DeliveryFaults,
    FaultLog,
    FaultyQueueFactory,
    agent_responses,
    read_fault_logs,
    with_delivery_faults,
)
from demo.chaos.leader import LeaderPauser
from demo.chaos.report import (
    CHAOS_INVARIANTS,
    WORKFLOW_BEHAVIOURS,
    count_misrouted_replies,
    failed_invariants,
    max_recovery_s,
    recovery_times_s,
    unexercised,
    unexercised_hints,
)
from demo.fleet import Child, DevhostSpec, Fleet
from orderflow.messages import AgentOutcome, AgentResponse, bounded_message_id
from orderflow.queues.memory import InMemoryQueueFactory
from orderflow.records import AttemptEntry, RetryBudget, StateRecord
from orderflow.settings import Settings
from tests.unit.fakes import received
from tests.unit.stop_signals import error_line, guarded

pytestmark = pytest.mark.unit

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
RESPONSES = "agent-responses-h1"


class Ticks:
    """A monotonic clock for the in-memory queues that moves only when told to."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def faulty(
    share: float = 0.0, *, late: float = 0.0, seed: int = 7, log: FaultLog | None = None
) -> tuple[FaultyQueueFactory, InMemoryQueueFactory, Ticks]:
    ticks = Ticks()
    inner = InMemoryQueueFactory(clock=ticks)
    plan = DeliveryFaults(duplicate_share=share, late_share=late, seed=seed)
    wrapped = FaultyQueueFactory(
        inner, plan, log or FaultLog(), late_for=agent_responses(Settings.load({})), late_delay_s=9.0
    )
    return wrapped, inner, ticks


# --- duplicated deliveries ------------------------------------------------------------------------------


def test_a_drawn_share_of_sends_arrives_twice_with_the_same_id_and_body_and_each_copy_is_counted() -> None:
    queues, inner, _ = faulty(0.1)
    for n in range(2000):
        queues.queue("orders").send(f"body-{n}", message_id=f"o-{n}:submit", correlation_id=f"o-{n}")

    delivered = received(inner.queue("orders"))
    copies: dict[str, list[str]] = {}
    for message in delivered:
        copies.setdefault(message.message_id, []).append(message.body)
    twice = {mid: bodies for mid, bodies in copies.items() if len(bodies) == 2}
    assert len(copies) == 2000 and all(len(bodies) <= 2 for bodies in copies.values())
    assert 150 <= len(twice) <= 250  # a share of 0.1 of 2000, from a fixed seed
    assert all(bodies == [f"body-{mid[2:-7]}"] * 2 for mid, bodies in twice.items())
    assert queues.log.counts == {"duplicate": len(twice)}
    assert len(delivered) == 2000 + len(twice)


def test_the_draw_is_a_function_of_seed_queue_and_message_id() -> None:
    plan = DeliveryFaults(duplicate_share=0.5, seed=1)
    ids = [f"m-{n}" for n in range(200)]
    drawn = {m for m in ids if plan.hits(DeliveryFault.DUPLICATE, "q", m)}
    assert drawn == {m for m in ids if plan.hits(DeliveryFault.DUPLICATE, "q", m)}  # reproducible
    assert drawn != {m for m in ids if plan.hits(DeliveryFault.DUPLICATE, "other", m)}
    reseeded = plan.model_copy(update={"seed": 2})
    assert drawn != {m for m in ids if reseeded.hits(DeliveryFault.DUPLICATE, "q", m)}
    off = plan.model_copy(update={"duplicate_share": 0.0})
    assert not any(off.hits(DeliveryFault.DUPLICATE, "q", m) for m in ids)


def test_no_share_changes_nothing() -> None:
    queues, inner, _ = faulty(0.0)
    for n in range(100):
        queues.queue(RESPONSES).send("{}", message_id=f"o-{n}:1:reserve:response")
    assert len(received(inner.queue(RESPONSES))) == 100
    assert queues.log.counts == {}


# --- late agent responses -------------------------------------------------------------------------------


def test_late_agent_responses_stay_invisible_for_the_delay_and_only_they_are_delayed() -> None:
    queues, inner, ticks = faulty(late=0.25)
    ids = [f"o-{n}:1:reserve_inventory:response" for n in range(400)]
    for message_id in ids:
        queues.queue(RESPONSES).send("{}", message_id=message_id)
    # Not agent responses: a review decision on a response queue, a response id on another queue.
    for n in range(100):
        queues.queue(RESPONSES).send("{}", message_id=f"o-{n}:review:approve:abcd")
        queues.queue("client-a").send("{}", message_id=f"o-{n}:1:reserve_inventory:response")

    on_time = received(inner.queue(RESPONSES))
    late = queues.log.counts["late"]
    assert 70 <= late <= 130  # a share of 0.25 of 400
    assert len(on_time) == 400 - late + 100
    assert len(received(inner.queue("client-a"))) == 100

    ticks.now = 8.9  # just before the delay
    assert received(inner.queue(RESPONSES)) == []
    ticks.now = 9.0
    delayed = received(inner.queue(RESPONSES))
    assert len(delayed) == late
    assert {m.message_id for m in delayed} | {m.message_id for m in on_time} >= set(ids)
    assert all(m.message_id.endswith(":response") for m in delayed)


def test_a_late_response_drawn_as_a_duplicate_arrives_late_twice() -> None:
    queues, inner, ticks = faulty(1.0, late=1.0)
    queues.queue(RESPONSES).send("{}", message_id="o-1:1:ship:response")
    assert received(inner.queue(RESPONSES)) == []
    ticks.now = 9.0
    assert [m.message_id for m in received(inner.queue(RESPONSES))] == ["o-1:1:ship:response"] * 2
    assert queues.log.counts == {"late": 1, "duplicate": 1}


def test_agent_responses_are_those_on_a_response_queue_under_a_response_id() -> None:
    is_response = agent_responses(Settings.load({}))
    assert is_response("agent-responses", "o-1:2:charge_payment:response", "{}")
    assert is_response("agent-responses-demo-1", "o-1:2:charge_payment:response", "{}")
    assert not is_response("agent-responses-demo-1", "o-1:review:approve:1234", "{}")
    assert not is_response("agent-payment", "o-1:2:charge_payment:response", "{}")
    assert not is_response("agent-responsesx", "o-1:2:charge_payment:response", "{}")


def test_an_agent_response_whose_id_was_hashed_is_known_by_its_body() -> None:
    is_response = agent_responses(Settings.load({}))
    order_id = f"a:{'o' * 120}"
    request_id = f"{order_id}:1:charge_payment"
    response = AgentResponse(
        request_id=request_id,
        event_id=f"{request_id}:response",
        event_name="charge_payment:response",
        order_id=order_id,
        instance_id=f"{order_id}:1",
        step="charge_payment",
        outcome=AgentOutcome.SUCCEEDED,
        completed_at=datetime(2026, 12, 7, tzinfo=UTC),
    )
    message_id = bounded_message_id(response.event_id)
    assert not message_id.endswith(":response")  # hashed: the suffix is gone
    assert is_response("agent-responses", message_id, response.to_json())
    assert not is_response("agent-payment", message_id, response.to_json())
    assert not is_response("agent-responses", message_id, '{"not": "a response"}')


# --- counting that survives a SIGKILL ---------------------------------------------------------------------


def test_fault_logs_are_one_line_per_fault_and_read_back_across_processes(tmp_path: Path) -> None:
    one = FaultLog(tmp_path / "faults" / "h1-100.jsonl")
    two = FaultLog(tmp_path / "faults" / "h2-200.jsonl")
    one.record(DeliveryFault.DUPLICATE, "orders", "o-1:submit")
    one.record(DeliveryFault.LATE, RESPONSES, "o-1:1:ship:response")
    two.record(DeliveryFault.DUPLICATE, "client-a", "o-1:Processed")
    # A process killed in the middle of a line leaves it cut short: it is not counted.
    with (tmp_path / "faults" / "h2-200.jsonl").open("a", encoding="utf-8") as out:
        out.write('{"fault": "dupl')

    line = json.loads((tmp_path / "faults" / "h1-100.jsonl").read_text(encoding="utf-8").splitlines()[0])
    assert (line["fault"], line["queue"], line["messageId"]) == ("duplicate", "orders", "o-1:submit")
    assert read_fault_logs(tmp_path / "faults") == {"duplicate": 2, "late": 1}
    assert read_fault_logs(tmp_path / "missing") == {}


def test_a_devhost_wraps_its_queues_only_when_the_environment_asks(tmp_path: Path) -> None:
    inner = InMemoryQueueFactory()
    settings = Settings.load({}, HOST_ID="h1", STEP_TIMEOUT_S=4)
    assert with_delivery_faults(inner, settings, env={}) is inner
    assert with_delivery_faults(inner, settings, env={CHAOS_ENV: DeliveryFaults().model_dump_json()}) is inner

    plan = DeliveryFaults(duplicate_share=1.0, seed=3, log_dir=str(tmp_path))
    wrapped = with_delivery_faults(inner, settings, env={CHAOS_ENV: plan.model_dump_json()})
    assert isinstance(wrapped, FaultyQueueFactory) and wrapped.faults == plan
    wrapped.queue("orders").send("{}", message_id="o-1:submit")
    assert len(received(inner.queue("orders"))) == 2
    [log] = tmp_path.glob("h1-*.jsonl")  # one file per process: host id and pid
    assert read_fault_logs(tmp_path) == {"duplicate": 1}
    assert log.name.startswith("h1-")
    with pytest.raises(ValueError):
        DeliveryFaults.from_env({CHAOS_ENV: '{"duplicate_share": 2}'})


# --- the report -------------------------------------------------------------------------------------------


def test_misrouted_replies_are_replies_for_another_clients_order_or_an_unknown_one() -> None:
    owners = {"o-1": "client-a", "o-2": "client-a", "o-3": "client-b"}
    received_by = {
        "client-a": {"o-1": 2, "o-2": 1},  # its own orders
        "client-b": {"o-3": 2, "o-1": 1, "o-9": 3},  # one of client-a's, and three for an unknown order
        "client-c": {},
    }
    assert count_misrouted_replies(received_by, owners) == 4
    assert count_misrouted_replies({"client-a": {"o-1": 1}, "client-b": {"o-3": 1}}, owners) == 0


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def record(order_id: str, *history: AttemptEntry) -> StateRecord:
    return StateRecord(
        id=order_id,
        order_id=order_id,
        client_id="a",
        reply_to="client-a",
        retry_budget=RetryBudget(limit=24),
        workflow_version="order-v2",
        attempt=len(history),
        attempt_history=list(history),
        created_at=T0,
        updated_at=T0,
    )


def tenure(
    attempt: int, claimed: float, ended: float | None, expired: float | None, outcome: str | None
) -> AttemptEntry:
    return AttemptEntry(
        attempt=attempt,
        instance_id=f"o:{attempt}",
        claimed_at=at(claimed),
        ended_at=None if ended is None else at(ended),
        outcome=outcome,
        expired_complete_by=None if expired is None else at(expired),
    )


def test_recovery_time_runs_from_the_expired_deadline_to_the_next_claim() -> None:
    records = [
        # Deadline at 8 s, recovered at 9.5 s, claimed again at 11 s; then processed.
        record("a", tenure(1, 0, 9.5, 8, "recovered"), tenure(2, 11, 15, None, "Processed")),
        # Two recoveries: 3.0 s, then 12.25 s (an extended backoff); the last attempt compensates.
        record(
            "b",
            tenure(2, 8, 30, 27, "recovered"),
            tenure(1, 0, 6, 5, "recovered"),  # history order does not matter: attempts do
            tenure(3, 39.25, 45, 40, "gave_up"),
            tenure(4, 45.5, None, None, None),
        ),
        # Recovered, but no next attempt yet: nothing to measure.
        record("c", tenure(1, 0, 9, 8, "recovered")),
        # Processed at once.
        record("d", tenure(1, 0, 3, None, "Processed")),
    ]
    assert recovery_times_s(records) == [3.0, 3.0, 12.25, 5.5]
    assert max_recovery_s(records) == 12.25
    assert max_recovery_s([records[3]]) == 0.0


def test_records_written_before_deadlines_were_kept_parse_and_measure_nothing() -> None:
    stored = record("a", tenure(1, 0, 9.5, None, "recovered"), tenure(2, 11, None, None, None)).to_json_dict()
    for entry in stored["attemptHistory"]:
        del entry["expiredCompleteBy"]  # what an older supervisor wrote

    parsed = StateRecord.from_stored(stored)
    assert parsed.attempt_history[0].expired_complete_by is None
    assert parsed.attempt_history[0].outcome == "recovered"
    assert recovery_times_s([parsed]) == []


def test_failed_invariants_names_each_non_zero_one_and_a_missing_one() -> None:
    passing = dict.fromkeys(CHAOS_INVARIANTS, 0)
    assert failed_invariants(passing) == []
    assert failed_invariants({**passing, "misrouted_replies": 2, "timed_out": 1}) == [
        "timed_out",
        "misrouted_replies",
    ]
    assert failed_invariants({k: v for k, v in passing.items() if k != "mismatched"}) == ["mismatched"]
    assert {"not_terminal", "duplicate_effects", "uncompensated_effects", "overlapping_attempts"} <= set(
        CHAOS_INVARIANTS
    )


def test_a_run_whose_chaos_never_happened_fails() -> None:
    passing = dict.fromkeys(CHAOS_INVARIANTS, 0)
    happened = {"orders": 60, "kills": 3, "duplicates_delivered": 9, "late_responses": 2, "leader_pauses": 1}
    asked: dict[str, Any] = {
        "kill_every_s": 15.0,
        "duplicate_share": 0.05,
        "late_share": 0.05,
        "pause_every_s": 30.0,
    }

    assert unexercised(happened, **asked) == []
    quiet = {**happened, "kills": 0, "leader_pauses": 0}
    assert unexercised(quiet, **asked) == ["kills", "leader_pauses"]
    # What was not asked for need not happen; no orders at all is never a run.
    assert unexercised(quiet, **{**asked, "kill_every_s": 0, "pause_every_s": 0}) == []
    assert unexercised({**happened, "orders": 0}, **asked) == ["orders"]
    assert failed_invariants({**passing, "unexercised": ["kills"]}) == ["no kills"]


def test_a_run_whose_workflow_never_expired_or_reacquired_a_hold_fails() -> None:
    asked: dict[str, Any] = {"kill_every_s": 0, "duplicate_share": 0, "late_share": 0, "pause_every_s": 0}
    shown = {"orders": 60, "reviewed": 3, "holds_acquired": 120, "holds_expired": 4, "holds_reacquired": 2}
    happened = {**shown, "holds_committed": 110}

    assert unexercised(happened, **asked, behaviours=WORKFLOW_BEHAVIOURS) == []
    no_expiry = {**happened, "holds_expired": 0, "holds_reacquired": 0}
    assert unexercised(no_expiry, **asked, behaviours=WORKFLOW_BEHAVIOURS) == [
        "holds_expired",
        "holds_reacquired",
    ]
    assert unexercised({**happened, "reviewed": 0}, **asked, behaviours=WORKFLOW_BEHAVIOURS) == ["reviewed"]
    # Only the behaviours asked for are checked.
    assert unexercised(no_expiry, **asked) == []
    hints = unexercised_hints(["holds_expired"], **asked)
    assert len(hints) == 1 and "CHAOS_HOLD_S" in hints[0]


# --- pausing the leader ----------------------------------------------------------------------------------


@dataclass
class FakeFleet:
    """Processes by name with their current pid; records what was paused and resumed."""

    pids: dict[str, int]
    events: list[str] = field(default_factory=list)
    resumed: threading.Event = field(default_factory=threading.Event)

    @property
    def specs(self) -> Mapping[str, DevhostSpec]:
        return {name: DevhostSpec(name, f"host-{name}", "all") for name in self.pids}

    def pause(self, name: str, pid: int) -> bool:
        if self.pids.get(name) != pid:
            self.events.append(f"skip {name}:{pid}")
            return False
        self.events.append(f"pause {name}")
        return True

    def resume(self, name: str) -> None:
        self.events.append(f"resume {name}")
        self.resumed.set()


def test_the_pauser_pauses_the_lease_holder_and_records_who_took_over() -> None:
    fleet = FakeFleet({"p1": 101, "p2": 102})
    holders = iter(
        [
            {"host": "host-p1", "pid": "99"},  # a killed process still named on the blob: not paused
            None,  # between holders
            {"host": "host-p1", "pid": "101"},  # the leader: paused
            {"host": "host-p2", "pid": "102"},  # read during the pause: p2 took over
        ]
    )
    pauser = LeaderPauser(fleet, lambda: next(holders, None), every_s=0.01, pause_s=0.01, retry_s=0.01)
    pauser.start()
    assert fleet.resumed.wait(10)
    pauser.stop()

    assert fleet.events[:3] == ["skip p1:99", "pause p1", "resume p1"]
    assert [(p["process"], p["pid"], p["taken_over_by"]) for p in pauser.pauses][:1] == [("p1", 101, "p2")]


def test_a_paused_process_is_spared_by_the_killer_and_resumed_before_the_fleet_stops() -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], text=True)
    fleet = Fleet(
        [DevhostSpec("p1", "h1", "all")],
        {},
        Path("/dev/null"),
        start=lambda spec, _run: Child(spec.name, sleeper, "", Path("/dev/null")),
    )
    try:
        assert not fleet.pause("p1", sleeper.pid + 1)  # not its current process
        assert fleet.pause("p1", sleeper.pid)
        assert fleet.killable() == []
        assert fleet.kill_and_restart("p1") is False
        assert _settled_state(sleeper.pid, until=lambda s: s == "T") == "T"
        fleet.resume("p1")
        assert fleet.killable() == ["p1"]
        assert _settled_state(sleeper.pid, until=lambda s: s != "T") in {"S", "R"}
    finally:
        fleet.children["p1"].kill()


def test_a_paused_child_wakes_on_resume_and_a_reaped_one_is_left_alone() -> None:
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], text=True)
    child = Child("sleeper", process, "", Path("/dev/null"))
    try:
        assert child.pause()
        assert _settled_state(process.pid, until=lambda s: s == "T") == "T"  # stopped
        child.resume()
        assert _settled_state(process.pid, until=lambda s: s != "T") in {"S", "R"}
    finally:
        child.kill()
    assert not child.pause()
    child.resume()  # reaped: no signal is sent to a pid that may have been reused since
    assert process.returncode == -signal.SIGKILL


def _settled_state(pid: int, *, until: Callable[[str], bool]) -> str:
    """The process's state letter from /proc (``T`` stopped, ``S`` sleeping, ``R`` running), once ``until``
    holds or after a bounded wait for the signal to be delivered."""
    state = ""
    for _ in range(100):
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
        state = stat.rsplit(")", 1)[1].split()[0]
        if until(state):
            break
        time.sleep(0.02)
    return state


# --- the command: arguments checked up front, hints after a run too short for its chaos -------------------

DEFAULTS: dict[str, Any] = {
    "orders": 200,
    "processes": 3,
    "kill_every_s": 5.0,
    "duplicate_share": 0.05,
    "late_share": 0.03,
    "pause_every_s": 30.0,
    "clients": 3,
    "timeout_s": None,
}


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"processes": 1}, "need at least 3 --processes (PROCESSES)"),
        ({"processes": 2}, "with 2, pass --pause-every 0 (PAUSE_EVERY=0)"),
        ({"kill_every_s": -3.0}, "--kill-every (KILL_EVERY) must be seconds between kills, or 0 for none"),
        ({"pause_every_s": -1.0}, "--pause-every (PAUSE_EVERY) must be seconds between leader pauses"),
        ({"duplicate_share": 1.5}, "--duplicate-share (DUPLICATE_SHARE) must be a share between 0 and 1"),
        ({"late_share": -0.1}, "--late-share (LATE_SHARE) must be a share between 0 and 1"),
        ({"late_share": float("nan")}, "--late-share (LATE_SHARE) must be a share between 0 and 1"),
        ({"clients": 0}, "--clients (CLIENTS) must be at least 1, not 0"),
        ({"orders": 0}, "--orders (ORDERS) must be at least 1, not 0"),
        ({"processes": 0, "pause_every_s": 0.0}, "--processes (PROCESSES) must be at least 1, not 0"),
    ],
)
def test_chaos_that_cannot_happen_is_refused_before_the_run(changes: dict[str, Any], expected: str) -> None:
    with pytest.raises(ValueError) as raised:
        check_chaos_args(**{**DEFAULTS, **changes})
    assert expected in str(raised.value)
    assert "\n" not in str(raised.value)


def test_one_process_runs_chaos_without_leader_pauses() -> None:
    check_chaos_args(**{**DEFAULTS, "processes": 1, "pause_every_s": 0.0})
    check_chaos_args(**{**DEFAULTS, "processes": 3})


def test_each_unexercised_feature_names_the_argument_to_change() -> None:
    asked: dict[str, Any] = {
        "kill_every_s": 5.0,
        "duplicate_share": 0.05,
        "late_share": 0.03,
        "pause_every_s": 30.0,
    }

    hints = unexercised_hints(["leader_pauses", "kills"], **asked)

    assert len(hints) == 2
    assert "--pause-every (PAUSE_EVERY) 30 s" in hints[0]
    assert "PAUSE_EVERY=0 to run without leader pauses" in hints[0]
    assert "more --orders (ORDERS)" in hints[0]
    assert "--kill-every (KILL_EVERY) of 5 s" in hints[1] and "KILL_EVERY=0" in hints[1]
    assert unexercised_hints([], **asked) == []


@pytest.fixture
def chaos_runs(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    started: list[dict[str, Any]] = []

    def run_chaos(**kwargs: Any) -> dict[str, Any]:
        started.append(kwargs)
        return {**dict.fromkeys(CHAOS_INVARIANTS, 0), "unexercised": []}

    monkeypatch.setattr(chaos, "run_chaos", run_chaos)
    return started


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--processes", "1"], "error: leader pauses (--pause-every / PAUSE_EVERY) need at least 3"),
        (["--processes", "0"], "error: --processes (PROCESSES) must be at least 1, not 0"),
        (["--processes", "-1", "--pause-every", "0"], "error: --processes (PROCESSES) must be at least 1"),
        (["--kill-every", "-3"], "error: --kill-every (KILL_EVERY) must be seconds between kills"),
        (["--orders", "0"], "error: --orders (ORDERS) must be at least 1, not 0"),
    ],
)
def test_the_command_refuses_bad_arguments_in_one_line_with_status_2(
    chaos_runs: list[dict[str, Any]], args: list[str], expected: str
) -> None:
    result = CliRunner().invoke(chaos.app, args)

    assert result.exit_code == 2, result.output
    assert error_line(result).startswith(expected)
    assert chaos_runs == []


def test_the_command_runs_one_process_without_pauses(chaos_runs: list[dict[str, Any]]) -> None:
    result = CliRunner().invoke(chaos.app, ["--processes", "1", "--pause-every", "0", "--orders", "5"])

    assert result.exit_code == 0, result.output
    assert [(r["processes"], r["pause_every_s"], r["orders"]) for r in chaos_runs] == [(1, 0.0, 5)]


def test_sigterm_stops_a_chaos_run_through_its_clean_up(monkeypatch: pytest.MonkeyPatch) -> None:
    resumed: list[str] = []

    def run_chaos(**kwargs: Any) -> dict[str, Any]:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        finally:
            resumed.append("paused leader")  # the pauser's stop resumes it, then the fleet stops
        raise AssertionError("not interrupted")

    monkeypatch.setattr(chaos, "run_chaos", run_chaos)

    with guarded():
        result = CliRunner().invoke(chaos.app, ["--orders", "5"])

    assert result.exit_code == 143, result.output
    assert resumed == ["paused leader"]
    assert error_line(result).startswith("stopped by SIGTERM")
