"""The operator API's dead-letter routes on Azurite: reading, replaying or purging never creates a queue,
whatever name the path holds (docs/operator-api.md#dead-letter-queues)."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace

import pytest
from azure.storage.queue import QueueServiceClient

from devhost.emulators import LocalEndpoints
from operator_api.handler import OperatorResponse, handle_operator_request
from orderflow.clock import FakeClock
from orderflow.dependencies import Dependencies
from orderflow.operator_auth import OPERATOR_ROLE
from orderflow.queues.storage import StorageQueueFactory
from orderflow.settings import Settings
from tests.operator_tokens import TrustedIssuer
from tests.unit.fakes import memory_deps

pytestmark = pytest.mark.integration

BASE = "/api/operator/deadletters"


def _call(
    deps: Dependencies, trusted: TrustedIssuer, method: str, path: str, body: object = None
) -> OperatorResponse:
    raw = b"" if body is None else json.dumps(body).encode()
    headers = trusted.bearer("otto", OPERATOR_ROLE)
    return handle_operator_request(method, path, headers, raw, deps=deps, validator=trusted.validator)


def test_no_dead_letter_route_creates_a_queue(
    local_endpoints: LocalEndpoints, trusted: TrustedIssuer
) -> None:
    run = uuid.uuid4().hex[:8]
    overrides = {
        "CLIENTS": json.dumps([{"id": f"c{run}"}]),
        "AGENT_QUEUE_PREFIX": f"agent-{run}-",
        "AGENT_RESPONSES_QUEUE": f"agent-responses-{run}",
        "HOST_ID": "h1",
    }
    settings = Settings.load(env={}, **overrides)
    queues = StorageQueueFactory.from_connection_string(
        local_endpoints.storage_connection_string, creatable=settings.is_deployment_queue
    )
    deps = replace(memory_deps(FakeClock(), **overrides), queues=queues, dead_letters=queues)
    (client,) = settings.clients()
    inbound = client.inbound_queue
    queues.queue(inbound)  # the inbound queue exists, as a running host makes it; its dead-letter queue not
    account = QueueServiceClient.from_connection_string(local_endpoints.storage_connection_string)

    def names() -> set[str]:
        return {q.name for q in account.list_queues() if run in q.name}

    before = names()
    forged = [f"agent-responses-{run}-anything-at-all", f"{inbound}-deadletter", f"agent-{run}-nosuch"]
    refused = [
        _call(deps, trusted, method, f"{BASE}/{name}{suffix}", body)
        for name in forged
        for method, suffix, body in [
            ("GET", "", None),
            ("GET", "/0001", None),
            ("POST", "/0001/replay", None),
            ("POST", "/purge", {"deadLetterId": "0001"}),
        ]
    ]
    listed = _call(deps, trusted, "GET", f"{BASE}/{inbound}")
    shown = _call(deps, trusted, "GET", f"{BASE}/{inbound}/0001")
    replayed = _call(deps, trusted, "POST", f"{BASE}/{inbound}/0001/replay")
    purged = _call(deps, trusted, "POST", f"{BASE}/{inbound}/purge", {"olderThan": "2030-01-01T00:00:00Z"})
    after = names()
    queues.close()
    account.close()

    assert before == {inbound}
    assert {(r.status, r.body["error"]["code"]) for r in refused} == {(404, "UnknownQueue")}
    assert (listed.status, listed.body["deadLetters"], listed.body["continuation"]) == (200, [], None)
    assert (shown.status, shown.body["error"]["code"]) == (404, "NoSuchDeadLetter")
    assert (replayed.status, replayed.body["error"]["code"]) == (404, "NoSuchDeadLetter")
    assert (purged.status, purged.body["count"]) == (200, 0)
    assert after == before
