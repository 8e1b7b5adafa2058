"""Reading and removing the dead letters of a Storage queue by receiving them: Storage peeks only the
first 32 messages of a queue, so a page past those, or a removal, receives the whole queue (each message
hidden until its pass ends) and releases what it did not delete.

Two scans of one dead-letter queue hide each other's messages; within a process they take turns
(:class:`_ScanTurns`), across processes a pass that did not cover the whole queue is made again, for at
most :func:`scan_budget_s`, and then :class:`~orderflow.errors.DeadLettersBusy` is raised
(docs/operations.md#dead-letters).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from azure.core.exceptions import AzureError
from azure.storage.queue import QueueClient, QueueMessage

from devhost.queues.storage import error_code, is_missing_queue, message_count, translate_error
from orderflow.errors import DeadLettersBusy
from orderflow.queues.base import MAX_DEAD_LETTER_SCAN, DeadLetter, RetryPauses, dead_letter_queue_name
from orderflow.queues.wire import MAX_RECEIVE_BATCH, decode_dead_letter

logger = logging.getLogger(__name__)

DEAD_LETTER_SCAN_LOCK_S = 30
"""Seconds a dead letter received by a page read or a removal stays hidden if it is not released
(the reader crashed): long enough for a re-send, short enough for another operator to retry."""

DEAD_LETTER_SCAN_RETRY_S = 10.0
"""How long a dead-letter page read or removal keeps scanning again while other scans hide part of the
queue, for an empty queue (seconds); :func:`scan_budget_s` adds time per message. Then it raises
:class:`~orderflow.errors.DeadLettersBusy`; docs/operations.md#dead-letters."""

DEAD_LETTER_SCAN_RETRY_PER_MESSAGE_S = 0.05
"""Seconds of retry added per dead letter the queue holds: another scan's pass holds the queue for a time
that grows with its size (a receive per 32 messages, a release per message)."""

DEAD_LETTER_SCAN_MAX_RETRY_S = 25.0
"""The most :func:`scan_budget_s` gives (seconds): less than a crashed reader hides its messages for
(:data:`DEAD_LETTER_SCAN_LOCK_S`), and well within an HTTP request's time."""


def scan_budget_s(count: int) -> float:
    """How long a scan of a dead-letter queue holding ``count`` messages may take turns and passes
    (seconds): :data:`DEAD_LETTER_SCAN_RETRY_S` plus :data:`DEAD_LETTER_SCAN_RETRY_PER_MESSAGE_S` per
    message, at most :data:`DEAD_LETTER_SCAN_MAX_RETRY_S`."""
    grown = DEAD_LETTER_SCAN_RETRY_S + max(count, 0) * DEAD_LETTER_SCAN_RETRY_PER_MESSAGE_S
    return min(grown, DEAD_LETTER_SCAN_MAX_RETRY_S)


class _ScanTurns:
    """First-come, first-served turns at scanning one queue, within this process.

    Two scans of one dead-letter queue hide each other's messages, so both would retry; in one process
    they need not collide at all, and a fair order keeps a looping reader from starving a removal.
    Scans by other processes still collide, which the passes' retries handle.
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._lines: dict[str, deque[object]] = {}

    @contextmanager
    def turn(self, key: str, timeout_s: float) -> Iterator[bool]:
        """Wait up to ``timeout_s`` seconds for the turn at ``key``; yields whether it came (the turn
        is held until the block ends)."""
        me = object()
        with self._changed:
            line = self._lines.setdefault(key, deque())
            line.append(me)
            got = self._changed.wait_for(lambda: line[0] is me, max(timeout_s, 0.0))
        try:
            yield got
        finally:
            with self._changed:
                line.remove(me)
                if not line:
                    del self._lines[key]
                self._changed.notify_all()


_SCAN_TURNS = _ScanTurns()


def decode_received(message: QueueMessage, name: str) -> DeadLetter:
    """The dead letter a message received from (or peeked at in) ``<name>-deadletter`` holds."""
    return decode_dead_letter(
        message.content or "",
        transport_id=message.id,
        source_queue=name,
        delivery_count=message.dequeue_count or 0,
        enqueued_at=message.inserted_on,
    )


def scan_dead_letters(
    name: str,
    visit: Callable[[DeadLetter], bool],
    *,
    client: QueueClient,
    count: int | None = None,
    stop: Callable[[], bool] = lambda: False,
    start_pass: Callable[[], None] = lambda: None,
) -> None:
    """Visit every dead letter of ``name`` through ``client`` (its dead-letter queue's): in this process's
    turn (:class:`_ScanTurns`), passes of :func:`_scan_pass` until one covered the queue (or ``stop``),
    for at most :func:`scan_budget_s` of the queue's message count (``count`` when the caller has just
    read it), turn included. ``visit`` answers whether to delete the dead letter; ``start_pass`` runs
    before each pass (a reader forgets what the last one collected).

    Raises:
        DeadLettersBusy: no pass covered the queue in that time (other scans kept part of it hidden).
        TransientError, PermanentError: the service failed.
    """
    dead_letter_queue = dead_letter_queue_name(name)
    try:
        count = message_count(client) if count is None else count
    except AzureError as error:
        if is_missing_queue(error):
            return  # nothing was ever dead-lettered there, so there is nothing to visit
        raise translate_error(error, "remove_dead_letters", dead_letter_queue) from error
    deadline = time.monotonic() + scan_budget_s(count)
    with _SCAN_TURNS.turn(client.url, deadline - time.monotonic()) as turn:
        if turn and _scan_passes(name, visit, client, stop=stop, start_pass=start_pass, deadline=deadline):
            return
    logger.warning("dead letters of %s not scanned whole: other operations held part of them", name)
    raise DeadLettersBusy(name)


def _scan_passes(
    name: str,
    visit: Callable[[DeadLetter], bool],
    client: QueueClient,
    *,
    stop: Callable[[], bool],
    start_pass: Callable[[], None],
    deadline: float,
) -> bool:
    """Passes until one is whole (True), or the first that is not once ``deadline`` (monotonic
    seconds) passed (False).

    A pass cannot receive what a concurrent scan holds hidden; the queue's message count (hidden
    ones included) tells such a pass from a whole one, and the pass is tried again after a short
    random pause (two scans that hide each other's targets must not retry in step).
    """
    pauses = RetryPauses()
    while True:
        start_pass()
        if _scan_pass(name, visit, client, stop):
            return True
        if time.monotonic() >= deadline:
            return False
        pauses.wait()


def _scan_pass(
    name: str, visit: Callable[[DeadLetter], bool], client: QueueClient, stop: Callable[[], bool]
) -> bool:
    """Receive dead letters of ``name`` in batches, delete each ``visit`` answers True for, and
    release the rest (visible again at once) when done or when ``visit`` raises.

    Returns:
        Whether the pass is whole: ``stop`` said so, :data:`MAX_DEAD_LETTER_SCAN` messages were met, or
        every message the queue holds was held by this pass when the receives ran dry.
    """
    dead_letter_queue = dead_letter_queue_name(name)
    held: list[QueueMessage] = []
    try:
        seen = 0
        while seen < MAX_DEAD_LETTER_SCAN and not stop():
            batch = list(
                client.receive_messages(
                    messages_per_page=MAX_RECEIVE_BATCH,
                    max_messages=MAX_RECEIVE_BATCH,
                    visibility_timeout=DEAD_LETTER_SCAN_LOCK_S,
                )
            )
            if not batch:
                # Counted while this pass still holds what it received: more means others hold some.
                return message_count(client) <= len(held)
            seen += len(batch)
            held += batch  # released in the end unless deleted, even when a visit raises
            for message in batch:
                if not stop() and visit(decode_received(message, name)):
                    client.delete_message(message.id, message.pop_receipt)
                    held.remove(message)
        return True
    except AzureError as error:
        if not (is_missing_queue(error) and not held):
            raise translate_error(error, "remove_dead_letters", dead_letter_queue) from error
        return True  # no such queue: nothing was ever dead-lettered there, so there is nothing to visit
    finally:
        _release(client, held, dead_letter_queue)


def _release(client: QueueClient, held: list[QueueMessage], queue: str) -> None:
    for message in held:
        try:
            client.update_message(message.id, message.pop_receipt, visibility_timeout=0)
        except AzureError as error:  # it comes back when its scan lock runs out
            logger.warning("dead letter %s on %s not released: %s", message.id, queue, error_code(error))
