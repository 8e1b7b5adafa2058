"""The client SDK: validated submissions, and a reply log that de-duplicates and keeps final statuses."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from orderflow.errors import InvalidMessage, TransientError
from orderflow.messages import OrderStatus, StatusReply, SubmitOrder, parse_message, reply_message_id
from orderflow.queues.memory import InMemoryQueueFactory
from orderflow_client import client as client_module
from orderflow_client.client import FINAL_STATUSES, OrderflowClient, ReplyLog, submission_message_id
from tests.unit.fakes import order_body

pytestmark = pytest.mark.unit

REPLY_QUEUE = "client-a"
AT = datetime(2026, 1, 1, 12, tzinfo=UTC)


@dataclass
class FakeTime:
    """Stands in for the ``time`` module inside :mod:`orderflow_client.client`: sleeping moves the clock."""

    now: float = 0.0
    slept: list[float] = field(default_factory=list)

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@pytest.fixture
def queues() -> InMemoryQueueFactory:
    now = [0.0]
    return InMemoryQueueFactory(clock=lambda: now[0])


@pytest.fixture
def client(queues: InMemoryQueueFactory) -> OrderflowClient:
    return OrderflowClient(queues, reply_queue=REPLY_QUEUE, orders_queue="orders-a")


def order(order_id: str = "o-1", **changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(order_body(order_id, reply_to="someone-else", **changes))
    return data


def reply(order_id: str, status: OrderStatus, *, seconds: int = 0) -> StatusReply:
    return StatusReply(order_id=order_id, status=status, at=AT + timedelta(seconds=seconds))


def send_reply(
    queues: InMemoryQueueFactory, status_reply: StatusReply, *, message_id: str | None = None
) -> None:
    queues.queue(REPLY_QUEUE).send(
        status_reply.to_json(),
        message_id=message_id or reply_message_id(status_reply.order_id, status_reply.status),
        correlation_id=status_reply.order_id,
    )


def latest_status(client: OrderflowClient, order_id: str) -> OrderStatus:
    return client.replies.latest[order_id].status


# --- submit ---------------------------------------------------------------------------------------


def test_submit_sends_the_order_with_reply_to_and_a_stable_message_id(
    client: OrderflowClient, queues: InMemoryQueueFactory
) -> None:
    order_id = client.submit(order("o-1"))

    assert order_id == "o-1"
    [message] = queues.queue("orders-a").peek_all()
    assert message.message_id == "o-1:submit" == submission_message_id("o-1")
    assert message.correlation_id == "o-1"
    sent = parse_message(SubmitOrder, message.body)
    assert sent.reply_to == REPLY_QUEUE
    assert sent.model_dump(mode="json", by_alias=True) == {**order("o-1"), "replyTo": REPLY_QUEUE}


def test_a_resubmission_after_rejected_gets_a_fresh_message_id(
    client: OrderflowClient, queues: InMemoryQueueFactory
) -> None:
    # Service Bus duplicate detection keeps message ids for minutes; a retry after a Rejected reply
    # (nothing was recorded) under the same id would be dropped without a word.
    client.submit(order("o-1"))
    client.submit(order("o-1"))  # a plain retry of the send: the same id
    send_reply(queues, reply("o-1", OrderStatus.REJECTED))
    send_reply(queues, reply("o-1", OrderStatus.REJECTED))  # the same reply twice counts once
    client.poll()
    client.submit(order("o-1"))

    ids = [m.message_id for m in queues.queue("orders-a").peek_all()]
    assert ids == ["o-1:submit", "o-1:submit", "o-1:submit:1"]
    assert submission_message_id("o-1", resubmission=1) == "o-1:submit:1"


def test_submit_accepts_a_model_and_overrides_its_reply_to(
    client: OrderflowClient, queues: InMemoryQueueFactory
) -> None:
    model = SubmitOrder.model_validate(order("o-2"))
    assert model.reply_to == "someone-else"

    assert client.submit(model) == "o-2"

    [message] = queues.queue("orders-a").peek_all()
    assert parse_message(SubmitOrder, message.body) == model.model_copy(update={"reply_to": REPLY_QUEUE})


def test_submit_twice_sends_the_same_message_id(
    client: OrderflowClient, queues: InMemoryQueueFactory
) -> None:
    client.submit(order("o-1"))
    client.submit(order("o-1"))

    assert [m.message_id for m in queues.queue("orders-a").peek_all()] == ["o-1:submit", "o-1:submit"]


def test_submit_uses_the_configured_orders_queue(queues: InMemoryQueueFactory) -> None:
    client = OrderflowClient(queues, reply_queue=REPLY_QUEUE, orders_queue="orders-eu")

    client.submit(order("o-1"))

    assert queues.queue("orders-a").approximate_count() == 0
    assert queues.queue("orders-eu").approximate_count() == 1


@pytest.mark.parametrize(
    "changes",
    [
        {"amount": "-5.00"},
        {"currency": "XYZ"},
        {"items": []},
        {"orderId": "has:colon"},
        {"discount": "5"},
        {"schemaVersion": 2},
    ],
)
def test_submit_of_an_invalid_order_sends_nothing(
    client: OrderflowClient, queues: InMemoryQueueFactory, changes: dict[str, Any]
) -> None:
    with pytest.raises((InvalidMessage, ValueError)):
        client.submit(order("o-1", **changes))

    assert queues.queue("orders-a").approximate_count() == 0


def test_submit_of_an_invalid_order_raises_invalid_message(client: OrderflowClient) -> None:
    with pytest.raises(InvalidMessage) as raised:
        client.submit(order("o-1", currency="XYZ"))

    assert raised.value.reason == "InvalidField"


def test_submit_with_an_invalid_reply_queue_sends_nothing(queues: InMemoryQueueFactory) -> None:
    client = OrderflowClient(queues, reply_queue="Not_A_Queue", orders_queue="orders-a")

    with pytest.raises((InvalidMessage, ValueError)):
        client.submit(order("o-1"))

    assert queues.queue("orders-a").approximate_count() == 0


def test_send_raw_sends_the_body_unchanged(client: OrderflowClient, queues: InMemoryQueueFactory) -> None:
    client.send_raw("{broken", message_id="garbage-1")

    [message] = queues.queue("orders-a").peek_all()
    assert (message.message_id, message.body) == ("garbage-1", "{broken")


# --- poll -----------------------------------------------------------------------------------------


def test_poll_returns_new_replies_and_completes_them(
    client: OrderflowClient, queues: InMemoryQueueFactory
) -> None:
    send_reply(queues, reply("o-1", OrderStatus.RECEIVED))
    send_reply(queues, reply("o-2", OrderStatus.RECEIVED, seconds=1))

    fresh = client.poll()

    assert [(r.order_id, r.status) for r in fresh] == [
        ("o-1", OrderStatus.RECEIVED),
        ("o-2", OrderStatus.RECEIVED),
    ]
    assert queues.queue(REPLY_QUEUE).approximate_count() == 0
    assert client.replies.latest == {"o-1": fresh[0], "o-2": fresh[1]}
    assert client.poll() == []


@pytest.mark.parametrize(
    ("sequence", "latest"),
    [
        # A conflicting resubmission (anyone may name this client's replyTo) never hides the order.
        ([OrderStatus.RECEIVED, OrderStatus.REJECTED], OrderStatus.RECEIVED),
        ([OrderStatus.RECEIVED, OrderStatus.PROCESSED, OrderStatus.REJECTED], OrderStatus.PROCESSED),
        # Refused by admission control, then resubmitted and accepted: the order's own status wins.
        ([OrderStatus.REJECTED, OrderStatus.RECEIVED], OrderStatus.RECEIVED),
        ([OrderStatus.REJECTED], OrderStatus.REJECTED),
        # Out of order: a final status is not replaced by an earlier, non-final one.
        ([OrderStatus.PROCESSED, OrderStatus.RECEIVED], OrderStatus.PROCESSED),
    ],
)
def test_the_latest_status_is_the_orders_own_and_final_wins(
    client: OrderflowClient, queues: InMemoryQueueFactory, sequence: list[OrderStatus], latest: OrderStatus
) -> None:
    for n, status in enumerate(sequence):
        send_reply(queues, reply("o-1", status, seconds=n))
        client.poll()

    assert latest_status(client, "o-1") is latest


def test_a_reply_whose_completion_fails_is_returned_once_and_its_redelivery_dropped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [0.0]
    queues = InMemoryQueueFactory(clock=lambda: now[0])
    client = OrderflowClient(queues, reply_queue=REPLY_QUEUE, orders_queue="orders-a")
    send_reply(queues, reply("o-1", OrderStatus.PROCESSED))
    send_reply(queues, reply("o-2", OrderStatus.PROCESSED, seconds=1))
    replies = queues.queue(REPLY_QUEUE)
    complete = replies.complete
    failures = [TransientError("complete timed out")]

    def complete_failing_once(message: Any) -> None:
        if failures:
            raise failures.pop()
        complete(message)

    monkeypatch.setattr(replies, "complete", complete_failing_once)

    # o-1's completion fails: both replies still reach the caller, none is lost with the exception.
    assert [r.order_id for r in client.poll()] == ["o-1", "o-2"]
    now[0] += 31  # o-1's lock runs out: it is delivered again, and dropped as a duplicate
    assert client.poll() == []
    assert client.replies.duplicates == 1
    assert replies.approximate_count() == 0


def test_poll_dedupes_a_resent_reply_in_one_batch_and_across_polls(
    client: OrderflowClient, queues: InMemoryQueueFactory
) -> None:
    processed = reply("o-1", OrderStatus.PROCESSED)
    send_reply(queues, processed)
    send_reply(queues, processed)

    assert client.poll() == [processed]
    assert client.replies.duplicates == 1

    send_reply(queues, processed)
    assert client.poll() == []
    assert client.replies.duplicates == 2
    assert client.replies.seen_ids == {"o-1:Processed"}
    assert client.replies.received == {"o-1": 1}  # replies per order, duplicates not counted
    assert queues.queue(REPLY_QUEUE).approximate_count() == 0


def test_a_later_received_does_not_overwrite_a_final_status(
    client: OrderflowClient, queues: InMemoryQueueFactory
) -> None:
    send_reply(queues, reply("o-1", OrderStatus.PROCESSED, seconds=5))
    client.poll()
    send_reply(queues, reply("o-1", OrderStatus.RECEIVED, seconds=1))

    fresh = client.poll()

    assert [r.status for r in fresh] == [OrderStatus.RECEIVED]
    assert latest_status(client, "o-1") is OrderStatus.PROCESSED
    assert client.replies.settled(["o-1"]) == 1


def test_a_received_before_the_final_status_in_one_batch_ends_final(
    client: OrderflowClient, queues: InMemoryQueueFactory
) -> None:
    send_reply(queues, reply("o-1", OrderStatus.PROCESSED, seconds=5))
    send_reply(queues, reply("o-1", OrderStatus.RECEIVED, seconds=1))

    client.poll()

    assert latest_status(client, "o-1") is OrderStatus.PROCESSED


def test_a_non_final_status_is_replaced_and_the_latest_final_status_is_kept(
    client: OrderflowClient, queues: InMemoryQueueFactory
) -> None:
    send_reply(queues, reply("o-1", OrderStatus.RECEIVED))
    send_reply(queues, reply("o-1", OrderStatus.AWAITING_REVIEW, seconds=1))
    client.poll()
    assert latest_status(client, "o-1") is OrderStatus.AWAITING_REVIEW
    assert client.replies.settled(["o-1"]) == 0

    send_reply(queues, reply("o-1", OrderStatus.FAILED, seconds=2))
    send_reply(queues, reply("o-1", OrderStatus.COMPENSATED, seconds=3))
    client.poll()

    assert latest_status(client, "o-1") is OrderStatus.COMPENSATED


@pytest.mark.parametrize(
    "text",
    [
        "hello, not json",
        json.dumps({"messageId": "m-1", "correlationId": None, "body": "[1, 2]", "sentAt": None}),
        json.dumps({"orderId": "o-1", "status": "Shipped", "at": "2026-01-01T00:00:00Z"}),
    ],
    ids=["raw-text", "envelope-not-object", "raw-json-unknown-status"],
)
def test_garbage_on_the_reply_queue_is_dead_lettered_and_counted_as_foreign(
    client: OrderflowClient, queues: InMemoryQueueFactory, text: str
) -> None:
    queues.queue(REPLY_QUEUE).put_raw(text)
    send_reply(queues, reply("o-1", OrderStatus.PROCESSED))

    fresh = client.poll()

    assert [(r.order_id, r.status) for r in fresh] == [("o-1", OrderStatus.PROCESSED)]
    assert client.replies.foreign == 1
    assert client.replies.duplicates == 0
    assert queues.queue(REPLY_QUEUE).approximate_count() == 0
    [dead] = queues.dead_letters(REPLY_QUEUE)
    assert dead.source_queue == REPLY_QUEUE
    assert dead.reason in {"InvalidJson", "NotAnObject", "InvalidField", "MissingField"}
    assert dead.description


def test_a_message_of_another_type_on_the_reply_queue_is_dead_lettered(
    client: OrderflowClient, queues: InMemoryQueueFactory
) -> None:
    queues.queue(REPLY_QUEUE).send(order_body("o-1"), message_id="o-1:submit")

    assert client.poll() == []

    assert client.replies.foreign == 1
    assert client.replies.latest == {}
    [dead] = queues.dead_letters(REPLY_QUEUE)
    assert (dead.message_id, dead.reason) == ("o-1:submit", "MissingField")


def test_reply_log_settled_counts_only_final_statuses() -> None:
    log = ReplyLog()
    for n, status in enumerate(OrderStatus):
        log.latest[f"o-{n}"] = reply(f"o-{n}", status)

    assert log.settled(log.latest) == len(FINAL_STATUSES)
    assert log.settled(["missing"]) == 0
    assert {OrderStatus.RECEIVED, OrderStatus.AWAITING_REVIEW}.isdisjoint(FINAL_STATUSES)


# --- wait_for -------------------------------------------------------------------------------------


def test_wait_for_returns_as_soon_as_all_are_settled(
    client: OrderflowClient, queues: InMemoryQueueFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_time = FakeTime()
    monkeypatch.setattr(client_module, "time", fake_time)
    send_reply(queues, reply("o-1", OrderStatus.RECEIVED))
    send_reply(queues, reply("o-1", OrderStatus.PROCESSED, seconds=1))
    send_reply(queues, reply("o-2", OrderStatus.REJECTED))
    seen: list[tuple[str, OrderStatus]] = []

    log = client.wait_for(
        ["o-1", "o-2"], timeout_s=60.0, on_reply=lambda r: seen.append((r.order_id, r.status))
    )

    assert fake_time.slept == []
    assert log is client.replies
    assert log.settled(["o-1", "o-2"]) == 2
    assert seen == [
        ("o-1", OrderStatus.RECEIVED),
        ("o-1", OrderStatus.PROCESSED),
        ("o-2", OrderStatus.REJECTED),
    ]


def test_wait_for_keeps_polling_until_the_last_order_settles(
    client: OrderflowClient, queues: InMemoryQueueFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    class ArrivingLater(FakeTime):
        def sleep(self, seconds: float) -> None:
            super().sleep(seconds)
            if len(self.slept) == 3:
                send_reply(queues, reply("o-2", OrderStatus.FAILED))

    fake_time = ArrivingLater()
    monkeypatch.setattr(client_module, "time", fake_time)
    send_reply(queues, reply("o-1", OrderStatus.PROCESSED))

    log = client.wait_for(["o-1", "o-2"], timeout_s=60.0, poll_s=0.5)

    assert fake_time.slept == [0.5, 0.5, 0.5]
    assert log.settled(["o-1", "o-2"]) == 2


def test_wait_for_gives_up_at_the_timeout(
    client: OrderflowClient, queues: InMemoryQueueFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_time = FakeTime()
    monkeypatch.setattr(client_module, "time", fake_time)
    send_reply(queues, reply("o-1", OrderStatus.RECEIVED))

    log = client.wait_for(["o-1"], timeout_s=2.0, poll_s=0.5)

    assert fake_time.now == pytest.approx(2.0)
    assert fake_time.slept == [0.5] * 4
    assert log.settled(["o-1"]) == 0
    assert log.latest["o-1"].status is OrderStatus.RECEIVED
