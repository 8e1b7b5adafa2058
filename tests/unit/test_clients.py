"""The client registry (``CLIENTS``): defaults, lookups, and every registry that would let one client
receive another's replies or write to orderflow's own queues refused at start-up, in one line."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from orderflow.clients import ClientRegistry, RegisteredClient, parse_clients
from orderflow.records import RetryBudget, StateRecord
from orderflow.settings import Settings, describe_invalid_settings

pytestmark = pytest.mark.unit

AT = datetime(2026, 12, 1, tzinfo=UTC)


def _load(clients: list[dict[str, object]]) -> Settings:
    return Settings.load({"CLIENTS": json.dumps(clients)})


def test_only_the_id_is_required_and_the_queues_follow_from_it() -> None:
    settings = _load([{"id": "acme", "maxInFlight": 5}, {"id": "globex", "replyQueue": "globex-out"}])
    acme = settings.clients.client("acme")
    assert (acme.inbound_queue, acme.reply_queue, acme.max_in_flight) == ("orders-acme", "replies-acme", 5)
    assert settings.clients.clients().for_inbound_queue("orders-globex") == settings.clients.client("globex")
    assert settings.clients.client("globex").reply_queue == "globex-out"
    assert settings.clients.clients().for_inbound_queue("orders") is None
    assert len(Settings.load({}).clients.clients()) == 0


@pytest.mark.parametrize(
    "principal",
    [
        "0A1B2C3D-0000-4000-8000-000000000001",
        "{0a1b2c3d-0000-4000-8000-000000000001}",
        "urn:uuid:0a1b2c3d-0000-4000-8000-000000000001",
        "0a1b2c3d000040008000000000000001",
    ],
)
def test_a_principal_id_is_kept_in_entras_form_whatever_form_it_was_written_in(principal: str) -> None:
    client = RegisteredClient.model_validate({"id": "a", "principalId": principal})
    assert client.principal_id == "0a1b2c3d-0000-4000-8000-000000000001"


@pytest.mark.parametrize(
    ("clients", "problem"),
    [
        ("not json", "should be a JSON list of clients"),
        ('{"id": "a"}', "should be a JSON list of clients"),
        ('[{"id": "Acme"}]', "entry 0 (id): should be 1-32 lowercase letters"),
        ('[{"id": "a--b"}]', "single hyphens"),
        ('[{"id": "a", "extra": 1}]', "entry 0 (extra)"),
        ('[{"id": "a", "maxInFlight": 0}]', "entry 0 (maxInFlight)"),
        ('[{"id": "a", "principalId": "acme-app"}]', "a GUID"),
        ('[{"id": "a", "replyQueue": "Not_A_Queue"}]', "not a valid queue name"),
        ('[{"id": "a", "replyQueue": "orders-a"}]', "its inbound and reply queues are the same"),
        ('[{"id": "a"}, {"id": "a"}]', "client id 'a' is registered twice"),
        # One client's reply queue is another's inbound: the first would read the second's orders.
        ('[{"id": "a", "replyQueue": "orders-b"}, {"id": "b"}]', "already the reply queue of client 'a'"),
        # Two clients sharing a reply queue would read each other's replies.
        ('[{"id": "a", "replyQueue": "shared"}, {"id": "b", "replyQueue": "shared"}]', "already"),
        ('[{"id": "a", "replyQueue": "agent-payment"}]', "an agent request queue"),
        ('[{"id": "a", "replyQueue": "agent-responses-h1"}]', "an agent response queue"),
        ('[{"id": "a", "replyQueue": "replies-a-deadletter"}]', "a dead-letter queue"),
    ],
)
def test_an_unsafe_registry_is_refused_in_one_line(clients: str, problem: str) -> None:
    with pytest.raises(ValidationError) as refused:
        Settings.load({"CLIENTS": clients})
    line = describe_invalid_settings(refused.value)
    assert line.startswith("CLIENTS=") and "\n" not in line
    assert problem in line


def test_the_reserved_queues_follow_the_queue_settings() -> None:
    with pytest.raises(ValidationError, match="an agent request queue"):
        Settings.load({"AGENT_QUEUE_PREFIX": "work-", "CLIENTS": '[{"id": "a", "replyQueue": "work-a"}]'})
    assert Settings.load({"CLIENTS": '[{"id": "a", "replyQueue": "agent-a"}]', "AGENT_QUEUE_PREFIX": "w-"})


def initial_state_json(*, reply_to: str) -> dict[str, object]:
    """A stored state record of client ``acme``'s order ``o-1``, as JSON."""
    return StateRecord(
        id="acme:o-1",
        order_id="acme:o-1",
        client_id="acme",
        reply_to=reply_to,
        retry_budget=RetryBudget(limit=24),
        workflow_version="order-v1",
        created_at=AT,
        updated_at=AT,
    ).to_json_dict()


def test_a_record_is_owned_by_the_client_it_records_and_one_without_a_client_id_by_nobody() -> None:
    acme, globex = parse_clients('[{"id": "acme"}, {"id": "globex"}]')
    assert acme.owns("acme") and not acme.owns("globex") and not globex.owns("acme")
    # Not even by the client whose reply queue it answers on: the order's body names that queue.
    stored = initial_state_json(reply_to=acme.reply_queue)
    for without in ({k: v for k, v in stored.items() if k != "clientId"}, {**stored, "clientId": None}):
        with pytest.raises(ValidationError, match="clientId"):
            StateRecord.model_validate(without)
    assert StateRecord.model_validate(stored).client_id == "acme"


def test_the_registry_is_looked_up_by_id_and_inbound_queue() -> None:
    registry = ClientRegistry(parse_clients('[{"id": "a"}, {"id": "b"}]'))
    assert [c.client_id for c in registry] == ["a", "b"]
    assert registry.is_reply_queue("replies-b") and not registry.is_reply_queue("orders-b")
    with pytest.raises(KeyError):
        registry.get("c")
