"""In-memory adapter of the message-queue port, for unit tests and single-process demos.

It mimics an Azure Storage queue: messages are stored as the same wire text
(:func:`orderflow.queues.wire.encode_envelope`), a receive hides a message for a visibility timeout
and increments its dequeue count, every receive or visibility update issues a new pop receipt and
only the newest one settles the message, and dead letters are the same JSON records in
``<queue>-deadletter``. Limits are the same too (64 KiB, 7 days, whole seconds, 32 per receive), so a
test that passes here does not fail on Azurite for a reason the fake hid.

Time comes from an injectable monotonic clock (seconds), so a test expires a lock by advancing its
clock instead of sleeping. Thread-safe: one lock per queue.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from orderflow.errors import ConcurrencyConflict
from orderflow.queues.base import DeadLetter, DeadLetterPage, ReceivedMessage, dead_letter_queue_name
from orderflow.queues.wire import (
    MAX_MESSAGE_BYTES,
    PopReceipt,
    decode_dead_letter,
    decode_message,
    encode_dead_letter,
    encode_envelope,
    lock_of,
    page_of_dead_letters,
    receive_batch_size,
    validate_queue_name,
    visibility_seconds,
)

logger = logging.getLogger(__name__)

Clock = Callable[[], float]
"""Monotonic time in seconds, like :func:`time.monotonic`."""


@dataclass
class _Stored:
    transport_id: str
    text: str
    sequence: int
    visible_at: float
    inserted_at: datetime
    dequeue_count: int = 0
    pop_receipt: str = ""


class _WallClock:
    """UTC timestamps that advance with the monotonic clock, so a fake clock moves them too."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._origin = clock()
        self._wall_origin = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self._wall_origin + timedelta(seconds=self._clock() - self._origin)


class InMemoryQueue:
    """One in-memory queue with Storage-queue semantics.

    Attributes:
        name: The queue's name.
    """

    def __init__(
        self,
        name: str,
        *,
        clock: Clock = time.monotonic,
        dead_letter_queue: Callable[[], InMemoryQueue] | None = None,
    ) -> None:
        """Create an empty queue.

        Args:
            name: The queue's name (Storage naming rules are checked).
            clock: Monotonic time in seconds; a test passes a fake one to expire locks without sleeping.
            dead_letter_queue: Returns the ``<name>-deadletter`` queue; by default a private one is made
                on first use.

        Raises:
            ValueError: ``name`` is not a valid queue name.
        """
        validate_queue_name(name)
        self.name = name
        self._clock = clock
        self._wall = _WallClock(clock)
        self._dead_letter_queue = dead_letter_queue
        self._messages: dict[str, _Stored] = {}
        self._sequence = 0
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"InMemoryQueue(name={self.name!r})"

    def send(
        self,
        body: str,
        *,
        message_id: str,
        correlation_id: str | None = None,
        delay_s: float = 0.0,
        reply_to: str | None = None,
    ) -> None:
        """Send a message; it becomes visible after ``delay_s`` seconds (rounded up, at most 7 days).

        ``reply_to`` is dropped, as a Storage queue drops it: it carries no message properties.

        Raises:
            ValueError: the envelope is too large (see
                :data:`orderflow.queues.wire.MAX_ENVELOPE_BYTES`) or ``delay_s`` is out of range.
        """
        text = encode_envelope(
            body, message_id=message_id, correlation_id=correlation_id, sent_at=self._wall()
        )
        self._put(text, visibility_seconds(delay_s, minimum=0, what="delay_s"))

    def put_raw(self, text: str, *, delay_s: float = 0.0) -> None:
        """Write raw text, as a foreign producer (or a dead-lettering queue) would: no envelope.

        Raises:
            ValueError: ``text`` is larger than 64 KiB in UTF-8, or ``delay_s`` is out of range.
        """
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > MAX_MESSAGE_BYTES:
            raise ValueError(f"message text is {size} bytes; the limit is {MAX_MESSAGE_BYTES} bytes")
        self._put(text, visibility_seconds(delay_s, minimum=0, what="delay_s"))

    def _put(self, text: str, delay: int) -> None:
        with self._lock:
            self._sequence += 1
            transport_id = str(uuid.uuid4())
            self._messages[transport_id] = _Stored(
                transport_id=transport_id,
                text=text,
                sequence=self._sequence,
                visible_at=self._clock() + delay,
                inserted_at=self._wall(),
                pop_receipt=uuid.uuid4().hex,
            )

    def receive(self, *, max_messages: int = 16, lock_s: float = 30.0) -> list[ReceivedMessage]:
        """Receive up to ``max_messages`` (at most 32) visible messages, hidden for ``lock_s`` seconds.

        ``lock_s`` is rounded up to whole seconds, at least 1, as on Storage.

        Raises:
            ValueError: ``max_messages`` < 1, or ``lock_s`` is out of range (0 to 7 days).
        """
        batch = receive_batch_size(max_messages)
        lock = visibility_seconds(lock_s, minimum=1, what="lock_s")
        received: list[ReceivedMessage] = []
        with self._lock:
            now = self._clock()
            visible = sorted(
                (stored for stored in self._messages.values() if stored.visible_at <= now),
                key=lambda stored: (stored.visible_at, stored.sequence),
            )
            for stored in visible[:batch]:
                stored.dequeue_count += 1
                stored.visible_at = now + lock
                stored.pop_receipt = uuid.uuid4().hex
                received.append(self._decode(stored, PopReceipt(stored.transport_id, stored.pop_receipt)))
        return received

    @staticmethod
    def _decode(stored: _Stored, lock_token: PopReceipt | None) -> ReceivedMessage:
        return decode_message(
            stored.text,
            transport_id=stored.transport_id,
            delivery_count=stored.dequeue_count,
            enqueued_at=stored.inserted_at,
            lock_token=lock_token,
        )

    def _owned(self, message: ReceivedMessage) -> _Stored | None:
        """The stored message if ``message``'s receipt is still the newest; call under the lock."""
        lock = lock_of(message)
        stored = self._messages.get(lock.message_id)
        if stored is None or stored.pop_receipt != lock.pop_receipt:
            return None
        return stored

    def complete(self, message: ReceivedMessage) -> None:
        """Delete the message; a stale receipt (lock lost) is logged at warning and ignored.

        Raises:
            ValueError: the message carries no pop receipt.
        """
        with self._lock:
            stored = self._owned(message)
            if stored is not None:
                del self._messages[stored.transport_id]
                return
        logger.warning("complete of message %s on %s ignored: lock lost", message.message_id, self.name)

    def abandon(self, message: ReceivedMessage, *, delay_s: float = 0.0) -> None:
        """Make the message visible again after ``delay_s`` seconds (rounded up); a lost lock is logged.

        Raises:
            ValueError: no pop receipt, or ``delay_s`` out of range (0 to 7 days).
        """
        delay = visibility_seconds(delay_s, minimum=0, what="delay_s")
        if not self._set_visibility(message, delay):
            logger.warning("abandon of message %s on %s ignored: lock lost", message.message_id, self.name)

    def renew_lock(self, message: ReceivedMessage, *, lock_s: float) -> None:
        """Keep the message hidden for ``lock_s`` more seconds (rounded up); issues a new receipt.

        Raises:
            ValueError: no pop receipt, or ``lock_s`` out of range (0 to 7 days).
            ConcurrencyConflict: the lock was lost; another consumer may be handling the message.
        """
        lock = visibility_seconds(lock_s, minimum=1, what="lock_s")
        if not self._set_visibility(message, lock):
            raise ConcurrencyConflict(f"lock of message {message.message_id!r} on {self.name!r} was lost")

    def _set_visibility(self, message: ReceivedMessage, seconds: int) -> bool:
        with self._lock:
            stored = self._owned(message)
            if stored is None:
                return False
            stored.visible_at = self._clock() + seconds
            stored.pop_receipt = uuid.uuid4().hex
            message.lock_token = PopReceipt(stored.transport_id, stored.pop_receipt)
            return True

    def dead_letter(self, message: ReceivedMessage, *, reason: str, description: str) -> None:
        """Move the message to ``<queue>-deadletter`` with the reason; a lost lock is logged and ignored.

        Raises:
            ValueError: the message carries no pop receipt.
        """
        with self._lock:
            stored = self._owned(message)
            if stored is not None:
                record = encode_dead_letter(
                    message,
                    reason=reason,
                    description=description,
                    source_queue=self.name,
                    dead_lettered_at=self._wall(),
                )
                # Same order as on Storage: write the dead letter, then remove the original.
                self._dead_letters().put_raw(record)
                del self._messages[stored.transport_id]
        if stored is None:
            logger.warning(
                "dead-letter of message %s on %s ignored: lock lost", message.message_id, self.name
            )
        else:
            logger.warning("dead-lettered message %s from %s: %s", message.message_id, self.name, reason)

    def _dead_letters(self) -> InMemoryQueue:
        if self._dead_letter_queue is None:
            own = InMemoryQueue(dead_letter_queue_name(self.name), clock=self._clock)
            self._dead_letter_queue = lambda: own
        return self._dead_letter_queue()

    def approximate_count(self) -> int:
        """Number of messages, visible or not (exact here; approximate on Storage)."""
        with self._lock:
            return len(self._messages)

    def peek_all(self) -> list[ReceivedMessage]:
        """Every message, visible or not, oldest first, without changing anything (for tests).

        The messages carry no lock token, so they cannot be settled; ``delivery_count`` is the number
        of receives so far (0 for a message never received).
        """
        with self._lock:
            stored = sorted(self._messages.values(), key=lambda item: item.sequence)
            return [self._decode(item, None) for item in stored]

    def _decode_dead_letter(self, item: _Stored) -> DeadLetter:
        return decode_dead_letter(
            item.text,
            transport_id=item.transport_id,
            source_queue=self.name,
            delivery_count=item.dequeue_count,
            enqueued_at=item.inserted_at,
        )

    def dead_letter_page(self, *, max_messages: int = 32, continuation: str | None = None) -> DeadLetterPage:
        """A page of this queue's dead letters (visible or not), oldest first; nothing changes.

        Raises:
            ValueError: ``max_messages`` < 1, or a continuation this queue did not give.
        """
        dead_letters = self._dead_letters()
        with dead_letters._lock:
            stored = list(dead_letters._messages.values())
        every = [self._decode_dead_letter(item) for item in stored]
        return page_of_dead_letters(every, max_messages=max_messages, continuation=continuation)

    def remove_dead_letters(
        self,
        select: Callable[[DeadLetter], bool],
        *,
        before: Callable[[DeadLetter], None] | None = None,
        most: int | None = None,
    ) -> list[DeadLetter]:
        """Remove the dead letters ``select`` picks (at most ``most``), oldest first, each after ``before``
        returned (see :meth:`orderflow.queues.base.DeadLetterQueues.remove_dead_letters`)."""
        dead_letters = self._dead_letters()
        removed: list[DeadLetter] = []
        # Under the dead-letter queue's lock throughout: a concurrent remover waits, then finds it gone.
        with dead_letters._lock:
            for item in sorted(dead_letters._messages.values(), key=lambda stored: stored.sequence):
                if most is not None and len(removed) >= most:
                    break
                dead = self._decode_dead_letter(item)
                if not select(dead):
                    continue
                if before is not None:
                    before(dead)
                del dead_letters._messages[item.transport_id]
                removed.append(dead)
        return removed

    def peek_dead_letters(self, *, max_messages: int = 32) -> list[DeadLetter]:
        """Visible dead-letter records of this queue, oldest first (what Storage's peek would show)."""
        dead_letters = self._dead_letters()
        with dead_letters._lock:
            now = self._clock()
            stored = sorted(
                (item for item in dead_letters._messages.values() if item.visible_at <= now),
                key=lambda item: (item.visible_at, item.sequence),
            )[: receive_batch_size(max_messages)]
        return [
            decode_dead_letter(
                item.text,
                transport_id=item.transport_id,
                source_queue=self.name,
                delivery_count=item.dequeue_count,
                enqueued_at=item.inserted_at,
            )
            for item in stored
        ]


class InMemoryQueueFactory:
    """Creates :class:`InMemoryQueue` objects by name, all sharing one clock; thread-safe."""

    messaging_system = "in_memory"
    """The ``messaging.system`` of these queues (orderflow's own value)."""

    def __init__(self, *, clock: Clock = time.monotonic) -> None:
        """Create a factory with no queues.

        Args:
            clock: Monotonic time in seconds, shared by every queue of this factory.
        """
        self.clock = clock
        self._queues: dict[str, InMemoryQueue] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"InMemoryQueueFactory(queues={len(self._queues)})"

    def names(self) -> frozenset[str]:
        """The names of the queues created so far (dead-letter queues included)."""
        with self._lock:
            return frozenset(self._queues)

    def queue(self, name: str) -> InMemoryQueue:
        """The queue ``name``, created if missing.

        Raises:
            ValueError: ``name`` is not a valid Storage queue name.
        """
        with self._lock:
            queue = self._queues.get(name)
            if queue is None:
                queue = InMemoryQueue(
                    name, clock=self.clock, dead_letter_queue=lambda: self.queue(dead_letter_queue_name(name))
                )
                self._queues[name] = queue
            return queue

    def dead_letters(self, name: str, *, max_messages: int = 32) -> list[DeadLetter]:
        """Peek at up to ``max_messages`` (at most 32) dead letters of queue ``name``, oldest first.

        Raises:
            ValueError: invalid name, or ``max_messages`` < 1.
        """
        return self.queue(name).peek_dead_letters(max_messages=max_messages)

    def dead_letter_page(
        self, name: str, *, max_messages: int = 32, continuation: str | None = None
    ) -> DeadLetterPage:
        """:meth:`InMemoryQueue.dead_letter_page` of queue ``name``."""
        return self.queue(name).dead_letter_page(max_messages=max_messages, continuation=continuation)

    def remove_dead_letters(
        self,
        name: str,
        select: Callable[[DeadLetter], bool],
        *,
        before: Callable[[DeadLetter], None] | None = None,
        most: int | None = None,
    ) -> list[DeadLetter]:
        """:meth:`InMemoryQueue.remove_dead_letters` of queue ``name``."""
        return self.queue(name).remove_dead_letters(select, before=before, most=most)
