"""Message settlement: complete, dead-letter with a reason, or abandon with backoff up to a limit.

The queue is in memory with a fake monotonic clock, so a redelivery delay is observed by moving the
clock, not by sleeping.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from orderflow.consumer import Settlement, redelivery_delay_s, settle
from orderflow.errors import ConflictingOrder, InvalidMessage, TransientError
from orderflow.queues.base import ReceivedMessage
from orderflow.queues.memory import InMemoryQueue, InMemoryQueueFactory

pytestmark = pytest.mark.unit

QUEUE = "orders"


@dataclass
class Monotonic:
    """A fake :func:`time.monotonic`."""

    now: float = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> Monotonic:
    return Monotonic()


@pytest.fixture
def queues(clock: Monotonic) -> InMemoryQueueFactory:
    return InMemoryQueueFactory(clock=clock)


@pytest.fixture
def queue(queues: InMemoryQueueFactory) -> InMemoryQueue:
    queue = queues.queue(QUEUE)
    queue.send('{"orderId": "o-1"}', message_id="o-1:submit", correlation_id="o-1")
    return queue


def receive_one(queue: InMemoryQueue) -> ReceivedMessage:
    [message] = queue.receive(max_messages=1, lock_s=30)
    return message


def failing(error: Exception) -> Callable[[ReceivedMessage], object]:
    def handler(message: ReceivedMessage) -> object:
        raise error

    return handler


def test_success_completes_the_message(queue: InMemoryQueue, queues: InMemoryQueueFactory) -> None:
    handled: list[str] = []
    message = receive_one(queue)

    settlement = settle(queue, message, lambda m: handled.append(m.body), max_delivery_count=5)

    assert settlement is Settlement.COMPLETED
    assert handled == ['{"orderId": "o-1"}']
    assert queue.peek_all() == []
    assert queues.dead_letters(QUEUE) == []


def test_invalid_message_is_dead_lettered_with_its_reason(
    queue: InMemoryQueue, queues: InMemoryQueueFactory
) -> None:
    message = receive_one(queue)
    error = InvalidMessage("MissingField", "customerId: Field required")

    settlement = settle(queue, message, failing(error), max_delivery_count=5)

    assert settlement is Settlement.DEAD_LETTERED
    assert queue.peek_all() == []
    [dead] = queues.dead_letters(QUEUE)
    assert (dead.reason, dead.description) == ("MissingField", "customerId: Field required")
    assert (dead.message_id, dead.body, dead.source_queue) == ("o-1:submit", '{"orderId": "o-1"}', QUEUE)
    assert dead.delivery_count == 1


def test_conflicting_order_is_dead_lettered_as_conflicting_order(
    queue: InMemoryQueue, queues: InMemoryQueueFactory
) -> None:
    message = receive_one(queue)

    settlement = settle(
        queue,
        message,
        failing(ConflictingOrder("o-1 was submitted with other content")),
        max_delivery_count=5,
    )

    assert settlement is Settlement.DEAD_LETTERED
    assert queue.peek_all() == []
    [dead] = queues.dead_letters(QUEUE)
    assert (dead.reason, dead.description) == ("ConflictingOrder", "o-1 was submitted with other content")
    assert dead.message_id == "o-1:submit"


def test_failure_abandons_with_backoff_then_redelivers(
    queue: InMemoryQueue, queues: InMemoryQueueFactory, clock: Monotonic
) -> None:
    message = receive_one(queue)

    settlement = settle(queue, message, failing(TransientError("store down")), max_delivery_count=5)

    assert settlement is Settlement.ABANDONED
    assert queues.dead_letters(QUEUE) == []
    assert [m.message_id for m in queue.peek_all()] == ["o-1:submit"]
    # Hidden for redelivery_delay_s(1) = 1 s, not for the rest of the 30 s lock, and not visible at once.
    assert queue.receive(max_messages=1) == []
    clock.advance(0.5)
    assert queue.receive(max_messages=1) == []
    clock.advance(0.5)
    again = receive_one(queue)
    assert (again.message_id, again.delivery_count, again.body) == ("o-1:submit", 2, '{"orderId": "o-1"}')

    # The second failure waits twice as long.
    assert settle(queue, again, failing(TransientError("still down")), max_delivery_count=5) is (
        Settlement.ABANDONED
    )
    clock.advance(1.9)
    assert queue.receive(max_messages=1) == []
    clock.advance(0.1)
    assert receive_one(queue).delivery_count == 3


def test_failure_at_the_delivery_limit_is_dead_lettered(
    queue: InMemoryQueue, queues: InMemoryQueueFactory, clock: Monotonic
) -> None:
    outcomes: list[Settlement] = []
    for _ in range(3):
        message = receive_one(queue)
        outcomes.append(settle(queue, message, failing(RuntimeError("boom")), max_delivery_count=3))
        clock.advance(redelivery_delay_s(message.delivery_count))

    assert outcomes == [Settlement.ABANDONED, Settlement.ABANDONED, Settlement.DEAD_LETTERED]
    assert queue.peek_all() == []
    [dead] = queues.dead_letters(QUEUE)
    assert dead.reason == "MaxDeliveryCountExceeded"
    assert dead.description == "RuntimeError: boom"
    assert (dead.message_id, dead.delivery_count, dead.body) == ("o-1:submit", 3, '{"orderId": "o-1"}')


def test_max_delivery_description_is_bounded(queue: InMemoryQueue, queues: InMemoryQueueFactory) -> None:
    message = receive_one(queue)

    settle(queue, message, failing(RuntimeError("x" * 5000)), max_delivery_count=1)

    [dead] = queues.dead_letters(QUEUE)
    assert dead.reason == "MaxDeliveryCountExceeded"
    assert dead.description.startswith("RuntimeError: xxx")
    assert len(dead.description) == 500


def test_success_on_a_redelivery_completes(queue: InMemoryQueue, clock: Monotonic) -> None:
    first = receive_one(queue)
    settle(queue, first, failing(ConnectionError("reset")), max_delivery_count=3)
    clock.advance(1)

    second = receive_one(queue)

    assert settle(queue, second, lambda m: None, max_delivery_count=3) is Settlement.COMPLETED
    assert queue.peek_all() == []


@pytest.mark.parametrize("error", [KeyError("orderId"), ValueError("bad"), ZeroDivisionError()])
def test_unexpected_handler_errors_do_not_propagate(
    queue: InMemoryQueue, queues: InMemoryQueueFactory, error: Exception
) -> None:
    message = receive_one(queue)

    settlement = settle(queue, message, failing(error), max_delivery_count=5)

    assert settlement is Settlement.ABANDONED
    assert [m.delivery_count for m in queue.peek_all()] == [1]
    assert queues.dead_letters(QUEUE) == []


def test_unexpected_error_at_the_limit_does_not_propagate(
    queue: InMemoryQueue, queues: InMemoryQueueFactory
) -> None:
    message = receive_one(queue)

    assert settle(queue, message, failing(KeyError("orderId")), max_delivery_count=1) is (
        Settlement.DEAD_LETTERED
    )
    [dead] = queues.dead_letters(QUEUE)
    assert dead.description == "KeyError: 'orderId'"


@pytest.mark.parametrize(
    ("delivery_count", "delay"),
    [(0, 1.0), (1, 1.0), (2, 2.0), (3, 4.0), (5, 16.0), (6, 30.0), (60, 30.0), (1024, 30.0)],
)
def test_redelivery_delay_doubles_and_is_capped(delivery_count: int, delay: float) -> None:
    assert redelivery_delay_s(delivery_count) == delay


def test_a_long_redelivered_message_is_still_abandoned(queue: InMemoryQueue) -> None:
    # MAX_DELIVERY_COUNT has no upper bound; a Storage dequeue count has none either.
    message = receive_one(queue)
    message.delivery_count = 1025

    settlement = settle(queue, message, failing(TransientError("down")), max_delivery_count=5000)

    assert settlement is Settlement.ABANDONED
    assert redelivery_delay_s(1025) == 30.0
