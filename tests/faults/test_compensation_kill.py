"""A compensation interrupted by SIGKILL resumes in another process and undoes every step exactly once.

Orders whose shipment is refused for good (an unknown carrier) complete their reservation and their
charge, then compensate both (docs/design.md §4). The demo services take a while over every call, undos
included, and apply its effect only at the end, whether or not the caller is still there: the devhost
process doing the undos is killed while its undo calls are in the services, which then apply them. Its
orchestrations die with it and the records stay ``Compensating`` until their ``completeBy`` passes;
the supervisor of a second process unlocks them, counting ``compensationFailures``, and a new attempt
there resumes each compensation from the first entry not yet undone. The undos the killed attempt had
already made are asked again under the same undo keys, and the services replay their stored answers:
the audit shows one effect per undo key, however many calls it took.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from demo.faults import FaultPlan
from demo.services.app import create_app
from demo.services.bindings import demo_bindings_json
from demo.tpch import load_catalog
from devhost.emulators import REPO_ROOT, LocalEndpoints
from devhost.queues.factory import StorageQueueFactory
from devhost.serving import serve_in_thread, server_url, stop
from orderflow.records import ProcessState, StateRecord, StepStatus, UndoStatus, order_key
from orderflow.stores.cosmos import CosmosStores
from tests.harness import FAST_SETTINGS, TPCH_FIXTURE, key_file_auth
from tests.unit.fakes import order_body, received

# Runs devhost processes under a deadline: one xdist worker runs all such tests in turn (Makefile).
pytestmark = [pytest.mark.faults, pytest.mark.xdist_group("devhost_processes")]

ORDERS = 8
SKU = "10"
UNDONE_STEPS = ("reserve_inventory", "charge_payment")
CALL_S = 1.2
"""Every remote call, forward or undo, is held this long after its request was read, then applied (the
``hang`` fault with a short ``hang_s``): an undo stays in flight long enough to kill its process in the
middle of it, and takes effect although its caller is dead."""
STEP_TIMEOUT_S = 4.0
"""Long enough for a slow call (and the agent's margin) to fit inside a step's or an undo's deadline,
short enough that the supervisor finds the killed attempts expired within seconds."""


def _spawn(env: dict[str, str], host_id: str, log: Path) -> subprocess.Popen[str]:
    with log.open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "devhost", "--host-id", host_id, "--log-level", "WARNING"],
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == f"devhost {host_id} ready"
    return process


def _undoing(record: StateRecord) -> bool:
    """Compensating with an undo started and not yet recorded."""
    return record.process_state is ProcessState.COMPENSATING and any(
        entry.status == UndoStatus.COMPENSATING for entry in record.compensation_log
    )


def test_compensation_resumed_after_a_kill_undoes_every_step_once(
    local_endpoints: LocalEndpoints, tmp_path: Path
) -> None:
    catalog = load_catalog(TPCH_FIXTURE, orders=None, stock_divisor=1)
    plan = FaultPlan(faults_on_undo=True, hang_rate=1.0, hang_s=CALL_S, seed=11)
    server, thread = serve_in_thread(create_app(catalog, plan, auth=key_file_auth()))
    services = server_url(server)
    run = uuid.uuid4().hex[:8]
    database = f"ckill{run}"
    env: dict[str, str] = {
        **os.environ,
        **{k: str(v) for k, v in FAST_SETTINGS.items()},
        "STORAGE_CONNECTION_STRING": local_endpoints.storage_connection_string,
        "COSMOS_ENDPOINT": local_endpoints.cosmos_endpoint,
        "COSMOS_KEY": local_endpoints.cosmos_key,
        "COSMOS_DATABASE": database,
        "COSMOS_VERIFY_TLS": "false",
        "SERVICE_BINDINGS": demo_bindings_json(services),
        # One registered client of its own: inbound queue orders-<run>, reply queue client-<run>.
        "CLIENTS": json.dumps([{"id": run, "replyQueue": f"client-{run}"}]),
        "AGENT_QUEUE_PREFIX": f"agent-{run}-",
        "STEP_TIMEOUT_S": str(STEP_TIMEOUT_S),
        # order-v2: the refused shipment has no fallback carrier, so every order compensates.
        "WORKFLOW_VERSION": "order-v2",
        # Its own lease: the killed process's lease would otherwise hold back other tests' supervisors.
        "SUPERVISOR_LEASE_BLOB": f"orderflow-leases/ckill{run}",
        # No election: the survivor sweeps at once instead of waiting out the dead leader's 15 s lease
        # (correctness never depends on the lease; tests/integration covers the hand-over).
        "SUPERVISOR_LEASE_ENABLED": "false",
    }
    stores = CosmosStores.connect(
        local_endpoints.cosmos_endpoint, key=local_endpoints.cosmos_key, database=database, verify_tls=False
    )
    queues = StorageQueueFactory.from_connection_string(local_endpoints.storage_connection_string)
    reply_queue = f"client-{run}"
    ids = [f"c{run}-{n:03d}" for n in range(ORDERS)]
    stock_before = httpx.get(f"{services}/stock/{SKU}", timeout=10).json()["available"]
    first = _spawn(env, f"a{run}", tmp_path / "first.log")
    survivor: subprocess.Popen[str] | None = None
    try:
        for order_id in ids:
            queues.queue(f"orders-{run}").send(
                order_body(
                    order_id,
                    reply_to=reply_queue,
                    carrier="CAMEL",
                    amount="10.00",
                    items=[{"sku": SKU, "quantity": 1}],
                ),
                message_id=f"{order_id}:submit",
            )

        def snapshot() -> dict[str, StateRecord]:
            found: dict[str, StateRecord] = {}
            for order_id in ids:
                try:
                    found[order_id] = stores.state.get(order_key(run, order_id)).item
                except Exception:  # not submitted yet
                    continue
            return found

        def undo_calls() -> int:
            keys = httpx.get(f"{services}/audit", timeout=10).json()["keys"]
            return sum(entry["calls"] for entry in keys.values() if entry["undo"])

        # Kill the first process while undo calls are in the services: as soon as every order is
        # undoing, or a moment after the first undo call arrived (it is held CALL_S, so still running).
        deadline = time.monotonic() + 30
        first_call: float | None = None
        while True:
            records = snapshot()
            undoing = [oid for oid, r in records.items() if _undoing(r)]
            if first_call is None and undoing and undo_calls() > 0:
                first_call = time.monotonic()
            if first_call is not None and (len(undoing) == ORDERS or time.monotonic() - first_call > 0.4):
                break
            assert time.monotonic() < deadline, f"no undo started: {_states(records)}"
            time.sleep(0.05)
        killed_at = datetime.now(UTC)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)

        at_kill = snapshot()
        interrupted = {oid: r.locked_by for oid, r in at_kill.items() if _undoing(r)}
        assert interrupted, f"no undo was in flight when the process died: {_states(at_kill)}"
        assert all(lock is not None for lock in interrupted.values())

        survivor = _spawn(env, f"b{run}", tmp_path / "survivor.log")
        deadline = time.monotonic() + 45
        while True:
            records = snapshot()
            if len(records) == ORDERS and all(
                r.process_state is ProcessState.COMPENSATED for r in records.values()
            ):
                break
            stuck = [r for r in records.values() if r.process_state is ProcessState.COMPENSATION_FAILED]
            assert not stuck, f"a compensation failed: {_states(records)}"
            assert time.monotonic() < deadline, f"compensations not resumed: {_states(records)}"
            time.sleep(0.2)

        audit = httpx.get(f"{services}/audit", timeout=10).json()
        facts = {
            oid: httpx.get(f"{services}/orders/{order_key(run, oid)}/facts", timeout=10).json() for oid in ids
        }
        stock_after = httpx.get(f"{services}/stock/{SKU}", timeout=10).json()["available"]
        replies = [json.loads(m.body) for m in received(queues.queue(reply_queue))]
    finally:
        for process in (first, survivor):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
        stores.close()
        stop(server, thread)

    # Every order went forward as far as the refused shipment, then undid both earlier steps.
    for oid, record in records.items():
        assert record.process_state is ProcessState.COMPENSATED, oid
        assert record.last_error is not None and record.last_error.code == "unknown_carrier", oid
        assert record.steps["create_shipment"].status is StepStatus.FAILED, oid
        for step in UNDONE_STEPS:
            assert record.steps[step].status is StepStatus.COMPENSATED, (oid, step)
        assert {entry.step for entry in record.compensation_log} == set(UNDONE_STEPS), oid
        assert all(entry.status == UndoStatus.COMPENSATED for entry in record.compensation_log), oid

    # The interrupted compensations were resumed by the supervisor, in an attempt other than the killed one.
    for oid, killed in interrupted.items():
        record = records[oid]
        assert record.compensation_failures >= 1, oid
        history = record.attempt_history
        finished = history[-1]
        assert finished.outcome == ProcessState.COMPENSATED.value, (oid, history)
        assert finished.instance_id != killed, (oid, history)
        assert finished.claimed_by == f"b{run}", (oid, history)
        ended = next(entry for entry in history if entry.instance_id == killed)
        assert ended.outcome == "recovered", (oid, history)

    # One effect per undo key, however many calls it took; a resumed undo replays the stored answer.
    keys = audit["keys"]
    for oid in ids:
        for step in UNDONE_STEPS:
            key = f"{order_key(run, oid)}:{step}:undo"
            assert keys[key]["effects"] == 1, (key, keys[key])
            assert keys[key]["calls"] >= 1, (key, keys[key])
        assert keys[f"{order_key(run, oid)}:create_shipment"]["effects"] == 0, oid
        assert f"{order_key(run, oid)}:create_shipment:undo" not in keys, oid
    # Undos the killed attempt had made were asked again by the resuming attempt after they took
    # effect (a call is applied CALL_S after it arrives), and were answered from the stored outcome.
    replayed = [
        key
        for oid, killed in interrupted.items()
        for key in (f"{order_key(run, oid)}:{step}:undo" for step in UNDONE_STEPS)
        if _replayed(keys[key]["received"], killed, killed_at)
    ]
    assert replayed, "no undo made before the kill was asked again after it took effect"
    assert all(keys[key]["calls"] >= 2 and keys[key]["effects"] == 1 for key in replayed)
    assert audit["duplicate_effects"] == 0
    assert audit["duplicate_order_effects"] == 0

    # Nothing the orders did is left in effect.
    for oid, order in facts.items():
        summary = order["summary"]
        assert summary["activeReservations"] == 0, (oid, order)
        assert summary["netCharged"] == "0.00", (oid, order)
        assert summary["activeShipments"] == 0, (oid, order)
        assert len(order["reservations"]) == 1 and len(order["charges"]) == 1, (oid, order)
    assert stock_after == stock_before

    # Every client heard the outcome, with the original cause.
    finals = [r for r in replies if r["status"] == "Compensated"]
    assert {r["orderId"] for r in finals} == set(ids)
    assert not [r for r in replies if r["status"] in ("Processed", "Failed", "CompensationFailed")]
    assert all(r.get("reason") == "unknown_carrier" for r in finals), finals


def _replayed(received: list[dict[str, Any]], killed: str | None, killed_at: datetime) -> bool:
    """Whether the killed attempt called the key before the kill, and another attempt called it again
    after that first call had taken effect."""
    arrivals = [(call["instance"], datetime.fromisoformat(call["at"])) for call in received]
    before = [at for instance, at in arrivals if instance == killed and at < killed_at]
    after = [at for instance, at in arrivals if instance not in (None, killed)]
    return bool(before and after) and max(after) > min(before) + timedelta(seconds=CALL_S)


def _states(records: dict[str, StateRecord]) -> dict[str, tuple[str, int, list[str]]]:
    return {
        oid: (r.process_state.value, r.attempt, [entry.status for entry in r.compensation_log])
        for oid, r in records.items()
    }
