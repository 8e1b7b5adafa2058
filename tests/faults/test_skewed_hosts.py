"""Two devhost processes, one clock 30 s ahead and one 30 s behind, killed by turns: deadlines hold.

Every deadline is written and compared on the state store's time (orderflow.store_clock), so neither
host's offset may move one: no supervisor recovers an attempt before its ``completeBy`` by the store's
clock (cosmosdb-server runs on this machine's clock: the true time), no two attempts of an order overlap,
and a host that is behind does not send requests that arrive expired, so the run wastes no more attempts
than the same run does without skew.

Each process runs every role (so each one's supervisor recovers the other's attempts, and each one's
agents serve the other's requests) and is SIGKILLed by turns every :data:`KILL_EVERY_S` and started again
under a new host id with the same clock. The recovery check reads the supervisor's own ``recovery``
events, which name the expired ``completeBy`` and the store's stamp of the recovery write.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from demo.faults import FaultPlan
from demo.outcome import attempt_overlaps
from demo.services.app import create_app
from demo.services.bindings import demo_bindings_json
from demo.tpch import load_catalog
from devhost.__main__ import CLOCK_OFFSET_ENV
from devhost.emulators import REPO_ROOT, LocalEndpoints
from devhost.queues.factory import StorageQueueFactory
from devhost.serving import serve_in_thread, server_url, stop
from orderflow.protocol.state_machine import SETTLED_STATES
from orderflow.records import ProcessState, StateRecord, order_key, parse_utc
from orderflow.stores.base import StateQuery
from orderflow.stores.cosmos import CosmosStores
from tests.harness import FAST_SETTINGS, TPCH_FIXTURE, key_file_auth
from tests.unit.fakes import order_body

# Runs devhost processes under a deadline: one xdist worker runs all such tests in turn (Makefile).
pytestmark = [pytest.mark.faults, pytest.mark.xdist_group("devhost_processes")]

ORDERS = 14
KILL_EVERY_S = 5.0
SETTLE_S = 35.0
"""Seconds one run may take to settle every order: each run takes about 10 s on two busy cores."""
STORE_TS_S = timedelta(seconds=1)
"""The store's stamp is its time rounded down to the second: a write stamped ``t`` happened in [t, t+1)."""
RECOVERY = re.compile(r"\brecovery\b.*?\bcomplete_by=(\S+).*?\bstored_at=(\S+)")


@dataclass
class Run:
    """What one run left: the records, the services' audit and the hosts' logs."""

    records: dict[str, StateRecord]
    audit: dict[str, Any]
    logs: list[Path] = field(default_factory=list)

    @property
    def recoveries(self) -> int:
        """Attempts the supervisor ended and re-queued (as ``make chaos`` counts them)."""
        return sum(1 for r in self.records.values() for e in r.attempt_history if e.outcome == "recovered")

    def recovery_stamps(self) -> list[tuple[datetime, datetime]]:
        """``(completeBy, store stamp of the recovery write)`` of every recovery the hosts logged."""
        found = []
        for log in self.logs:
            for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
                if (match := RECOVERY.search(line)) is not None and match[2] != "None":
                    found.append((parse_utc(match[1]), parse_utc(match[2])))
        return found

    def expired_on_arrival(self) -> int:
        """Requests the hosts' agents dropped because their deadline had passed when they arrived."""
        return sum(
            log.read_text(encoding="utf-8", errors="replace").count("agent.expired_on_arrival")
            for log in self.logs
        )


def _spawn(env: dict[str, str], host_id: str, offset_s: float, log: Path) -> subprocess.Popen[str]:
    with log.open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "devhost", "--host-id", host_id, "--log-level", "INFO"],
            cwd=REPO_ROOT,
            env={**env, CLOCK_OFFSET_ENV: str(offset_s)},
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == f"devhost {host_id} ready"
    return process


def _run(endpoints: LocalEndpoints, tmp_path: Path, offsets: tuple[float, float]) -> Run:
    """Submit :data:`ORDERS` orders to two hosts at ``offsets`` and kill them by turns until all settle."""
    catalog = load_catalog(TPCH_FIXTURE, orders=None, stock_divisor=1)
    server, thread = serve_in_thread(
        create_app(catalog, FaultPlan(latency_rate=1.0, latency_s=0.3, seed=5), auth=key_file_auth())
    )
    run = uuid.uuid4().hex[:8]
    env: dict[str, str] = {
        **os.environ,
        **{k: str(v) for k, v in FAST_SETTINGS.items()},
        "STORAGE_CONNECTION_STRING": endpoints.storage_connection_string,
        "COSMOS_ENDPOINT": endpoints.cosmos_endpoint,
        "COSMOS_KEY": endpoints.cosmos_key,
        "COSMOS_DATABASE": f"skew{run}",
        "COSMOS_VERIFY_TLS": "false",
        "SERVICE_BINDINGS": demo_bindings_json(server_url(server)),
        "CLIENTS": json.dumps([{"id": run, "replyQueue": f"client-{run}"}]),
        "AGENT_QUEUE_PREFIX": f"agent-{run}-",
        "STEP_TIMEOUT_S": "3",
        # A submission a killed host had received but not yet written comes back after its lock: 3 s, as
        # in make chaos, rather than the default 30 s, which alone would outlast SETTLE_S.
        "QUEUE_LOCK_S": "3",
        "SUPERVISOR_LEASE_BLOB": f"orderflow-leases/skew{run}",
        # Both supervisors sweep: each one's clock judges the other's deadlines.
        "SUPERVISOR_LEASE_ENABLED": "false",
        # Both starters claim, so both hosts hold attempts when a kill comes (with claim on submit, the
        # host that received the batch of submissions would start every order itself).
        "CLAIM_ON_SUBMIT": "false",
    }
    stores = CosmosStores.connect(
        endpoints.cosmos_endpoint, key=endpoints.cosmos_key, database=f"skew{run}", verify_tls=False
    )
    queues = StorageQueueFactory.from_connection_string(endpoints.storage_connection_string)
    logs: list[Path] = []
    hosts: list[subprocess.Popen[str]] = []

    def start(n: int, generation: int) -> subprocess.Popen[str]:
        logs.append(tmp_path / f"{run}-h{n}-{generation}.log")
        return _spawn(env, f"s{run}h{n}g{generation}", offsets[n], logs[-1])

    try:
        hosts = [start(0, 0), start(1, 0)]
        ids = [f"k{run}-{n:03d}" for n in range(ORDERS)]
        for order_id in ids:
            queues.queue(f"orders-{run}").send(
                order_body(
                    order_id, reply_to=f"client-{run}", amount="10.00", items=[{"sku": "10", "quantity": 1}]
                ),
                message_id=f"{order_id}:submit",
            )
        deadline = time.monotonic() + SETTLE_S
        while stores.state.count(StateQuery(process_states=(ProcessState.PROCESSING,))) < 3:
            assert time.monotonic() < deadline, "orders never started processing"
            time.sleep(0.05)
        next_kill = time.monotonic()  # the first kill with attempts in flight, then every KILL_EVERY_S
        kills = 0
        while stores.state.count(StateQuery(process_states=tuple(SETTLED_STATES))) < ORDERS:
            assert time.monotonic() < deadline, (
                f"orders did not settle within {SETTLE_S} s (offsets {offsets})"
            )
            if time.monotonic() >= next_kill:
                victim = kills % 2
                hosts[victim].send_signal(signal.SIGKILL)
                hosts[victim].wait(timeout=10)
                kills += 1
                hosts[victim] = start(victim, kills)
                next_kill = time.monotonic() + KILL_EVERY_S
            time.sleep(0.2)
        assert kills >= 1, "the run settled before the first kill"
        records = {oid: stores.state.get(order_key(run, oid)).item for oid in ids}
        audit = httpx.get(f"{server_url(server)}/audit", timeout=10).json()
    finally:
        for process in hosts:
            if process.poll() is None:
                process.kill()
                process.wait()
        stores.close()
        stop(server, thread)
    return Run(records, audit, logs)


def test_hosts_30_s_ahead_and_behind_under_kills_keep_every_deadline(
    local_endpoints: LocalEndpoints, tmp_path: Path
) -> None:
    plain = _run(local_endpoints, tmp_path, (0.0, 0.0))
    skewed = _run(local_endpoints, tmp_path, (30.0, -30.0))

    for run in (plain, skewed):
        assert {r.process_state for r in run.records.values()} == {ProcessState.PROCESSED}
        assert run.audit["duplicate_effects"] == 0
    # The kills interrupted attempts, and the supervisors recovered them.
    assert plain.recoveries >= 1 and skewed.recoveries >= 1
    stamps = skewed.recovery_stamps()
    # Every recovery logs its stamp, unless its host was killed between the write and the log line.
    assert stamps and len(stamps) >= skewed.recoveries - 1
    # No recovery before the attempt's deadline by the store's clock: a write stamped t happened at or
    # after t, so one stamped a whole second or more before completeBy was certainly early.
    early = [(complete_by, stored) for complete_by, stored in stamps if stored + STORE_TS_S <= complete_by]
    assert early == []
    # No two attempts of an order at once: the store's attempt history and the services' audit (its
    # times are this machine's; the hosts' stamps are the store's time within one measurement).
    assert attempt_overlaps(skewed.records, skewed.audit.get("keys", {}), clock_slack_s=1.0) == {}
    # The hosts' offsets waste no attempts: no request of the host that is behind is born expired (with
    # deadlines on a host's own clock, every one of its requests was). Recoveries follow the kills, whose
    # timing against attempts in flight varies from run to run, so they get a margin of half the orders.
    assert skewed.expired_on_arrival() <= plain.expired_on_arrival() + 2
    assert skewed.recoveries <= 2 * plain.recoveries + ORDERS // 2, (skewed.recoveries, plain.recoveries)
