"""Lock renewal for the local consumers: a message stays locked while its handler runs, up to a limit.

The Functions host renews a Service Bus message's lock while the function runs, for at most
``maxAutoLockRenewalDuration`` (host.json). The local consumers do the same on Storage queues, where the
lock is the visibility timeout: :class:`LockRenewer` extends it (``update_message`` with the newest pop
receipt) each time half of ``lock_s`` is left, for at most ``max_renewal_s`` seconds from the receive.
A handler still running then is abandoned cleanly: the message is made visible again at once (before its
lock would run out, so its redelivery is prompt), a warning and the ``message.lock_renewal_exhausted``
event say so, and whatever the late handler then settles is discarded, since another consumer may hold
the message by then. Handlers are idempotent (every consumer tolerates a redelivery), so the only cost is
the work done twice.

Renewals and settlement of one message are serialised (:class:`HeldMessage`): a Storage queue replaces
the pop receipt on every visibility update, so a complete racing a renewal would use a receipt that just
died, and the message would come back although it was handled.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from orderflow import telemetry
from orderflow.errors import ConcurrencyConflict
from orderflow.queues.base import MessageQueue, ReceivedMessage

logger = logging.getLogger(__name__)

RETRY_AFTER_FAILURE_S = 0.5
"""Seconds before a renewal that failed (the queue unreachable) is tried again."""

NEVER = float("inf")
"""``renew_at`` of a message no longer renewed."""


class HeldMessage:
    """A message whose handler is running, and what settlement it may still make.

    Attributes:
        message: The message (its lock token is replaced by each renewal).
        received_at: Monotonic seconds of the receive.
        renew_at: Monotonic seconds of the next renewal.
        released: The lock is no longer ours: abandoned after the renewal limit, or lost.
        renewals: Renewals made so far.
    """

    def __init__(self, message: ReceivedMessage, *, received_at: float, renew_at: float) -> None:
        self.message = message
        self.received_at = received_at
        self.renew_at = renew_at
        self.released = False
        self.settled = False
        self.renewals = 0
        self.mutex = threading.Lock()


class HeldQueue:
    """The settlements of one held message: each waits for a renewal in flight, and none is made once the
    message was released (:attr:`HeldMessage.released`); that case is logged.

    Args:
        queue: The queue the message came from.
        held: The message.
    """

    def __init__(self, queue: MessageQueue, held: HeldMessage) -> None:
        self.name = queue.name
        self._queue = queue
        self._held = held

    def _may_settle(self, action: str) -> bool:
        self._held.settled = True
        if self._held.released:
            logger.warning(
                "%s of message %s on %s discarded: its handler outran the lock, which was released",
                action,
                self._held.message.message_id,
                self.name,
            )
            return False
        return True

    def complete(self, message: ReceivedMessage) -> None:
        """Complete, unless the message was released."""
        with self._held.mutex:
            if self._may_settle("complete"):
                self._queue.complete(message)

    def abandon(self, message: ReceivedMessage, *, delay_s: float = 0.0) -> None:
        """Abandon, unless the message was released."""
        with self._held.mutex:
            if self._may_settle("abandon"):
                self._queue.abandon(message, delay_s=delay_s)

    def dead_letter(self, message: ReceivedMessage, *, reason: str, description: str) -> None:
        """Dead-letter, unless the message was released."""
        with self._held.mutex:
            if self._may_settle("dead-letter"):
                self._queue.dead_letter(message, reason=reason, description=description)


class LockRenewer:
    """Renews the locks of one queue's messages while their handlers run, on a thread of its own.

    Args:
        queue: The queue (its ``renew_lock`` and ``abandon``).
        stop: Set to stop renewing.
        lock_s: The lock each receive and renewal takes, seconds; renewed when half is left.
        max_renewal_s: Seconds after the receive past which a message is abandoned instead of renewed
            (``QUEUE_MAX_LOCK_RENEWAL_S``).
        monotonic: Seconds of a monotonic clock.
    """

    def __init__(
        self,
        queue: MessageQueue,
        stop: threading.Event,
        *,
        lock_s: float,
        max_renewal_s: float,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._queue = queue
        self._stop = stop
        self._half_lock_s = lock_s / 2
        self._lock_s = lock_s
        self._max_renewal_s = max_renewal_s
        self._monotonic = monotonic
        self._held: set[HeldMessage] = set()
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=f"renew-{queue.name}", daemon=True)

    def start(self) -> None:
        """Start the renewing thread."""
        self._thread.start()

    def join(self, timeout_s: float = 5.0) -> None:
        """Wait for the thread to end (after ``stop`` was set); returns at once if it never started."""
        with self._changed:
            self._changed.notify_all()
        if self._thread.ident is not None:
            self._thread.join(timeout_s)

    def hold(self, message: ReceivedMessage) -> HeldMessage:
        """Keep ``message`` locked from now on, until :meth:`release`."""
        now = self._monotonic()
        held = HeldMessage(message, received_at=now, renew_at=now + self._half_lock_s)
        with self._changed:
            self._held.add(held)
            self._changed.notify_all()
        return held

    def release(self, held: HeldMessage) -> None:
        """Stop renewing ``held`` (its handler returned and settled it)."""
        with self._changed:
            self._held.discard(held)

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._changed:
                due = [held for held in self._held if held.renew_at <= self._monotonic()]
                if not due:
                    next_at = min((held.renew_at for held in self._held), default=None)
                    wait_s = 1.0 if next_at is None else max(0.0, next_at - self._monotonic())
                    self._changed.wait(min(wait_s, 1.0))
                    continue
            for held in due:
                self._renew(held)

    def _renew(self, held: HeldMessage) -> None:
        """Renew ``held``'s lock, or abandon the message once the renewal limit has passed."""
        with held.mutex:
            if held.settled or held.released:
                held.renew_at = NEVER  # nothing more to renew: its handler's thread releases it
                return
            now = self._monotonic()
            if now - held.received_at >= self._max_renewal_s:
                self._abandon(held, now)
                return
            try:
                self._queue.renew_lock(held.message, lock_s=self._lock_s)
            except ConcurrencyConflict:
                held.released = True
                held.renew_at = NEVER
                logger.warning(
                    "lock of message %s on %s was lost while its handler ran; its outcome will be discarded",
                    held.message.message_id,
                    self._queue.name,
                )
                return
            except Exception:
                held.renew_at = now + RETRY_AFTER_FAILURE_S
                logger.warning(
                    "renewing the lock of message %s on %s failed; retrying",
                    held.message.message_id,
                    self._queue.name,
                    exc_info=True,
                )
                return
            held.renewals += 1
            held.renew_at = self._monotonic() + self._half_lock_s

    def _abandon(self, held: HeldMessage, now: float) -> None:
        """Release a message whose handler outran the renewal limit (the caller holds its mutex)."""
        held.released = True
        held.renew_at = NEVER
        ran_s = now - held.received_at
        logger.warning(
            "handler of message %s on %s still running after %.1f s, past the lock renewal limit of %.1f s "
            "(QUEUE_MAX_LOCK_RENEWAL_S): abandoning the message for redelivery; the handler's outcome "
            "will be discarded",
            held.message.message_id,
            self._queue.name,
            ran_s,
            self._max_renewal_s,
        )
        telemetry.event(
            "message.lock_renewal_exhausted",
            queue=self._queue.name,
            message_id=held.message.message_id,
            ran_s=round(ran_s, 3),
            renewals=held.renewals,
        )
        try:
            self._queue.abandon(held.message, delay_s=0.0)
        except Exception:
            # The lock then runs out by itself within half a lock: the message is redelivered all the same.
            logger.warning("abandoning message %s failed", held.message.message_id, exc_info=True)
