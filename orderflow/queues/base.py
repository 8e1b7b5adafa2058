"""The message-queue port: PeekLock-style receive, complete, abandon and dead-letter.

The semantics are those common to Service Bus (PeekLock) and Storage queues (visibility timeout): a
received message is invisible to other consumers until its lock expires, and comes back with its
delivery count incremented unless it is completed. Every message carries a stable ``message_id`` chosen
by the sender (docs/design.md §3.7) so consumers can recognise a duplicate.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Protocol

DEAD_LETTER_SUFFIX = "-deadletter"
"""Suffix of a local dead-letter queue's name (Service Bus has its own dead-letter sub-queue)."""


def dead_letter_queue_name(queue_name: str) -> str:
    """Local dead-letter queue of ``queue_name``: ``<queue>-deadletter`` (Service Bus has its own DLQ)."""
    return f"{queue_name}{DEAD_LETTER_SUFFIX}"


@dataclass
class ReceivedMessage:
    """A message received under a lock.

    Attributes:
        message_id: The sender's stable id.
        body: The message body (UTF-8 text, normally JSON).
        delivery_count: 1 on first delivery, incremented on every redelivery.
        correlation_id: Optional correlation id (the order id).
        enqueued_at: When the message was first sent (UTC), if the transport knows.
        lock_token: Transport-specific handle for settlement (a pop receipt, a lock token). Opaque.
        transport_id: The transport's own id of the message (a Storage message id, a sequence number).
        reply_to: The transport's reply-to property (Service Bus ``ReplyTo``), or None: Storage queues
            carry no message properties.
    """

    message_id: str
    body: str
    delivery_count: int
    correlation_id: str | None = None
    enqueued_at: datetime | None = None
    lock_token: Any = field(default=None, repr=False)
    transport_id: str = ""
    reply_to: str | None = None


@dataclass(frozen=True)
class DeadLetter:
    """A dead-lettered message as read back from a dead-letter queue.

    Attributes:
        message_id: The id the message was sent with.
        body: Its body, as it was.
        reason / description: Why it was dead-lettered.
        source_queue: The queue it was dead-lettered from (where a replay sends it).
        delivery_count: Deliveries before it was dead-lettered.
        dead_lettered_at: When (UTC).
        dead_letter_id: The dead-letter queue's own id of it (a Storage message id, a Service Bus
            sequence number): what :meth:`DeadLetterQueues.remove_dead_letters` selects on.
        correlation_id: Its correlation id (the order id), if it had one.
        reply_to: Its ``ReplyTo`` property (Service Bus; Storage queues carry none).
    """

    message_id: str
    body: str
    reason: str
    description: str
    source_queue: str
    delivery_count: int
    dead_lettered_at: datetime
    dead_letter_id: str = ""
    correlation_id: str | None = None
    reply_to: str | None = None


@dataclass(frozen=True)
class DeadLetterPage:
    """A page of dead letters, oldest first; ``continuation`` (opaque) reads the next, None on the last."""

    items: list[DeadLetter]
    continuation: str | None


MAX_DEAD_LETTER_SCAN = 1024
"""Most dead letters one page read or removal looks at where the transport cannot seek (Storage queues
peek only the first 32): beyond it a removal stops and a listing ends; docs/operations.md#dead-letters."""


class DeadLetterQueues(Protocol):
    """The operator's view of the dead-letter queues: read a page, remove some (a replay first re-sends).

    Implementations: :class:`orderflow.queues.memory.InMemoryQueueFactory`,
    :class:`devhost.queues.factory.StorageQueueFactory` (``<queue>-deadletter``),
    :class:`orderflow.queues.servicebus.ServiceBusQueueFactory` (``$DeadLetterQueue``).
    """

    def dead_letter_page(
        self, name: str, *, max_messages: int = 32, continuation: str | None = None
    ) -> DeadLetterPage:
        """A page of at most ``max_messages`` dead letters of queue ``name``, changing none.

        Raises:
            ValueError: invalid name, ``max_messages`` < 1, or a continuation this transport did not give.
            DeadLettersBusy: the queue could not be read whole (other operations held part of it); never
                a short page.
            TransientError, PermanentError: the transport failed.
        """
        ...

    def remove_dead_letters(
        self,
        name: str,
        select: Callable[[DeadLetter], bool],
        *,
        before: Callable[[DeadLetter], None] | None = None,
        most: int | None = None,
    ) -> list[DeadLetter]:
        """Remove (receive and delete) the dead letters of ``name`` that ``select`` picks, at most ``most``.

        Each is held under a lock while ``before`` runs (a replay's re-send) and deleted only if it
        returns; if it raises, that dead letter stays, the others held are released and the error
        propagates. Two removers never both delete one dead letter, and a remover that meets its target
        held by another one tries again: two removals of two different dead letters at once both succeed.

        Returns:
            The dead letters removed, in the order met.

        Raises:
            ValueError: invalid name.
            DeadLettersBusy: the queue could not be searched whole in time; never "none removed".
            TransientError, PermanentError: the transport failed (what was removed before stays removed).
        """
        ...


class MessageQueue(Protocol):
    """One queue.

    Implementations: :class:`devhost.queues.storage.StorageQueue` (Azure Storage / Azurite),
    :class:`orderflow.queues.memory.InMemoryQueue`; the Service Bus adapter comes with the Azure host.
    """

    name: str

    def send(
        self,
        body: str,
        *,
        message_id: str,
        correlation_id: str | None = None,
        delay_s: float = 0.0,
        reply_to: str | None = None,
    ) -> None:
        """Send a message; ``delay_s`` seconds before it becomes visible.

        ``reply_to`` is the queue answers to this message go to, as a transport property where the
        transport has message properties (Service Bus ``ReplyTo``); Storage queues have none and drop it.
        """
        ...

    def receive(self, *, max_messages: int = 16, lock_s: float = 30.0) -> list[ReceivedMessage]:
        """Receive up to ``max_messages`` visible messages and lock them for ``lock_s`` seconds.

        An empty list means nothing was visible at that moment, never that the queue is drained.
        """
        ...

    def complete(self, message: ReceivedMessage) -> None:
        """Delete a message received under a lock. A lost lock is harmless: it is logged, not raised."""
        ...

    def abandon(self, message: ReceivedMessage, *, delay_s: float = 0.0) -> None:
        """Release the lock so the message is redelivered after ``delay_s`` seconds."""
        ...

    def renew_lock(self, message: ReceivedMessage, *, lock_s: float) -> None:
        """Extend the lock to ``lock_s`` seconds from now (long-running handlers)."""
        ...

    def dead_letter(self, message: ReceivedMessage, *, reason: str, description: str) -> None:
        """Move the message, with its original body, reason and description, to the dead-letter queue."""
        ...

    def approximate_count(self) -> int:
        """Approximate number of messages in the queue (for backpressure, not for correctness)."""
        ...


class QueueFactory(Protocol):
    """Creates queue clients by name; queues are created on first use."""

    def queue(self, name: str) -> MessageQueue:
        """The queue ``name``, created if missing."""
        ...

    def dead_letters(self, name: str, *, max_messages: int = 32) -> list[DeadLetter]:
        """Peek at the dead letters of queue ``name`` (without removing them)."""
        ...


class ForwardingQueue:
    """A :class:`MessageQueue` that forwards every call to ``inner``: the base of wrappers that change
    only what they need (a send that also does something, for example).

    Args:
        inner: The queue every call goes to.
    """

    def __init__(self, inner: MessageQueue) -> None:
        self._inner = inner
        self.name = inner.name

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._inner!r})"

    def send(
        self,
        body: str,
        *,
        message_id: str,
        correlation_id: str | None = None,
        delay_s: float = 0.0,
        reply_to: str | None = None,
    ) -> None:
        """Send on the inner queue."""
        self._inner.send(
            body, message_id=message_id, correlation_id=correlation_id, delay_s=delay_s, reply_to=reply_to
        )

    def receive(self, *, max_messages: int = 16, lock_s: float = 30.0) -> list[ReceivedMessage]:
        """Receive from the inner queue."""
        return self._inner.receive(max_messages=max_messages, lock_s=lock_s)

    def complete(self, message: ReceivedMessage) -> None:
        """Complete on the inner queue."""
        self._inner.complete(message)

    def abandon(self, message: ReceivedMessage, *, delay_s: float = 0.0) -> None:
        """Abandon on the inner queue."""
        self._inner.abandon(message, delay_s=delay_s)

    def renew_lock(self, message: ReceivedMessage, *, lock_s: float) -> None:
        """Renew the lock on the inner queue."""
        self._inner.renew_lock(message, lock_s=lock_s)

    def dead_letter(self, message: ReceivedMessage, *, reason: str, description: str) -> None:
        """Dead-letter on the inner queue."""
        self._inner.dead_letter(message, reason=reason, description=description)

    def approximate_count(self) -> int:
        """The inner queue's approximate count."""
        return self._inner.approximate_count()


class RetryPauses:
    """Random pauses between the tries of one operation that met another's held messages: each between
    its base and twice that, the base doubling from 0.02 s up to 0.25 s, so that two operations that
    hid each other's targets do not retry in step.

    Args:
        sleep: Sleeps so many seconds (``time.sleep``; tests replace it).
    """

    FIRST_S: Final = 0.02
    LONGEST_S: Final = 0.25

    def __init__(self, sleep: Callable[[float], None] = time.sleep) -> None:
        self._sleep = sleep
        self._pause_s = self.FIRST_S

    def wait(self) -> None:
        """Sleep the next pause."""
        self._sleep(random.uniform(self._pause_s, 2 * self._pause_s))
        self._pause_s = min(2 * self._pause_s, self.LONGEST_S)
