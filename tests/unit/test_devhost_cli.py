"""``python -m devhost`` and ``python -m devhost.emulators`` as commands: arguments and settings refused up
front in one line, a start-up failure that stops what it started, and stop signals (devhost.__main__,
devhost.cli, devhost.emulators)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner, Result

import devhost.__main__ as devhost_main
from demo.chaos import faulty_host
from demo.chaos.delivery import CHAOS_ENV, DeliveryFaults, FaultyQueueFactory, with_delivery_faults
from demo.services.bindings import demo_bindings_json
from devhost import emulators
from devhost.cli import StopSignal, driver_signals, one_line, stop_signals_interrupt
from devhost.host import DevHost
from devhost.settings import LocalSettings, load_settings
from orderflow.errors import TransientError
from orderflow.queues.memory import InMemoryQueueFactory
from orderflow.settings import Settings
from orderflow.stores.memory import (
    InMemoryAlertStore,
    InMemoryBreakerStore,
    InMemoryOrderStore,
    InMemoryStateStore,
)
from tests.unit.stop_signals import error_line, guarded

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
AZURITE = (
    "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=a2V5;"
    "QueueEndpoint=http://127.0.0.1:1/devstoreaccount1;BlobEndpoint=http://127.0.0.1:1/devstoreaccount1;"
)


@pytest.fixture
def signal_guard() -> Iterator[None]:
    with guarded():
        yield


@pytest.fixture
def environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Connection settings that parse, no chaos, no lease; logging, telemetry and the heap left alone; host id
    locks of the test's own (tests running at once all start host h1 against the same endpoint)."""
    for name in ("HOST_ID", "DEVHOST_CHAOS", "AGENT_QUEUE_PREFIX"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(devhost_main.LOCK_DIR_ENV, str(tmp_path))
    monkeypatch.setenv("STORAGE_CONNECTION_STRING", AZURITE)
    monkeypatch.setenv("COSMOS_ENDPOINT", "https://127.0.0.1:1/")
    monkeypatch.setenv("COSMOS_KEY", "a2V5")
    monkeypatch.setenv("SUPERVISOR_LEASE_ENABLED", "false")
    monkeypatch.setenv("SERVICE_BINDINGS", demo_bindings_json("http://127.0.0.1:1"))
    monkeypatch.setattr(devhost_main, "configure_logging", lambda level: None)
    monkeypatch.setattr(devhost_main, "configure_telemetry", lambda name: None)
    # The test process's collector is not the devhost's to freeze and retune.
    monkeypatch.setattr(devhost_main, "settle_heap", lambda: None)


@dataclass
class FakeStores:
    """In-memory stores in place of Cosmos DB, recording whether they were closed."""

    state: InMemoryStateStore = field(default_factory=InMemoryStateStore)
    orders: InMemoryOrderStore = field(default_factory=InMemoryOrderStore)
    breakers: InMemoryBreakerStore = field(default_factory=InMemoryBreakerStore)
    alerts: InMemoryAlertStore = field(default_factory=InMemoryAlertStore)
    closed: bool = False

    def close(self) -> None:
        self.closed = True


class RefusingQueues(InMemoryQueueFactory):
    """In-memory queues that refuse the agents' request queues, as Storage refuses an invalid name."""

    def queue(self, name: str) -> Any:
        if name.startswith("agent-") and not name.startswith("agent-responses"):
            raise ValueError(f"invalid queue name {name!r}")
        return super().queue(name)


def run_devhost(*args: str) -> Result:
    return CliRunner().invoke(devhost_main.cli, list(args))


def new_non_daemon_threads(before: set[threading.Thread]) -> list[str]:
    """Threads started since ``before`` that are still alive and would keep the process from exiting."""
    time.sleep(0.2)  # a stopped thread may take a moment to finish
    return [t.name for t in threading.enumerate() if t not in before and t.is_alive() and not t.daemon]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--roles", "bogus"], "error: --roles 'bogus': unknown roles: ['bogus']"),
        (["--roles", "starter"], "need the orchestrator role"),
        (["--roles", ","], "no roles given"),
        (["--log-level", "bogus"], "error: --log-level 'bogus': choose from DEBUG, INFO, WARNING"),
        (["--host-id", ""], "error: --host-id is empty"),
        (["--host-id", "BAD ID!"], "error: invalid host id 'BAD ID!' (--host-id or HOST_ID)"),
        (["--host-id", "H1"], "error: invalid host id 'H1'"),
        (["--host-id", "h" * 37], "at most 36 characters"),
    ],
)
def test_bad_arguments_are_refused_in_one_line_before_anything_connects(
    environment: None, monkeypatch: pytest.MonkeyPatch, args: list[str], expected: str
) -> None:
    connected: list[Settings] = []
    monkeypatch.setattr(devhost_main, "connect_stores", connected.append)

    result = run_devhost(*args)

    assert result.exit_code == 2, result.output
    assert expected in error_line(result)
    assert connected == []


@pytest.mark.parametrize(
    ("unset", "values", "expected"),
    [
        (("COSMOS_ENDPOINT",), {}, "error: COSMOS_ENDPOINT is not set"),
        (("COSMOS_ENDPOINT", "COSMOS_KEY"), {}, "error: COSMOS_ENDPOINT, COSMOS_KEY are not set"),
        ((), {"HOST_ID": ""}, "error: the host id (--host-id or HOST_ID) is empty"),
        ((), {"SUPERVISOR_LEASE_S": "5"}, "error: invalid settings: SUPERVISOR_LEASE_S: Input should be"),
        ((), {"COSMOS_KEY": "garbage"}, "error: invalid settings: COSMOS_KEY: should be base64"),
        (
            (),
            {"STORAGE_CONNECTION_STRING": "garbage"},
            "error: devhost local did not start: STORAGE_CONNECTION_STRING: Connection string is",
        ),
    ],
)
def test_unusable_settings_are_refused_in_one_line_with_status_2(
    environment: None,
    monkeypatch: pytest.MonkeyPatch,
    unset: tuple[str, ...],
    values: dict[str, str],
    expected: str,
) -> None:
    for name in unset:
        monkeypatch.delenv(name)
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    connected: list[Settings] = []
    monkeypatch.setattr(devhost_main, "connect_stores", connected.append)

    result = run_devhost()

    assert result.exit_code == 2, result.output
    assert error_line(result).startswith(expected)
    assert connected == []


def test_an_unreachable_store_is_one_line_with_status_1(
    environment: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unreachable(settings: Settings) -> FakeStores:
        raise TransientError("Cosmos DB unreachable for Cosmos DB account 'https://127.0.0.1:1/'")

    monkeypatch.setattr(devhost_main, "connect_stores", unreachable)

    result = run_devhost("--host-id", "h1")

    assert result.exit_code == 1, result.output
    assert error_line(result) == (
        "error: devhost h1 failed: [transient] Cosmos DB unreachable for Cosmos DB account "
        "'https://127.0.0.1:1/'"
    )


def test_a_host_id_held_by_a_live_process_is_refused_in_one_line_before_anything_connects(
    environment: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    connected: list[Settings] = []
    monkeypatch.setattr(devhost_main, "connect_stores", connected.append)
    held = devhost_main.hold_host_id(Settings.load(HOST_ID="h1"))  # as another live process would
    try:
        result = run_devhost("--host-id", "h1")
    finally:
        held.release()

    assert result.exit_code == 1, result.output
    assert error_line(result).startswith(
        f"error: devhost h1 did not start: host id 'h1' is in use by process {os.getpid()} on this machine "
        "against http://127.0.0.1:1/devstoreaccount1"
    )
    assert connected == [] and "ready" not in result.stdout


def test_a_start_up_that_fails_half_way_stops_what_it_started_and_exits_2(
    environment: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The orchestrator role (durabletask backend and worker) starts before the agents' queues are refused:
    # unless they are stopped, the worker's thread alone keeps the process alive for ever.
    stores = FakeStores()
    monkeypatch.setattr(devhost_main, "connect_stores", lambda connections: stores)
    monkeypatch.setattr(devhost_main, "connect_queues", lambda connections, clients: RefusingQueues())
    before = set(threading.enumerate())

    result = run_devhost("--host-id", "h1", "--roles", "all")

    assert result.exit_code == 2, result.output
    assert error_line(result) == "error: devhost h1 did not start: invalid queue name 'agent-courier'"
    assert "ready" not in result.stdout
    assert stores.closed
    assert new_non_daemon_threads(before) == []


def test_agents_without_a_binding_for_every_operation_refuse_the_start_in_one_line(
    environment: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    stores = FakeStores()
    monkeypatch.setattr(devhost_main, "connect_stores", lambda connections: stores)
    monkeypatch.setattr(devhost_main, "connect_queues", lambda connections, clients: InMemoryQueueFactory())
    monkeypatch.setenv("SERVICE_BINDINGS", demo_bindings_json("http://services.example.com"))

    result = run_devhost("--host-id", "h1", "--roles", "agents")

    assert result.exit_code == 2, result.output
    assert error_line(result) == (
        "error: devhost h1 did not start: SERVICE_BINDINGS courier: plain http to services.example.com, "
        "a public host: use https"
    )
    assert "ready" not in result.stdout
    assert stores.closed


def test_sigterm_stops_a_running_devhost_cleanly_with_status_0(
    environment: None, monkeypatch: pytest.MonkeyPatch, signal_guard: None
) -> None:
    stores = FakeStores()
    monkeypatch.setattr(devhost_main, "connect_stores", lambda connections: stores)
    monkeypatch.setattr(devhost_main, "connect_queues", lambda connections, clients: InMemoryQueueFactory())
    started: list[DevHost] = []
    real_start = DevHost.start

    def start_then_sigterm(host: DevHost) -> None:
        real_start(host)
        started.append(host)
        # Sent while the host waits, as `kill <pid>` would be.
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGTERM)).start()

    monkeypatch.setattr(DevHost, "start", start_then_sigterm)
    before = set(threading.enumerate())

    result = run_devhost("--host-id", "h1", "--roles", "all")

    assert result.exit_code == 0, result.output
    # "all" takes in the operator API, on a free loopback port (not configured here: it refuses calls).
    ready, api = result.stdout.strip().splitlines()
    assert re.fullmatch(r"devhost h1 operator API on http://127\.0\.0\.1:\d+", api), api
    assert ready == "devhost h1 ready"
    [host] = started
    assert host.stop_event.is_set()
    assert stores.closed
    assert new_non_daemon_threads(before) == []


def test_a_stop_signal_raises_what_ctrl_c_raises_once_and_the_handlers_are_restored(
    signal_guard: None,
) -> None:
    previous = signal.getsignal(signal.SIGTERM)

    with stop_signals_interrupt() as requests:
        with pytest.raises(KeyboardInterrupt) as raised:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # interrupted at once
        assert isinstance(raised.value, StopSignal)
        assert raised.value.signum == signal.SIGTERM
        assert str(raised.value) == "stopped by SIGTERM"
        assert requests.stopping
        # A second one (make forwards the SIGTERM timeout sent) must not cut the clean-up short.
        os.kill(os.getpid(), signal.SIGHUP)
        time.sleep(0.05)

    assert signal.getsignal(signal.SIGTERM) is previous


def test_a_stop_signal_whose_exception_was_dropped_still_ends_the_wait(signal_guard: None) -> None:
    # Python may run the handler inside a garbage-collector callback, which reports the exception as
    # unraisable and drops it: the devhost must stop anyway instead of waiting forever.
    done = threading.Event()
    with stop_signals_interrupt() as requests:
        handler = signal.getsignal(signal.SIGTERM)
        assert callable(handler)
        with pytest.raises(StopSignal):
            handler(signal.SIGTERM, None)  # the exception a gc callback would have swallowed
        with pytest.raises(StopSignal) as raised:
            requests.wait(done, poll_s=0.01)
    assert raised.value.signum == signal.SIGTERM
    assert not done.is_set()


def test_the_wait_returns_when_its_event_is_set_and_no_signal_came(signal_guard: None) -> None:
    done = threading.Event()
    threading.Timer(0.05, done.set).start()
    with stop_signals_interrupt() as requests:
        requests.wait(done, poll_s=0.01)
        requests.ignore_more()  # a clean-up began for another reason: no signal to raise
        requests.wait(done, poll_s=0.01)
    assert requests.signum is None


def test_sighup_raises_too_unless_a_clean_up_asked_to_ignore_more(signal_guard: None) -> None:
    with stop_signals_interrupt(), pytest.raises(StopSignal) as raised:
        os.kill(os.getpid(), signal.SIGHUP)
        time.sleep(5)
    assert raised.value.signum == signal.SIGHUP

    with stop_signals_interrupt() as requests:
        requests.ignore_more()
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.05)  # not interrupted


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_driver_stopped_by_a_signal_cleans_up_then_exits_128_plus_the_signal(
    signal_guard: None, sig: signal.Signals, code: int
) -> None:
    cleaned: list[str] = []
    app = typer.Typer()

    @app.command()
    def drive() -> None:
        with driver_signals():
            try:
                os.kill(os.getpid(), sig)
                time.sleep(5)
            finally:
                cleaned.append("children stopped")

    result = CliRunner().invoke(app, [])

    assert result.exit_code == code, result.output
    assert cleaned == ["children stopped"]
    assert error_line(result) == f"stopped by {sig.name}: everything the run started has been stopped"


DRIVER = """
import os, time
from pathlib import Path
import typer
from devhost.cli import driver_signals
from demo.fleet import DevhostSpec, Fleet, start_child

SLEEPER = "print('ready', flush=True); import time; time.sleep(120)"

def main(log_dir: Path) -> None:
    def start(spec, run):
        return start_child(spec.name, ["-c", SLEEPER], dict(os.environ), "ready", log_dir)

    with driver_signals():
        fleet = Fleet([DevhostSpec("a", "a", "all"), DevhostSpec("b", "b", "all")], {}, log_dir, start=start)
        try:
            print(" ".join(str(c.process.pid) for c in fleet.children.values()), flush=True)
            time.sleep(120)
        finally:
            fleet.stop()

typer.run(main)
"""


def test_sigterm_to_a_driver_process_stops_the_children_it_started_in_their_own_sessions(
    tmp_path: Path,
) -> None:
    # The children are in sessions of their own (as the demo's are): nothing but the driver's clean-up
    # stops them. Before SIGTERM took Ctrl-C's path they were left running, re-parented to PID 1.
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(tmp_path)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert driver.stdout is not None
        pids = [int(pid) for pid in driver.stdout.readline().split()]
        assert len(pids) == 2
        driver.send_signal(signal.SIGTERM)
        _, stderr = driver.communicate(timeout=60)
    finally:
        driver.kill()
        driver.wait()
    assert driver.returncode == 143, stderr
    assert "stopped by SIGTERM" in stderr
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_the_emulators_command_refuses_an_unknown_option(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    started: list[str] = []
    monkeypatch.setattr(emulators, "start_local_emulators", lambda: started.append("emulators"))

    with pytest.raises(SystemExit) as exited:
        emulators.main(["--bogus"])

    assert exited.value.code == 2
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err
    assert started == []


def test_the_emulators_command_reports_a_missing_emulator_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], signal_guard: None
) -> None:
    def missing() -> emulators.LocalEmulators:
        raise emulators.EmulatorError(f"node_modules/.bin/azurite not found: {emulators.INSTALL_HINT}")

    monkeypatch.setattr(emulators, "start_local_emulators", missing)

    assert emulators.main([]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: node_modules/.bin/azurite not found: {emulators.INSTALL_HINT}"]


def test_one_line_keeps_a_validation_errors_fields_and_problems() -> None:
    # One error lists them all: orderflow's settings (the consumers') before the local host's own.
    with pytest.raises(ValueError) as raised:
        load_settings({}, SUPERVISOR_LEASE_S=5, QUEUE_LOCK_S="soon")

    assert one_line(raised.value) == (
        "QUEUE_LOCK_S: Input should be a valid number, unable to parse string as a number; "
        "SUPERVISOR_LEASE_S: Input should be greater than or equal to 15"
    )


def test_the_host_wraps_its_queues_only_when_the_driver_that_runs_it_hands_it_a_wrapper(
    environment: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    plan = DeliveryFaults(duplicate_share=0.5, seed=1, log_dir=str(tmp_path))
    monkeypatch.setenv(CHAOS_ENV, plan.model_dump_json())
    settings = Settings.load(HOST_ID="h1")
    local = LocalSettings.load()
    queues, unwrapped, _ = devhost_main.connect_transport(settings, ["starter"], local=local)
    assert queues is unwrapped  # python -m devhost injects nothing, whatever the environment says
    queues, unwrapped, _ = devhost_main.connect_transport(
        settings, ["starter"], with_delivery_faults, local=local
    )
    assert isinstance(queues, FaultyQueueFactory) and queues.faults == plan

    served: list[object] = []
    monkeypatch.setattr(
        devhost_main,
        "serve",
        lambda settings, roles, *, local, api_port, wrap_queues: served.append(wrap_queues),
    )
    monkeypatch.setattr(sys, "argv", ["faulty_host", "--host-id", "h1", "--roles", "all"])
    with pytest.raises(SystemExit) as exited:
        faulty_host.main()
    assert exited.value.code == 0
    assert served == [with_delivery_faults]
    assert CliRunner().invoke(devhost_main.cli, ["--host-id", "h1"]).exit_code == 0
    assert served == [with_delivery_faults, None]
