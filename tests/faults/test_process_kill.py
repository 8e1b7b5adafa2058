"""A devhost process killed with SIGKILL mid-flight loses nothing: another process recovers its orders.

Each devhost process runs its own durabletask backend, so the killed process's orchestrations die
with it; its orders stay Processing until their completeBy passes, and the supervisor of the surviving
process re-queues them for a new attempt there (docs/design.md §1). The demo services' audit shows
that no effect was applied twice.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
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
from orderflow.protocol.state_machine import SETTLED_STATES
from orderflow.records import ProcessState, order_key
from orderflow.stores.base import StateQuery
from orderflow.stores.cosmos import CosmosStores
from tests.harness import FAST_SETTINGS, TPCH_FIXTURE, key_file_auth
from tests.unit.fakes import order_body, received

# Runs devhost processes under a deadline: one xdist worker runs all such tests in turn (Makefile).
pytestmark = [pytest.mark.faults, pytest.mark.xdist_group("devhost_processes")]

ORDERS = 24


def _spawn(env: dict[str, str], host_id: str) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "devhost", "--host-id", host_id, "--log-level", "WARNING"],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == f"devhost {host_id} ready"
    return process


def test_orders_of_a_killed_process_settle_in_another(local_endpoints: LocalEndpoints) -> None:
    catalog = load_catalog(TPCH_FIXTURE, orders=None, stock_divisor=1)
    # Slow remote calls keep orders in flight long enough to kill the host in the middle of them.
    server, thread = serve_in_thread(
        create_app(catalog, FaultPlan(latency_rate=1.0, latency_s=0.3, seed=5), auth=key_file_auth())
    )
    run = uuid.uuid4().hex[:8]
    database = f"kill{run}"
    env: dict[str, Any] = {
        **os.environ,
        **{k: str(v) for k, v in FAST_SETTINGS.items()},
        "STORAGE_CONNECTION_STRING": local_endpoints.storage_connection_string,
        "COSMOS_ENDPOINT": local_endpoints.cosmos_endpoint,
        "COSMOS_KEY": local_endpoints.cosmos_key,
        "COSMOS_DATABASE": database,
        "COSMOS_VERIFY_TLS": "false",
        "SERVICE_BINDINGS": demo_bindings_json(server_url(server)),
        # One registered client of its own: inbound queue orders-<run>, reply queue client-<run>.
        "CLIENTS": json.dumps([{"id": run, "replyQueue": f"client-{run}"}]),
        "AGENT_QUEUE_PREFIX": f"agent-{run}-",
        "STEP_TIMEOUT_S": "3",
        # Its own lease: the killed process's lease would otherwise hold back other tests' supervisors.
        "SUPERVISOR_LEASE_BLOB": f"orderflow-leases/kill{run}",
        # No election: the survivor sweeps at once instead of waiting out the dead leader's 15 s lease
        # (correctness never depends on the lease; tests/integration covers the hand-over).
        "SUPERVISOR_LEASE_ENABLED": "false",
    }
    stores = CosmosStores.connect(
        local_endpoints.cosmos_endpoint, key=local_endpoints.cosmos_key, database=database, verify_tls=False
    )
    queues = StorageQueueFactory.from_connection_string(local_endpoints.storage_connection_string)
    reply_queue = f"client-{run}"
    first = _spawn(env, f"a{run}")
    survivor: subprocess.Popen[str] | None = None
    try:
        ids = [f"k{run}-{n:03d}" for n in range(ORDERS)]
        for order_id in ids:
            queues.queue(f"orders-{run}").send(
                order_body(
                    order_id, reply_to=reply_queue, amount="10.00", items=[{"sku": "10", "quantity": 1}]
                ),
                message_id=f"{order_id}:submit",
            )
        deadline = time.monotonic() + 30
        while stores.state.count(StateQuery(process_states=(ProcessState.PROCESSING,))) < 3:
            assert time.monotonic() < deadline, "orders never started processing"
            time.sleep(0.05)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        in_flight = stores.state.count(StateQuery(process_states=(ProcessState.PROCESSING,)))
        assert in_flight >= 1

        survivor = _spawn(env, f"b{run}")
        deadline = time.monotonic() + 60
        while stores.state.count(StateQuery(process_states=tuple(SETTLED_STATES))) < ORDERS:
            assert time.monotonic() < deadline, "orders of the killed process were not recovered"
            time.sleep(0.2)

        records = {oid: stores.state.get(order_key(run, oid)).item for oid in ids}
        audit = httpx.get(f"{server_url(server)}/audit", timeout=10).json()
        replies = [json.loads(m.body) for m in received(queues.queue(reply_queue))]
    finally:
        for process in (first, survivor):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
        stores.close()
        stop(server, thread)

    assert {r.process_state for r in records.values()} == {ProcessState.PROCESSED}
    recovered = [oid for oid, r in records.items() if r.failure_count > 0]
    assert recovered, "the kill must have interrupted at least one order"
    assert all(records[oid].attempt >= 2 for oid in recovered)
    assert audit["duplicate_effects"] == 0
    finals = Counter(r["orderId"] for r in replies if r["status"] == "Processed")
    assert set(finals) == set(ids)
