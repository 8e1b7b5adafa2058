"""The devhost's durabletask backend in a process of its own: it serves, it stops, and it ends with the
devhost that started it, even one killed with SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import grpc
import pytest
from durabletask import client as dt_client

from devhost.durabletask_backend import BackendProcess
from devhost.emulators import REPO_ROOT
from devhost.host import free_port

pytestmark = pytest.mark.integration


def _gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def test_the_backend_serves_the_durabletask_client_and_stops_when_asked() -> None:
    backend = BackendProcess(free_port())
    address = backend.start()
    assert backend.process is not None
    pid = backend.process.pid
    client = dt_client.TaskHubGrpcClient(host_address=address)
    try:
        assert client.get_orchestration_state("no-such-instance") is None
        with pytest.raises(grpc.RpcError) as raised:
            client.raise_orchestration_event("no-such-instance", "Payment", data={})
        assert raised.value.code() == grpc.StatusCode.NOT_FOUND
    finally:
        backend.stop()
    assert repr(backend) == f"BackendProcess(port={backend.port}, pid=None)"
    assert _gone(pid, 1.0)
    backend.stop()  # once stopped, a second stop does nothing


def test_the_backend_ends_with_a_devhost_killed_with_sigkill() -> None:
    # A stand-in for the devhost: it starts the backend, prints the backend's pid and waits.
    parent_code = textwrap.dedent(
        f"""
        import time
        from devhost.durabletask_backend import BackendProcess
        backend = BackendProcess({free_port()})
        backend.start()
        print(backend.process.pid, flush=True)
        time.sleep(120)
        """
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", parent_code], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        backend_pid = int(parent.stdout.readline())
        os.kill(backend_pid, 0)  # running
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        assert _gone(backend_pid, 5.0), "the backend outlived its killed devhost"
    finally:
        parent.kill()
        parent.wait()
