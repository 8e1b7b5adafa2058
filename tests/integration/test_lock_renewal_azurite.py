"""A local consumer keeps a message locked while its handler runs, up to its renewal limit (Azurite).

The lock is the Storage queue's visibility timeout, here 2 s; the handlers take longer. Without renewal
the message comes back while its first handler still runs; with it, the message is delivered once; past
the renewal limit it is abandoned for redelivery, said in a log, and the late handler's outcome is
discarded.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from devhost.emulators import LocalEndpoints
from devhost.loops import ConsumerLoop
from devhost.queues.factory import StorageQueueFactory
from devhost.queues.storage import StorageQueue
from orderflow import telemetry
from orderflow.queues.base import ReceivedMessage

pytestmark = pytest.mark.integration

LOCK_S = 2.0
HANDLER_S = 3.5


@pytest.fixture
def queue(local_endpoints: LocalEndpoints, unique_name: str) -> Iterator[StorageQueue]:
    with StorageQueueFactory.from_connection_string(local_endpoints.storage_connection_string) as factory:
        yield factory.queue(unique_name)


class Handler:
    """Sleeps ``seconds(delivery)`` per delivery and records each delivery's count."""

    def __init__(self, seconds: Callable[[int], float]) -> None:
        self.seconds = seconds
        self.deliveries: list[int] = []
        self.finished = 0
        self._lock = threading.Lock()

    def __call__(self, message: ReceivedMessage) -> None:
        with self._lock:
            self.deliveries.append(message.delivery_count)
        time.sleep(self.seconds(message.delivery_count))
        with self._lock:
            self.finished += 1


def wait_until(predicate: Callable[[], bool], timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


@contextmanager
def consuming(queue: StorageQueue, handler: Handler, *, max_lock_renewal_s: float) -> Iterator[None]:
    stop = threading.Event()
    loop = ConsumerLoop(
        queue,
        handler,
        stop,
        concurrency=2,
        lock_s=LOCK_S,
        max_lock_renewal_s=max_lock_renewal_s,
        poll_s=0.05,
        max_poll_s=0.1,
    )
    loop.start()
    try:
        yield
    finally:
        stop.set()
        loop.join()


def test_a_handler_longer_than_its_lock_is_delivered_once_while_the_lock_is_renewed(
    queue: StorageQueue,
) -> None:
    handler = Handler(lambda _delivery: HANDLER_S)
    queue.send("long", message_id="m-1")
    with consuming(queue, handler, max_lock_renewal_s=60.0):
        wait_until(lambda: handler.finished == 1)
        # Completed, so gone for good: an approximate count counts invisible messages too.
        wait_until(lambda: queue.approximate_count() == 0, timeout_s=5.0)
    assert handler.deliveries == [1]


def test_without_renewal_the_same_handler_sees_its_message_again_while_it_runs(queue: StorageQueue) -> None:
    handler = Handler(lambda delivery: HANDLER_S if delivery == 1 else 0.0)
    queue.send("long", message_id="m-1")
    with consuming(queue, handler, max_lock_renewal_s=0.0):
        wait_until(lambda: len(handler.deliveries) >= 2)
    assert handler.deliveries[:2] == [1, 2]


def test_a_handler_past_the_renewal_limit_has_its_message_abandoned_and_its_outcome_discarded(
    queue: StorageQueue, caplog: pytest.LogCaptureFixture
) -> None:
    # Renewed at 1 s; at 2 s the limit has passed: abandoned, redelivered, and the quick second delivery
    # completes it while the first handler still sleeps.
    handler = Handler(lambda delivery: 4.0 if delivery == 1 else 0.0)
    queue.send("long", message_id="m-1")
    with (
        telemetry.recording() as events,
        caplog.at_level(logging.WARNING, "devhost.lock_renewal"),
        consuming(queue, handler, max_lock_renewal_s=LOCK_S),
    ):
        wait_until(lambda: handler.finished == 2)
    assert handler.deliveries == [1, 2]
    assert queue.approximate_count() == 0  # the second delivery's complete stood
    assert events["message.lock_renewal_exhausted"] == 1
    messages = [record.getMessage() for record in caplog.records]
    assert any(
        "handler of message m-1" in m and "past the lock renewal limit of 2.0 s" in m and "abandoning" in m
        for m in messages
    ), messages
    assert any(m.startswith("complete of message m-1") and "discarded" in m for m in messages), messages
