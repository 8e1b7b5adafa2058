"""``python -m devhost`` as a real process: it settles orders and stops cleanly on SIGTERM and SIGINT."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from demo import fleet
from demo.faults import FaultPlan
from demo.services.app import create_app
from demo.services.bindings import demo_bindings_json
from demo.tpch import load_catalog
from devhost.emulators import REPO_ROOT, LocalEndpoints
from devhost.queues.factory import StorageQueueFactory
from devhost.serving import serve_in_thread, server_url, stop
from orderflow.records import ProcessState, order_key
from orderflow.stores.cosmos import CosmosStores
from orderflow_client.client import OrderflowClient
from tests.harness import FAST_SETTINGS, TPCH_FIXTURE, key_file_auth

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
def test_devhost_process_settles_orders_and_stops_cleanly(
    local_endpoints: LocalEndpoints, stop_signal: signal.Signals
) -> None:
    catalog = load_catalog(TPCH_FIXTURE, orders=None, stock_divisor=1)
    server, thread = serve_in_thread(create_app(catalog, FaultPlan(), auth=key_file_auth()))
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
        "SERVICE_BINDINGS": demo_bindings_json(server_url(server)),
        "CLIENTS": json.dumps([{"id": host_id, "replyQueue": f"client-{host_id}"}]),
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
        # Every role: the operator API too, on a free loopback port (not configured: it refuses calls).
        assert process.stdout.readline().strip() == f"devhost {host_id} ready"
        api = process.stdout.readline().strip()
        assert api.startswith(f"devhost {host_id} operator API on http://127.0.0.1:"), api
        answered = httpx.get(api.rsplit(" ", 1)[-1] + f"/api/operator/orders/{host_id}:tpch-1", timeout=5)
        assert (answered.status_code, answered.json()["error"]["code"]) == (503, "NotConfigured")
        queues = StorageQueueFactory.from_connection_string(local_endpoints.storage_connection_string)
        client = OrderflowClient(queues, reply_queue=f"client-{host_id}", orders_queue=f"orders-{host_id}")
        ids = [client.submit(o.to_submission(client.reply_queue)) for o in catalog.orders[:2]]
        log = client.wait_for(ids, timeout_s=30)
        assert {oid: log.latest[oid].status.value for oid in ids} == {
            "tpch-1": "Processed",
            "tpch-2": "Compensated",
        }
        assert stores.state.get(order_key(host_id, "tpch-1")).item.process_state is ProcessState.PROCESSED

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


def test_a_child_interrupted_before_it_is_ready_is_killed_not_left_running(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Children run in their own session, so a Ctrl-C in the terminal never reaches them: one that
    # start_child was still waiting for when the Ctrl-C came must be killed by start_child itself.
    started: list[subprocess.Popen[str]] = []
    real_popen = subprocess.Popen

    def recording_popen(*args: Any, **kwargs: Any) -> subprocess.Popen[str]:
        process: subprocess.Popen[str] = real_popen(*args, **kwargs)
        started.append(process)
        return process

    ticks = iter([0.0, 0.0])

    def monotonic() -> float:
        # The second check of the 60 s deadline is where the Ctrl-C lands.
        try:
            return next(ticks)
        except StopIteration:
            raise KeyboardInterrupt from None

    # Only demo.fleet sees these stand-ins, not the rest of the process.
    monkeypatch.setattr("demo.fleet.subprocess", SimpleNamespace(Popen=recording_popen, PIPE=subprocess.PIPE))
    monkeypatch.setattr("demo.fleet.time", SimpleNamespace(monotonic=monotonic))
    script = "import time\nprint('starting', flush=True)\ntime.sleep(120)\n"

    with pytest.raises(KeyboardInterrupt):
        fleet.start_child("sleeper", ["-c", script], dict(os.environ), "never printed", tmp_path)

    [process] = started
    assert process.poll() is not None  # killed and reaped, not left sleeping
    assert process.returncode == -signal.SIGKILL


def _devhost(env: dict[str, str], host_id: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "devhost",
            "--host-id",
            host_id,
            "--roles",
            "submission",
            "--log-level",
            "INFO",
        ],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_second_devhost_with_a_live_host_id_is_refused_and_the_id_is_free_once_its_holder_dies(
    local_endpoints: LocalEndpoints, tmp_path: Path
) -> None:
    host_id = "p" + uuid.uuid4().hex[:8]
    env = {
        **os.environ,
        **{k: str(v) for k, v in FAST_SETTINGS.items()},
        "STORAGE_CONNECTION_STRING": local_endpoints.storage_connection_string,
        "COSMOS_ENDPOINT": local_endpoints.cosmos_endpoint,
        "COSMOS_KEY": local_endpoints.cosmos_key,
        "COSMOS_DATABASE": "db" + uuid.uuid4().hex[:10],
        "COSMOS_VERIFY_TLS": "false",
        "CLIENTS": json.dumps([{"id": host_id, "replyQueue": f"client-{host_id}"}]),
        "WAKEUP_DIR": str(tmp_path),
    }
    started: list[subprocess.Popen[str]] = []
    try:
        first = _devhost(env, host_id)
        started.append(first)
        assert first.stdout is not None and first.stdout.readline().strip() == f"devhost {host_id} ready"
        socket_file = tmp_path / f"{host_id}.sock"
        assert socket_file.exists()

        second = _devhost(env, host_id)
        started.append(second)
        out, err = second.communicate(timeout=60)
        assert second.returncode == 1 and out == ""
        [line] = err.splitlines()  # one line, naming the holder
        assert line.startswith(
            f"error: devhost {host_id} did not start: host id {host_id!r} is in use by process {first.pid} "
            "on this machine against http://127.0.0.1:"
        ), line
        # The first is untouched: still running, its wake-up socket still its own.
        assert first.poll() is None and socket_file.exists()

        first.send_signal(signal.SIGKILL)
        first.wait()
        third = _devhost(env, host_id)
        started.append(third)
        assert third.stdout is not None and third.stdout.readline().strip() == f"devhost {host_id} ready"
        third.send_signal(signal.SIGTERM)
        _, err = third.communicate(timeout=30)
        assert third.returncode == 0, err[-2000:]
    finally:
        for process in started:
            if process.poll() is None:
                process.kill()
                process.wait()
