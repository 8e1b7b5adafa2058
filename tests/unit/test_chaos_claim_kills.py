"""The chaos run's kills between an order's create and its claim (demo.chaos.claim_kills): which sends ask
for a kill, once per order, and how the driver acts on the requests."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from demo.chaos import claim_kills
from demo.chaos.claim_kills import ClaimKiller, KillPoint
from demo.chaos.delivery import CHAOS_ENV, DeliveryFaults, with_delivery_faults
from demo.chaos.report import unexercised
from orderflow.queues.memory import InMemoryQueueFactory
from orderflow.settings import Settings
from tests.unit.fakes import TEST_CLIENTS

pytestmark = pytest.mark.unit


def kill_point(markers: Path, drawn: bool = True) -> KillPoint:
    return KillPoint(frozenset({"client-a"}), lambda _queue, _id: drawn, markers, hold_s=0.0)


def requests(markers: Path) -> list[dict[str, Any]]:
    return [json.loads(path.read_text()) for path in sorted(markers.glob("*.json"))]


def test_a_drawn_orders_received_reply_asks_once_for_the_kill_of_its_process(tmp_path: Path) -> None:
    point = kill_point(tmp_path)

    point.after_send("client-a", "o-1:Received")
    point.after_send("client-a", "o-1:Received")  # the redelivery's reply: no second kill

    assert requests(tmp_path) == [{"pid": os.getpid(), "queue": "client-a", "messageId": "o-1:Received"}]
    assert [p.name for p in tmp_path.iterdir() if not p.name.endswith(".json")] == []  # no draft left


@pytest.mark.parametrize(
    ("queue", "message_id", "drawn"),
    [
        ("client-a", "o-1:Processed", True),  # another reply
        ("agent-inventory", "o-1:Received", True),  # not a reply queue
        ("client-a", "o-1:Received", False),  # not drawn
    ],
)
def test_any_other_send_asks_for_nothing(tmp_path: Path, queue: str, message_id: str, drawn: bool) -> None:
    kill_point(tmp_path, drawn).after_send(queue, message_id)

    assert requests(tmp_path) == []


def test_a_process_with_a_claim_kill_share_asks_after_the_received_reply(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    held: list[float] = []
    monkeypatch.setattr("demo.chaos.claim_kills.time.sleep", held.append)  # the hold, not waited for here
    faults = DeliveryFaults(claim_kill_share=1.0, seed=1, log_dir=str(tmp_path))
    settings = Settings.load({}, CLIENTS=TEST_CLIENTS, HOST_ID="h1")
    queues = with_delivery_faults(InMemoryQueueFactory(), settings, {CHAOS_ENV: faults.model_dump_json()})

    queues.queue("agent-inventory").send("{}", message_id="o-1:reserve_inventory")
    queues.queue("client-a").send("{}", message_id="o-1:Received")

    assert held == [claim_kills.HOLD_S]
    assert [r["messageId"] for r in requests(tmp_path / claim_kills.MARKERS)] == ["o-1:Received"]
    # Sent first: the client hears of its order whatever happens to the process.
    assert len(queues.queue("client-a").receive(max_messages=5, lock_s=5)) == 1


@dataclass
class FakeProcess:
    pid: int


@dataclass
class FakeChild:
    process: FakeProcess


@dataclass
class FakeFleet:
    """The part of :class:`demo.fleet.Fleet` the claim killer uses."""

    children: dict[str, FakeChild]
    paused: set[str] = field(default_factory=set)
    killed: list[str] = field(default_factory=list)

    def kill_and_restart(self, name: str) -> bool:
        if name in self.paused:
            return False
        self.killed.append(name)
        self.children[name] = FakeChild(FakeProcess(self.children[name].process.pid + 1000))
        return True

    def restart(self, name: str) -> bool:
        return True


def request(markers: Path, pid: int, *, age_s: float = 0.0, name: str = "r1") -> Path:
    markers.mkdir(parents=True, exist_ok=True)
    marker = markers / f"{name}.json"
    marker.write_text(json.dumps({"pid": pid, "queue": "client-a", "messageId": "o-1:Received"}))
    if age_s:
        then = time.time() - age_s
        os.utime(marker, (then, then))
    return marker


def killer(fleet: FakeFleet, markers: Path) -> ClaimKiller:
    return ClaimKiller(fleet, markers, hold_s=20.0)  # type: ignore[arg-type]  # the fake has what it uses


def test_the_driver_kills_and_restarts_the_process_that_asked_once(tmp_path: Path) -> None:
    fleet = FakeFleet({"devhost-1": FakeChild(FakeProcess(11)), "devhost-2": FakeChild(FakeProcess(12))})
    claim_killer = killer(fleet, tmp_path)
    marker = request(tmp_path, 12)

    claim_killer.act_on(marker)

    assert fleet.killed == ["devhost-2"]
    assert [(k["process"], k["reply"]) for k in claim_killer.kills] == [("devhost-2", "o-1:Received")]


def test_a_paused_process_is_killed_once_it_runs_and_a_stale_or_orphan_request_is_dropped(
    tmp_path: Path,
) -> None:
    fleet = FakeFleet({"devhost-1": FakeChild(FakeProcess(11))}, paused={"devhost-1"})
    claim_killer = killer(fleet, tmp_path)
    marker = request(tmp_path, 11)

    claim_killer.act_on(marker)
    assert fleet.killed == []  # paused: tried again on the next look
    fleet.paused.clear()
    claim_killer.act_on(marker)
    assert fleet.killed == ["devhost-1"]

    claim_killer.act_on(request(tmp_path, 99, name="r2"))  # no such process any more
    claim_killer.act_on(request(tmp_path, 1011, age_s=60, name="r3"))  # its process went on long ago
    assert fleet.killed == ["devhost-1"]
    assert len(claim_killer.kills) == 1


def test_a_run_that_asked_for_claim_kills_and_had_none_lists_them_unexercised() -> None:
    counts = {"orders": 5, "claim_kills": 0}
    assert unexercised(
        counts, kill_every_s=0, duplicate_share=0, late_share=0, pause_every_s=0, claim_kill_share=0.02
    ) == ["claim_kills"]
    assert (
        unexercised(
            {**counts, "claim_kills": 1},
            kill_every_s=0,
            duplicate_share=0,
            late_share=0,
            pause_every_s=0,
            claim_kill_share=0.02,
        )
        == []
    )
