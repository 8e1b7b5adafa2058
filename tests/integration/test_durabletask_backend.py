"""The devhost's durabletask backend in a process of its own: it serves, it stops, and it ends with the
devhost that started it, even one killed with SIGKILL; an event raised before a worker ran the instance
waits for the instance's wait. It listens on the loopback interface only: its gRPC service has no
authentication, and whoever reaches it can read every orchestration and raise events into them."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest
from durabletask import client as dt_client
from durabletask import worker as dt_worker

from devhost.durabletask_adapter import DurableTaskClient, durabletask_orchestrator
from devhost.durabletask_backend import BackendProcess, free_port, serve_backend
from devhost.emulators import REPO_ROOT
from orchestrators.listener import event_payload
from orchestrators.workflow import order_workflow
from orderflow.contracts import ORDER_WORKFLOW, START_STEP, OrchestrationInput, StartedStep
from orderflow.messages import AgentOutcome, AgentResponse, request_id_for, step_event_name
from orderflow.results import Fenced
from orderflow.workflows import ORDER_V1

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


LOOPBACK = frozenset({"0100007F", "0000000000000000FFFF00000100007F"})
"""127.0.0.1 as /proc/net/tcp writes a local address, and as tcp6 writes it (``::ffff:127.0.0.1``, where
gRPC listens on an IPv4 address through an IPv6 socket)."""


def _listening(port: int) -> set[str]:
    """The local addresses of the sockets listening on TCP ``port`` (/proc/net/tcp and tcp6)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text(encoding="ascii").splitlines()[1:]:
            fields = line.split()
            address, local_port = fields[1].split(":")
            if int(local_port, 16) == port and fields[3] == "0A":  # 0A: LISTEN
                found.add(address)
    return found


def test_the_listening_check_sees_a_socket_on_every_interface() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as everywhere:
        everywhere.bind(("0.0.0.0", 0))
        everywhere.listen()
        assert _listening(everywhere.getsockname()[1]) == {"00000000"}


@pytest.mark.parametrize("own_process", [True, False], ids=["process", "thread"])
def test_the_backend_listens_on_the_loopback_interface_only(own_process: bool) -> None:
    port = free_port()
    backend = BackendProcess(port) if own_process else None
    served = serve_backend(port) if backend is None else None
    address = backend.start() if backend is not None else f"127.0.0.1:{port}"
    try:
        listening = _listening(port)
        assert listening and listening <= LOOPBACK, listening
        assert dt_client.TaskHubGrpcClient(host_address=address).get_orchestration_state("none") is None
    finally:
        if backend is not None:
            backend.stop()
        if served is not None:
            served.stop(grace=0)


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
        from devhost.durabletask_backend import BackendProcess, serve_backend
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


def test_an_answer_raised_before_any_worker_ran_the_instance_is_taken_by_its_first_wait() -> None:
    # The starter sends the first request once the instance is scheduled: its answer can be raised before
    # a worker has run the instance at all. durabletask keeps the event, and the first episode's wait
    # takes it: the orchestration goes on to start the second step with the first one's result.
    first, second = ORDER_V1.steps[0].name, ORDER_V1.steps[1].name
    instance = "a:o-1:1"
    backend = BackendProcess(free_port())
    address = backend.start()
    grpc_client = dt_client.TaskHubGrpcClient(host_address=address)
    worker = dt_worker.TaskHubGrpcWorker(host_address=address)
    started: list[dict[str, Any]] = []
    ended: list[str] = []
    try:
        client = DurableTaskClient(grpc_client)
        payload = OrchestrationInput(
            order_id="a:o-1",
            attempt=1,
            workflow_version=ORDER_V1.version,
            response_queue="r-q1",
            max_calls=10,
            step_timeout_s=30,
            first_step=StartedStep(step=first, complete_by=datetime.now(UTC) + timedelta(minutes=5)),
        ).to_payload()
        assert client.start(ORDER_WORKFLOW, instance, payload)
        answer = AgentResponse(
            request_id=request_id_for(instance, first),
            event_id=f"{request_id_for(instance, first)}:response",
            event_name=step_event_name(first),
            order_id="a:o-1",
            instance_id=instance,
            step=first,
            outcome=AgentOutcome.SUCCEEDED,
            result={"reservationId": "r-1"},
            calls=1,
            completed_at=datetime.now(UTC),
        )
        assert client.raise_event_if_exists(instance, answer.event_name, event_payload(answer))

        def start_step(_ctx: Any, data: dict[str, Any]) -> dict[str, Any]:
            started.append(data)
            return Fenced(reason="the test ends the attempt here").to_payload()

        start_step.__name__ = START_STEP
        orchestrator = durabletask_orchestrator(order_workflow, ended.append)
        orchestrator.__name__ = ORDER_WORKFLOW
        worker.add_orchestrator(orchestrator)  # type: ignore[arg-type]
        worker.add_activity(start_step)
        worker.start()  # type: ignore[no-untyped-call]
        state = grpc_client.wait_for_orchestration_completion(instance, timeout=30)
    finally:
        worker.stop()  # type: ignore[no-untyped-call]
        backend.stop()
    assert state is not None and state.serialized_output is not None
    assert '"fenced"' in state.serialized_output
    # Told the end once, in the last of its episodes: not in the one that ended waiting for the activity.
    assert ended == [instance]
    [data] = started
    assert (data["step"], data["completed"]) == (
        second,
        {"step": first, "result": {"reservationId": "r-1"}, "calls": 1},
    )
