"""``python -m demo.run`` as a command: arguments refused up front in one line, runtime failures in
one line, SIGTERM taking Ctrl-C's clean-up path, and a log directory of its own per run (demo.run,
demo.config, demo.fleet)."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from demo import fleet as fleet_module
from demo import run as demo
from demo.config import DEMO_FAULTS, TPCH_ORDERS, check_run_args, new_run_dir
from demo.fleet import Child, DevhostSpec, Fleet, devhost_specs
from demo.outcome import INVARIANTS
from orderflow.settings import Settings
from tests.unit.stop_signals import error_line, guarded

pytestmark = pytest.mark.unit


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The runs the command started (none, unless a test replaces this stand-in)."""
    started: list[dict[str, Any]] = []

    def run_demo(**kwargs: Any) -> dict[str, Any]:
        started.append(kwargs)
        return dict.fromkeys(INVARIANTS, 0)

    monkeypatch.setattr(demo, "run_demo", run_demo)
    return started


def invoke(*args: str) -> Result:
    return CliRunner().invoke(demo.app, list(args))


def test_tpch_has_15000_orders_at_the_demo_scale() -> None:
    assert TPCH_ORDERS == 15_000


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--orders", "-5"], "error: --orders (ORDERS) must be at least 1, not -5"),
        (["--orders", "0"], "error: --orders (ORDERS) must be at least 1, not 0"),
        (["--orders", "999999"], "error: --orders (ORDERS) must be at most 15000, every order of the TPC-H"),
        (["--processes", "0"], "error: --processes (PROCESSES) must be at least 1, not 0"),
        (["--processes", "-1"], "error: --processes (PROCESSES) must be at least 1, not -1"),
        (["--kill-every", "-3"], "error: --kill-every (KILL_EVERY) must be seconds between kills, or 0"),
        (["--kill-every", "nan"], "error: --kill-every (KILL_EVERY) must be seconds between kills"),
        (["--timeout-s", "-1"], "error: --timeout-s must be more than 0 seconds"),
        (["--timeout-s", "0"], "error: --timeout-s must be more than 0 seconds"),
    ],
)
def test_bad_arguments_are_refused_in_one_line_before_anything_starts(
    runs: list[dict[str, Any]], args: list[str], expected: str
) -> None:
    result = invoke(*args)

    assert result.exit_code == 2, result.output
    assert error_line(result).startswith(expected)
    assert runs == []


def test_good_arguments_run_the_demo_with_them(runs: list[dict[str, Any]]) -> None:
    result = invoke("--orders", "15000", "--processes", "1", "--kill-every", "0", "--timeout-s", "30")

    assert result.exit_code == 0, result.output
    assert [(r["orders"], r["processes"], r["kill_every_s"], r["timeout_s"]) for r in runs] == [
        (15000, 1, 0.0, 30.0)
    ]


def test_keep_runs_the_demo_keeping_the_system_up(runs: list[dict[str, Any]]) -> None:
    kept = invoke("--orders", "5", "--keep")
    default = invoke("--orders", "5")

    assert (kept.exit_code, default.exit_code) == (0, 0)
    assert [r["keep"] for r in runs] == [True, False]


def test_the_demo_prints_the_console_url_and_how_to_sign_in(capsys: pytest.CaptureFixture[str]) -> None:
    demo.print_console("http://127.0.0.1:8090")

    printed = " ".join(capsys.readouterr().out.split())
    assert "web console: http://127.0.0.1:8090/api/operator/console/;" in printed
    assert "python -m devhost.local_issuer login --name <you> --role orderflow.operator" in printed


def test_keeping_up_waits_until_ctrl_c_then_returns(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        if len(slept) == 3:
            raise KeyboardInterrupt

    monkeypatch.setattr("demo.run.time.sleep", sleep)

    demo.keep_up("http://127.0.0.1:8090")  # returns: the demo then stops what it started

    assert slept == [1.0, 1.0, 1.0]


def test_the_library_entry_point_refuses_the_same_arguments() -> None:
    with pytest.raises(ValueError, match="--orders"):
        demo.run_demo(orders=0, processes=1, timeout_s=None, faults=DEMO_FAULTS)
    check_run_args(orders=1, processes=1, kill_every_s=0.0, timeout_s=None)  # the smallest run is fine


def test_a_run_that_cannot_start_is_one_line_with_status_1(monkeypatch: pytest.MonkeyPatch) -> None:
    def run_demo(**kwargs: Any) -> dict[str, Any]:
        raise RuntimeError("demo-services exited with 1; see .run/x/demo-services.log")

    monkeypatch.setattr(demo, "run_demo", run_demo)

    result = invoke("--orders", "5")

    assert result.exit_code == 1, result.output
    assert error_line(result) == "error: demo-services exited with 1; see .run/x/demo-services.log"


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_stop_signal_takes_the_clean_up_path_of_ctrl_c(
    monkeypatch: pytest.MonkeyPatch, sig: signal.Signals, code: int
) -> None:
    stopped: list[str] = []

    def run_demo(**kwargs: Any) -> dict[str, Any]:
        try:
            os.kill(os.getpid(), sig)  # as `timeout 120 make demo` would, mid-run
            time.sleep(5)
        finally:
            stopped.append("everything")  # the demo's ExitStack unwinds here
        raise AssertionError("not interrupted")

    monkeypatch.setattr(demo, "run_demo", run_demo)

    with guarded():
        result = invoke("--orders", "5")

    assert result.exit_code == code, result.output
    assert stopped == ["everything"]
    assert error_line(result).startswith(f"stopped by {sig.name}")


def test_runs_started_in_the_same_second_get_directories_of_their_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("demo.config.time.strftime", lambda fmt: "20261130-010203")

    dirs = [new_run_dir(root=tmp_path / ".run") for _ in range(3)] + [
        new_run_dir("bench-", root=tmp_path / ".run")
    ]

    assert [d.name for d in dirs] == [
        "20261130-010203",
        "20261130-010203-2",
        "20261130-010203-3",
        "bench-20261130-010203",
    ]
    assert all(d.is_dir() for d in dirs)


class Recorded:
    """Stand-in children: the third one fails to start."""

    def __init__(self) -> None:
        self.stopped: list[str] = []

    def start(self, spec: DevhostSpec, run: int) -> Child:
        if spec.name == "devhost-agents":
            raise RuntimeError("devhost-agents exited with 1")
        recorded = self

        class Started(Child):
            def stop(self, timeout_s: float = 15.0) -> None:
                recorded.stopped.append(self.name)

        return Started(spec.name, None, "ready", Path("x.log"))  # type: ignore[arg-type]


def test_a_fleet_whose_start_fails_stops_the_processes_it_had_started(tmp_path: Path) -> None:
    # Nobody holds the fleet yet to stop it: they would outlive the run in their own sessions.
    children = Recorded()

    with pytest.raises(RuntimeError, match="devhost-agents exited"):
        Fleet(devhost_specs(3), {}, tmp_path, start=children.start)

    assert children.stopped == ["devhost-1", "devhost-2"]


def test_the_fleet_starts_the_api_process_on_its_port_and_restarts_it_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    commands: list[list[str]] = []

    def start_child(name: str, args: list[str], *rest: Any, **options: Any) -> Child:
        commands.append(args)
        return Child(name, None, "ready", tmp_path / "x.log")  # type: ignore[arg-type]

    monkeypatch.setattr(fleet_module, "start_child", start_child)
    monkeypatch.setattr(Child, "kill", lambda self: None)
    fleet = Fleet(devhost_specs(2, api_port=8090), {}, tmp_path)
    fleet.kill_and_restart("devhost-1")

    roles = "submission,starter,orchestrator,listener,supervisor,api"
    api = ["-m", "devhost", "--host-id", "demo-1", "--roles", roles, "--api-port", "8090"]
    agents = ["-m", "devhost", "--host-id", "demo-agents", "--roles", "agents"]
    assert commands == [api, agents, api]


@pytest.fixture
def no_signal_handlers() -> Iterator[None]:
    # Sanity: the command restores the handlers it installed (a leak would change later tests).
    before = signal.getsignal(signal.SIGTERM)
    yield
    assert signal.getsignal(signal.SIGTERM) is before


def test_the_command_leaves_the_signal_handlers_as_it_found_them(
    runs: list[dict[str, Any]], no_signal_handlers: None
) -> None:
    assert invoke("--orders", "5").exit_code == 0
    assert len(runs) == 1


def test_a_kept_demo_writes_the_settings_its_clients_need(tmp_path: Path) -> None:
    env = {
        "STORAGE_CONNECTION_STRING": "UseDevelopmentStorage=true",
        "COSMOS_ENDPOINT": "https://127.0.0.1:8081/",
        "COSMOS_KEY": "a2V5",
        "COSMOS_VERIFY_TLS": "false",
        "CLIENTS": '[{"id": "demo", "replyQueue": "replies-demo"}]',
        "PATH": "/usr/bin",
    }

    path = demo.write_client_settings(env, "http://127.0.0.1:8090", tmp_path)

    written = json.loads(path.read_text(encoding="utf-8"))
    assert written == {
        **{k: v for k, v in env.items() if k != "PATH"},
        "ORDERFLOW_API_URL": "http://127.0.0.1:8090",
    }
    settings = Settings.load(env=written)  # what the CLI's --env-file reads them into
    assert [c.client_id for c in settings.clients.clients()] == ["demo"]
