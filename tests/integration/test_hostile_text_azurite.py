"""A client's hostile text through the intake on Azurite's Storage queues (the envelope and dead-letter
records the local host really keeps), then the local host's operator API over loopback and the CLI:
valid UTF-8 JSON of the documented shape, and no raw control character on the operator's output."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import replace

import httpx
import pytest
from typer.testing import CliRunner

from devhost.emulators import LocalEndpoints
from devhost.operator_http import create_operator_app
from devhost.queues.factory import StorageQueueFactory
from devhost.serving import serve_in_thread, server_url, stop
from operator_api.routing import OperatorApiSections
from operator_api.schemas import DeadLetterAnswer, DeadLetterList, PurgeAnswer
from orderflow.clients import RegisteredClient
from orderflow.clock import FakeClock
from orderflow.operator_auth import OPERATOR_ROLE
from orderflow.settings import Settings
from orderflow_client import cli
from tests.host_deps import HostDeps
from tests.hostile_text import hostile_cases, raw_controls, send_hostile
from tests.operator_tokens import TrustedIssuer
from tests.unit.fakes import memory_deps

pytestmark = pytest.mark.integration


@pytest.fixture
def on_azurite(local_endpoints: LocalEndpoints) -> Iterator[tuple[HostDeps, RegisteredClient]]:
    """In-memory stores, Azurite's queues, and a client of this test's own (its queues are new)."""
    overrides = {"CLIENTS": json.dumps([{"id": f"h{uuid.uuid4().hex[:10]}"}]), "HOST_ID": "h1"}
    settings = Settings.load(env={}, **overrides)
    queues = StorageQueueFactory.from_connection_string(
        local_endpoints.storage_connection_string, creatable=settings.clients.is_deployment_queue
    )
    (client,) = settings.clients.clients()
    try:
        yield replace(memory_deps(FakeClock(), **overrides), queues=queues, dead_letters=queues), client
    finally:
        queues.close()


@hostile_cases
def test_hostile_text_on_storage_queues_is_answered_as_json_and_shown_safely(
    on_azurite: tuple[HostDeps, RegisteredClient], trusted: TrustedIssuer, hostile: str
) -> None:
    deps, client = on_azurite
    inbound = client.inbound_queue
    send_hostile(deps, hostile, client=client)
    token = trusted.issuer.mint(name="otto", roles=[OPERATOR_ROLE])
    server, thread = serve_in_thread(
        create_operator_app(deps, OperatorApiSections.of(deps.settings), trusted.validator)
    )
    try:
        url = server_url(server)
        with httpx.Client(
            base_url=f"{url}/api/operator", headers={"Authorization": f"Bearer {token}"}
        ) as api:
            listed = api.get(f"/deadletters/{inbound}")
            ids = [d["deadLetterId"] for d in json.loads(listed.content.decode("utf-8"))["deadLetters"]]
            shown = [api.get(f"/deadletters/{inbound}/{dead_id}") for dead_id in ids]
            dry_run = api.post(
                f"/deadletters/{inbound}/purge", json={"olderThan": "2999-01-01T00:00:00Z", "dryRun": True}
            )
        env = {"ORDERFLOW_API_URL": url, "ORDERFLOW_TOKEN": token, "COLUMNS": "250"}
        outputs = [
            CliRunner().invoke(cli.app, ["deadletters", *args], env=env)
            for args in (["list", inbound], ["show", inbound, ids[0]])
        ]
    finally:
        stop(server, thread)

    assert (listed.status_code, dry_run.status_code) == (200, 200)
    DeadLetterList.model_validate(json.loads(listed.content.decode("utf-8")))
    assert PurgeAnswer.model_validate(json.loads(dry_run.content.decode("utf-8"))).count == 3
    for answer in shown:
        assert answer.status_code == 200
        DeadLetterAnswer.model_validate(json.loads(answer.content.decode("utf-8")))
    for result in outputs:
        assert result.exit_code == 0, result.output[:500]
        assert raw_controls(result.stdout_bytes) == []
