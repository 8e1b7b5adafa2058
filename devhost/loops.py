"""Background loops of the local host: queue consumers and periodic tasks, each on its own thread.

A loop never dies on one failure: a handler's exception is settled by :func:`orderflow.consumer.settle`
(abandon, or dead-letter with a reason), and a failing periodic task is logged and retried on the next
tick. Every loop stops when the host's stop event is set.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from devhost.lock_renewal import HeldQueue, LockRenewer
from orderflow import tracing
from orderflow.consumer import settle
from orderflow.queues.base import DeadLetter, ForwardingQueue, MessageQueue, QueueFactory, ReceivedMessage

logger = logging.getLogger(__name__)


class Wakeups:
    """One event per queue name, set when this process sends to that queue.

    An idle consumer loop sleeps up to ``POLL_MAX_INTERVAL_S`` between receives (Storage queues have no
    long polling, and idle polling is most of an emulator's load). A message sent by this same process
    (an activity's agent request, an agent's response, a reply) wakes the queue's loop at once instead:
    each of an order's hops within one process costs a receive, not half a polling interval. With
    ``announce`` (a :class:`~devhost.wakeup_channel.WakeupChannel`'s), a send also wakes the other
    devhost processes' loops of that queue, through :meth:`wake`.
    """

    def __init__(self, announce: Callable[[str], object] | None = None) -> None:
        self._events: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        self.announce = announce

    def event(self, name: str) -> threading.Event:
        """The event of queue ``name``."""
        with self._lock:
            return self._events.setdefault(name, threading.Event())

    def notify(self, name: str) -> None:
        """A message was sent to queue ``name`` by this process (or ``name`` is another wake-up, such as
        the starter's): wake its loop here and, with ``announce``, in the other processes."""
        self.event(name).set()
        if self.announce is not None:
            self.announce(name)

    def wake(self, name: str) -> None:
        """Another process sent to queue ``name``: wake this process's loop of it, if it has one."""
        with self._lock:
            event = self._events.get(name)
        if event is not None:
            event.set()

    def notify_all(self) -> None:
        """Wake every loop (the host is stopping)."""
        with self._lock:
            events = list(self._events.values())
        for event in events:
            event.set()


class _WakingQueue(ForwardingQueue):
    def __init__(self, inner: MessageQueue, wakeups: Wakeups) -> None:
        super().__init__(inner)
        self._wakeups = wakeups

    def send(
        self,
        body: str,
        *,
        message_id: str,
        correlation_id: str | None = None,
        delay_s: float = 0.0,
        reply_to: str | None = None,
    ) -> None:
        super().send(
            body, message_id=message_id, correlation_id=correlation_id, delay_s=delay_s, reply_to=reply_to
        )
        if delay_s <= 0:
            self._wakeups.notify(self.name)


class WakingQueueFactory:
    """A :class:`QueueFactory` whose sends wake this process's loop of the queue sent to (:class:`Wakeups`).

    Args:
        inner: The real queues.
        wakeups: This process's events.
    """

    def __init__(self, inner: QueueFactory, wakeups: Wakeups) -> None:
        self._inner = inner
        self.wakeups = wakeups

    def __repr__(self) -> str:
        return f"WakingQueueFactory({self._inner!r})"

    @property
    def messaging_system(self) -> str | None:
        """The inner factory's ``messaging.system`` (:func:`orderflow.tracing.messaging_system`)."""
        return tracing.messaging_system(self._inner)

    def queue(self, name: str) -> MessageQueue:
        """The queue ``name`` of the inner factory; its sends notify ``wakeups``."""
        return _WakingQueue(self._inner.queue(name), self.wakeups)

    def dead_letters(self, name: str, *, max_messages: int = 32) -> list[DeadLetter]:
        """Dead letters of ``name``, from the inner factory."""
        return self._inner.dead_letters(name, max_messages=max_messages)


class ConsumerLoop:
    """Receives from one queue and runs a handler per message on a bounded thread pool.

    No more messages are received than there are free workers, so a message never waits, locked, in
    a local buffer while its lock runs out. While a handler runs, its message's lock is renewed each
    time half of ``lock_s`` is left, for at most ``max_lock_renewal_s`` seconds; a handler still running
    then has its message abandoned, and what it settles later is discarded (:mod:`devhost.lock_renewal`).

    Args:
        queue: The queue to consume.
        handler: Called with each message; raises on failure.
        stop: Set to stop the loop.
        concurrency: Handlers running at once.
        lock_s: Lock (visibility timeout) of received messages, seconds.
        max_lock_renewal_s: Seconds after its receive during which a message's lock is renewed while its
            handler runs (``QUEUE_MAX_LOCK_RENEWAL_S``); 0: never renewed.
        poll_s: Sleep after an empty receive, seconds; doubles while the queue stays empty.
        max_poll_s: Longest sleep between receives of an idle queue, seconds.
        max_delivery_count: Deliveries before a failing message is dead-lettered.
        wakeup: Set when this process sends to the queue: ends an idle sleep early (:class:`Wakeups`).
        announced: Every sender of the queue wakes ``wakeup`` (the devhost processes announce their sends
            to each other: :mod:`devhost.wakeup_channel`). After a receive the loop then waits for the
            next wake-up, receiving at least every ``max_poll_s`` for one that was lost or a message made
            visible late (a delayed send, an expired lock), instead of receiving again ``poll_s`` later:
            that receive would find nothing, since the next message is announced when it is sent. Leave it
            off for a queue that anyone else sends to (a client's inbound queue).
    """

    def __init__(
        self,
        queue: MessageQueue,
        handler: Callable[[ReceivedMessage], object],
        stop: threading.Event,
        *,
        concurrency: int = 1,
        lock_s: float = 30.0,
        max_lock_renewal_s: float = 120.0,
        poll_s: float = 0.2,
        max_poll_s: float = 0.8,
        max_delivery_count: int = 10,
        wakeup: threading.Event | None = None,
        announced: bool = False,
    ) -> None:
        self.queue = queue
        self._wakeup = wakeup
        self._handler = handler
        self._stop = stop
        self._concurrency = concurrency
        self._lock_s = lock_s
        self._poll_s = poll_s
        self._max_poll_s = max(poll_s, max_poll_s)
        # The wait after a receive that returned messages, or after a wake-up.
        self._rest_s = self._max_poll_s if announced and wakeup is not None else poll_s
        self._max_delivery_count = max_delivery_count
        self._running = 0  # handlers submitted and not yet finished
        self._running_lock = threading.Lock()
        self._freed = threading.Event()  # set when a handler finishes
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix=f"consume-{queue.name}")
        self._thread = threading.Thread(target=self._run, name=f"loop-{queue.name}", daemon=True)
        self._renewer = (
            LockRenewer(queue, stop, lock_s=lock_s, max_renewal_s=max_lock_renewal_s)
            if max_lock_renewal_s > 0
            else None
        )

    def start(self) -> None:
        """Start receiving (and renewing locks)."""
        if self._renewer is not None:
            self._renewer.start()
        self._thread.start()

    def join(self, timeout_s: float = 10.0) -> None:
        """Wait for the loop and its running handlers to finish (after ``stop`` was set); a loop never
        started (its host failed to start) has nothing to wait for."""
        if self._thread.ident is not None:
            self._thread.join(timeout_s)
        self._pool.shutdown(wait=True, cancel_futures=True)
        if self._renewer is not None:
            self._renewer.join()

    def is_alive(self) -> bool:
        """Whether the receive loop is still running."""
        return self._thread.is_alive()

    def _run(self) -> None:
        idle_s = self._poll_s
        while not self._stop.is_set():
            free = self._free_slots()
            if free <= 0:
                # Every handler is busy: sleep until one finishes (not a 10 ms poll, whose wake-ups
                # cost a loaded process its interpreter lock a hundred times a second per queue).
                self._freed.clear()
                if self._free_slots() <= 0:
                    self._freed.wait(min(self._poll_s, 1.0))  # and notices a stop within a second
                continue
            asked = min(free, 32)
            if self._wakeup is not None:
                # Cleared before the receive, which sees every message sent before: a set from now on
                # is a send this receive may have missed.
                self._wakeup.clear()
            try:
                messages = self.queue.receive(max_messages=asked, lock_s=self._lock_s)
            except Exception:
                logger.exception("receive from %s failed; retrying", self.queue.name)
                self._stop.wait(1.0)
                continue
            for message in messages:
                with self._running_lock:
                    self._running += 1
                self._pool.submit(self._handle, message)
            if messages:
                idle_s = self._rest_s
                if len(messages) == asked or self._wakeup is None:
                    continue  # perhaps more: receive again at once
            # Fewer than asked: the queue held no more then. Wait for a send (or one poll interval)
            # rather than receive at once and find it empty; back off while it stays empty, since idle
            # polling is most of an emulator's load.
            if self._wakeup is None:
                self._stop.wait(idle_s)
            elif self._wakeup.wait(idle_s):
                idle_s = self._rest_s
                continue
            if not messages:
                idle_s = min(self._max_poll_s, idle_s * 2)

    def _free_slots(self) -> int:
        with self._running_lock:
            return self._concurrency - self._running

    def _handle(self, message: ReceivedMessage) -> None:
        held = self._renewer.hold(message) if self._renewer is not None else None
        target = self.queue if held is None else HeldQueue(self.queue, held)
        try:
            settle(target, message, self._handler, max_delivery_count=self._max_delivery_count)
        except Exception:
            # Settlement itself failed (the queue is unreachable): the lock expires and the message
            # is redelivered, which every handler tolerates.
            logger.exception("settling message %s from %s failed", message.message_id, self.queue.name)
        finally:
            if held is not None:
                assert self._renewer is not None
                self._renewer.release(held)
            with self._running_lock:
                self._running -= 1
            self._freed.set()


class PeriodicLoop:
    """Runs ``task`` every ``interval_s`` seconds until stopped; a failing run is logged, not fatal.

    With ``wakeup``, setting the event runs the task early, but never sooner than ``min_interval_s``
    after the previous run began (a burst of wake-ups costs one run, not one each).
    """

    def __init__(
        self,
        name: str,
        task: Callable[[], object],
        stop: threading.Event,
        *,
        interval_s: float,
        wakeup: threading.Event | None = None,
        min_interval_s: float = 0.05,
    ) -> None:
        self._name = name
        self._task = task
        self._stop = stop
        self._interval_s = interval_s
        self._wakeup = wakeup
        self._min_interval_s = min(min_interval_s, interval_s)
        self._thread = threading.Thread(target=self._run, name=f"loop-{name}", daemon=True)

    def start(self) -> None:
        """Start ticking."""
        self._thread.start()

    def join(self, timeout_s: float = 10.0) -> None:
        """Wait for the loop to finish (after ``stop`` was set); a loop never started returns at once."""
        if self._thread.ident is not None:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            if self._wakeup is not None:
                self._wakeup.clear()  # before the run: a wake-up during it asks for another
            try:
                self._task()
            except Exception:
                logger.exception("%s failed; retrying in %.1f s", self._name, self._interval_s)
            if self._wakeup is None:
                self._stop.wait(self._interval_s)
                continue
            self._wakeup.wait(max(0.0, self._interval_s - (time.monotonic() - began)))
            self._stop.wait(max(0.0, self._min_interval_s - (time.monotonic() - began)))
