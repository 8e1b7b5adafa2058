"""A DevHost's start-up and shutdown: a start that fails half-way stops what it started, a stop can be
repeated, and the durabletask worker's own shutdown is not logged as a warning
(devhost.durabletask_adapter); the api role serves the operator API over loopback HTTP."""

from __future__ import annotations

import contextlib
import json
import logging
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from demo.services.bindings import demo_bindings_json
from devhost import host as host_module
from devhost.durabletask_adapter import DURABLETASK_WORKER_LOGGER, quiet_local_cancel
from devhost.durabletask_backend import free_port
from devhost.handlers import STARTER_WAKEUP
from devhost.local_issuer import LOCAL_TENANT_ID
from devhost.roles import ALL_ROLES, check_roles, parse_roles
from devhost.settings import load_settings
from devhost.wakeup_channel import WakeupChannel
from orderflow.client_text import visible
from orderflow.clock import SystemClock
from orderflow.errors import NotFound, TransientError
from orderflow.operator_auth import OPERATOR_ROLE
from orderflow.queues.memory import InMemoryQueueFactory
from orderflow.records import order_key
from orderflow.settings import Settings
from orderflow.settings.hosts import UnsafeAzureSetting
from orderflow.stores.memory import InMemoryOrderStore, InMemoryStateStore
from tests.dev_host import dev_host
from tests.host_deps import HostDeps
from tests.operator_tokens import local_issuer
from tests.unit.fakes import client_for, order_body

pytestmark = pytest.mark.unit

LOCAL_CANCEL = (
    "Error in work item stream: <_MultiThreadedRendezvous of RPC that terminated with:\n"
    "\tstatus = StatusCode.CANCELLED\n"
    '\tdetails = "Locally cancelled by application!"\n'
    '\tdebug_error_string = "None"\n>'
)


class RefusingQueues(InMemoryQueueFactory):
    """In-memory queues that refuse the agents' request queues, as Storage refuses an invalid name."""

    def queue(self, name: str) -> Any:
        if name.startswith("agent-") and not name.startswith("agent-responses"):
            raise ValueError(f"invalid queue name {name!r}")
        return super().queue(name)


class FlakyQueues(InMemoryQueueFactory):
    """In-memory queues whose first ``failures`` opens fail as a busy queue service's do (timed out)."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures
        self.refused: list[str] = []

    def queue(self, name: str) -> Any:
        if len(self.refused) < self.failures:
            self.refused.append(name)
            raise TransientError(f"create on queue {name!r} failed: timed out")
        return super().queue(name)


def deps(queues: InMemoryQueueFactory | None = None) -> HostDeps:
    settings, local = load_settings(
        {}, HOST_ID="h1", POLL_INTERVAL_S=0.01, SERVICE_BINDINGS=demo_bindings_json("http://127.0.0.1:1")
    )
    return HostDeps(
        states=InMemoryStateStore(),
        orders=InMemoryOrderStore(),
        queues=queues or InMemoryQueueFactory(),
        clock=SystemClock(),
        settings=settings,
        local=local,
    )


def new_non_daemon_threads(before: set[threading.Thread]) -> list[str]:
    time.sleep(0.2)  # a stopped thread may take a moment to finish
    return [t.name for t in threading.enumerate() if t not in before and t.is_alive() and not t.daemon]


def test_a_start_that_fails_half_way_stops_the_durabletask_worker_it_had_started() -> None:
    # Without this the worker's (non-daemon) thread kept `python -m devhost` alive after the error.
    host = dev_host(deps(RefusingQueues()), ALL_ROLES)
    before = set(threading.enumerate())

    with pytest.raises(ValueError, match="invalid queue name 'agent-courier'"):
        host.start()

    assert host.stop_event.is_set()
    assert new_non_daemon_threads(before) == []
    host.stop()  # a second stop (the command's own clean-up) does nothing and does not fail


def test_stopping_the_worker_logs_no_warning_about_the_stream_the_stop_cancelled(
    caplog: pytest.LogCaptureFixture,
) -> None:
    host = dev_host(deps(), ("orchestrator",))
    host.start()
    time.sleep(0.5)  # the worker has opened its work-item stream
    with caplog.at_level(logging.INFO, logger=DURABLETASK_WORKER_LOGGER):
        host.stop()

    worker_records = [r for r in caplog.records if r.name == DURABLETASK_WORKER_LOGGER]
    assert any("Worker shutdown completed" in r.getMessage() for r in worker_records)
    assert [r.getMessage() for r in worker_records if r.levelno >= logging.WARNING] == []
    assert logging.getLogger(DURABLETASK_WORKER_LOGGER).filters == []  # only while stopping


def test_only_the_local_cancellation_is_quieted_and_only_while_stopping(
    caplog: pytest.LogCaptureFixture,
) -> None:
    worker = logging.getLogger(DURABLETASK_WORKER_LOGGER)
    unavailable = LOCAL_CANCEL.replace("CANCELLED", "UNAVAILABLE").replace(
        "Locally cancelled by application!", "failed to connect to all addresses"
    )
    with caplog.at_level(logging.WARNING, logger=DURABLETASK_WORKER_LOGGER):
        with quiet_local_cancel():
            worker.warning(LOCAL_CANCEL)
            worker.warning(unavailable)
        worker.warning(LOCAL_CANCEL)

    # Each record is one line (orderflow.telemetry.guard_log_records): the gRPC text's breaks escaped.
    assert [r.getMessage() for r in caplog.records] == [visible(unavailable), visible(LOCAL_CANCEL)]


def test_roles_are_all_or_known_names_and_the_starter_needs_the_orchestrator() -> None:
    assert parse_roles("all") == ALL_ROLES
    assert parse_roles(" agents , supervisor,agents") == ("agents", "supervisor")
    with pytest.raises(ValueError, match=r"unknown roles: \['bogus'\]"):
        parse_roles("agents,bogus")
    with pytest.raises(ValueError, match="no roles given"):
        parse_roles(" , ")
    with pytest.raises(ValueError, match="need the orchestrator role"):
        check_roles(["listener"])
    with pytest.raises(ValueError, match="unknown roles"):
        dev_host(deps(), ("bogus",))


def test_the_submission_role_consumes_each_registered_clients_queue_as_that_client() -> None:
    clients = '[{"id": "acme"}, {"id": "globex"}]'
    settings, local = load_settings({}, HOST_ID="h1", POLL_INTERVAL_S=0.01, CLIENTS=clients)
    queues = InMemoryQueueFactory()
    wired = HostDeps(
        states=InMemoryStateStore(),
        orders=InMemoryOrderStore(),
        queues=queues,
        clock=SystemClock(),
        settings=settings,
        local=local,
    )
    host = dev_host(wired, roles=("submission",))
    host.start()
    try:
        # Both queues of every client exist from start-up: none is created because a message named it.
        assert {"orders-acme", "replies-acme", "orders-globex", "replies-globex"} <= queues.names()
        queues.queue("orders-globex").send(order_body("a:o-1", reply_to="replies-globex"), message_id="m-1")
        # The same body on acme's queue names a reply queue that is not acme's: dead-lettered.
        queues.queue("orders-acme").send(order_body("a:o-2", reply_to="replies-globex"), message_id="m-2")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not queues.dead_letters("orders-acme"):
            time.sleep(0.01)
        while time.monotonic() < deadline and queues.queue("orders-globex").approximate_count():
            time.sleep(0.01)
    finally:
        host.stop()
    assert wired.states.get("globex:o-1").item.client_id == "globex"
    [dead] = queues.dead_letters("orders-acme")
    assert dead.reason == "ReplyToNotRegistered"
    assert [m.message_id for m in queues.queue("replies-acme").peek_all()] == []


# --- the api role: the operator API over HTTP, with the local issuer's JWKS ---------------------------


def test_the_api_role_serves_the_operator_api_and_the_local_issuers_keys_on_one_port() -> None:
    issuer = local_issuer()
    port = free_port()
    trust = issuer.operator_settings(f"http://127.0.0.1:{port}{issuer.jwks_path}")
    wired = deps()
    host = dev_host(
        replace(wired, settings=Settings.load({}, HOST_ID="h1", **trust)),
        ("api",),
        api_port=port,
        local_issuer=issuer,
    )
    host.start()
    try:
        assert host.api_url == f"http://127.0.0.1:{port}"
        keys = httpx.get(f"{host.api_url}{issuer.jwks_path}", timeout=5)
        order = f"{host.api_url}/api/operator/orders/a:o-1"
        operator = {"Authorization": f"Bearer {issuer.mint(name='otto', roles=[OPERATOR_ROLE])}"}
        anonymous = httpx.get(order, timeout=5)
        unknown = httpx.get(order, headers=operator, timeout=5)  # the keys are fetched from this same server
        wrong_method = httpx.delete(order, headers=operator, timeout=5)
    finally:
        host.stop()

    assert keys.json() == issuer.jwks()
    assert (anonymous.status_code, anonymous.headers["WWW-Authenticate"]) == (401, 'Bearer realm="orderflow"')
    assert (unknown.status_code, unknown.json()["error"]["code"]) == (404, "UnknownOrder")
    assert unknown.headers["Content-Type"] == "application/json; charset=utf-8"
    assert (wrong_method.status_code, wrong_method.headers["Allow"]) == (405, "GET")
    with pytest.raises(httpx.ConnectError):
        httpx.get(order, timeout=2)  # stopped with the host


def test_an_api_configured_only_in_part_stops_the_start_up() -> None:
    host = dev_host(
        replace(deps(), settings=deps().settings.replace(**{"OPERATOR_TENANT_ID": LOCAL_TENANT_ID})),
        ("api", "agents"),
    )

    with pytest.raises(ValueError, match="OPERATOR_AUDIENCE"):
        host.start()

    assert host.stop_event.is_set() and host.api_url is None


def test_a_host_running_agents_refuses_to_start_without_a_binding_for_every_operation() -> None:
    raw = json.loads(demo_bindings_json("http://127.0.0.1:1"))
    del raw["payment"]["operations"]["refund"]
    wired = deps()
    host = dev_host(replace(wired, settings=wired.settings.replace(**{"SERVICE_BINDINGS": json.dumps(raw)})))
    before = set(threading.enumerate())

    with pytest.raises(UnsafeAzureSetting) as refused:
        host.start()

    assert str(refused.value) == "SERVICE_BINDINGS payment: no mapping for operation 'refund'"
    assert host.stop_event.is_set()
    assert new_non_daemon_threads(before) == []  # refused before anything started


def test_a_start_while_the_queue_service_times_out_tries_again_and_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("devhost.host.wait_exponential_jitter", lambda **_: lambda _state: 0.0)
    queues = FlakyQueues(failures=3)
    host = dev_host(deps(queues), roles=("agents",))

    host.start()
    host.stop()

    assert len(queues.refused) == 3
    assert set(queues.refused) <= queues.names()  # each tried again and opened: the start-up went on


def test_a_start_gives_up_once_the_queue_service_keeps_timing_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("devhost.host.wait_exponential_jitter", lambda **_: lambda _state: 0.0)
    monkeypatch.setattr("devhost.host.START_RETRY_S", 0.05)
    host = dev_host(deps(FlakyQueues(failures=10**9)), roles=("agents",))

    with pytest.raises(TransientError, match="timed out"):
        host.start()
    assert host.stop_event.is_set()


def test_a_submission_wakes_the_starter_of_another_process_through_the_wakeup_channel(
    tmp_path: Path,
) -> None:
    """The submission may run beside the agents, away from the starter: its Pending record still gets
    claimed at once, not at the starter's next tick, because the wake-up crosses processes."""
    client = client_for("client-a")
    settings, local = load_settings(
        {},
        HOST_ID="intake-1",
        POLL_INTERVAL_S=0.01,
        CLIENTS=json.dumps([{"id": client.client_id, "replyQueue": client.reply_queue}]),
    )
    heard: list[str] = []
    woken = threading.Event()

    def on_name(name: str) -> None:
        heard.append(name)
        if name == STARTER_WAKEUP:
            woken.set()

    scheduler = WakeupChannel(tmp_path, "scheduler-1", on_name)
    scheduler.start()
    local = local.model_copy(update={"WAKEUP_DIR": str(tmp_path)})
    host = dev_host(replace(deps(), settings=settings), roles=("submission",), local=local)
    host.start()
    try:
        queues = host.deps.queues
        queues.queue(client.inbound_queue).send(
            order_body("w-1", reply_to=client.reply_queue), message_id="w-1"
        )
        assert woken.wait(5.0)
    finally:
        host.stop()
        scheduler.stop()
    assert STARTER_WAKEUP in heard
    key = order_key(client.client_id, "w-1")
    assert host.deps.states.get(key).item.process_state == "Pending"
    # No orchestrator here: the order is not kept for activities that run elsewhere.
    with pytest.raises(NotFound):
        host.deps.order_cache.get(InMemoryOrderStore(), key)


def test_a_host_built_in_a_process_of_its_own_keeps_a_clients_text_in_log_records_on_one_line() -> None:
    # In a fresh interpreter: this suite's conftest installs the guard for every test process.
    script = (
        "import logging, sys\n"
        "from tests.unit.test_devhost_host import deps\n"
        "from devhost.host import DevHost\n"
        "wired = deps()\n"
        "DevHost(wired, ('orchestrator',), settings=wired.settings)\n"
        "hostile = ('m\\x1b[2J\\nX',)\n"
        "record = logging.getLogger('t').makeRecord('t', logging.INFO, 'f', 1, 'got %s', hostile, None)\n"
        "sys.stdout.write(record.getMessage())\n"
    )
    shown = subprocess.run(
        [sys.executable, "-c", script],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout

    assert shown == "got m\\x1b[2J\\nX"


class CountingReceives(InMemoryQueueFactory):
    """In-memory queues that count each queue's receives."""

    def __init__(self) -> None:
        super().__init__()
        self.receives: dict[str, int] = {}

    def queue(self, name: str) -> Any:
        queue = super().queue(name)
        receive = queue.receive

        def counted(**kwargs: Any) -> Any:
            self.receives[name] = self.receives.get(name, 0) + 1
            return receive(**kwargs)

        queue.receive = counted  # type: ignore[method-assign]
        return queue


def inbound_receives_after_one_order(tmp_path: Path, *, announced: bool) -> int:
    """Receives of a client's inbound queue in the 0.3 s after its one order was taken, the loop's
    poll 10 ms and its longest an hour, in a host with a wake-up channel."""
    client = client_for("client-a")
    settings, local = load_settings(
        {},
        HOST_ID="intake-1",
        POLL_INTERVAL_S=0.01,
        POLL_MAX_INTERVAL_S=3600,
        WAKEUP_DIR=str(tmp_path),
        WAKEUP_INBOUND=announced,
        CLIENTS=json.dumps([{"id": client.client_id, "replyQueue": client.reply_queue}]),
    )
    queues = CountingReceives()
    host = dev_host(replace(deps(queues), settings=settings), roles=("submission",), local=local)
    host.start()
    try:
        host.deps.queues.queue(client.inbound_queue).send(
            order_body("w-1", reply_to=client.reply_queue), message_id="w-1"
        )
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not queues.queue(client.reply_queue).peek_all():
            time.sleep(0.01)
        taken = queues.receives[client.inbound_queue]
        time.sleep(0.3)
        return queues.receives[client.inbound_queue] - taken
    finally:
        host.stop()


def test_with_announced_inbound_sends_the_submission_loop_waits_for_the_next_announcement(
    tmp_path: Path,
) -> None:
    assert inbound_receives_after_one_order(tmp_path, announced=True) == 0


def test_without_announced_inbound_sends_the_submission_loop_polls_again_soon(tmp_path: Path) -> None:
    # A client that announces nothing: its next order is found by polling, 10 ms after the last.
    assert inbound_receives_after_one_order(tmp_path, announced=False) >= 1


def test_an_order_is_taken_when_the_room_check_cannot_read_the_backend(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The room check only decides whether the submission starts the order at once: a backend it cannot
    read leaves the order Pending for a starter, it does not fail the message (and dead-letter it)."""

    def unreadable(client: object) -> int:
        raise RuntimeError("QueryInstances: failed to connect to all addresses")

    monkeypatch.setattr(host_module, "running_orchestrations", unreadable)
    client = client_for("client-a")
    settings, _ = load_settings(
        {},
        HOST_ID="h1",
        POLL_INTERVAL_S=0.01,
        CLIENTS=json.dumps([{"id": client.client_id, "replyQueue": client.reply_queue}]),
    )
    host = dev_host(replace(deps(), settings=settings), roles=("orchestrator", "submission"))
    host.start()
    key = order_key(client.client_id, "r-1")
    try:
        host.deps.queues.queue(client.inbound_queue).send(
            order_body("r-1", reply_to=client.reply_queue), message_id="r-1"
        )
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            with contextlib.suppress(NotFound):
                host.deps.states.get(key)
                break
            time.sleep(0.02)
    finally:
        host.stop()
    assert host.deps.states.get(key).item.process_state == "Pending"
