"""One contract suite for every message-queue adapter: Azure Storage queues on Azurite, and in-memory.

Each test gets a fresh queue. Where time matters, the in-memory adapter runs on a fake clock and
Azurite on real 1-second visibility timeouts, so the Azurite half sleeps a few seconds in all.
Run only the fast half with ``-m unit``.
"""

from __future__ import annotations

import copy
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from azure.storage.queue import QueueClient

from devhost.emulators import LocalEndpoints, azurite_connection_string
from devhost.queues.factory import StorageQueueFactory
from orderflow.errors import ConcurrencyConflict, TransientError
from orderflow.queues.base import (
    DeadLetter,
    DeadLetterQueues,
    MessageQueue,
    QueueFactory,
    dead_letter_queue_name,
)
from orderflow.queues.memory import InMemoryQueueFactory
from orderflow.queues.wire import MAX_ENVELOPE_BYTES, MAX_MESSAGE_BYTES, encode_envelope

# Longer than a 1-second lock by a margin for a loaded machine; Azurite tracks visibility in ms.
PAST_LOCK_S = 1.25


class FakeClock:
    """A monotonic clock that moves only when told to."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Harness:
    """One adapter under test, with a fresh queue and the means to let time pass."""

    factory: QueueFactory
    queue: MessageQueue
    advance: Callable[[float], None]
    put_raw: Callable[[str], None]


@pytest.fixture(scope="module")
def storage_factory(request: pytest.FixtureRequest) -> Iterator[StorageQueueFactory]:
    endpoints: LocalEndpoints = request.getfixturevalue("local_endpoints")
    factory = StorageQueueFactory.from_connection_string(endpoints.storage_connection_string)
    yield factory
    factory.close()


@pytest.fixture(
    params=[
        pytest.param("memory", marks=pytest.mark.unit),
        pytest.param("azurite", marks=pytest.mark.integration),
    ]
)
def harness(request: pytest.FixtureRequest, unique_name: str) -> Harness:
    if request.param == "memory":
        clock = FakeClock()
        memory = InMemoryQueueFactory(clock=clock)
        queue = memory.queue(unique_name)
        return Harness(memory, queue, clock.advance, queue.put_raw)
    # Only the Azurite half asks for the emulators, so `-m unit` starts none.
    storage: StorageQueueFactory = request.getfixturevalue("storage_factory")
    endpoints: LocalEndpoints = request.getfixturevalue("local_endpoints")
    storage_queue = storage.queue(unique_name)
    raw = QueueClient.from_connection_string(endpoints.storage_connection_string, unique_name)

    def put_raw(text: str) -> None:
        raw.send_message(text)  # the SDK's default: plain text, as a foreign producer would write

    return Harness(storage, storage_queue, time.sleep, put_raw)


BODIES = [
    pytest.param('{"orderId":"o-1","lines":[{"sku":"A","qty":2}]}', id="json"),
    pytest.param("Grüße aus Köln — 東京 😀", id="non-ascii"),
    pytest.param('<tag attr="x">&amp; \\ "quoted"\t\r\n\x00\x1f\x7f</tag>', id="xml-and-controls"),
    pytest.param("\ufffe\uffff \ud800", id="xml-forbidden"),
    pytest.param("", id="empty"),
]


@pytest.mark.parametrize("body", BODIES)
def test_round_trip_keeps_id_correlation_and_body(harness: Harness, body: str) -> None:
    before = datetime.now(UTC) - timedelta(seconds=5)
    harness.queue.send(body, message_id="m-1", correlation_id="order-1")

    [message] = harness.queue.receive(lock_s=30)

    assert message.message_id == "m-1"
    assert message.correlation_id == "order-1"
    assert message.body == body
    assert message.delivery_count == 1
    assert message.transport_id and message.transport_id != "m-1"
    assert message.enqueued_at is not None and message.enqueued_at >= before


def test_correlation_id_is_optional(harness: Harness) -> None:
    harness.queue.send("x", message_id="m-1")

    [message] = harness.queue.receive()

    assert (message.message_id, message.correlation_id, message.body) == ("m-1", None, "x")


def test_received_message_is_hidden_until_its_lock_expires_then_redelivered(harness: Harness) -> None:
    harness.queue.send("body", message_id="m-1")
    [first] = harness.queue.receive(lock_s=1)

    assert harness.queue.receive(lock_s=1) == []
    harness.advance(PAST_LOCK_S)
    [second] = harness.queue.receive(lock_s=30)

    assert (second.message_id, second.body, second.delivery_count) == ("m-1", "body", 2)
    assert second.transport_id == first.transport_id


def test_complete_removes_the_message_for_good(harness: Harness) -> None:
    harness.queue.send("body", message_id="m-1")
    [message] = harness.queue.receive(lock_s=1)

    harness.queue.complete(message)
    harness.advance(PAST_LOCK_S)

    assert harness.queue.receive() == []
    assert harness.queue.approximate_count() == 0


def test_complete_with_a_stale_receipt_leaves_the_new_owners_message(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    harness.queue.send("body", message_id="m-1")
    [stale] = harness.queue.receive(lock_s=1)
    harness.advance(PAST_LOCK_S)
    [current] = harness.queue.receive(lock_s=30)

    with caplog.at_level(logging.WARNING, logger="orderflow.queues"):
        harness.queue.complete(stale)  # must neither raise nor delete the other consumer's message

    assert harness.queue.approximate_count() == 1
    assert any("lock lost" in record.getMessage() for record in caplog.records)
    harness.queue.complete(current)
    assert harness.queue.approximate_count() == 0


def test_abandon_makes_the_message_visible_again_at_once(harness: Harness) -> None:
    harness.queue.send("body", message_id="m-1")
    [message] = harness.queue.receive(lock_s=30)

    harness.queue.abandon(message)
    [again] = harness.queue.receive(lock_s=30)

    assert (again.message_id, again.delivery_count) == ("m-1", 2)


def test_abandon_honours_its_delay(harness: Harness) -> None:
    harness.queue.send("body", message_id="m-1")
    [message] = harness.queue.receive(lock_s=30)

    harness.queue.abandon(message, delay_s=1)

    assert harness.queue.receive() == []
    harness.advance(PAST_LOCK_S)
    [again] = harness.queue.receive(lock_s=30)
    assert (again.message_id, again.delivery_count) == ("m-1", 2)


def test_renew_lock_keeps_the_message_hidden_and_complete_uses_the_newest_receipt(harness: Harness) -> None:
    harness.queue.send("body", message_id="m-1")
    [message] = harness.queue.receive(lock_s=1)
    before_renewal = copy.copy(message)

    harness.queue.renew_lock(message, lock_s=4)
    harness.advance(1.5)  # past the original lock, well inside the renewed one

    assert harness.queue.receive(lock_s=30) == []
    harness.queue.complete(before_renewal)  # the old receipt no longer settles it
    assert harness.queue.approximate_count() == 1
    harness.queue.complete(message)
    assert harness.queue.approximate_count() == 0


def test_renew_lock_after_the_lock_was_lost_raises(harness: Harness) -> None:
    harness.queue.send("body", message_id="m-1")
    [stale] = harness.queue.receive(lock_s=1)
    harness.advance(PAST_LOCK_S)
    [current] = harness.queue.receive(lock_s=30)

    with pytest.raises(ConcurrencyConflict, match="lock"):
        harness.queue.renew_lock(stale, lock_s=30)

    harness.queue.complete(current)
    assert harness.queue.approximate_count() == 0


def test_dead_letter_moves_body_reason_and_delivery_count(harness: Harness) -> None:
    body = '{"orderId":"o-7","note":"Grüße"}'
    harness.queue.send(body, message_id="m-7", correlation_id="o-7")
    [first] = harness.queue.receive(lock_s=30)
    harness.queue.abandon(first)
    [message] = harness.queue.receive(lock_s=30)
    before = datetime.now(UTC) - timedelta(seconds=5)

    harness.queue.dead_letter(message, reason="InvalidMessage", description="lines must not be empty")

    [dead] = harness.factory.dead_letters(harness.queue.name)
    assert dead.message_id == "m-7"
    assert dead.body == body
    assert dead.reason == "InvalidMessage"
    assert dead.description == "lines must not be empty"
    assert dead.source_queue == harness.queue.name
    assert dead.delivery_count == 2
    assert dead.dead_lettered_at >= before
    assert harness.queue.approximate_count() == 0
    assert harness.queue.receive() == []
    assert harness.factory.queue(dead_letter_queue_name(harness.queue.name)).approximate_count() == 1


def test_dead_letter_after_the_lock_was_lost_leaves_it_to_the_new_owner(harness: Harness) -> None:
    harness.queue.send("body", message_id="m-1")
    [stale] = harness.queue.receive(lock_s=1)
    harness.advance(PAST_LOCK_S)
    [current] = harness.queue.receive(lock_s=30)

    harness.queue.dead_letter(stale, reason="InvalidMessage", description="late")

    assert harness.factory.dead_letters(harness.queue.name) == []
    assert harness.queue.approximate_count() == 1
    harness.queue.complete(current)


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param("not json at all {", id="text"),
        pytest.param('{"messageId": 5, "body": "x"}', id="json-not-envelope"),
        pytest.param('["a", "list"]', id="json-array"),
        pytest.param("", id="empty"),
        # Poison that once failed the whole receive: nested past the recursion limit, too many digits.
        pytest.param("[" * 20_000, id="deeply-nested"),
        pytest.param('{"n": ' + "9" * 5000 + "}", id="huge-integer"),
    ],
)
def test_raw_text_is_delivered_and_can_be_dead_lettered(harness: Harness, raw: str) -> None:
    harness.put_raw(raw)

    [message] = harness.queue.receive(lock_s=30)

    assert message.message_id == message.transport_id
    assert message.body == raw
    assert message.correlation_id is None
    assert message.delivery_count == 1
    harness.queue.dead_letter(message, reason="NotAnEnvelope", description="raw text")
    [dead] = harness.factory.dead_letters(harness.queue.name)
    assert (dead.message_id, dead.body, dead.reason) == (message.transport_id, raw, "NotAnEnvelope")
    assert harness.queue.approximate_count() == 0


def test_delayed_send_is_invisible_until_the_delay_passes(harness: Harness) -> None:
    harness.queue.send("later", message_id="m-1", delay_s=1)

    assert harness.queue.receive() == []
    assert harness.queue.approximate_count() == 1
    harness.advance(PAST_LOCK_S)
    [message] = harness.queue.receive()
    assert (message.message_id, message.body, message.delivery_count) == ("m-1", "later", 1)


def test_approximate_count_includes_locked_messages(harness: Harness) -> None:
    for index in range(3):
        harness.queue.send(f"body {index}", message_id=f"m-{index}")

    assert harness.queue.approximate_count() == 3
    [message] = harness.queue.receive(max_messages=1, lock_s=30)
    assert harness.queue.approximate_count() == 3
    harness.queue.complete(message)
    assert harness.queue.approximate_count() == 2


def test_receive_returns_messages_oldest_first_up_to_max(harness: Harness) -> None:
    for index in range(5):
        harness.queue.send(f"body {index}", message_id=f"m-{index}")

    first = harness.queue.receive(max_messages=3, lock_s=30)
    rest = harness.queue.receive(max_messages=16, lock_s=30)

    assert [message.message_id for message in first] == ["m-0", "m-1", "m-2"]
    assert [message.message_id for message in rest] == ["m-3", "m-4"]


def test_oversized_body_is_refused_with_value_error(harness: Harness) -> None:
    with pytest.raises(ValueError, match="too large"):
        harness.queue.send("x" * MAX_MESSAGE_BYTES, message_id="m-1")
    # The limit is in UTF-8 bytes, not characters: 40,000 'é' are 80,000 bytes.
    with pytest.raises(ValueError, match="too large"):
        harness.queue.send("é" * 40_000, message_id="m-2")

    assert harness.queue.approximate_count() == 0


def test_largest_body_that_fits_round_trips_and_dead_letters_intact(harness: Harness) -> None:
    overhead = len(encode_envelope("", message_id="m-1", correlation_id="o-1", sent_at=datetime.now(UTC)))
    body = "y" * (MAX_ENVELOPE_BYTES - overhead)
    harness.queue.send(body, message_id="m-1", correlation_id="o-1")
    with pytest.raises(ValueError, match="too large"):
        harness.queue.send(body + "y", message_id="m-2", correlation_id="o-1")

    [message] = harness.queue.receive(lock_s=30)
    assert message.body == body
    harness.queue.dead_letter(message, reason="R" * 1000, description="why? " * 2000)

    [dead] = harness.factory.dead_letters(harness.queue.name)
    assert dead.body == body
    assert dead.reason.startswith("RRR") and len(dead.reason) < 1000
    assert dead.description.startswith("why? ") and len(dead.description) < 2000 * 5


@pytest.mark.parametrize("bad_name", ["ab", "Orders", "a--b", "-orders", "x" * 60])
def test_invalid_queue_names_are_refused(harness: Harness, bad_name: str) -> None:
    with pytest.raises(ValueError, match="invalid queue name"):
        harness.factory.queue(bad_name)


def test_settling_a_message_that_was_never_received_is_a_value_error(harness: Harness) -> None:
    harness.queue.send("body", message_id="m-1")
    [message] = harness.queue.receive()
    message.lock_token = None

    with pytest.raises(ValueError, match="pop receipt"):
        harness.queue.complete(message)


def test_concurrent_consumers_each_get_distinct_messages(harness: Harness) -> None:
    count = 60
    for index in range(count):
        harness.queue.send(f"body {index}", message_id=f"m-{index}")
    seen: list[str] = []
    seen_lock = threading.Lock()

    def consume() -> None:
        while messages := harness.queue.receive(max_messages=4, lock_s=30):
            for message in messages:
                with seen_lock:
                    seen.append(message.message_id)
                harness.queue.complete(message)

    with ThreadPoolExecutor(max_workers=6) as pool:
        for future in [pool.submit(consume) for _ in range(6)]:
            future.result()

    assert sorted(seen) == sorted(f"m-{index}" for index in range(count))
    assert harness.queue.approximate_count() == 0


@pytest.mark.integration
def test_unreachable_storage_raises_transient_error() -> None:
    with socket.socket() as probe:  # a loopback port that nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    factory = StorageQueueFactory.from_connection_string(
        azurite_connection_string(port, port), retry_total=0, connection_timeout_s=1
    )

    with pytest.raises(TransientError, match="create on queue 'orders' failed"):
        factory.queue("orders")


def test_a_raw_envelope_with_a_huge_message_id_can_still_be_dead_lettered(harness: Harness) -> None:
    raw = json.dumps({"messageId": "Z" * 60_000, "body": "{not json"})
    harness.put_raw(raw)

    [message] = harness.queue.receive(lock_s=30)
    harness.queue.dead_letter(message, reason="InvalidJson", description="bad body")

    [dead] = harness.factory.dead_letters(harness.queue.name)
    assert (dead.body, dead.reason) == ("{not json", "InvalidJson")
    assert dead.message_id == "Z" * len(dead.message_id) and 0 < len(dead.message_id) < 300
    assert harness.queue.approximate_count() == 0


def _dead_letter_many(harness: Harness, count: int) -> None:
    for n in range(count):
        harness.queue.send(f'{{"n": {n}}}', message_id=f"m-{n}", correlation_id=f"a:o-{n}")
    left = count
    while left:
        for message in harness.queue.receive(max_messages=32, lock_s=30):
            harness.queue.dead_letter(message, reason="HandlerFailed", description="")
            left -= 1


def _dead_letter_queues(harness: Harness) -> DeadLetterQueues:
    assert isinstance(harness.factory, InMemoryQueueFactory | StorageQueueFactory)
    return harness.factory


@pytest.mark.parametrize("count", [3, 40], ids=["peeked", "beyond-a-peek"])
def test_dead_letters_page_through_every_one_once_and_reading_changes_none(
    harness: Harness, count: int
) -> None:
    _dead_letter_many(harness, count)
    dead_letters = _dead_letter_queues(harness)

    seen: list[str] = []
    continuation: str | None = None
    for _ in range(count):
        page = dead_letters.dead_letter_page(harness.queue.name, max_messages=7, continuation=continuation)
        seen += [dead.message_id for dead in page.items]
        continuation = page.continuation
        if continuation is None:
            break
    again = dead_letters.dead_letter_page(harness.queue.name, max_messages=100)

    assert sorted(seen) == sorted(f"m-{n}" for n in range(count)) and len(seen) == count
    assert len(again.items) == count and again.continuation is None
    assert {dead.correlation_id for dead in again.items} == {f"a:o-{n}" for n in range(count)}


def test_removing_a_dead_letter_runs_the_resend_first_and_keeps_it_when_that_fails(harness: Harness) -> None:
    _dead_letter_many(harness, 35)
    dead_letters = _dead_letter_queues(harness)
    name = harness.queue.name
    target = next(
        d for d in dead_letters.dead_letter_page(name, max_messages=100).items if d.message_id == "m-33"
    )
    resent: list[str] = []

    def failing(dead: DeadLetter) -> None:
        raise TransientError("the queue to re-send to is down")

    with pytest.raises(TransientError):
        dead_letters.remove_dead_letters(
            name, lambda d: d.dead_letter_id == target.dead_letter_id, before=failing
        )
    kept = dead_letters.dead_letter_page(name, max_messages=100).items
    removed = dead_letters.remove_dead_letters(
        name,
        lambda d: d.dead_letter_id == target.dead_letter_id,
        before=lambda d: resent.append(d.body),
        most=1,
    )
    left = dead_letters.dead_letter_page(name, max_messages=100).items

    assert len(kept) == 35  # the failed re-send kept it, and every other one was released
    assert [d.message_id for d in removed] == ["m-33"] and resent == ['{"n": 33}']
    assert len(left) == 34 and "m-33" not in {d.message_id for d in left}
