"""The local host's consumer loop: a send from this process wakes the queue's idle loop."""

from __future__ import annotations

import threading

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
