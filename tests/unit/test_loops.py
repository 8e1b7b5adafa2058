"""The local host's consumer loop: a send from this process wakes the queue's idle loop."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from devhost.loops import ConsumerLoop, Wakeups, WakingQueueFactory
from orderflow.queues.base import ReceivedMessage
from orderflow.queues.memory import InMemoryQueueFactory

pytestmark = pytest.mark.unit

NEVER_S = 3600.0
"""An idle sleep no test waits out: a message is handled only if a wake-up ends the sleep."""


def idle_loop(
    queues: WakingQueueFactory, handled: list[str], done: threading.Event, stop: threading.Event
) -> ConsumerLoop:
    def handle(message: ReceivedMessage) -> None:
        handled.append(message.message_id)
        done.set()

    return ConsumerLoop(
        queues.queue("agent-responses-h1"),
        handle,
        stop,
        poll_s=NEVER_S,
        max_poll_s=NEVER_S,
        wakeup=queues.wakeups.event("agent-responses-h1"),
    )


def test_a_send_from_this_process_wakes_the_idle_loop_of_that_queue() -> None:
    queues = WakingQueueFactory(InMemoryQueueFactory(), Wakeups())
    handled: list[str] = []
    done, stop = threading.Event(), threading.Event()
    loop = idle_loop(queues, handled, done, stop)
    loop.start()
    try:
        queues.queue("agent-requests").send("{}", message_id="elsewhere")  # another queue's loop
        queues.queue("agent-responses-h1").send("{}", message_id="r-1")

        assert done.wait(30.0)
        assert handled == ["r-1"]
    finally:
        stop.set()
        queues.wakeups.notify_all()
        loop.join()


def test_stopping_wakes_an_idle_loop_and_a_delayed_send_does_not() -> None:
    wakeups = Wakeups()
    queues = WakingQueueFactory(InMemoryQueueFactory(), wakeups)
    queues.queue("agent-responses-h1").send("{}", message_id="late", delay_s=NEVER_S)
    # Not visible yet: waking the loop for it would only cost a receive.
    assert not wakeups.event("agent-responses-h1").is_set()

    handled: list[str] = []
    done, stop = threading.Event(), threading.Event()
    loop = idle_loop(queues, handled, done, stop)
    loop.start()
    stop.set()
    wakeups.notify_all()
    loop.join(timeout_s=30.0)

    assert not loop.is_alive()  # the idle sleep ended when the host stopped
    assert handled == []


class CountingQueue:
    """A queue that counts its receives and what each returned."""

    def __init__(self, queue: Any) -> None:
        self._queue = queue
        self.received: list[int] = []
        self.name = queue.name

    def receive(self, *, max_messages: int, lock_s: float) -> list[ReceivedMessage]:
        messages: list[ReceivedMessage] = self._queue.receive(max_messages=max_messages, lock_s=lock_s)
        self.received.append(len(messages))
        return messages

    def __getattr__(self, name: str) -> Any:
        return getattr(self._queue, name)


def test_after_a_batch_smaller_than_asked_the_loop_waits_for_a_send_not_an_empty_receive() -> None:
    queues = WakingQueueFactory(InMemoryQueueFactory(), Wakeups())
    counting = CountingQueue(queues.queue("agent-responses-h1"))
    handled: list[str] = []
    stop = threading.Event()
    loop = ConsumerLoop(
        counting,  # type: ignore[arg-type]
        lambda message: handled.append(message.message_id),
        stop,
        concurrency=4,
        poll_s=NEVER_S,
        max_poll_s=NEVER_S,
        wakeup=queues.wakeups.event("agent-responses-h1"),
    )
    queues.queue("agent-responses-h1").send("{}", message_id="r-1")
    loop.start()
    try:
        wait_until(lambda: handled == ["r-1"])
        time.sleep(0.3)  # a loop that receives again at once would have done so by now
        assert counting.received == [1]  # one message of the four asked for: no receive since

        queues.queue("agent-responses-h1").send("{}", message_id="r-2")
        wait_until(lambda: handled == ["r-1", "r-2"])
        assert counting.received == [1, 1]
    finally:
        stop.set()
        queues.wakeups.notify_all()
        loop.join()


def wait_until(predicate: Any, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


class CountingSlots(ConsumerLoop):
    """A consumer loop that counts how often it looks for a free handler."""

    looks = 0

    def _free_slots(self) -> int:
        self.looks += 1
        return super()._free_slots()


def test_a_loop_whose_handlers_are_all_busy_sleeps_until_one_finishes() -> None:
    queues = WakingQueueFactory(InMemoryQueueFactory(), Wakeups())
    release = threading.Event()
    handled: list[str] = []
    stop = threading.Event()

    def handle(message: ReceivedMessage) -> None:
        release.wait(30)
        handled.append(message.message_id)

    loop = CountingSlots(
        queues.queue("agent-responses-h1"),
        handle,
        stop,
        concurrency=1,
        poll_s=NEVER_S,
        max_poll_s=NEVER_S,
        wakeup=queues.wakeups.event("agent-responses-h1"),
    )
    queues.queue("agent-responses-h1").send("{}", message_id="r-1")
    queues.queue("agent-responses-h1").send("{}", message_id="r-2")
    loop.start()
    try:
        wait_until(lambda: loop.looks >= 2)  # r-1 taken; its one handler is busy
        time.sleep(0.5)
        assert loop.looks <= 4  # a 10 ms poll of the busy handler would have looked about 50 times
        release.set()  # the handler finishes: the loop takes r-2 at once, not after its idle sleep
        wait_until(lambda: handled == ["r-1", "r-2"], timeout_s=5)
    finally:
        release.set()
        stop.set()
        queues.wakeups.notify_all()
        loop.join()


class RecordingWakeup(threading.Event):
    """A wake-up that never comes: each wait returns at once as if its time ran out, and is recorded
    (its timeout is when the loop would receive next); the ``limit``-th wait stops the loop."""

    def __init__(self, stop: threading.Event, limit: int) -> None:
        super().__init__()
        self._stop = stop
        self._limit = limit
        self.waits: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout)
        if len(self.waits) >= self._limit:
            self._stop.set()
            return True
        return False


def recorded_waits(*, announced: bool) -> tuple[list[float | None], list[int]]:
    """The loop's waits and receives after one message, then nothing, with no wake-up ever coming."""
    queues = WakingQueueFactory(InMemoryQueueFactory(), Wakeups())
    counting = CountingQueue(queues.queue("agent-responses-h1"))
    queues.queue("agent-responses-h1").send("{}", message_id="r-1")
    stop = threading.Event()
    wakeup = RecordingWakeup(stop, limit=6)
    loop = ConsumerLoop(
        counting,  # type: ignore[arg-type]
        lambda message: None,
        stop,
        concurrency=4,
        poll_s=0.1,
        max_poll_s=0.8,
        wakeup=wakeup,
        announced=announced,
    )
    loop.start()
    loop.join(timeout_s=30.0)
    assert not loop.is_alive()
    return wakeup.waits, counting.received


def test_an_announced_loop_waits_the_longest_poll_after_a_message_not_the_shortest() -> None:
    waits, received = recorded_waits(announced=True)
    # Every send wakes it: the next receive after the message is the lost wake-up's, max_poll_s later.
    assert waits == [0.8] * 6
    assert received == [1, 0, 0, 0, 0, 0]


def test_a_loop_not_announced_polls_again_soon_after_a_message_then_backs_off_to_the_longest() -> None:
    waits, received = recorded_waits(announced=False)
    assert waits == [0.1, 0.1, 0.2, 0.4, 0.8, 0.8]
    assert received == [1, 0, 0, 0, 0, 0]
