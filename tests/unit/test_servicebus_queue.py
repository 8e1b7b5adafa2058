"""The Service Bus queue adapter at the SDK boundary.

The Service Bus emulator needs Docker, which this machine lacks, so the seam is the SDK's client
surface: a recording fake ``ServiceBusClient`` hands out fake senders and receivers, while the messages
crossing the seam are the SDK's own classes: real ``ServiceBusMessage`` objects are checked on the
way out, and real ``ServiceBusReceivedMessage`` objects (built from an AMQP message, as the SDK's own
test-suite does) come back in.
"""

from __future__ import annotations

import logging
import re
import subprocess
import sys
import threading
import time
import types
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from azure.core.credentials import AccessToken
from azure.core.exceptions import AzureError, HttpResponseError, ResourceNotFoundError
from azure.servicebus import (
    ServiceBusMessage,
    ServiceBusReceivedMessage,
    ServiceBusReceiveMode,
    ServiceBusSubQueue,
)
from azure.servicebus._pyamqp.message import Header, Message, Properties
from azure.servicebus.exceptions import (
    MessageAlreadySettled,
    MessageLockLostError,
    MessageNotFoundError,
    MessageSizeExceededError,
    MessagingEntityNotFoundError,
    OperationTimeoutError,
    ServiceBusAuthorizationError,
    ServiceBusCommunicationError,
    ServiceBusConnectionError,
    ServiceBusError,
    ServiceBusQuotaExceededError,
    ServiceBusServerBusyError,
)

from orderflow.errors import (
    ConcurrencyConflict,
    DeadLettersBusy,
    InvalidMessage,
    PermanentError,
    TransientError,
)
from orderflow.messages import SubmitOrder, parse_message
from orderflow.queues import servicebus
from orderflow.queues.base import DeadLetter, ReceivedMessage
from orderflow.queues.servicebus import (
    DELIVERY_COUNT_PROPERTY,
    MAX_DEAD_LETTER_FIELD_CHARS,
    ORIGINAL_MESSAGE_ID_PROPERTY,
    QueueCountUnavailable,
    ServiceBusQueue,
    ServiceBusQueueFactory,
    copy_identity,
    delivery_count,
    redelivery_message_id,
)

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
QUEUE = "orders"
NOW = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
ENQUEUED = datetime(2024, 5, 1, 11, 59, 30, tzinfo=UTC)
LOCKED_UNTIL = datetime(2100, 1, 1, tzinfo=UTC)
MAX_WAIT_S = 0.5


# --- fakes of the SDK's client surface ----------------------------------------------------------------


@dataclass
class FakeSender:
    """Records every message sent; raises ``error`` instead when set."""

    sent: list[ServiceBusMessage] = field(default_factory=list)
    error: Exception | None = None
    closed: bool = False

    def send_messages(self, message: ServiceBusMessage, *, timeout: float | None = None) -> None:
        if self.error is not None:
            raise self.error
        self.sent.append(message)

    def close(self) -> None:
        self.closed = True


@dataclass
class FakeReceiver:
    """Records every call; serves queued batches and peekable messages; raises ``errors[method]``."""

    batches: list[list[ServiceBusReceivedMessage]] = field(default_factory=list)
    peekable: list[ServiceBusReceivedMessage] = field(default_factory=list)
    errors: dict[str, Exception] = field(default_factory=dict)
    calls: list[tuple[Any, ...]] = field(default_factory=list)
    closed: bool = False

    def _record(self, *call: Any) -> None:
        self.calls.append(call)
        error = self.errors.get(call[0])
        if error is not None:
            raise error

    def receive_messages(
        self, max_message_count: int | None = 1, max_wait_time: float | None = None
    ) -> list[ServiceBusReceivedMessage]:
        self._record("receive_messages", max_message_count, max_wait_time)
        return self.batches.pop(0) if self.batches else []

    def peek_messages(
        self, max_message_count: int = 1, *, sequence_number: int = 0
    ) -> list[ServiceBusReceivedMessage]:
        self._record("peek_messages", max_message_count, sequence_number)
        return self.peekable[:max_message_count]

    def complete_message(self, message: ServiceBusReceivedMessage) -> None:
        self._record("complete_message", message)

    def abandon_message(self, message: ServiceBusReceivedMessage) -> None:
        self._record("abandon_message", message)

    def dead_letter_message(
        self,
        message: ServiceBusReceivedMessage,
        reason: str | None = None,
        error_description: str | None = None,
    ) -> None:
        self._record("dead_letter_message", message, reason, error_description)

    def renew_message_lock(self, message: ServiceBusReceivedMessage) -> datetime:
        self._record("renew_message_lock", message)
        return LOCKED_UNTIL

    def close(self) -> None:
        self.closed = True


@dataclass
class FakeClient:
    """A ``ServiceBusClient`` whose senders and receivers are fakes, one per queue (and sub-queue)."""

    fully_qualified_namespace: str = "orderflow-test.servicebus.windows.net"
    senders: dict[str, FakeSender] = field(default_factory=dict)
    receivers: dict[tuple[str, ServiceBusSubQueue | None], FakeReceiver] = field(default_factory=dict)
    sender_requests: list[str] = field(default_factory=list)
    receiver_requests: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    closed: bool = False

    def sender(self, queue_name: str) -> FakeSender:
        return self.senders.setdefault(queue_name, FakeSender())

    def receiver(self, queue_name: str, sub_queue: ServiceBusSubQueue | None = None) -> FakeReceiver:
        return self.receivers.setdefault((queue_name, sub_queue), FakeReceiver())

    def get_queue_sender(self, queue_name: str) -> FakeSender:
        self.sender_requests.append(queue_name)
        return self.sender(queue_name)

    def get_queue_receiver(
        self,
        queue_name: str,
        *,
        sub_queue: ServiceBusSubQueue | None = None,
        receive_mode: ServiceBusReceiveMode = ServiceBusReceiveMode.PEEK_LOCK,
        max_wait_time: float | None = None,
        prefetch_count: int = 0,
    ) -> FakeReceiver:
        options = {
            "sub_queue": sub_queue,
            "receive_mode": receive_mode,
            "max_wait_time": max_wait_time,
            "prefetch_count": prefetch_count,
        }
        self.receiver_requests.append((queue_name, options))
        return self.receiver(queue_name, sub_queue)

    def close(self) -> None:
        self.closed = True


@dataclass
class FakeRuntimeProperties:
    active_message_count: int | None


@dataclass
class FakeAdmin:
    """A ``ServiceBusAdministrationClient`` answering runtime properties (or raising ``error``)."""

    active_message_count: int | None = 0
    error: Exception | None = None
    requests: list[str] = field(default_factory=list)
    closed: bool = False

    def get_queue_runtime_properties(self, queue_name: str) -> FakeRuntimeProperties:
        self.requests.append(queue_name)
        if self.error is not None:
            raise self.error
        return FakeRuntimeProperties(self.active_message_count)

    def close(self) -> None:
        self.closed = True


@dataclass
class FakeCredential:
    """A ``TokenCredential`` that records token requests (there should be none without I/O)."""

    requests: list[tuple[str, ...]] = field(default_factory=list)

    def get_token(
        self,
        *scopes: str,
        claims: str | None = None,
        tenant_id: str | None = None,
        enable_cae: bool = False,
        **kwargs: Any,
    ) -> AccessToken:
        self.requests.append(scopes)
        return AccessToken("token", 4102444800)


def _millis(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def sb_message(
    receiver: FakeReceiver,
    *,
    message_id: str | None = "o-1:submit",
    correlation_id: str | None = "o-1",
    data: list[bytes] | None = None,
    value: Any = None,
    delivery_count: int = 0,
    sequence_number: int = 7,
    enqueued: datetime | None = ENQUEUED,
    application_properties: dict[str | bytes, Any] | None = None,
    peeked: bool = False,
    reply_to: str | None = None,
) -> ServiceBusReceivedMessage:
    """A real ``ServiceBusReceivedMessage`` as the SDK builds it from an AMQP transfer."""
    annotations: dict[str | bytes, Any] = {
        b"x-opt-sequence-number": sequence_number,
        b"x-opt-locked-until": _millis(LOCKED_UNTIL),
    }
    if enqueued is not None:
        annotations[b"x-opt-enqueued-time"] = _millis(enqueued)
    amqp = Message(
        header=Header(delivery_count=delivery_count),
        properties=Properties(
            message_id=None if message_id is None else message_id.encode(),
            correlation_id=None if correlation_id is None else correlation_id.encode(),
            reply_to=None if reply_to is None else reply_to.encode(),
            content_type=b"application/json",
        ),
        message_annotations=annotations,
        delivery_annotations={b"x-opt-lock-token": uuid.uuid4()},
        application_properties=application_properties,
        data=data if value is None and data is not None else None,
        value=value,
    )
    return ServiceBusReceivedMessage(amqp, receiver=receiver, is_peeked_message=peeked)


# --- fixtures ------------------------------------------------------------------------------------------


@pytest.fixture
def client() -> FakeClient:
    return FakeClient()


@pytest.fixture
def admin() -> FakeAdmin:
    return FakeAdmin()


@pytest.fixture
def factory(client: FakeClient, admin: FakeAdmin) -> ServiceBusQueueFactory:
    return ServiceBusQueueFactory(client, admin=admin, max_wait_s=MAX_WAIT_S, clock=lambda: NOW)


@pytest.fixture
def queue(factory: ServiceBusQueueFactory) -> ServiceBusQueue:
    return factory.queue(QUEUE)


@pytest.fixture
def receiver(client: FakeClient) -> FakeReceiver:
    return client.receiver(QUEUE)


def receive_one(queue: ServiceBusQueue, receiver: FakeReceiver, **message: Any) -> ReceivedMessage:
    """Queue one real received message on the fake receiver and receive it through the adapter."""
    receiver.batches.append([sb_message(receiver, data=[b'{"orderId":"o-1"}'], **message)])
    [received] = queue.receive()
    return received


# --- send ----------------------------------------------------------------------------------------------


def test_send_sends_one_message_with_stable_id_correlation_and_json_content_type(
    queue: ServiceBusQueue, client: FakeClient
) -> None:
    queue.send('{"orderId":"o-1"}', message_id="o-1:submit", correlation_id="o-1")
    queue.send('{"orderId":"o-2"}', message_id="o-2:submit")

    first, second = client.sender(QUEUE).sent
    assert type(first) is ServiceBusMessage
    assert b"".join(first.body) == b'{"orderId":"o-1"}'
    assert first.message_id == "o-1:submit"
    assert first.correlation_id == "o-1"
    assert first.content_type == "application/json"
    assert first.scheduled_enqueue_time_utc is None
    assert first.time_to_live is None  # the queue's DefaultMessageTimeToLive applies
    assert b"".join(second.body) == b'{"orderId":"o-2"}'
    assert (second.message_id, second.correlation_id) == ("o-2:submit", None)
    assert (first.reply_to, second.reply_to) == (None, None)
    assert client.sender_requests == [QUEUE]  # one sender, kept open


def test_send_sets_the_reply_to_property(queue: ServiceBusQueue, client: FakeClient) -> None:
    queue.send('{"replyTo":"client-a"}', message_id="o-1:submit", reply_to="client-a")

    [sent] = client.sender(QUEUE).sent
    assert sent.reply_to == "client-a"


def test_delayed_send_is_scheduled_at_now_plus_delay(queue: ServiceBusQueue, client: FakeClient) -> None:
    queue.send('{"orderId":"o-1"}', message_id="o-1:retry", correlation_id="o-1", delay_s=90.5)

    [sent] = client.sender(QUEUE).sent
    assert sent.scheduled_enqueue_time_utc == NOW + timedelta(seconds=90.5)
    assert sent.message_id == "o-1:retry"
    assert b"".join(sent.body) == b'{"orderId":"o-1"}'


# --- redeliver: the delayed abandon of the Functions triggers ------------------------------------------


def test_redeliver_schedules_a_copy_that_carries_the_next_delivery(
    factory: ServiceBusQueueFactory, client: FakeClient, receiver: FakeReceiver
) -> None:
    original = sb_message(
        receiver,
        message_id="o-1:submit",
        reply_to="client-a",
        data=[b'{"orderId"', b':"o-1"}'],
        application_properties={b"tenant": "a"},
    )

    factory.redeliver(QUEUE, original, delivery=2, delay_s=4.0)

    [copy] = client.sender(QUEUE).sent
    assert copy.message_id is not None
    assert re.fullmatch(r"o-1:submit:redelivery:2:[0-9a-f]{16}", copy.message_id)
    assert copy.scheduled_enqueue_time_utc == NOW + timedelta(seconds=4)
    assert b"".join(copy.body) == b'{"orderId":"o-1"}'
    assert (copy.correlation_id, copy.reply_to, copy.content_type) == ("o-1", "client-a", "application/json")
    assert copy.application_properties == {
        "tenant": "a",
        DELIVERY_COUNT_PROPERTY: 2,
        ORIGINAL_MESSAGE_ID_PROPERTY: "o-1:submit",
    }


def test_a_copy_of_a_copy_keeps_the_original_id_and_counts_on(
    factory: ServiceBusQueueFactory, client: FakeClient, receiver: FakeReceiver
) -> None:
    first_copy = copy_of(receiver, 2)
    assert delivery_count(first_copy, this_copy=1) == 2

    factory.redeliver(QUEUE, first_copy, delivery=3, delay_s=0)

    [copy] = client.sender(QUEUE).sent
    assert copy.message_id is not None
    assert re.fullmatch(r"o-1:submit:redelivery:3:[0-9a-f]{16}", copy.message_id)
    assert copy.scheduled_enqueue_time_utc == NOW
    assert copy.application_properties is not None
    assert copy.application_properties[DELIVERY_COUNT_PROPERTY] == 3


def copy_of(receiver: FakeReceiver, delivery: int, **changes: Any) -> ServiceBusReceivedMessage:
    """A received copy that is delivery ``delivery`` of ``o-1:submit``, with ``changes`` to what it
    carries (``message_id``, or properties to add or replace)."""
    copy_id, identity = copy_identity("o-1:submit", delivery)
    properties: dict[str | bytes, Any] = dict(identity.items())
    properties.update(changes.get("properties", {}))
    return sb_message(
        receiver,
        message_id=changes.get("message_id", copy_id),
        data=[b"{}"],
        application_properties=properties,
    )


@pytest.mark.parametrize(("delivery", "this_copy", "expected"), [(2, 1, 2), (4, 1, 4), (4, 2, 5), (9, 3, 11)])
def test_a_copy_counts_the_delivery_it_carries_plus_its_own_redeliveries(
    receiver: FakeReceiver, delivery: int, this_copy: int, expected: int
) -> None:
    # this_copy > 1: the copy itself was redelivered by the broker.
    assert delivery_count(copy_of(receiver, delivery), this_copy=this_copy) == expected


def test_an_original_counts_the_brokers_deliveries(receiver: FakeReceiver) -> None:
    assert delivery_count(sb_message(receiver, data=[b"{}"]), this_copy=3) == 3


@pytest.mark.parametrize(
    "changes",
    [
        {"message_id": "o-1:submit"},  # the sender's own id
        {"message_id": "o-1:submit:redelivery:4:0123456789abcdef"},  # another delivery's id
        {"message_id": "o-2:submit:redelivery:4:0123456789abcdef"},  # another message's id
        {"message_id": "o-1:submit:redelivery:4:not-a-nonce"},
        {"properties": {DELIVERY_COUNT_PROPERTY: "not a number"}},
        {"properties": {DELIVERY_COUNT_PROPERTY: -5}},
        {"properties": {DELIVERY_COUNT_PROPERTY: 1}},
        {"properties": {DELIVERY_COUNT_PROPERTY: 2.5}},
        {"properties": {DELIVERY_COUNT_PROPERTY: True}},
        {"properties": {DELIVERY_COUNT_PROPERTY: "9" * 5000}},
        {"properties": {ORIGINAL_MESSAGE_ID_PROPERTY: ""}},
    ],
)
def test_a_carried_count_that_is_not_a_genuine_copys_counts_as_absent(
    receiver: FakeReceiver, changes: dict[str, Any]
) -> None:
    # A client may set any application property on what it sends: only a consistent copy is believed.
    assert delivery_count(copy_of(receiver, 6, **changes), this_copy=1) == 1


def test_a_received_copy_reports_the_delivery_it_carries(
    queue: ServiceBusQueue, receiver: FakeReceiver
) -> None:
    copy_id, identity = copy_identity("o-1:submit", 4)
    received = receive_one(
        queue, receiver, message_id=copy_id, delivery_count=1, application_properties=dict(identity)
    )

    # The broker's header says the copy was delivered once before: this is its second delivery.
    assert received.delivery_count == 5


def test_a_long_message_id_is_hashed_so_the_copys_id_stays_within_the_limit() -> None:
    long_id = "x" * 128

    derived = redelivery_message_id(long_id, 10, nonce="f" * 16)

    assert len(derived) <= 128
    assert derived.endswith(":redelivery:10:" + "f" * 16)
    assert derived == redelivery_message_id(long_id, 10, nonce="f" * 16)
    assert derived != redelivery_message_id("x" * 127 + "y", 10, nonce="f" * 16)


def test_two_copies_of_one_delivery_get_different_ids_no_sender_can_claim_first() -> None:
    assert copy_identity("o-1:submit", 2)[0] != copy_identity("o-1:submit", 2)[0]


@pytest.mark.parametrize(("delivery", "delay_s"), [(1, 1.0), (2, -1.0), (2, float("inf"))])
def test_redeliver_refuses_a_first_delivery_or_a_bad_delay(
    queue: ServiceBusQueue, client: FakeClient, receiver: FakeReceiver, delivery: int, delay_s: float
) -> None:
    with pytest.raises(ValueError):
        queue.redeliver(sb_message(receiver, data=[b"{}"]), delivery=delivery, delay_s=delay_s)
    assert client.sender(QUEUE).sent == []


def test_redeliver_errors_are_translated(
    queue: ServiceBusQueue, client: FakeClient, receiver: FakeReceiver
) -> None:
    client.sender(QUEUE).error = ServiceBusConnectionError(message="connection reset")

    with pytest.raises(TransientError, match="redeliver on Service Bus queue 'orders' failed"):
        queue.redeliver(sb_message(receiver, data=[b"{}"]), delivery=2, delay_s=1.0)


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"message_id": ""}, "message_id must not be empty"),
        ({"message_id": "x" * 129}, "message_id cannot be longer than 128 characters"),
        ({"delay_s": -1.0}, "delay_s must be a finite number of seconds at least 0"),
        ({"delay_s": float("nan")}, "delay_s must be a finite number"),
    ],
)
def test_send_rejects_bad_arguments_before_sending(
    queue: ServiceBusQueue, client: FakeClient, changes: dict[str, Any], error: str
) -> None:
    arguments: dict[str, Any] = {"message_id": "o-1:submit", **changes}
    with pytest.raises(ValueError, match=error):
        queue.send("{}", **arguments)
    assert client.sender(QUEUE).sent == []


# --- receive -------------------------------------------------------------------------------------------


def test_receive_uses_a_peek_lock_receiver_and_maps_the_message(
    queue: ServiceBusQueue, client: FakeClient, receiver: FakeReceiver
) -> None:
    first = sb_message(receiver, data=[b'{"orderId":"o-1"}'], delivery_count=0, sequence_number=7)
    again = sb_message(receiver, message_id="o-2:submit", correlation_id=None, data=[b"{}"], delivery_count=2)
    receiver.batches.append([first, again])

    one, two = queue.receive(max_messages=5, lock_s=45)

    assert client.receiver_requests == [
        (
            QUEUE,
            {
                "sub_queue": None,
                "receive_mode": ServiceBusReceiveMode.PEEK_LOCK,
                "max_wait_time": MAX_WAIT_S,
                "prefetch_count": 0,
            },
        )
    ]
    assert receiver.calls == [("receive_messages", 5, MAX_WAIT_S)]
    assert one == ReceivedMessage(
        message_id="o-1:submit",
        body='{"orderId":"o-1"}',
        delivery_count=1,  # the AMQP header says 0 on a first delivery
        correlation_id="o-1",
        enqueued_at=ENQUEUED,
        lock_token=first,
        transport_id="7",
    )
    assert one.lock_token is first
    assert (two.message_id, two.correlation_id, two.delivery_count, two.body) == ("o-2:submit", None, 3, "{}")
    assert two.lock_token is again


def test_empty_receive_returns_an_empty_list_and_keeps_the_receiver(
    queue: ServiceBusQueue, client: FakeClient, receiver: FakeReceiver
) -> None:
    assert queue.receive() == []
    assert queue.receive() == []
    assert len(client.receiver_requests) == 1
    assert receiver.calls == [("receive_messages", 16, MAX_WAIT_S)] * 2


def test_message_without_an_id_is_named_by_its_sequence_number(
    queue: ServiceBusQueue, receiver: FakeReceiver
) -> None:
    received = receive_one(queue, receiver, message_id=None, sequence_number=42)
    assert (received.message_id, received.transport_id) == ("sequence-42", "42")


@pytest.mark.parametrize(
    ("max_messages", "lock_s", "error"),
    [
        (0, 30.0, "max_messages must be at least 1"),
        (1, 0.0, "lock_s must be a finite number of seconds greater than 0"),
        (1, float("inf"), "lock_s must be a finite number"),
    ],
)
def test_receive_rejects_bad_arguments(
    queue: ServiceBusQueue, client: FakeClient, max_messages: int, lock_s: float, error: str
) -> None:
    with pytest.raises(ValueError, match=error):
        queue.receive(max_messages=max_messages, lock_s=lock_s)
    assert client.receiver_requests == []


# --- body decoding -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "text"),
    [
        # data sections (the SDK yields them from a generator); "é" split across two sections
        ({"data": [b'{"name":"Caf\xc3', b'\xa9"}']}, '{"name":"Café"}'),
        ({"data": [b'{"a":1}']}, '{"a":1}'),
        ({"value": b'{"a":1}'}, '{"a":1}'),  # an AMQP value body of bytes
        ({"value": '{"a":1}'}, '{"a":1}'),  # an AMQP value body of text
        ({"value": 12}, "12"),  # anything else: its text, for the consumer to reject
        ({}, ""),  # no body at all
    ],
)
def test_body_is_decoded_as_utf8_text(
    queue: ServiceBusQueue, receiver: FakeReceiver, body: dict[str, Any], text: str
) -> None:
    message = sb_message(receiver, **body)
    receiver.batches.append([message])
    [received] = queue.receive()
    assert received.body == text


def test_data_body_arrives_as_a_generator_and_is_decoded(
    queue: ServiceBusQueue, receiver: FakeReceiver
) -> None:
    message = sb_message(receiver, data=[b"[1,", b"2]"])
    assert isinstance(message.body, types.GeneratorType)  # the SDK's shape, not a list or bytes
    receiver.batches.append([message])
    [received] = queue.receive()
    assert received.body == "[1,2]"


def test_invalid_utf8_is_kept_escaped_and_logged_not_raised(
    queue: ServiceBusQueue, receiver: FakeReceiver, caplog: pytest.LogCaptureFixture
) -> None:
    receiver.batches.append([sb_message(receiver, message_id="bad-1", data=[b'\xff{"a":1}'])])
    with caplog.at_level(logging.WARNING, logger="orderflow.queues.servicebus"):
        [received] = queue.receive()
    assert received.body == '\udcff{"a":1}'  # surrogateescape: the original byte, recoverable
    assert [record.getMessage() for record in caplog.records] == [
        "body of message bad-1 is not UTF-8; undecodable bytes kept escaped"
    ]
    # Replacement characters would have let a mangled name through; the parser sees the real byte.
    with pytest.raises(InvalidMessage) as caught:
        parse_message(SubmitOrder, received.body)
    assert caught.value.reason == "NotUtf8"
    assert "byte 0xff at offset 0" in caught.value.description


@pytest.mark.parametrize("reply_to", ["client-a", None])
def test_receive_maps_the_reply_to_property(
    queue: ServiceBusQueue, receiver: FakeReceiver, reply_to: str | None
) -> None:
    received = receive_one(queue, receiver, reply_to=reply_to)
    assert received.reply_to == reply_to


# --- settlement on the receiver that received the message ----------------------------------------------


def test_complete_abandon_renew_and_dead_letter_go_to_the_receiving_receiver(
    factory: ServiceBusQueueFactory, client: FakeClient, receiver: FakeReceiver
) -> None:
    receiver.batches.append([sb_message(receiver, message_id=f"m-{n}", data=[b"{}"]) for n in range(4)])
    first, second, third, fourth = factory.queue(QUEUE).receive()

    # Every caller gets the same queue object, hence the same receiver.
    factory.queue(QUEUE).renew_lock(first, lock_s=60)
    factory.queue(QUEUE).complete(first)
    factory.queue(QUEUE).abandon(second)
    factory.queue(QUEUE).abandon(third, delay_s=30)  # no visibility delay on Service Bus: abandon now
    factory.queue(QUEUE).dead_letter(fourth, reason="InvalidMessage", description="missing orderId")

    assert len(client.receiver_requests) == 1
    assert receiver.calls[1:] == [
        ("renew_message_lock", first.lock_token),
        ("complete_message", first.lock_token),
        ("abandon_message", second.lock_token),
        ("abandon_message", third.lock_token),
        ("dead_letter_message", fourth.lock_token, "InvalidMessage", "missing orderId"),
    ]
    assert all(
        call[1] is message.lock_token
        for call, message in zip(receiver.calls[2:], (first, second, third, fourth), strict=True)
    )
    assert client.sender_requests == []  # abandon with a delay sends no scheduled copy


def test_dead_letter_reason_and_description_are_truncated_to_the_service_limit(
    queue: ServiceBusQueue, receiver: FakeReceiver
) -> None:
    received = receive_one(queue, receiver)
    reason = "R" * (MAX_DEAD_LETTER_FIELD_CHARS + 10)
    # Characters outside the BMP count as two UTF-16 units (how .NET and the service count length).
    # 3001 characters, 6001 units: short enough by characters, too long by units.
    description = "x" + "😀" * 3000

    queue.dead_letter(received, reason=reason, description=description)

    [(_, _, sent_reason, sent_description)] = receiver.calls[1:]
    assert sent_reason == "R" * 4096
    assert sent_description == "x" + "😀" * 2047  # 1 + 2 * 2047 = 4095 units; one more would be 4097
    assert len(sent_description.encode("utf-16-le")) // 2 == 4095


def test_dead_letter_is_logged(
    queue: ServiceBusQueue, receiver: FakeReceiver, caplog: pytest.LogCaptureFixture
) -> None:
    received = receive_one(queue, receiver)
    with caplog.at_level(logging.WARNING, logger="orderflow.queues.servicebus"):
        queue.dead_letter(received, reason="InvalidMessage", description="missing orderId")
    assert [record.getMessage() for record in caplog.records] == [
        "dead-lettered message o-1:submit from orders: InvalidMessage"
    ]


LOCK_LOST_ERRORS = [
    MessageLockLostError(),
    ServiceBusError("Message settling failed."),  # the base class, for AMQP conditions the SDK does not map
    MessageAlreadySettled(action="complete"),
    MessageNotFoundError(),
]


@pytest.mark.parametrize("error", LOCK_LOST_ERRORS, ids=lambda error: type(error).__name__)
@pytest.mark.parametrize(
    ("action", "method"),
    [
        ("complete", "complete_message"),
        ("abandon", "abandon_message"),
        ("dead_letter", "dead_letter_message"),
    ],
)
def test_settling_a_message_whose_lock_was_lost_is_logged_not_raised(
    queue: ServiceBusQueue,
    receiver: FakeReceiver,
    caplog: pytest.LogCaptureFixture,
    error: Exception,
    action: str,
    method: str,
) -> None:
    received = receive_one(queue, receiver)
    receiver.errors[method] = error
    with caplog.at_level(logging.WARNING, logger="orderflow.queues.servicebus"):
        if action == "dead_letter":
            queue.dead_letter(received, reason="InvalidMessage", description="bad")
        else:
            getattr(queue, action)(received)
    assert receiver.calls[-1][:2] == (method, received.lock_token)
    assert [(record.levelname, record.getMessage()) for record in caplog.records] == [
        ("WARNING", f"{action} of message o-1:submit on orders ignored: lock lost ({type(error).__name__})")
    ]


@pytest.mark.parametrize("error", LOCK_LOST_ERRORS, ids=lambda error: type(error).__name__)
def test_renewing_a_lost_lock_raises_concurrency_conflict(
    queue: ServiceBusQueue, receiver: FakeReceiver, error: Exception
) -> None:
    received = receive_one(queue, receiver)
    receiver.errors["renew_message_lock"] = error
    with pytest.raises(
        ConcurrencyConflict, match=r"lock of message 'o-1:submit' on 'orders' was lost"
    ) as raised:
        queue.renew_lock(received, lock_s=30)
    assert raised.value.__cause__ is error


def test_a_connection_failure_on_complete_is_raised_not_taken_for_a_lost_lock(
    queue: ServiceBusQueue, receiver: FakeReceiver
) -> None:
    received = receive_one(queue, receiver)
    receiver.errors["complete_message"] = ServiceBusConnectionError()
    with pytest.raises(TransientError, match=r"complete on Service Bus queue 'orders' failed"):
        queue.complete(received)


def test_a_refused_dead_letter_is_raised_as_permanent(queue: ServiceBusQueue, receiver: FakeReceiver) -> None:
    received = receive_one(queue, receiver)
    receiver.errors["dead_letter_message"] = ServiceBusAuthorizationError()
    with pytest.raises(PermanentError) as raised:
        queue.dead_letter(received, reason="InvalidMessage", description="bad")
    assert raised.value.code == "ServiceBusAuthorizationError"


def test_settling_a_message_not_received_from_service_bus_is_a_value_error(queue: ServiceBusQueue) -> None:
    foreign = ReceivedMessage(message_id="m-1", body="{}", delivery_count=1, lock_token="pop-receipt")
    with pytest.raises(ValueError, match="carries no Service Bus lock"):
        queue.complete(foreign)


# --- error translation ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "expected", "code"),
    [
        (ServiceBusConnectionError(), TransientError, None),
        (OperationTimeoutError(), TransientError, None),
        (ServiceBusServerBusyError(), TransientError, None),
        (ServiceBusCommunicationError(), TransientError, None),
        (ServiceBusQuotaExceededError(), TransientError, None),
        (MessagingEntityNotFoundError(), PermanentError, "MessagingEntityNotFoundError"),
        (ServiceBusAuthorizationError(), PermanentError, "ServiceBusAuthorizationError"),
        (ServiceBusError("unmapped condition"), PermanentError, "ServiceBusError"),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, Exception) else None,
)
def test_send_errors_are_translated(
    queue: ServiceBusQueue, client: FakeClient, error: AzureError, expected: type[Exception], code: str | None
) -> None:
    client.sender(QUEUE).error = error
    with pytest.raises(expected, match=r"send on Service Bus queue 'orders' failed: ") as raised:
        queue.send("{}", message_id="m-1")
    assert raised.value.__cause__ is error
    if code is not None:
        assert isinstance(raised.value, PermanentError)
        assert raised.value.code == code


def test_a_message_too_large_is_a_value_error(queue: ServiceBusQueue, client: FakeClient) -> None:
    error = MessageSizeExceededError()
    client.sender(QUEUE).error = error
    with pytest.raises(ValueError, match=r"message too large for Service Bus queue 'orders'") as raised:
        queue.send("x" * 10, message_id="m-1")
    assert type(raised.value) is ValueError
    assert raised.value.__cause__ is error


def test_receive_errors_are_translated(queue: ServiceBusQueue, receiver: FakeReceiver) -> None:
    receiver.errors["receive_messages"] = OperationTimeoutError()
    with pytest.raises(TransientError, match=r"receive on Service Bus queue 'orders' failed"):
        queue.receive()


# --- approximate count ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("active", "count"), [(5, 5), (0, 0), (None, 0)])
def test_approximate_count_is_the_active_message_count(
    queue: ServiceBusQueue, admin: FakeAdmin, active: int | None, count: int
) -> None:
    admin.active_message_count = active
    assert queue.approximate_count() == count
    assert admin.requests == [QUEUE]


def test_approximate_count_without_an_admin_client_says_so(client: FakeClient) -> None:
    queue = ServiceBusQueueFactory(client).queue(QUEUE)
    with pytest.raises(QueueCountUnavailable, match="has no Service Bus administration client") as raised:
        queue.approximate_count()
    assert isinstance(raised.value, NotImplementedError)
    assert isinstance(raised.value, PermanentError)
    assert raised.value.code == "approximate_count_unavailable"


class _Response:
    """The least of an HTTP response that ``HttpResponseError`` reads."""

    def __init__(self, status_code: int) -> None:
        self.status_code = status_code
        self.reason = "reason"
        self.headers: dict[str, str] = {}
        self.request = None

    def text(self, encoding: str | None = None) -> str:
        return ""

    def body(self) -> bytes:
        return b""


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (HttpResponseError(message="unavailable", response=_Response(503)), TransientError),
        (HttpResponseError(message="throttled", response=_Response(429)), TransientError),
        (HttpResponseError(message="no response"), TransientError),
        (HttpResponseError(message="forbidden", response=_Response(403)), PermanentError),
        (ResourceNotFoundError("Queue orders does not exist"), PermanentError),
    ],
)
def test_approximate_count_errors_are_translated(
    queue: ServiceBusQueue, admin: FakeAdmin, error: AzureError, expected: type[Exception]
) -> None:
    admin.error = error
    with pytest.raises(expected, match=r"approximate_count on Service Bus queue 'orders' failed"):
        queue.approximate_count()


# --- dead letters --------------------------------------------------------------------------------------


def test_dead_letters_peek_the_dead_letter_sub_queue_from_the_start(
    factory: ServiceBusQueueFactory, client: FakeClient
) -> None:
    dlq = client.receiver(QUEUE, ServiceBusSubQueue.DEAD_LETTER)
    dlq.peekable = [
        sb_message(
            dlq,
            data=[b'{"orderId":"o-1"}'],
            delivery_count=2,
            application_properties={
                b"DeadLetterReason": b"InvalidMessage",
                b"DeadLetterErrorDescription": b"missing field: amount",
            },
            peeked=True,
        ),
        # Dead-lettered by something that gave no reason, with no id and no enqueued time.
        sb_message(dlq, message_id=None, sequence_number=9, data=[b"raw"], enqueued=None, peeked=True),
    ]

    first = factory.dead_letters(QUEUE, max_messages=10)
    again = factory.dead_letters(QUEUE)

    assert client.receiver_requests == [
        (
            QUEUE,
            {
                "sub_queue": ServiceBusSubQueue.DEAD_LETTER,
                "receive_mode": ServiceBusReceiveMode.PEEK_LOCK,
                "max_wait_time": None,
                "prefetch_count": 0,
            },
        )
    ]
    # From sequence number 1 each time: a receiver's peek otherwise resumes after its last peek.
    assert dlq.calls == [("peek_messages", 10, 1), ("peek_messages", 32, 1)]
    assert first == again
    invalid, unexplained = first
    assert invalid.message_id == "o-1:submit"
    assert invalid.body == '{"orderId":"o-1"}'
    assert (invalid.reason, invalid.description) == ("InvalidMessage", "missing field: amount")
    assert invalid.source_queue == QUEUE
    assert invalid.delivery_count == 3
    assert invalid.dead_lettered_at == ENQUEUED
    assert (unexplained.message_id, unexplained.body) == ("sequence-9", "raw")
    assert (unexplained.reason, unexplained.description) == ("", "")
    assert unexplained.dead_lettered_at == NOW


def test_dead_letters_translate_errors(factory: ServiceBusQueueFactory, client: FakeClient) -> None:
    client.receiver(QUEUE, ServiceBusSubQueue.DEAD_LETTER).errors["peek_messages"] = (
        ServiceBusServerBusyError()
    )
    with pytest.raises(TransientError, match=r"dead_letters on Service Bus queue 'orders' failed"):
        factory.dead_letters(QUEUE)


# --- removing dead letters: found by peek, settled by sequence number ----------------------------------


@dataclass
class DeadLetterBroker:
    """A dead-letter sub-queue as the broker keeps it: bodies by sequence number, and which receiver holds
    each locked one. Peeks show locked messages too; receives return unlocked ones by sequence number."""

    bodies: dict[int, bytes] = field(default_factory=dict)
    holders: dict[int, object] = field(default_factory=dict)
    guard: threading.Lock = field(default_factory=threading.Lock)

    def remove(self, seq: int) -> None:
        """Someone else settled (or moved) ``seq``."""
        with self.guard:
            del self.bodies[seq]
            self.holders.pop(seq, None)


@dataclass
class BrokerReceiver(FakeReceiver):
    """A dead-letter receiver of a :class:`DeadLetterBroker`; ``on_receive()`` runs before each receive,
    as something else happening at that moment."""

    broker: DeadLetterBroker = field(default_factory=DeadLetterBroker)
    on_receive: Any = None

    def _message(self, seq: int, *, peeked: bool) -> ServiceBusReceivedMessage:
        return sb_message(
            self,
            message_id=f"m-{seq}",
            correlation_id=None,
            sequence_number=seq,
            data=[self.broker.bodies[seq]],
            application_properties={b"DeadLetterReason": b"HandlerFailed"},
            peeked=peeked,
        )

    def peek_messages(
        self, max_message_count: int = 1, *, sequence_number: int = 0
    ) -> list[ServiceBusReceivedMessage]:
        self._record("peek_messages", max_message_count, sequence_number)
        with self.broker.guard:
            found = sorted(seq for seq in self.broker.bodies if seq >= sequence_number)[:max_message_count]
            return [self._message(seq, peeked=True) for seq in found]

    def receive_messages(
        self, max_message_count: int | None = 1, max_wait_time: float | None = None
    ) -> list[ServiceBusReceivedMessage]:
        self._record("receive_messages", max_message_count, max_wait_time)
        if self.on_receive is not None:
            self.on_receive()
        with self.broker.guard:
            free = sorted(seq for seq in self.broker.bodies if seq not in self.broker.holders)
            found = free[: max_message_count or 1]
            for seq in found:
                self.broker.holders[seq] = self
            return [self._message(seq, peeked=False) for seq in found]

    def complete_message(self, message: ServiceBusReceivedMessage) -> None:
        seq = message.sequence_number or 0
        self._record("complete_message", seq)
        with self.broker.guard:
            if self.broker.holders.get(seq) is not self:
                raise MessageLockLostError()
            del self.broker.bodies[seq]
            del self.broker.holders[seq]

    def abandon_message(self, message: ServiceBusReceivedMessage) -> None:
        seq = message.sequence_number or 0
        self._record("abandon_message", seq)
        with self.broker.guard:
            if self.broker.holders.get(seq) is self:
                del self.broker.holders[seq]


def broker_of(count: int) -> DeadLetterBroker:
    """A dead-letter sub-queue holding ``count`` dead letters, sequence numbers 1 to ``count``."""
    return DeadLetterBroker(bodies={seq: b'{"n": %d}' % seq for seq in range(1, count + 1)})


def operator_factory(
    broker: DeadLetterBroker, *, sleep: Any = lambda _: None
) -> tuple[ServiceBusQueueFactory, BrokerReceiver]:
    """One operator's factory over ``broker`` (its own client and dead-letter receiver)."""
    client = FakeClient()
    receiver = BrokerReceiver(broker=broker)
    client.receivers[(QUEUE, ServiceBusSubQueue.DEAD_LETTER)] = receiver
    return ServiceBusQueueFactory(client, max_wait_s=MAX_WAIT_S, clock=lambda: NOW, sleep=sleep), receiver


def by_sequence(seq: int) -> Any:
    return lambda dead: dead.dead_letter_id == str(seq)


def test_a_removal_finds_by_peek_settles_by_sequence_number_and_holds_nothing_behind_its_target() -> None:
    broker = broker_of(40)
    factory, receiver = operator_factory(broker)
    resent: list[str] = []

    removed = factory.remove_dead_letters(
        QUEUE, by_sequence(20), before=lambda d: resent.append(d.body), most=1
    )

    kinds = [call[0] for call in receiver.calls]
    received = [call[1] for call in receiver.calls if call[0] in ("complete_message", "abandon_message")]
    assert [d.dead_letter_id for d in removed] == ["20"] and resent == ['{"n": 20}']
    # Found before anything is locked, by one peek: the first page holds it.
    assert (
        kinds.index("receive_messages") > kinds.index("peek_messages") and kinds.count("peek_messages") == 1
    )
    assert ("complete_message", 20) in receiver.calls and kinds.count("complete_message") == 1
    # One batch of 32 received: the 31 others abandoned at once, nothing left locked.
    assert sorted(received) == list(range(1, 33)) and broker.holders == {}
    assert sorted(broker.bodies) == [seq for seq in range(1, 41) if seq != 20]


def test_a_dead_letter_settled_by_someone_else_between_peek_and_receive_removes_nothing() -> None:
    broker = broker_of(40)
    factory, receiver = operator_factory(broker)
    # Another operator completes it after this one peeked it and before this one receives.
    receiver.on_receive = lambda: broker.remove(35) if 35 in broker.bodies else None
    resent: list[str] = []

    removed = factory.remove_dead_letters(
        QUEUE, by_sequence(35), before=lambda d: resent.append(d.body), most=1
    )

    assert removed == [] and resent == []
    assert not any(call[0] == "complete_message" for call in receiver.calls)
    assert ("peek_messages", 32, 35) in receiver.calls  # gone, by a peek at its sequence number
    assert broker.holders == {} and sorted(broker.bodies) == [seq for seq in range(1, 41) if seq != 35]


def test_a_dead_letter_another_operation_holds_is_tried_again_once_released() -> None:
    broker = broker_of(40)
    other = object()
    broker.holders[35] = other  # another operator's removal holds it for a moment
    pauses: list[float] = []

    def released_meanwhile(seconds: float) -> None:
        pauses.append(seconds)
        broker.holders.pop(35)

    factory, _ = operator_factory(broker, sleep=released_meanwhile)

    removed = factory.remove_dead_letters(QUEUE, by_sequence(35), most=1)

    assert [d.dead_letter_id for d in removed] == ["35"] and len(pauses) == 1 and 0 < pauses[0] < 1
    assert broker.holders == {} and len(broker.bodies) == 39


def test_a_removal_by_age_settles_every_target_and_no_other() -> None:
    broker = broker_of(70)
    factory, _ = operator_factory(broker)
    targets = {3, 33, 34, 64, 70}

    removed = factory.remove_dead_letters(QUEUE, lambda d: int(d.dead_letter_id) in targets)

    assert sorted(int(d.dead_letter_id) for d in removed) == sorted(targets)
    assert broker.holders == {} and set(broker.bodies) == set(range(1, 71)) - targets


def _remove_at_once(start: threading.Barrier, factory: ServiceBusQueueFactory, seq: int) -> list[str]:
    start.wait()
    return [d.dead_letter_id for d in factory.remove_dead_letters(QUEUE, by_sequence(seq), most=1)]


def test_two_operators_removing_two_dead_letters_at_once_both_succeed() -> None:
    for first, second in [(5, 40), (40, 5), (33, 34), (1, 64)]:
        broker = broker_of(64)
        operators = [operator_factory(broker, sleep=time.sleep)[0] for _ in range(2)]
        start = threading.Barrier(2)

        with ThreadPoolExecutor(2) as pool:
            answers = list(pool.map(_remove_at_once, [start] * 2, operators, [first, second]))

        assert answers == [[str(first)], [str(second)]]
        assert broker.holders == {} and set(broker.bodies) == set(range(1, 65)) - {first, second}


def test_a_failed_resend_keeps_the_dead_letter_and_releases_every_other() -> None:
    broker = broker_of(40)
    factory, _ = operator_factory(broker)

    def failing(dead: DeadLetter) -> None:
        raise TransientError("the queue to re-send to is down")

    with pytest.raises(TransientError):
        factory.remove_dead_letters(QUEUE, by_sequence(10), before=failing, most=1)

    assert broker.holders == {} and len(broker.bodies) == 40


# --- the factory ---------------------------------------------------------------------------------------


def test_queue_is_one_object_per_name_and_names_are_checked(factory: ServiceBusQueueFactory) -> None:
    assert factory.queue(QUEUE) is factory.queue(QUEUE)
    assert factory.queue("agent-requests.payments") is not factory.queue(QUEUE)
    for bad in ("", "-orders", "orders/", "orders/$DeadLetterQueue", "x" * 261):
        with pytest.raises(ValueError, match="invalid Service Bus queue name"):
            factory.queue(bad)


def test_getting_and_using_a_queue_never_manages_entities(
    factory: ServiceBusQueueFactory, client: FakeClient, admin: FakeAdmin
) -> None:
    queue = factory.queue(QUEUE)
    queue.send("{}", message_id="m-1")
    queue.receive()
    assert admin.requests == []  # no get, no create: queues come from the infrastructure


def test_close_closes_senders_receivers_admin_and_client(
    factory: ServiceBusQueueFactory, client: FakeClient, admin: FakeAdmin
) -> None:
    factory.queue(QUEUE).send("{}", message_id="m-1")
    factory.queue(QUEUE).receive()
    factory.dead_letters(QUEUE)

    factory.close()

    assert client.sender(QUEUE).closed
    assert client.receiver(QUEUE).closed
    assert client.receiver(QUEUE, ServiceBusSubQueue.DEAD_LETTER).closed
    assert admin.closed
    assert client.closed


def test_from_connection_string_builds_real_clients_for_the_emulator_without_io() -> None:
    connection_string = (
        "Endpoint=sb://localhost;SharedAccessKeyName=RootManageSharedAccessKey;"
        "SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;"
    )
    with ServiceBusQueueFactory.from_connection_string(connection_string) as factory:
        assert repr(factory) == "ServiceBusQueueFactory(namespace='localhost', queues=0)"
        queue = factory.queue(QUEUE)
        assert repr(queue) == "ServiceBusQueue(name='orders')"
        with pytest.raises(QueueCountUnavailable):
            queue.approximate_count()


def test_from_namespace_takes_any_token_credential_and_asks_for_no_token_until_used() -> None:
    credential = FakeCredential()
    with ServiceBusQueueFactory.from_namespace("orderflow.servicebus.windows.net", credential) as factory:
        factory.queue(QUEUE)
        assert (
            repr(factory) == "ServiceBusQueueFactory(namespace='orderflow.servicebus.windows.net', queues=1)"
        )
    assert credential.requests == []  # no connection, and no queue created


def test_the_module_does_not_import_azure_identity() -> None:
    script = "import sys, orderflow.queues.servicebus; print('azure.identity' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"


def test_a_target_another_operation_holds_past_the_retry_time_is_busy_not_nothing_removed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(servicebus.dead_letter_queue, "DEAD_LETTER_RETRY_S", 0.0)
    broker = broker_of(40)
    other = object()
    broker.holders[35] = other  # another operator's removal holds it throughout
    factory, _ = operator_factory(broker)

    with pytest.raises(DeadLettersBusy, match="being read by another operation"):
        factory.remove_dead_letters(QUEUE, by_sequence(35), most=1)

    assert broker.holders == {35: other} and len(broker.bodies) == 40
