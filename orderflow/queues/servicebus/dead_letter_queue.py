"""The dead-letter sub-queues of a namespace's queues: peeked to read (browsing locks nothing), and
removed by peeking for the targets and settling them by sequence number."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime

from azure.core.exceptions import AzureError
from azure.servicebus import ServiceBusReceivedMessage, ServiceBusSubQueue

from orderflow.errors import DeadLettersBusy
from orderflow.queues.base import MAX_DEAD_LETTER_SCAN, DeadLetter, DeadLetterPage, RetryPauses
from orderflow.queues.servicebus.codec import decode_body, message_id_of, validate_queue_name
from orderflow.queues.servicebus.errors import translate_error
from orderflow.queues.servicebus.redelivery import broker_delivery_count
from orderflow.queues.servicebus.sdk import ReceiverLike, ServiceBusClientLike

logger = logging.getLogger("orderflow.queues.servicebus")  # the package's one logger, as filters name it

DEAD_LETTER_RETRY_S = 10.0
"""Longest a dead-letter removal keeps trying for a target another operation holds locked (seconds):
far longer than a removal holds a dead letter, shorter than an operator waits for an answer."""


class DeadLetterSubQueues:
    """Reads and removes the dead letters of a client's queues, through one PeekLock receiver per
    dead-letter sub-queue (opened on first use). Thread-safe: every receiver is used under one lock.
    """

    def __init__(
        self,
        client: ServiceBusClientLike,
        *,
        max_wait_s: float,
        clock: Callable[[], datetime],
        sleep: Callable[[float], None],
    ) -> None:
        """Read the dead letters of ``client``'s queues.

        Args:
            client: A ``ServiceBusClient`` (or a fake of one); not closed here.
            max_wait_s: Seconds a receive waits for the first message.
            clock: Current UTC time, for undated dead letters.
            sleep: Waits the given seconds (a removal's pause before it tries again).
        """
        self._client = client
        self._max_wait_s = max_wait_s
        self._clock = clock
        self._sleep = sleep
        self._dead_letter_receivers: dict[str, ReceiverLike] = {}
        self._peek_lock = threading.Lock()

    def dead_letters(self, name: str, *, max_messages: int = 32) -> list[DeadLetter]:
        """Peek at up to ``max_messages`` dead letters of queue ``name``, oldest first.

        Reads the queue's dead-letter sub-queue from its first sequence number (a receiver's peek
        otherwise resumes after the last message it peeked). Service Bus keeps no dead-lettering time
        that this SDK exposes: ``dead_lettered_at`` is the dead letter's enqueued time, else now.

        Raises:
            ValueError: invalid name, or ``max_messages`` < 1.
            TransientError: the service is unreachable, busy or timed out.
            PermanentError: the service refused the request.
        """
        validate_queue_name(name)
        if max_messages < 1:
            raise ValueError(f"max_messages must be at least 1, got {max_messages}")
        peeked = self._peek(name, start=1, count=max_messages, action="dead_letters")
        return [self._dead_letter(message, name) for message in peeked]

    def _dead_letter_receiver(self, name: str) -> ReceiverLike:
        """The PeekLock receiver of ``name``'s dead-letter sub-queue; call under ``_peek_lock``."""
        receiver = self._dead_letter_receivers.get(name)
        if receiver is None:
            receiver = self._client.get_queue_receiver(name, sub_queue=ServiceBusSubQueue.DEAD_LETTER)
            self._dead_letter_receivers[name] = receiver
        return receiver

    def dead_letter_page(
        self, name: str, *, max_messages: int = 32, continuation: str | None = None
    ) -> DeadLetterPage:
        """A page of the dead letters of ``name`` by sequence number, peeked (nothing changes); the
        continuation is the next sequence number.

        Raises:
            ValueError: invalid name, ``max_messages`` < 1, or a continuation that is not a sequence number.
            TransientError, PermanentError: the service failed.
        """
        validate_queue_name(name)
        if max_messages < 1:
            raise ValueError(f"max_messages must be at least 1, got {max_messages}")
        if continuation is not None and not (continuation.isascii() and continuation.isdigit()):
            raise ValueError("not a continuation of this dead-letter queue")
        start = int(continuation) if continuation is not None else 1
        peeked = self._peek(name, start=start, count=max_messages, action="dead_letter_page")
        items = [self._dead_letter(message, name) for message in peeked]
        last = peeked[-1].sequence_number if peeked else None
        more = len(peeked) >= max_messages and last is not None
        return DeadLetterPage(items, str(last + 1) if more and last is not None else None)

    def remove_dead_letters(
        self,
        name: str,
        select: Callable[[DeadLetter], bool],
        *,
        before: Callable[[DeadLetter], None] | None = None,
        most: int | None = None,
    ) -> list[DeadLetter]:
        """Remove the dead letters of ``name`` that ``select`` picks: found by peeking (which locks
        nothing), then settled by sequence number (see
        :meth:`orderflow.queues.base.DeadLetterQueues.remove_dead_letters`).

        A pass (:meth:`_settle_pass`) receives under PeekLock, completes each target once ``before``
        returned and abandons the rest as soon as it has met every target or gone past the last. A target
        the pass did not receive was held by another operation, or is gone: a peek at its sequence number
        tells which, and one still there is tried again after a short random pause, for at most
        :data:`DEAD_LETTER_RETRY_S` seconds. An abandon adds one to a dead letter's delivery count; the
        dead-letter sub-queue has no delivery limit. Reading (:meth:`dead_letter_page`) peeks, which
        holds nothing, so it is always whole.

        Raises:
            ValueError: invalid name.
            DeadLettersBusy: a target was still there, held by another operation, when the time was up
                (what was removed before stays removed).
            TransientError, PermanentError: the service failed.
        """
        validate_queue_name(name)
        wanted = self._peek_targets(name, select, most)
        removed: list[DeadLetter] = []
        deadline = time.monotonic() + DEAD_LETTER_RETRY_S
        pauses = RetryPauses(self._sleep)  # two removers must not retry in step
        while wanted:
            self._settle_pass(name, wanted, removed, before)
            if wanted:
                present = self._present(name, set(wanted))
                wanted = {seq: dead for seq, dead in wanted.items() if seq in present}
            if not wanted:
                return removed
            if time.monotonic() >= deadline:
                # Still there and never received: another operation kept it; "not removed" would be untrue.
                raise DeadLettersBusy(name)
            pauses.wait()
        return removed

    def _peek_targets(
        self, name: str, select: Callable[[DeadLetter], bool], most: int | None
    ) -> dict[int, DeadLetter]:
        """The first ``most`` (None: all) dead letters of ``name`` that ``select`` picks, by sequence
        number, among the first :data:`MAX_DEAD_LETTER_SCAN`: peeked, so locked ones are found too and
        none is locked by this."""
        targets: dict[int, DeadLetter] = {}
        start: int | None = 1
        seen = 0
        while start is not None and seen < MAX_DEAD_LETTER_SCAN and (most is None or len(targets) < most):
            peeked, start = self._peek_from(name, start)
            for message in peeked[: MAX_DEAD_LETTER_SCAN - seen]:
                dead = self._dead_letter(message, name)
                if message.sequence_number and (most is None or len(targets) < most) and select(dead):
                    targets[message.sequence_number] = dead
            seen += len(peeked)
        return targets

    def _present(self, name: str, sequence_numbers: set[int]) -> set[int]:
        """Which of ``sequence_numbers`` the dead-letter sub-queue of ``name`` still holds, peeked."""
        present: set[int] = set()
        start: int | None = min(sequence_numbers)
        last = max(sequence_numbers)
        while start is not None and start <= last:
            peeked, start = self._peek_from(name, start)
            present |= sequence_numbers.intersection(m.sequence_number for m in peeked)
        return present

    def _peek_from(self, name: str, start: int) -> tuple[list[ServiceBusReceivedMessage], int | None]:
        """Peek at up to 32 dead letters of ``name`` from sequence number ``start`` on, for a removal:
        the batch, and the sequence number the next batch starts at (None: none follows)."""
        peeked = self._peek(name, start=start, count=32, action="remove_dead_letters")
        numbers = [m.sequence_number for m in peeked if m.sequence_number is not None]
        return peeked, (max(numbers) + 1 if numbers else None)

    def _peek(self, name: str, *, start: int, count: int, action: str) -> list[ServiceBusReceivedMessage]:
        """Peek at up to ``count`` dead letters of ``name`` from sequence number ``start`` on: browsing,
        which locks nothing and shows locked ones too; errors are reported as ``action``'s."""
        with self._peek_lock:
            receiver = self._dead_letter_receiver(name)
            try:
                return receiver.peek_messages(count, sequence_number=start)
            except AzureError as error:
                raise translate_error(error, action, name) from error

    def _settle_pass(
        self,
        name: str,
        wanted: dict[int, DeadLetter],
        removed: list[DeadLetter],
        before: Callable[[DeadLetter], None] | None,
    ) -> None:
        """Receive dead letters of ``name`` under PeekLock until every one of ``wanted`` (by sequence
        number) was met, one beyond the last was, the receive ran dry or :data:`MAX_DEAD_LETTER_SCAN`
        were received; complete each wanted one once ``before`` returned (moving it from ``wanted`` to
        ``removed``), and abandon every other one received, also when ``before`` raises."""
        held: list[ServiceBusReceivedMessage] = []
        with self._peek_lock:
            receiver = self._dead_letter_receiver(name)
            try:
                seen = 0
                while wanted and seen < MAX_DEAD_LETTER_SCAN:
                    batch = receiver.receive_messages(max_message_count=32, max_wait_time=self._max_wait_s)
                    if not batch:
                        break
                    seen += len(batch)
                    held += batch  # abandoned in the end unless completed
                    last = max(wanted)
                    for message in batch:
                        seq = message.sequence_number
                        if seq is None or seq not in wanted:
                            continue
                        dead = self._dead_letter(message, name)
                        if before is not None:
                            before(dead)
                        receiver.complete_message(message)
                        held.remove(message)
                        removed.append(dead)
                        del wanted[seq]
                    if any((m.sequence_number or 0) > last for m in batch):
                        break  # past every target: one not met is held by another operation, or gone
            except AzureError as error:
                raise translate_error(error, "remove_dead_letters", name) from error
            finally:
                for message in held:
                    try:
                        receiver.abandon_message(message)
                    except AzureError:  # its lock runs out and it comes back
                        logger.warning("dead letter %s of %s not released", message.sequence_number, name)

    def _dead_letter(self, message: ServiceBusReceivedMessage, source_queue: str) -> DeadLetter:
        message_id = message_id_of(message)
        return DeadLetter(
            message_id=message_id,
            body=decode_body(message.body, message_id=message_id),
            reason=message.dead_letter_reason or "",
            description=message.dead_letter_error_description or "",
            source_queue=source_queue,
            delivery_count=broker_delivery_count(message),
            dead_lettered_at=message.enqueued_time_utc or self._clock(),
            dead_letter_id=str(message.sequence_number or ""),
            correlation_id=None if message.correlation_id is None else str(message.correlation_id),
            reply_to=None if message.reply_to is None else str(message.reply_to),
        )

    def close(self) -> None:
        """Close every dead-letter receiver."""
        with self._peek_lock:
            receivers, self._dead_letter_receivers = list(self._dead_letter_receivers.values()), {}
        for receiver in receivers:
            receiver.close()
