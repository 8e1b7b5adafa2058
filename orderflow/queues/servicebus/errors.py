"""How the Service Bus SDK's errors map onto the orderflow hierarchy, and which of them mean a lost lock."""

from __future__ import annotations

from azure.core.exceptions import AzureError, HttpResponseError, ServiceRequestError, ServiceResponseError
from azure.servicebus import ServiceBusReceivedMessage
from azure.servicebus.exceptions import (
    MessageAlreadySettled,
    MessageLockLostError,
    MessageNotFoundError,
    MessageSizeExceededError,
    OperationTimeoutError,
    ServiceBusCommunicationError,
    ServiceBusConnectionError,
    ServiceBusError,
    ServiceBusQuotaExceededError,
    ServiceBusServerBusyError,
)

from orderflow.errors import PermanentError, TransientError
from orderflow.queues.base import ReceivedMessage

# Errors that may succeed on retry. A full queue (quota exceeded) drains as consumers catch up, so it is
# transient too: treating it as permanent would make a step fail for want of capacity.
_TRANSIENT_ERRORS = (
    ServiceBusConnectionError,
    OperationTimeoutError,
    ServiceBusServerBusyError,
    ServiceBusCommunicationError,
    ServiceBusQuotaExceededError,
)
# Settlement errors that mean the lock is gone (the base ServiceBusError is checked separately: only
# the exact base class counts, its subclasses say what else went wrong).
_LOCK_LOST_ERRORS = (MessageLockLostError, MessageAlreadySettled, MessageNotFoundError)


class QueueCountUnavailable(PermanentError, NotImplementedError):
    """:meth:`ServiceBusQueue.approximate_count` was called without an administration client.

    Both a :class:`~orderflow.errors.PermanentError` (code ``approximate_count_unavailable``) and a
    :class:`NotImplementedError`, so callers may catch either.
    """

    def __init__(self, queue: str) -> None:
        super().__init__(
            "approximate_count_unavailable",
            f"queue {queue!r} has no Service Bus administration client, so its message count is unknown; "
            "create the factory with admin_connection_string (emulator) or admin=True (Azure)",
        )


def lock_of(message: ReceivedMessage) -> ServiceBusReceivedMessage:
    """The SDK message a received message holds the lock of.

    Raises:
        ValueError: it was not received from a Service Bus queue.
    """
    if not isinstance(message.lock_token, ServiceBusReceivedMessage):
        raise ValueError(
            f"message {message.message_id!r} carries no Service Bus lock; was it received from a Service "
            "Bus queue?"
        )
    return message.lock_token


def translate_error(error: AzureError, action: str, queue: str) -> Exception:
    """Map an Azure SDK error to the orderflow hierarchy.

    - ``ServiceBusConnectionError``, ``OperationTimeoutError``, ``ServiceBusServerBusyError``,
      ``ServiceBusCommunicationError`` and ``ServiceBusQuotaExceededError`` (a full queue drains)
      become :class:`~orderflow.errors.TransientError`;
    - ``MessageSizeExceededError`` becomes a :class:`ValueError` saying what to do;
    - any other ``ServiceBusError`` becomes :class:`~orderflow.errors.PermanentError` whose code is the
      error's type name (``MessagingEntityNotFoundError``, ``ServiceBusAuthorizationError``, ...);
    - azure-core errors (the administration client speaks HTTP): connection failures, 408, 429, 5xx
      and a bare ``HttpResponseError`` without a status are transient; other errors (a missing queue,
      a refused credential, 4xx) are permanent with the type name as code.

    Args:
        error: The SDK's exception.
        action: What was being done (``send``, ``receive``, ...).
        queue: The queue's name.

    Returns:
        The exception to raise (``from error``).
    """
    text = f"{action} on Service Bus queue {queue!r} failed: {error.message}"
    if isinstance(error, MessageSizeExceededError):
        return ValueError(
            f"message too large for Service Bus queue {queue!r} ({error.message}); the limit is 256 KB "
            "on the Standard tier (Premium: the queue's configured maximum); store the payload elsewhere "
            "and send a reference"
        )
    if isinstance(error, _TRANSIENT_ERRORS):
        return TransientError(text)
    if isinstance(error, ServiceBusError):
        return PermanentError(type(error).__name__, text)
    if isinstance(error, ServiceRequestError | ServiceResponseError):
        return TransientError(text)
    if isinstance(error, HttpResponseError):
        status = error.status_code
        if status is not None and (status >= 500 or status in (408, 429)):
            return TransientError(text)
        # No status: a bare HttpResponseError is a broken exchange; a subclass names a refusal
        # (ResourceNotFoundError for a missing queue, ClientAuthenticationError, ...).
        if status is None and type(error) is HttpResponseError:
            return TransientError(text)
    return PermanentError(type(error).__name__, text)


def is_lock_lost(error: Exception) -> bool:
    """Whether a settlement error means the message's lock is gone."""
    return isinstance(error, _LOCK_LOST_ERRORS) or type(error) is ServiceBusError
