"""The part of the Service Bus SDK's surface this adapter uses, as protocols: the real clients satisfy
them, and tests inject fakes."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Protocol

from azure.servicebus import (
    ServiceBusMessage,
    ServiceBusReceivedMessage,
    ServiceBusReceiveMode,
    ServiceBusSubQueue,
)


class SenderLike(Protocol):
    """The part of :class:`azure.servicebus.ServiceBusSender` used here."""

    def send_messages(self, message: ServiceBusMessage, *, timeout: float | None = ...) -> None:
        """Send one message."""
        ...

    def close(self) -> None:
        """Close the link."""
        ...


class ReceiverLike(Protocol):
    """The part of :class:`azure.servicebus.ServiceBusReceiver` used here."""

    def receive_messages(
        self, max_message_count: int | None = ..., max_wait_time: float | None = ...
    ) -> list[ServiceBusReceivedMessage]:
        """Receive a batch under PeekLock."""
        ...

    def peek_messages(
        self, max_message_count: int = ..., *, sequence_number: int = ...
    ) -> list[ServiceBusReceivedMessage]:
        """Browse messages without locking them."""
        ...

    def complete_message(self, message: ServiceBusReceivedMessage) -> None:
        """Remove the message."""
        ...

    def abandon_message(self, message: ServiceBusReceivedMessage) -> None:
        """Release the lock."""
        ...

    def dead_letter_message(
        self,
        message: ServiceBusReceivedMessage,
        reason: str | None = ...,
        error_description: str | None = ...,
    ) -> None:
        """Move the message to the dead-letter sub-queue."""
        ...

    def renew_message_lock(self, message: ServiceBusReceivedMessage) -> datetime:
        """Extend the lock by the queue's lock duration."""
        ...

    def close(self) -> None:
        """Close the link."""
        ...


class ServiceBusClientLike(Protocol):
    """The part of :class:`azure.servicebus.ServiceBusClient` used here."""

    fully_qualified_namespace: str

    def get_queue_sender(self, queue_name: str) -> SenderLike:
        """A sender for ``queue_name``."""
        ...

    def get_queue_receiver(
        self,
        queue_name: str,
        *,
        sub_queue: ServiceBusSubQueue | None = ...,
        receive_mode: ServiceBusReceiveMode = ...,
        max_wait_time: float | None = ...,
        prefetch_count: int = ...,
    ) -> ReceiverLike:
        """A receiver for ``queue_name`` (or one of its sub-queues)."""
        ...

    def close(self) -> None:
        """Close the connection and every handler."""
        ...


class QueueRuntimePropertiesLike(Protocol):
    """The part of :class:`azure.servicebus.management.QueueRuntimeProperties` used here."""

    @property
    def active_message_count(self) -> int | None:
        """Messages available or locked (not scheduled, not dead-lettered)."""
        ...


class AdministrationClientLike(Protocol):
    """The part of :class:`azure.servicebus.management.ServiceBusAdministrationClient` used here."""

    def get_queue_runtime_properties(self, queue_name: str) -> QueueRuntimePropertiesLike:
        """Runtime counts of a queue."""
        ...

    def close(self) -> None:
        """Close the HTTP pipeline."""
        ...


class ReceivedMessageLike(Protocol):
    """What the redelivery functions read of a received message: the shape of the SDK's
    ``ServiceBusReceivedMessage``, whichever receiver decoded it (this adapter, the Functions extension)."""

    @property
    def message_id(self) -> Any: ...

    @property
    def sequence_number(self) -> int | None: ...

    @property
    def application_properties(self) -> Mapping[Any, Any] | None: ...

    @property
    def body(self) -> Any: ...

    @property
    def correlation_id(self) -> Any: ...

    @property
    def reply_to(self) -> Any: ...

    @property
    def content_type(self) -> str | None: ...

    @property
    def subject(self) -> str | None: ...
