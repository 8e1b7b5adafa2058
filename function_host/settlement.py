"""Service Bus settlement for the Azure host's triggers: orderflow's one policy, through the trigger.

A Service Bus trigger with ``auto_complete_messages=False`` hands the function its message and the
binding's ``ServiceBusMessageActions``. :func:`settle_trigger_message` (the body) and
:func:`settle_trigger_delivery` (the whole delivery, with its count) run a role handler on it and settle
the message by :func:`orderflow.consumer.settle`, the policy every host shares. Service Bus has no
delayed abandon and the binding reports no delivery count, so a retry is a scheduled copy carrying the
next count (:class:`Redelivery`); an agent's request is never retried (:data:`NO_RETRY`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from orderflow.consumer import Settlement, settle
from orderflow.queues.base import ReceivedMessage
from orderflow.queues.servicebus import ReceivedMessageLike, decode_body, delivery_count

logger = logging.getLogger(__name__)


class TriggerMessage(ReceivedMessageLike, Protocol):
    """What orderflow reads of a ``ServiceBusReceivedMessage`` delivered by a trigger."""

    @property
    def delivery_count(self) -> int | None: ...


class Redelivery(Protocol):
    """Schedules a copy of a trigger-delivered message as a later delivery (Service Bus has no delayed
    abandon); :class:`~orderflow.queues.servicebus.ServiceBusQueueFactory` is one."""

    def redeliver(self, queue_name: str, message: TriggerMessage, *, delivery: int, delay_s: float) -> None:
        """Schedule ``message``, received from ``queue_name``, as delivery ``delivery`` in ``delay_s`` s.

        Raises:
            Exception: the copy was not sent (the caller abandons the message instead).
        """
        ...


class MessageActions(Protocol):
    """The settlement half of ``azurefunctions.extensions.bindings.servicebus.ServiceBusMessageActions``."""

    def complete(self, message: Any) -> None: ...

    def abandon(self, message: Any) -> None: ...

    def deadletter(
        self,
        message: Any,
        deadletter_reason: str | None = None,
        deadletter_error_description: str | None = None,
    ) -> None: ...


class NoRetry:
    """The :class:`Redelivery` of a trigger whose message a retry could do nothing with: an agent's
    request. A redelivered request makes no call and sends no response (:mod:`agents.agent`), so none
    is scheduled; the request is completed and the step's durable timer takes over. Nor is it abandoned,
    which the broker would redeliver with a count the binding does not report, as a first delivery
    that calls again."""

    def redeliver(self, queue_name: str, message: TriggerMessage, *, delivery: int, delay_s: float) -> None:
        """Schedule nothing; the caller completes the message."""
        logger.warning(
            "not retrying message %s on %s: a redelivery would make no call; the step's timer takes over",
            message.message_id,
            queue_name,
        )


NO_RETRY = NoRetry()


@dataclass
class TriggerSettlement:
    """Settles one trigger-delivered message through the trigger's message actions.

    Service Bus has no delayed abandon, and the trigger's binding does not report the broker's delivery
    count. So a message to be retried is redelivered through ``redelivery``: a copy carrying the next
    delivery count is scheduled ``delay_s`` seconds ahead, then the original is completed. The count
    bounds the retries (:func:`orderflow.consumer.settle` dead-letters at ``MAX_DELIVERY_COUNT``) and
    the delay is the consumer's backoff. If the copy cannot be sent, the original is abandoned: the
    broker redelivers it at once, and the queue's ``maxDeliveryCount`` bounds that loop.
    """

    name: str
    actions: MessageActions
    redelivery: Redelivery

    def complete(self, message: ReceivedMessage) -> None:
        """Complete the message."""
        self._settle("complete", message, lambda: self.actions.complete(message.lock_token))

    def abandon(self, message: ReceivedMessage, *, delay_s: float = 0.0) -> None:
        """Redeliver the message in ``delay_s`` seconds as its next delivery; abandon it if that fails."""
        try:
            self.redelivery.redeliver(
                self.name, message.lock_token, delivery=message.delivery_count + 1, delay_s=delay_s
            )
        except Exception as exc:
            logger.warning(
                "redelivery of message %s on %s failed, abandoning it: %s", message.message_id, self.name, exc
            )
            self._settle("abandon", message, lambda: self.actions.abandon(message.lock_token))
            return
        self.complete(message)

    def dead_letter(self, message: ReceivedMessage, *, reason: str, description: str) -> None:
        """Dead-letter with a reason and description (4,096 characters each at most)."""
        self._settle(
            "dead-letter",
            message,
            lambda: self.actions.deadletter(
                message.lock_token,
                deadletter_reason=reason[:4096],
                deadletter_error_description=description[:4096],
            ),
        )

    def _settle(self, action: str, message: ReceivedMessage, call: Callable[[], None]) -> None:
        # A settlement that fails (lost lock, message already settled) is harmless: the broker
        # redelivers the message and every handler is idempotent (docs/design.md §7).
        try:
            call()
        except Exception as exc:
            logger.warning("%s of message %s on %s failed: %s", action, message.message_id, self.name, exc)


def trigger_delivery_count(message: TriggerMessage) -> int:
    """Which delivery of ``message`` this is, counted as the port counts: 1 on the first delivery.

    The Functions host receives with the .NET Service Bus client, whose count is 1-based, and hands
    the worker that AMQP message. azurefunctions-extensions-bindings-servicebus 1.0.0b2 decodes it from
    after its lock-token annotation, past the header, so ``delivery_count`` is None on every delivery;
    None counts as 1. A copy made by :meth:`TriggerSettlement.abandon` carries the count it was
    redelivered as (:func:`orderflow.queues.servicebus.delivery_count`), which is what bounds retries.

    Returns:
        The count, at least 1.
    """
    return delivery_count(message, this_copy=max(1, message.delivery_count or 0))


def received(message: TriggerMessage) -> ReceivedMessage:
    """The port's view of a trigger-delivered message (delivery count from :func:`trigger_delivery_count`;
    a body that is not UTF-8 keeps its bytes escaped, for the handler to reject as ``NotUtf8``)."""
    message_id = message.message_id or ""
    return ReceivedMessage(
        message_id=message_id,
        body=decode_body(message.body, message_id=message_id),
        delivery_count=trigger_delivery_count(message),
        correlation_id=message.correlation_id,
        lock_token=message,
        reply_to=message.reply_to,
    )


def settle_trigger_delivery(
    queue_name: str,
    message: TriggerMessage,
    actions: MessageActions,
    handler: Callable[[ReceivedMessage], object],
    *,
    max_delivery_count: int,
    redelivery: Redelivery,
) -> Settlement:
    """Run ``handler`` on the received message (body, delivery count, ids) and settle the message by
    orderflow's policy (:func:`orderflow.consumer.settle`), redelivering through ``redelivery``.

    Returns:
        How the message was settled.
    """
    return settle(
        TriggerSettlement(queue_name, actions, redelivery),
        received(message),
        handler,
        max_delivery_count=max_delivery_count,
    )


def settle_trigger_message(
    queue_name: str,
    message: TriggerMessage,
    actions: MessageActions,
    handler: Callable[[str], object],
    *,
    max_delivery_count: int,
    redelivery: Redelivery,
) -> Settlement:
    """Run ``handler`` on the message body and settle the message by orderflow's policy.

    Returns:
        How the message was settled.
    """
    return settle_trigger_delivery(
        queue_name,
        message,
        actions,
        lambda m: handler(m.body),
        max_delivery_count=max_delivery_count,
        redelivery=redelivery,
    )
