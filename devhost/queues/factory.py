"""Opens Storage queues by name and reads and removes their dead letters: the local host's queue factory
(Azurite), built from a connection string, an account URL or per-queue SAS URLs."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from azure.core.credentials import AzureNamedKeyCredential, AzureSasCredential, TokenCredential
from azure.core.exceptions import AzureError, ResourceExistsError
from azure.storage.queue import ExponentialRetry, QueueClient, QueueServiceClient

from devhost.http_transport import transport_for
from devhost.queues.dead_letter_scan import decode_received, scan_dead_letters
from devhost.queues.storage import StorageQueue, is_missing_queue, message_count, translate_error
from orderflow.errors import PermanentError
from orderflow.queues.base import DeadLetter, DeadLetterPage, dead_letter_queue_name
from orderflow.queues.wire import (
    MAX_RECEIVE_BATCH,
    decode_dead_letter,
    page_of_dead_letters,
    receive_batch_size,
    validate_queue_name,
)

DEFAULT_RETRY_TOTAL = 2
DEFAULT_CONNECTION_TIMEOUT_S = 5
DEFAULT_READ_TIMEOUT_S = 10


class StorageQueueFactory:
    """Creates :class:`StorageQueue` objects by name, creating each queue on first use when its credential
    may (an account key or identity); with a SAS it only opens queues that exist.

    The SDK's retry policy is cut to ``retry_total`` quick retries (default 2, about 1 s then 3 s)
    instead of its default of three retries 15-24 s apart: consumer loops retry on their own and the
    order's retry budget is end-to-end (docs/design.md §2), so a long hidden retry in the SDK would only hold
    a message lock and a worker thread while the caller cannot react. Transport timeouts are short for
    the same reason (a paused emulator must surface as a :class:`TransientError`, not a minute's hang).

    Use :meth:`from_connection_string` locally (Azurite) and :meth:`from_account_url` with a managed
    identity credential on Azure; a client holding one SAS per queue uses :meth:`from_queue_urls`.
    """

    messaging_system = "azure_storage_queues"
    """The ``messaging.system`` of these queues (OpenTelemetry names no value for Storage queues)."""

    def __init__(
        self,
        service: QueueServiceClient | None,
        *,
        create_queues: bool = True,
        queue_clients: Mapping[str, QueueClient] | None = None,
        creatable: Callable[[str], bool] | None = None,
    ) -> None:
        """Wrap a configured service client, or fixed queue clients (see the constructors).

        Args:
            service: The queue service, or None when only ``queue_clients`` may be used.
            create_queues: Create a queue on its first use. False with a SAS, which may not create one.
            queue_clients: Clients of the only queues this factory opens (each with its own SAS).
            creatable: Which queues may be created on first use (None: every one). Another queue is
                opened as it is: a send to it fails (``PermanentError``) if it does not exist, so no
                queue comes into being because a record or a message named it.
        """
        self._service = service
        self._create_queues = create_queues
        self._creatable = creatable
        self._clients: dict[str, QueueClient] = dict(queue_clients or {})
        self._ensured: set[str] = set()  # queues this factory created (or found existing)
        self._fixed = queue_clients is not None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        if self._service is None:
            return f"StorageQueueFactory(queues={sorted(self._clients)})"
        return f"StorageQueueFactory(account={self._service.account_name!r})"

    @classmethod
    def from_connection_string(
        cls,
        connection_string: str,
        *,
        retry_total: int = DEFAULT_RETRY_TOTAL,
        connection_timeout_s: float = DEFAULT_CONNECTION_TIMEOUT_S,
        read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
        creatable: Callable[[str], bool] | None = None,
    ) -> StorageQueueFactory:
        """A factory for the account of a connection string (Azurite's, locally).

        Args:
            connection_string: A storage connection string with a ``QueueEndpoint`` or account name,
                with an account key or a ``SharedAccessSignature`` (then queues are never created:
                they must exist, and the SAS decides what may be done with each).
            retry_total: SDK retries of a failed request.
            connection_timeout_s: Seconds to wait for a connection.
            read_timeout_s: Seconds to wait for a response.
            creatable: Which queues may be created on first use (see the constructor).
        """
        service = QueueServiceClient.from_connection_string(
            connection_string,
            **_client_options(
                retry_total, connection_timeout_s, read_timeout_s, url=queue_endpoint(connection_string)
            ),
        )
        fields = {
            part.split("=", 1)[0].strip().lower() for part in connection_string.split(";") if "=" in part
        }
        sas_only = "sharedaccesssignature" in fields and "accountkey" not in fields
        return cls(service, create_queues=not sas_only, creatable=creatable)

    @classmethod
    def from_queue_urls(
        cls,
        urls: Mapping[str, str],
        *,
        retry_total: int = DEFAULT_RETRY_TOTAL,
        connection_timeout_s: float = DEFAULT_CONNECTION_TIMEOUT_S,
        read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
    ) -> StorageQueueFactory:
        """A factory of exactly the queues in ``urls``, each reached with the SAS in its URL.

        What a registered client holds locally (docs/clients.md): a SAS to add to its inbound queue and
        one to read and process its reply queue. No queue is created; any other queue name is refused,
        and so is dead-lettering (the client holds no SAS for a dead-letter queue).

        Args:
            urls: Queue name -> ``https://<account>/<queue>?<sas>`` (locally ``http://127.0.0.1:.../``).
            retry_total / connection_timeout_s / read_timeout_s: As for :meth:`from_connection_string`.
        """
        clients = {
            name: QueueClient.from_queue_url(
                url,
                message_encode_policy=None,
                message_decode_policy=None,
                **_client_options(retry_total, connection_timeout_s, read_timeout_s, url=url),
            )
            for name, url in urls.items()
        }
        return cls(None, create_queues=False, queue_clients=clients)

    @classmethod
    def from_account_url(
        cls,
        account_url: str,
        credential: TokenCredential | AzureNamedKeyCredential | AzureSasCredential,
        *,
        retry_total: int = DEFAULT_RETRY_TOTAL,
        connection_timeout_s: float = DEFAULT_CONNECTION_TIMEOUT_S,
        read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
    ) -> StorageQueueFactory:
        """A factory for ``https://<account>.queue.core.windows.net`` with a credential.

        Args:
            account_url: The queue service endpoint.
            credential: Normally a ``DefaultAzureCredential`` / managed identity (shared keys are disabled).
            retry_total: SDK retries of a failed request.
            connection_timeout_s: Seconds to wait for a connection.
            read_timeout_s: Seconds to wait for a response.
        """
        service = QueueServiceClient(
            account_url,
            credential=credential,
            **_client_options(retry_total, connection_timeout_s, read_timeout_s, url=account_url),
        )
        return cls(service)

    def queue(self, name: str) -> StorageQueue:
        """The queue ``name``, created if missing (its dead-letter queue is created on first use).

        Raises:
            ValueError: ``name`` is not a valid queue name (see :func:`validate_queue_name`).
            TransientError: the service is unreachable or failed.
            PermanentError: the service refused to create the queue.
        """
        validate_queue_name(name)
        client = self._client(name)
        return StorageQueue(
            name,
            client,
            # The dead-letter queue of a queue that may be created may be created too, on first use.
            dead_letter_client=lambda: self._client(
                dead_letter_queue_name(name), create=self._may_create(name)
            ),
        )

    def dead_letters(self, name: str, *, max_messages: int = 32) -> list[DeadLetter]:
        """Peek at up to ``max_messages`` (at most 32) dead letters of queue ``name``, oldest first.

        Raises:
            ValueError: invalid name, or ``max_messages`` < 1.
            TransientError: the service is unreachable or failed.
            PermanentError: the service refused the request.
        """
        validate_queue_name(name)
        batch = receive_batch_size(max_messages)
        client = self._client(dead_letter_queue_name(name), create=False)
        try:
            peeked = client.peek_messages(max_messages=batch)
        except AzureError as error:
            if is_missing_queue(error):
                return []  # nothing was ever dead-lettered there
            raise translate_error(error, "dead_letters", dead_letter_queue_name(name)) from error
        return [
            decode_dead_letter(
                message.content or "",
                transport_id=message.id,
                source_queue=name,
                delivery_count=message.dequeue_count or 0,
                enqueued_at=message.inserted_on,
            )
            for message in peeked
        ]

    def dead_letter_page(
        self, name: str, *, max_messages: int = 32, continuation: str | None = None
    ) -> DeadLetterPage:
        """A page of the dead letters of ``name``, oldest first (by dead-lettering time, then id).

        Storage peeks only the first 32 messages of a queue: when they are all the queue holds (its
        message count, hidden ones included, says so), the page comes from one peek and changes nothing.
        Otherwise the queue is read by :func:`~devhost.queues.dead_letter_scan.scan_dead_letters`, which
        receives it (each message hidden until the pass ends) and releases what it received at once;
        their dequeue counts grow, which a dead letter does not read (its record keeps the delivery
        count). A dead-letter queue that does
        not exist is an empty page: reading (or removing) dead letters never creates a queue.

        Raises:
            ValueError: invalid name, ``max_messages`` < 1, or a foreign continuation.
            DeadLettersBusy: other scans kept part of the queue hidden for as long as the scan may retry.
            TransientError, PermanentError: the service failed.
        """
        validate_queue_name(name)
        client = self._client(dead_letter_queue_name(name), create=False)
        try:
            peeked = client.peek_messages(max_messages=MAX_RECEIVE_BATCH)
            count = message_count(client)
        except AzureError as error:
            if not is_missing_queue(error):
                raise translate_error(error, "dead_letter_page", dead_letter_queue_name(name)) from error
            peeked, count = [], 0  # nothing was ever dead-lettered there
        whole = count <= len(peeked)
        if whole:
            every = [decode_received(message, name) for message in peeked]
        else:
            every = []

            def keep(dead: DeadLetter) -> bool:
                every.append(dead)
                return False  # read, not removed

            scan_dead_letters(name, keep, client=client, count=count, start_pass=every.clear)
        return page_of_dead_letters(every, max_messages=max_messages, continuation=continuation)

    def remove_dead_letters(
        self,
        name: str,
        select: Callable[[DeadLetter], bool],
        *,
        before: Callable[[DeadLetter], None] | None = None,
        most: int | None = None,
    ) -> list[DeadLetter]:
        """Receive the dead letters of ``name`` (hidden until the pass ends), delete those ``select``
        picks once ``before`` returned, release the others: see
        :meth:`orderflow.queues.base.DeadLetterQueues.remove_dead_letters`. A message's pop receipt is
        the lock: one held by another remover is not received, so a pass that did not cover the whole
        queue is made again (:func:`~devhost.queues.dead_letter_scan.scan_dead_letters`) and a dead letter
        another scan hid for a moment is still found.

        Raises:
            ValueError: invalid name.
            DeadLettersBusy: no pass covered the queue in time (what was removed before stays removed).
            TransientError, PermanentError: the service failed.
        """
        validate_queue_name(name)
        client = self._client(dead_letter_queue_name(name), create=False)
        removed: list[DeadLetter] = []

        def visit(dead: DeadLetter) -> bool:
            if (most is not None and len(removed) >= most) or not select(dead):
                return False
            if before is not None:
                before(dead)
            removed.append(dead)
            return True

        scan_dead_letters(name, visit, client=client, stop=lambda: most is not None and len(removed) >= most)
        return removed

    def close(self) -> None:
        """Close the service client and every queue client (their HTTP connections)."""
        with self._lock:
            clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            client.close()
        if self._service is not None:
            self._service.close()

    def __enter__(self) -> StorageQueueFactory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _may_create(self, name: str) -> bool:
        return self._create_queues and (self._creatable is None or self._creatable(name))

    def _client(self, name: str, *, create: bool | None = None) -> QueueClient:
        """The client of queue ``name``, the queue created first when ``create`` (None: when
        :meth:`_may_create` says so) and not done before by this factory. Readers of dead letters pass
        False: reading a queue never brings it into being."""
        with self._lock:
            client = self._clients.get(name)
            if client is None:
                if self._service is None or self._fixed:
                    raise PermanentError(
                        "no_credential",
                        f"queue {name!r}: this factory holds credentials for its own queues only",
                    )
                # None, explicitly: the SDK's NoEncodePolicy sends text as-is (see the module docstring).
                client = self._service.get_queue_client(
                    name, message_encode_policy=None, message_decode_policy=None
                )
                self._clients[name] = client
            if name not in self._ensured and (self._may_create(name) if create is None else create):
                try:
                    client.create_queue()
                except ResourceExistsError:
                    pass  # another process (or an earlier run) created it
                except AzureError as error:
                    raise translate_error(error, "create", name) from error
                self._ensured.add(name)
            return client


def queue_service_url(connection_string: str) -> str:
    """The URL of the queue service a connection string names (Azurite's
    ``http://127.0.0.1:10001/devstoreaccount1``, an account's ``https://<account>.queue.core.windows.net/``),
    parsed locally with no network call.

    Raises:
        ValueError: the connection string is malformed.
    """
    return str(QueueServiceClient.from_connection_string(connection_string).url)


def queue_endpoint(connection_string: str) -> str:
    """The ``QueueEndpoint`` of a connection string; '' when it names none (an Azure account name)."""
    for part in connection_string.split(";"):
        key, _, value = part.partition("=")
        if key.strip().lower() == "queueendpoint":
            return value.strip()
    return ""


def _client_options(
    retry_total: int, connection_timeout_s: float, read_timeout_s: float, *, url: str = ""
) -> dict[str, Any]:
    # A loopback endpoint (Azurite) gets a session without environment lookups (devhost.http_transport).
    transport = transport_for(url, connection_timeout_s=connection_timeout_s, read_timeout_s=read_timeout_s)
    return {
        **({"transport": transport} if transport is not None else {}),
        "retry_policy": ExponentialRetry(
            initial_backoff=1, increment_base=2, retry_total=retry_total, random_jitter_range=1
        ),
        "connection_timeout": connection_timeout_s,
        "read_timeout": read_timeout_s,
    }
