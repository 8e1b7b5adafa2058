"""``orderflow demo --azure`` against the local host: the driver of a deployment runs its whole code path
(settings file as azd writes it, the client's own queue credentials, replies watched, the state store and
the demo services read) on the emulators, and reports what ``make demo`` reports, key for key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from demo.faults import FaultPlan
from demo.outcome import INVARIANTS, build_report
from demo.run import CLIENT_SETTINGS
from demo.system import demo_system, submit_and_settle
from orderflow_client.cli import app

# Runs devhost processes under a deadline: one xdist worker runs all such tests in turn (Makefile).
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("devhost_processes")]

ORDERS = 8


def _azd_env_file(values: dict[str, str], path: Path) -> Path:
    """``values`` as ``azd env get-values`` prints them: ``NAME="value"``, quotes and backslashes escaped."""
    escaped = {name: value.replace("\\", "\\\\").replace('"', '\\"') for name, value in values.items()}
    lines = [f'{name}="{value}"' for name, value in escaped.items()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_the_azure_driver_reports_make_demos_keys_against_the_local_host(tmp_path: Path) -> None:
    with demo_system(orders=ORDERS, processes=1, faults=FaultPlan(), run_dir=tmp_path) as system:
        settings = {name: system.env[name] for name in CLIENT_SETTINGS if name in system.env}
        env_file = _azd_env_file(
            {**settings, "DEMO_SERVICES_ENDPOINT": system.services_url}, tmp_path / ".env"
        )
        report_path = tmp_path / "demo-azure-report.json"
        result = CliRunner().invoke(
            app,
            [
                "demo",
                "--azure",
                "--env-file",
                str(env_file),
                "--orders",
                str(ORDERS),
                "--report",
                str(report_path),
            ],
        )
        assert result.exit_code == 0, result.output
        azure = json.loads(report_path.read_text(encoding="utf-8"))

        # make demo's report of the same system, built as demo.run.run_demo builds it.
        client = system.sdk_client(system.clients[0])
        settling = submit_and_settle(system, [client], budget_s=180.0)
        local, mismatched = build_report(system, [client], settling, processes=1, kills=0)

    assert list(azure) == list(local)
    assert (azure["submitted"], local["submitted"]) == (ORDERS, ORDERS)
    assert azure["final_replies"] == ORDERS
    assert azure["processed"] + azure["compensated"] == ORDERS  # only this run's orders are counted
    assert {key: azure[key] for key in INVARIANTS} == dict.fromkeys(INVARIANTS, 0)
    assert {key: local[key] for key in INVARIANTS} == dict.fromkeys(INVARIANTS, 0), mismatched
