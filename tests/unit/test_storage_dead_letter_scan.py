"""The Storage adapter's dead-letter scan against a fake ``QueueClient``: a scan that never covered the
whole queue (another operation kept part of it hidden) raises ``DeadLettersBusy``, never a short page
or a "nothing removed"; scans of one queue in one process take turns in arrival order."""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from devhost.queues import dead_letter_scan
from devhost.queues.factory import StorageQueueFactory
from orderflow.errors import DeadLettersBusy, TransientError

pytestmark = pytest.mark.unit

QUEUE = "orders-acme"


@dataclass
class HidingQueueClient:
    """A dead-letter queue of ``count`` messages of which ``hidden`` are held by another operation for
    good: receives return only the others, the message count says all of them."""

    count: int
    hidden: int
    url: str = field(default_factory=lambda: f"http://fake/{uuid.uuid4().hex}")
    deleted: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)
    _taken: set[str] = field(default_factory=set)

    def _message(self, n: int) -> Any:
        return SimpleNamespace(
            id=f"id-{n}",
            pop_receipt=f"pr-{n}",
            content=f'{{"n": {n}}}',
            dequeue_count=1,
            inserted_on=datetime(2026, 1, 1, 0, 0, n % 60, tzinfo=UTC),
        )

    def peek_messages(self, *, max_messages: int) -> list[Any]:
        return [self._message(n) for n in range(min(max_messages, self.count - self.hidden))]

    def get_queue_properties(self) -> Any:
        return SimpleNamespace(approximate_message_count=self.count - len(self.deleted))

    def receive_messages(self, **_: Any) -> list[Any]:
        visible = [n for n in range(self.hidden, self.count) if f"id-{n}" not in self._taken]
        batch = [self._message(n) for n in visible[:32] if f"id-{n}" not in self.deleted]
        self._taken |= {message.id for message in batch}
        return batch

    def delete_message(self, message_id: str, pop_receipt: str) -> None:
        self.deleted.append(message_id)

    def update_message(self, message_id: str, pop_receipt: str, *, visibility_timeout: int) -> None:
        self.released.append(message_id)
        self._taken.discard(message_id)


def factory_of(client: HidingQueueClient) -> StorageQueueFactory:
    return StorageQueueFactory(None, create_queues=False, queue_clients={f"{QUEUE}-deadletter": client})  # type: ignore[dict-item]


@pytest.fixture(autouse=True)
def short_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dead_letter_scan, "DEAD_LETTER_SCAN_RETRY_S", 0.2)
    monkeypatch.setattr(dead_letter_scan, "DEAD_LETTER_SCAN_RETRY_PER_MESSAGE_S", 0.0)


def test_a_page_read_that_never_covered_the_queue_is_busy_not_short() -> None:
    client = HidingQueueClient(count=40, hidden=5)

    with pytest.raises(DeadLettersBusy, match="being read by another operation; try again") as raised:
        factory_of(client).dead_letter_page(QUEUE, max_messages=100)

    assert isinstance(raised.value, TransientError) and raised.value.queue == QUEUE
    assert set(client.released) == {f"id-{n}" for n in range(5, 40)} and client.deleted == []


def test_a_removal_whose_target_stays_hidden_is_busy_not_nothing_removed() -> None:
    client = HidingQueueClient(count=40, hidden=5)

    with pytest.raises(DeadLettersBusy):
        factory_of(client).remove_dead_letters(QUEUE, lambda d: d.dead_letter_id == "id-2", most=1)

    assert client.deleted == []


def test_a_whole_queue_is_read_and_a_target_missing_from_it_is_nothing_removed() -> None:
    client = HidingQueueClient(count=40, hidden=0)
    factory = factory_of(client)

    page = factory.dead_letter_page(QUEUE, max_messages=100)
    removed = factory.remove_dead_letters(QUEUE, lambda d: d.dead_letter_id == "id-99", most=1)

    assert len(page.items) == 40 and page.continuation is None
    assert removed == [] and client.deleted == []


def test_the_retry_time_grows_with_the_queue_and_is_bounded() -> None:
    assert dead_letter_scan.scan_budget_s(0) == dead_letter_scan.DEAD_LETTER_SCAN_RETRY_S
    assert (
        dead_letter_scan.scan_budget_s(80)
        <= dead_letter_scan.scan_budget_s(1024)
        <= dead_letter_scan.DEAD_LETTER_SCAN_MAX_RETRY_S
    )
    assert dead_letter_scan.DEAD_LETTER_SCAN_MAX_RETRY_S < dead_letter_scan.DEAD_LETTER_SCAN_LOCK_S


def test_scans_of_one_queue_in_one_process_take_turns_in_arrival_order() -> None:
    turns = dead_letter_scan._ScanTurns()
    order: list[str] = []
    holding = threading.Event()

    def scan(label: str) -> None:
        with turns.turn("q", 5.0) as got:
            assert got
            order.append(label)

    with turns.turn("q", 5.0) as first:
        holding.set()
        threads = []
        for label in ("a", "b", "c"):
            threads.append(threading.Thread(target=scan, args=(label,)))
            threads[-1].start()
            time.sleep(0.05)  # each in line before the next
        with turns.turn("q", 0.05) as late:
            assert first and not late  # the turn is held: a short wait gives up, and leaves the line
    for thread in threads:
        thread.join()

    assert order == ["a", "b", "c"]
