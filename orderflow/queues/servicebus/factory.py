"""The Service Bus queue factory: one client per namespace (connection string or Entra ID), one
:class:`ServiceBusQueue` per queue name, and the dead letters of those queues."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime

from azure.core.credentials import TokenCredential
from azure.servicebus import ServiceBusClient
from azure.servicebus.management import ServiceBusAdministrationClient

from orderflow.queues.base import DeadLetter, DeadLetterPage
from orderflow.queues.servicebus.codec import utc_now, validate_queue_name
from orderflow.queues.servicebus.dead_letter_queue import DeadLetterSubQueues
from orderflow.queues.servicebus.queue import DEFAULT_MAX_WAIT_S, ServiceBusQueue
from orderflow.queues.servicebus.sdk import (
    AdministrationClientLike,
    ReceivedMessageLike,
    ServiceBusClientLike,
)

DEFAULT_RETRY_TOTAL = 2
"""SDK retries of a failed operation (its default is 3): consumer loops retry on their own, and the
order's retry budget is end to end (docs/design.md §2)."""


class ServiceBusQueueFactory:
    """Hands out one :class:`ServiceBusQueue` per name over one Service Bus client; creates no queues.

    Use :meth:`from_connection_string` with the emulator (or a SAS connection string) and
    :meth:`from_namespace` with a ``DefaultAzureCredential`` / managed identity on Azure. Thread-safe.
    """

    messaging_system = "servicebus"
    """The OpenTelemetry ``messaging.system`` of these queues."""

    def __init__(
        self,
        client: ServiceBusClientLike,
        *,
        admin: AdministrationClientLike | None = None,
        max_wait_s: float = DEFAULT_MAX_WAIT_S,
        clock: Callable[[], datetime] = utc_now,
        send_timeout_s: float | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """Wrap a client (see the two constructors).

        Args:
            client: A ``ServiceBusClient`` (or a fake of one); closed by :meth:`close`.
            admin: An administration client for :meth:`ServiceBusQueue.approximate_count`, or None.
            max_wait_s: Seconds a receive waits for the first message.
            clock: Current UTC time, for scheduled sends and undated dead letters.
            send_timeout_s: Seconds one send may wait (``QUEUE_READ_TIMEOUT_S``); None: the SDK's default.
            sleep: Waits the given seconds (a dead-letter removal's pause before it tries again).
        """
        self._client = client
        self._send_timeout_s = send_timeout_s
        self._admin = admin
        self._max_wait_s = max_wait_s
        self._clock = clock
        self._queues: dict[str, ServiceBusQueue] = {}
        self._lock = threading.Lock()
        self._dead_letter_queues = DeadLetterSubQueues(
            client, max_wait_s=max_wait_s, clock=clock, sleep=sleep
        )

    def __repr__(self) -> str:
        return (
            f"ServiceBusQueueFactory(namespace={self._client.fully_qualified_namespace!r}, "
            f"queues={len(self._queues)})"
        )

    @classmethod
    def from_connection_string(
        cls,
        connection_string: str,
        *,
        admin_connection_string: str | None = None,
        retry_total: int = DEFAULT_RETRY_TOTAL,
        max_wait_s: float = DEFAULT_MAX_WAIT_S,
        send_timeout_s: float | None = None,
    ) -> ServiceBusQueueFactory:
        """A factory for a connection string (the emulator's, with ``UseDevelopmentEmulator=true``).

        Args:
            connection_string: The namespace's connection string.
            admin_connection_string: Connection string of the administration endpoint (the emulator
                serves it on another port, 5300); None leaves :meth:`ServiceBusQueue.approximate_count`
                unavailable.
            retry_total: SDK retries of a failed operation.
            max_wait_s: Seconds a receive waits for the first message.
            send_timeout_s: Seconds one send may wait; None: the SDK's default.
        """
        client = ServiceBusClient.from_connection_string(connection_string, retry_total=retry_total)
        admin = (
            None
            if admin_connection_string is None
            else ServiceBusAdministrationClient.from_connection_string(admin_connection_string)
        )
        return cls(client, admin=admin, max_wait_s=max_wait_s, send_timeout_s=send_timeout_s)

    @classmethod
    def from_namespace(
        cls,
        fully_qualified_namespace: str,
        credential: TokenCredential,
        *,
        admin: bool = True,
        retry_total: int = DEFAULT_RETRY_TOTAL,
        max_wait_s: float = DEFAULT_MAX_WAIT_S,
        send_timeout_s: float | None = None,
    ) -> ServiceBusQueueFactory:
        """A factory for ``<namespace>.servicebus.windows.net`` with an Entra ID credential.

        Args:
            fully_qualified_namespace: The namespace's host name.
            credential: Any ``TokenCredential``, normally ``DefaultAzureCredential`` / a managed
                identity (azure-identity is the caller's import, not this module's).
            admin: Also create an administration client for approximate counts; reading runtime
                properties needs management rights (``Azure Service Bus Data Owner``), not just the
                sender and receiver roles.
            retry_total: SDK retries of a failed operation.
            max_wait_s: Seconds a receive waits for the first message.
            send_timeout_s: Seconds one send may wait; None: the SDK's default.
        """
        client = ServiceBusClient(fully_qualified_namespace, credential, retry_total=retry_total)
        admin_client = (
            ServiceBusAdministrationClient(fully_qualified_namespace, credential) if admin else None
        )
        return cls(client, admin=admin_client, max_wait_s=max_wait_s, send_timeout_s=send_timeout_s)

    def queue(self, name: str) -> ServiceBusQueue:
        """The queue ``name``; the same object on every call. The queue must already exist.

        Raises:
            ValueError: ``name`` is not a valid Service Bus queue name.
        """
        validate_queue_name(name)
        with self._lock:
            queue = self._queues.get(name)
            if queue is None:
                queue = ServiceBusQueue(
                    name,
                    self._client,
                    admin=self._admin,
                    max_wait_s=self._max_wait_s,
                    clock=self._clock,
                    send_timeout_s=self._send_timeout_s,
                )
                self._queues[name] = queue
            return queue

    def redeliver(
        self, queue_name: str, message: ReceivedMessageLike, *, delivery: int, delay_s: float
    ) -> None:
        """:meth:`ServiceBusQueue.redeliver` on the queue ``queue_name``."""
        self.queue(queue_name).redeliver(message, delivery=delivery, delay_s=delay_s)

    def dead_letters(self, name: str, *, max_messages: int = 32) -> list[DeadLetter]:
        """:meth:`DeadLetterSubQueues.dead_letters`: peek at up to ``max_messages`` dead letters of
        queue ``name``, oldest first."""
        return self._dead_letter_queues.dead_letters(name, max_messages=max_messages)

    def dead_letter_page(
        self, name: str, *, max_messages: int = 32, continuation: str | None = None
    ) -> DeadLetterPage:
        """:meth:`DeadLetterSubQueues.dead_letter_page`: a page of the dead letters of ``name``, peeked."""
        return self._dead_letter_queues.dead_letter_page(
            name, max_messages=max_messages, continuation=continuation
        )

    def remove_dead_letters(
        self,
        name: str,
        select: Callable[[DeadLetter], bool],
        *,
        before: Callable[[DeadLetter], None] | None = None,
        most: int | None = None,
    ) -> list[DeadLetter]:
        """:meth:`DeadLetterSubQueues.remove_dead_letters`: remove the dead letters of ``name`` that
        ``select`` picks."""
        return self._dead_letter_queues.remove_dead_letters(name, select, before=before, most=most)

    def close(self) -> None:
        """Close every queue's sender and receiver, the administration client and the client."""
        with self._lock:
            queues, self._queues = list(self._queues.values()), {}
        for queue in queues:
            queue.close()
        self._dead_letter_queues.close()
        if self._admin is not None:
            self._admin.close()
        self._client.close()

    def __enter__(self) -> ServiceBusQueueFactory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
