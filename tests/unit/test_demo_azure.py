"""``orderflow demo --azure`` before it reaches a deployment: azd's settings read as azd writes them, the
environment found as azd keeps it, and what the command refuses in one line."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
from pathlib import Path
from unittest.mock import MagicMock

import httpx
import pytest
from azure.core.credentials import AccessToken
from typer.testing import CliRunner

from demo.azure import azd_env_file, connect, failed_invariants, parse_env_text, tagged
from demo.outcome import INVARIANTS
from demo.tpch import load_catalog
from orderflow.queues.servicebus import ServiceBusQueueFactory
from orderflow_client.cli import app
from tests.harness import TPCH_FIXTURE

pytestmark = pytest.mark.unit


def test_azd_get_values_output_is_read_with_its_escapes() -> None:
    text = (
        'AZURE_ENV_NAME="dev"\n'
        "# a comment\n\n"
        'CLIENTS="[{\\"id\\":\\"demo\\",\\"inboundQueue\\":\\"orders-demo\\"}]"\n'
        'WINDOWS_PATH="C:\\\\temp"\n'
        "BARE=value\n"
    )
    env = parse_env_text(text)
    assert env == {
        "AZURE_ENV_NAME": "dev",
        "CLIENTS": '[{"id":"demo","inboundQueue":"orders-demo"}]',
        "WINDOWS_PATH": "C:\\temp",
        "BARE": "value",
    }
    assert json.loads(env["CLIENTS"])[0]["id"] == "demo"


def test_json_settings_and_local_settings_are_read_too() -> None:
    assert parse_env_text('{"A": "1", "B": 2}') == {"A": "1", "B": "2"}
    assert parse_env_text('{"IsEncrypted": false, "Values": {"A": "1"}}') == {"A": "1"}
    with pytest.raises(ValueError, match="line 2 is not NAME=value"):
        parse_env_text('A="1"\nnot a setting\n')
    with pytest.raises(ValueError, match="not a JSON object"):
        parse_env_text('{"Values": []}')


def test_the_azd_environment_is_the_named_one_or_azds_default(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="azd up first"):
        azd_env_file(tmp_path)
    (tmp_path / ".azure" / "dev").mkdir(parents=True)
    (tmp_path / ".azure" / "dev" / ".env").write_text('A="1"\n')
    (tmp_path / ".azure" / "config.json").write_text('{"version": 1, "defaultEnvironment": "dev"}')
    assert azd_env_file(tmp_path) == tmp_path / ".azure" / "dev" / ".env"
    with pytest.raises(FileNotFoundError, match="prod"):
        azd_env_file(tmp_path, "prod")


def test_each_run_tags_its_order_ids_and_keeps_their_data() -> None:
    catalog = load_catalog(TPCH_FIXTURE, orders=None, stock_divisor=1)
    run = tagged(catalog, "a1b2c3")
    assert [o.order_id for o in run.orders] == [f"{o.order_id}-a1b2c3" for o in catalog.orders]
    assert [(o.amount, o.items) for o in run.orders] == [(o.amount, o.items) for o in catalog.orders]
    assert run.stock == catalog.stock


def test_a_deployment_without_demo_services_or_the_client_is_refused() -> None:
    catalog = load_catalog(TPCH_FIXTURE, orders=None, stock_divisor=1)
    clients = json.dumps([{"id": "demo"}, {"id": "acme"}])
    with (
        pytest.raises(ValueError, match="--client is needed: CLIENTS registers 2 clients"),
        connect({"CLIENTS": clients, "DEMO_SERVICES_ENDPOINT": "https://x"}, catalog),
    ):
        pass
    with (
        pytest.raises(ValueError, match="--client 'zeta' is not a registered client"),
        connect({"CLIENTS": clients, "DEMO_SERVICES_ENDPOINT": "https://x"}, catalog, client_id="zeta"),
    ):
        pass
    with (
        pytest.raises(ValueError, match="DEMO_SERVICES_ENDPOINT is not set"),
        connect({"CLIENTS": clients}, catalog, client_id="demo"),
    ):
        pass


def test_the_invariants_are_make_demos() -> None:
    report = dict.fromkeys(INVARIANTS, 0) | {"processed": 7}
    assert failed_invariants(report) == []
    assert failed_invariants(report | {"mismatched": 2, "timed_out": 1}) == ["timed_out", "mismatched"]


def test_the_command_needs_azure_and_usable_settings(tmp_path: Path) -> None:
    runner = CliRunner()
    local = runner.invoke(app, ["demo"])
    assert local.exit_code == 2 and "make demo" in local.output
    broken = tmp_path / "settings.env"
    broken.write_text("not a setting\n")
    result = runner.invoke(app, ["demo", "--azure", "--env-file", str(broken)])
    assert result.exit_code == 2 and "line 1 is not NAME=value" in result.output
    empty = tmp_path / "empty.env"
    empty.write_text('CLIENTS="[{\\"id\\": \\"demo\\"}]"\n')
    result = runner.invoke(app, ["demo", "--azure", "--env-file", str(empty), "--orders", "1"])
    assert result.exit_code == 2 and "DEMO_SERVICES_ENDPOINT is not set" in result.output


class FakeCredential:
    """A TokenCredential that hands out one token per scope and records the scopes asked."""

    def __init__(self) -> None:
        self.scopes: list[str] = []

    def get_token(self, *scopes: str, **kwargs: object) -> AccessToken:
        self.scopes.extend(scopes)
        return AccessToken(f"token-for-{scopes[0]}", int(time.time()) + 3600)


def test_a_deployment_is_reached_with_the_deployers_identity(monkeypatch: pytest.MonkeyPatch) -> None:
    credential = FakeCredential()
    stores = MagicMock()
    monkeypatch.setattr("demo.azure._azure_credential", lambda: credential)
    monkeypatch.setattr(
        "demo.azure._state_store", lambda settings, cred: stores if cred is credential else None
    )
    env = {
        "CLIENTS": json.dumps([{"id": "demo"}]),
        "SERVICEBUS__fullyQualifiedNamespace": "sb-x.servicebus.windows.net",
        "COSMOS_ENDPOINT": "https://cosmos-x.documents.azure.com:443/",
        "DEMO_SERVICES_ENDPOINT": "https://func-demo-x.azurewebsites.net/",
        "DEMO_SERVICES_SCOPE": "api://66666666-7777-4888-8999-aaaaaaaaaaaa/.default",
    }
    catalog = load_catalog(TPCH_FIXTURE, orders=None, stock_divisor=1)
    with connect(env, catalog) as deployment:
        assert isinstance(deployment.client._queues, ServiceBusQueueFactory)
        assert deployment.client._queues._admin is None  # the deployer holds data roles, not Manage
        assert (deployment.client.orders_queue, deployment.client.reply_queue) == (
            "orders-demo",
            "replies-demo",
        )
        assert deployment.stores.state is stores.state
        assert deployment.services_url == "https://func-demo-x.azurewebsites.net"
        seen: list[str] = []

        def answer(request: httpx.Request) -> httpx.Response:
            seen.append(request.headers["Authorization"])
            return httpx.Response(200)

        transport = httpx.MockTransport(answer)
        with httpx.Client(transport=transport, auth=deployment.services_auth) as http:
            http.get("https://func-demo-x.azurewebsites.net/audit")
    assert seen == [f"Bearer token-for-{env['DEMO_SERVICES_SCOPE']}"]
    assert credential.scopes == [env["DEMO_SERVICES_SCOPE"]]
    stores.close.assert_called_once()


def test_make_demo_azure_runs_its_command_from_a_checkout() -> None:
    # The installed console script does not see the checkout's demo package; the make target must.
    root = Path(__file__).resolve().parents[2]
    # Under make test, the outer make's flags would add "Entering directory" lines to the dry run.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    dry = subprocess.run(
        ["make", "--no-print-directory", "-n", "demo-azure", "ORDERS=1", "AZD_ENV=no-such-environment"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    command = dry.stdout.replace("\\\n", " ").strip().splitlines()[-1]
    ran = subprocess.run(
        shlex.split(command), check=False, cwd=root, capture_output=True, text=True, timeout=120
    )
    assert ran.returncode == 2, ran.stdout + ran.stderr
    assert "no azd environment file" in ran.stdout + ran.stderr
    assert "No module named" not in ran.stdout + ran.stderr


def test_without_an_azd_environment_or_local_settings_the_command_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CLIENTS", raising=False)
    result = CliRunner().invoke(app, ["demo", "--azure", "--orders", "1"])
    assert result.exit_code == 2
    assert "no azd environment" in result.output
