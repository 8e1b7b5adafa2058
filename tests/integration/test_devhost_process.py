"""``python -m devhost`` as a real process: it settles orders and stops cleanly on SIGTERM and SIGINT."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from demo.faults import FaultPlan
from demo.services import create_app, serve_in_thread, server_url, stop
from demo.tpch import load_catalog
from devhost.emulators import REPO_ROOT, LocalEndpoints
from orderflow.client import OrderflowClient
from orderflow.queues.storage import StorageQueueFactory
from orderflow.records import ProcessState
from orderflow.stores.cosmos import CosmosStores
from tests.harness import FAST_SETTINGS, TPCH_FIXTURE

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
def test_devhost_process_settles_orders_and_stops_cleanly(
    local_endpoints: LocalEndpoints, stop_signal: signal.Signals
) -> None:
    catalog = load_catalog(TPCH_FIXTURE, orders=None, stock_divisor=1)
    server, thread = serve_in_thread(create_app(catalog, FaultPlan()))
    database = "db" + uuid.uuid4().hex[:10]
    host_id = "p" + uuid.uuid4().hex[:8]
    env = {
        **os.environ,
        **{k: str(v) for k, v in FAST_SETTINGS.items()},
        "STORAGE_CONNECTION_STRING": local_endpoints.storage_connection_string,
        "COSMOS_ENDPOINT": local_endpoints.cosmos_endpoint,
        "COSMOS_KEY": local_endpoints.cosmos_key,
        "COSMOS_DATABASE": database,
        "COSMOS_VERIFY_TLS": "false",
        "DEMO_SERVICES_URL": server_url(server),
        "ORDERS_QUEUE": f"orders-{host_id}",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "devhost", "--host-id", host_id, "--log-level", "INFO"],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    stores = CosmosStores.connect(
        local_endpoints.cosmos_endpoint, key=local_endpoints.cosmos_key, database=database, verify_tls=False
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == f"devhost {host_id} ready"
        queues = StorageQueueFactory.from_connection_string(local_endpoints.storage_connection_string)
        client = OrderflowClient(queues, reply_queue=f"client-{host_id}", orders_queue=f"orders-{host_id}")
        ids = [client.submit(o.to_submission(client.reply_queue)) for o in catalog.orders[:2]]
        log = client.wait_for(ids, timeout_s=30)
        assert {oid: log.latest[oid].status.value for oid in ids} == {
            "tpch-1": "Processed",
            "tpch-2": "Compensated",
        }
        assert stores.state.get("tpch-1").item.process_state is ProcessState.PROCESSED

        started = time.monotonic()
        process.send_signal(stop_signal)
        _, stderr = process.communicate(timeout=30)
        assert process.returncode == 0, stderr[-2000:]
        assert time.monotonic() - started < 20
        assert f"devhost {host_id} stopped" in stderr
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        stores.close()
        stop(server, thread)
