"""What Azurite enforces of the credentials the devhost issues to registered clients (docs/clients.md).

Each client holds a queue-scoped service SAS with *add* on its inbound queue and *read + process* on its
reply queue (:mod:`devhost.client_credentials`). Measured here against Azurite itself, not assumed: what
one client's tokens may and may not do on its own and another client's queues.
"""

from __future__ import annotations

import json
import uuid

import pytest
from azure.core.exceptions import HttpResponseError
from azure.storage.queue import QueueClient, QueueServiceClient

from devhost.client_credentials import ClientCredentials, connection_strings, issue_client_credentials
from devhost.emulators import LocalEndpoints
from devhost.queues.factory import StorageQueueFactory
from orderflow.errors import PermanentError
from orderflow.settings import Settings
from orderflow_client.client import OrderflowClient
from tests.unit.fakes import order_body

pytestmark = pytest.mark.integration


def _refused(action: object) -> int:
    """Call ``action`` and return the HTTP status Azurite refused it with."""
    with pytest.raises(HttpResponseError) as refused:
        action()  # type: ignore[operator]
    assert refused.value.status_code is not None
    return refused.value.status_code


def _with_sas_of(credentials_url: str, other_queue_url: str) -> QueueClient:
    """A client of ``other_queue_url`` carrying the SAS of ``credentials_url`` (a token used elsewhere)."""
    sas = credentials_url.split("?", 1)[1]
    return QueueClient.from_queue_url(f"{other_queue_url.split('?', 1)[0]}?{sas}")


@pytest.fixture
def two_clients(local_endpoints: LocalEndpoints) -> tuple[ClientCredentials, ClientCredentials]:
    run = uuid.uuid4().hex[:8]
    settings = Settings.load(env={}, CLIENTS=json.dumps([{"id": f"a{run}"}, {"id": f"b{run}"}]))
    a, b = settings.clients.clients()
    connection = local_endpoints.storage_connection_string
    return issue_client_credentials(connection, a), issue_client_credentials(connection, b)


def test_a_client_token_works_only_on_its_own_queues_for_its_own_purpose(
    two_clients: tuple[ClientCredentials, ClientCredentials],
) -> None:
    a, b = two_clients
    inbound = QueueClient.from_queue_url(a.inbound_url)
    inbound.send_message("hello")  # add on its own inbound queue: allowed

    # The inbound token: refused on another client's inbound queue, and for receiving from its own.
    assert _refused(lambda: _with_sas_of(a.inbound_url, b.inbound_url).send_message("x")) == 403
    assert _refused(lambda: list(inbound.receive_messages())) == 403
    assert _refused(lambda: list(inbound.peek_messages())) == 403
    # ... and for sending to its own reply queue (replies are the app's to send).
    assert _refused(lambda: _with_sas_of(a.inbound_url, a.reply_url).send_message("x")) == 403
    # ... and for creating a queue on demand.
    fresh = a.inbound_url.split("?", 1)[0].rsplit("/", 1)[0] + f"/new-{uuid.uuid4().hex[:8]}"
    assert _refused(lambda: _with_sas_of(a.inbound_url, fresh).create_queue()) == 403

    # The reply token: receives from its own reply queue, refused on another client's, refused to send.
    reply = QueueClient.from_queue_url(a.reply_url)
    assert list(reply.receive_messages()) == []
    assert _refused(lambda: list(_with_sas_of(a.reply_url, b.reply_url).receive_messages())) == 403
    assert _refused(lambda: reply.send_message("forged reply")) == 403

    # A tampered signature is refused.
    tampered = a.inbound_url.replace("sig=", "sig=A", 1)
    assert _refused(lambda: QueueClient.from_queue_url(tampered).send_message("x")) == 403


def test_the_sdk_submits_and_reads_replies_with_only_the_two_tokens(
    local_endpoints: LocalEndpoints, two_clients: tuple[ClientCredentials, ClientCredentials]
) -> None:
    a, _ = two_clients
    client = OrderflowClient(a.queues(), reply_queue=a.reply_queue, orders_queue=a.inbound_queue)

    client.submit(json.loads(order_body("o-1")))
    assert client.poll() == []

    # What the submission role sees on the inbound queue (with the devhost's own key).
    app = StorageQueueFactory.from_connection_string(local_endpoints.storage_connection_string)
    [message] = app.queue(a.inbound_queue).receive()
    assert json.loads(message.body)["replyTo"] == a.reply_queue
    # The client's factory has no credential for any other queue.
    with pytest.raises(PermanentError):
        a.queues().queue("agent-responses")


def test_a_sas_only_connection_string_opens_its_queue_without_creating_it(
    two_clients: tuple[ClientCredentials, ClientCredentials],
) -> None:
    a, _ = two_clients
    inbound, reply = connection_strings(a)  # what `python -m devhost.client_credentials` prints
    queues = StorageQueueFactory.from_connection_string(inbound)

    queues.queue(a.inbound_queue).send("{}", message_id="m-1")  # no create_queue: the SAS may not

    with pytest.raises(PermanentError):  # the queue exists; the SAS is for another
        queues.queue(a.reply_queue).send("{}", message_id="m-2")
    replies = StorageQueueFactory.from_connection_string(reply)
    assert replies.queue(a.reply_queue).receive() == []  # the reply SAS reads its queue
    with pytest.raises(PermanentError):
        replies.queue(a.reply_queue).send("{}", message_id="m-3")  # and may not write to it


def test_a_client_token_cannot_forge_an_agent_request_or_response(
    local_endpoints: LocalEndpoints, two_clients: tuple[ClientCredentials, ClientCredentials]
) -> None:
    # The attack: a refund request on an agent's queue, or a declined-card answer on the response
    # queue, sent with the only credentials a client holds.
    a, _ = two_clients
    run = uuid.uuid4().hex[:8]
    settings = Settings.load(
        env={}, AGENT_QUEUE_PREFIX=f"agent-{run}-", AGENT_RESPONSES_QUEUE=f"agent-responses-{run}"
    )
    app = StorageQueueFactory.from_connection_string(local_endpoints.storage_connection_string)
    account_url = a.inbound_url.split("?", 1)[0].rsplit("/", 1)[0]
    for name in (settings.queues.agent_queue("payment"), settings.queues.AGENT_RESPONSES_QUEUE):
        queue = app.queue(name)  # the app's own queue exists
        forged = _with_sas_of(a.inbound_url, f"{account_url}/{name}")
        assert _refused(lambda forged=forged: forged.send_message('{"type": "AgentResponse"}')) == 403
        assert queue.approximate_count() == 0  # nothing reached an agent or a listener


def test_the_app_creates_its_own_queues_only(local_endpoints: LocalEndpoints) -> None:
    # A reply queue an earlier record names (or any name) is not created because the app sends to it.
    run = uuid.uuid4().hex[:8]
    settings = Settings.load(env={}, CLIENTS=json.dumps([{"id": f"c{run}"}]))
    (client,) = settings.clients.clients()
    app = StorageQueueFactory.from_connection_string(
        local_endpoints.storage_connection_string, creatable=settings.clients.is_deployment_queue
    )
    app.queue(client.reply_queue).send("a reply", message_id="m-1")  # the registry's: created
    stray = f"old-replies-{run}"
    with pytest.raises(PermanentError) as refused:
        app.queue(stray).send("a reply", message_id="m-2")
    assert refused.value.code == "QueueNotFound"
    account = QueueServiceClient.from_connection_string(local_endpoints.storage_connection_string)
    names = {q.name for q in account.list_queues(name_starts_with=f"c{run}")} | {
        q.name for q in account.list_queues(name_starts_with="old-replies-")
    }
    assert stray not in names
    assert app.queue(client.reply_queue).approximate_count() == 1
