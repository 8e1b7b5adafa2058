"""Message settlement at the edge: map a handler's outcome to complete, abandon or dead-letter.

One policy for every consumer (submission, agents, the response listener), on every host:

- success → complete;
- :class:`InvalidMessage` → dead-letter with its reason (bad input is never retried, never dropped);
- :class:`ConflictingOrder` → dead-letter ``ConflictingOrder``;
- any other failure → abandon with a backoff delay, until the delivery count reaches the limit, then
  dead-letter ``MaxDeliveryCountExceeded`` with the last error. Nothing accepted is lost, and no
  consumer loop dies on one message.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from enum import StrEnum
from typing import Protocol

from orderflow import telemetry
from orderflow.errors import ConflictingOrder, InvalidMessage
from orderflow.queues.base import ReceivedMessage

logger = logging.getLogger(__name__)


class Settlement(StrEnum):
    """How a message was settled."""

    COMPLETED = "completed"
    ABANDONED = "abandoned"
    DEAD_LETTERED = "dead_lettered"


def redelivery_delay_s(delivery_count: int, *, initial_s: float = 1.0, max_s: float = 30.0) -> float:
    """Exponential redelivery delay in seconds: 1, 2, 4 ... capped at ``max_s``."""
    exponent = min(max(0, delivery_count - 1), 32)  # capped first: 2**1024 overflows a float
    return float(min(max_s, initial_s * 2**exponent))


class SettlementTarget(Protocol):
    """What :func:`settle` needs of a queue: its name and the three settlements."""

    @property
    def name(self) -> str:
        """The queue's name, for logs."""
        ...

    def complete(self, message: ReceivedMessage) -> None:
        """Delete the message."""
        ...

    def abandon(self, message: ReceivedMessage, *, delay_s: float = 0.0) -> None:
        """Release the message for redelivery."""
        ...

    def dead_letter(self, message: ReceivedMessage, *, reason: str, description: str) -> None:
        """Move the message to the dead-letter queue."""
        ...


def settle(
    queue: SettlementTarget,
    message: ReceivedMessage,
    handler: Callable[[ReceivedMessage], object],
    *,
    max_delivery_count: int,
) -> Settlement:
    """Run ``handler`` on ``message`` and settle it by the policy in the module docstring.

    Args:
        queue: The queue the message came from.
        message: The received message.
        handler: Does the work; raises on failure.
        max_delivery_count: Deliveries after which a failing message is dead-lettered.

    Returns:
        How the message was settled. Never raises for a handler failure.
    """
    try:
        handler(message)
    except InvalidMessage as exc:
        logger.warning("dead-lettering message %s from %s: %s", message.message_id, queue.name, exc)
        telemetry.event(
            "message.dead_lettered", queue=queue.name, reason=exc.reason, message_id=message.message_id
        )
        queue.dead_letter(message, reason=exc.reason, description=exc.description)
        return Settlement.DEAD_LETTERED
    except ConflictingOrder as exc:
        logger.warning("dead-lettering message %s from %s: %s", message.message_id, queue.name, exc)
        telemetry.event(
            "message.dead_lettered", queue=queue.name, reason=exc.reason, message_id=message.message_id
        )
        queue.dead_letter(message, reason=exc.reason, description=exc.detail)
        return Settlement.DEAD_LETTERED
    except Exception as exc:
        if message.delivery_count >= max_delivery_count:
            logger.error(
                "dead-lettering message %s from %s after %s deliveries: %s",
                message.message_id,
                queue.name,
                message.delivery_count,
                exc,
            )
            telemetry.alert("max_delivery_count", queue=queue.name, message_id=message.message_id)
            queue.dead_letter(
                message, reason="MaxDeliveryCountExceeded", description=f"{type(exc).__name__}: {exc}"[:500]
            )
            return Settlement.DEAD_LETTERED
        delay = redelivery_delay_s(message.delivery_count)
        logger.warning(
            "handler failed for message %s from %s (delivery %s), retrying in %.1f s: %s",
            message.message_id,
            queue.name,
            message.delivery_count,
            delay,
            exc,
            exc_info=not isinstance(exc, ConnectionError),
        )
        queue.abandon(message, delay_s=delay)
        return Settlement.ABANDONED
    queue.complete(message)
    return Settlement.COMPLETED
