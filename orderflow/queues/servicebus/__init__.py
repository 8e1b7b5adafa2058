"""Azure Service Bus adapter of the message-queue port (the Azure host; the Service Bus emulator locally).

Unlike Storage queues, Service Bus carries the sender's ids natively, so no envelope is needed: the body
is sent as-is with ``message_id`` = the sender's stable id (what broker duplicate detection keys on,
docs/design.md §3.7), ``correlation_id`` = the order id and ``content_type`` = ``application/json``.

How the port's PeekLock semantics map onto Service Bus:

- **Receive** uses a PeekLock receiver with ``prefetch_count=0``: a prefetched message's lock would
  tick in a local buffer, and with no prefetch the SDK releases messages that arrive outside a receive
  call. An empty receive means nothing arrived within ``max_wait_s``; it never means the queue is
  drained (docs/design.md §7).
- **Delivery count**: the SDK returns the AMQP header's count, which is 0 on first delivery (the
  service writes ``DeliveryCount - 1``; the SDK's own live tests assert 0 on a first receive). The
  port counts from 1, as the .NET and Java SDKs do, so 1 is added.
- **Lock duration** is a property of the queue (``LockDuration``, default 60 s, at most 5 minutes, set
  by the infrastructure), not of a receive call. ``lock_s`` is therefore advisory here: it is checked,
  and a handler that needs longer calls :meth:`ServiceBusQueue.renew_lock`, which extends the lock by
  the queue's lock duration from now.
- **Abandon** makes the message available again at once: Service Bus has no visibility delay on
  abandon, so ``delay_s`` is ignored. :meth:`ServiceBusQueue.redeliver` is the delayed alternative: a
  scheduled copy under a derived ``MessageId`` that carries the delivery count as an application
  property (:data:`DELIVERY_COUNT_PROPERTY`), read back by :func:`delivery_count`.
- **Settlement** goes through the receiver that received the message (the AMQP delivery belongs to its
  link). Each queue keeps one sender and one receiver open, and the factory hands out one queue object
  per name. The SDK's sync senders and receivers are not thread-safe, so each is guarded by a lock; a
  receive holds the receiver for at most ``max_wait_s`` (keep it small).
- **A lost lock** is harmless on complete, abandon and dead-letter (logged at warning): the message is
  redelivered, or was already settled. The SDK raises :class:`~azure.servicebus.exceptions.
  MessageLockLostError`, :class:`~azure.servicebus.exceptions.MessageAlreadySettled`,
  :class:`~azure.servicebus.exceptions.MessageNotFoundError`, or the base ``ServiceBusError`` for AMQP
  conditions it does not map (docs/design.md §7). On :meth:`ServiceBusQueue.renew_lock` the same errors
  raise :class:`~orderflow.errors.ConcurrencyConflict`, as on Storage.
- **Dead letters** use the queue's own dead-letter sub-queue; the reason and description become the
  ``DeadLetterReason`` / ``DeadLetterErrorDescription`` application properties, truncated to
  :data:`MAX_DEAD_LETTER_FIELD_CHARS`. An operator's removal finds dead letters by peeking (browsing
  shows locked messages and locks none) and settles them by sequence number, so that it never keeps
  another dead letter from a concurrent operation for longer than one pass
  (:meth:`ServiceBusQueueFactory.remove_dead_letters`).
- **Queues are never created** here: on Azure they come from the infrastructure (Bicep), and the
  emulator reads them from its configuration file. A missing queue surfaces as a
  :class:`~orderflow.errors.PermanentError` (``MessagingEntityNotFoundError``) on first use.
- Messages are sent without a time-to-live, so the queue's ``DefaultMessageTimeToLive`` applies; the
  infrastructure must keep it long and dead-letter on expiry, or an expired message is lost.

The adapter's modules: :mod:`.sdk` (the SDK surface used), :mod:`.codec` (names, durations, bodies),
:mod:`.errors` (SDK errors mapped), :mod:`.redelivery` (delayed copies and delivery counts),
:mod:`.queue` (one queue), :mod:`.dead_letter_queue` (reading and removing dead letters) and
:mod:`.factory` (the client and its queues).
"""

from orderflow.queues.servicebus.codec import (
    CONTENT_TYPE,
    MAX_DEAD_LETTER_FIELD_CHARS,
    decode_body,
    truncate_utf16,
    validate_queue_name,
)
from orderflow.queues.servicebus.dead_letter_queue import DEAD_LETTER_RETRY_S, DeadLetterSubQueues
from orderflow.queues.servicebus.errors import QueueCountUnavailable, translate_error
from orderflow.queues.servicebus.factory import DEFAULT_RETRY_TOTAL, ServiceBusQueueFactory
from orderflow.queues.servicebus.queue import DEFAULT_MAX_WAIT_S, ServiceBusQueue
from orderflow.queues.servicebus.redelivery import (
    DELIVERY_COUNT_PROPERTY,
    ORIGINAL_MESSAGE_ID_PROPERTY,
    copy_identity,
    delivery_count,
    original_message_id,
    redelivery_copy,
    redelivery_message_id,
    trace_properties,
)
from orderflow.queues.servicebus.sdk import (
    AdministrationClientLike,
    QueueRuntimePropertiesLike,
    ReceivedMessageLike,
    ReceiverLike,
    SenderLike,
    ServiceBusClientLike,
)

__all__ = [
    "CONTENT_TYPE",
    "DEAD_LETTER_RETRY_S",
    "DEFAULT_MAX_WAIT_S",
    "DEFAULT_RETRY_TOTAL",
    "DELIVERY_COUNT_PROPERTY",
    "MAX_DEAD_LETTER_FIELD_CHARS",
    "ORIGINAL_MESSAGE_ID_PROPERTY",
    "AdministrationClientLike",
    "DeadLetterSubQueues",
    "QueueCountUnavailable",
    "QueueRuntimePropertiesLike",
    "ReceivedMessageLike",
    "ReceiverLike",
    "SenderLike",
    "ServiceBusClientLike",
    "ServiceBusQueue",
    "ServiceBusQueueFactory",
    "copy_identity",
    "decode_body",
    "delivery_count",
    "original_message_id",
    "redelivery_copy",
    "redelivery_message_id",
    "trace_properties",
    "translate_error",
    "truncate_utf16",
    "validate_queue_name",
]
