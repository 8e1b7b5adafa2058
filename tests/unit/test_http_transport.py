"""One environment-free session per loopback emulator; the SDK's own transport everywhere else."""

from __future__ import annotations

import pytest
from azure.core.pipeline.transport import RequestsTransport

from orderflow.http_transport import POOL_SIZE, is_loopback, local_session, transport_for
from orderflow.queues.storage import StorageQueueFactory

pytestmark = pytest.mark.unit

AZURITE = (
    "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=a2V5;"
    "QueueEndpoint=http://127.0.0.1:10001/devstoreaccount1;"
)


def test_only_this_machine_is_loopback() -> None:
    assert is_loopback("http://127.0.0.1:10001/devstoreaccount1")
    assert is_loopback("https://localhost:8081/")
    assert is_loopback("http://[::1]:10001/")
    assert not is_loopback("https://orderflow.documents.azure.com:443/")
    assert not is_loopback("")


def test_a_local_session_reads_no_environment_and_pools_more_connections() -> None:
    session = local_session()
    assert session.trust_env is False
    adapter = session.get_adapter("http://127.0.0.1:10001/")
    assert adapter._pool_maxsize == POOL_SIZE  # type: ignore[attr-defined]
    assert adapter.max_retries.total is False  # type: ignore[attr-defined]
    assert session.get_adapter("https://localhost/") is adapter


def test_a_loopback_endpoint_gets_the_local_transport_and_azure_the_sdk_default() -> None:
    transport = transport_for("https://127.0.0.1:8081/")
    assert isinstance(transport, RequestsTransport)
    assert transport.session is not None and transport.session.trust_env is False
    assert transport_for("https://orderflow.queue.core.windows.net") is None


def test_the_azurite_queue_clients_share_the_local_session() -> None:
    factory = StorageQueueFactory.from_connection_string(AZURITE, creatable=lambda name: False)
    service = factory._service
    assert service is not None
    transport = service._pipeline._transport
    assert isinstance(transport, RequestsTransport)
    assert transport.session is not None and transport.session.trust_env is False
    factory.close()
