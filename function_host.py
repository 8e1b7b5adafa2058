"""Azure Functions host support shared by the blueprints: wiring, Service Bus settlement, durable client.

Like ``function_app.py`` this is host code: the blueprints import it, role code never does.

- :func:`dependencies` builds the adapters once per worker process from the app settings, with
  identity-based connections (``DefaultAzureCredential``): Cosmos DB for both stores, Service Bus for
  every queue. No keys.
- :func:`settle_trigger_message` applies orderflow's one settlement policy
  (:func:`orderflow.consumer.settle`) to a message delivered by a Service Bus trigger with
  ``auto_complete_messages=False``, through the trigger's ``ServiceBusMessageActions``.
- :class:`DurableFunctionsClient` is the roles' :class:`~orchestrators.starter.OrchestrationClient`
  over the Durable Functions client binding.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any, Protocol

from activities.steps import ActivityDeps
from orchestrators.starter import InstanceStatus
from orderflow.clock import SystemClock
from orderflow.consumer import Settlement, settle
from orderflow.queues.base import ReceivedMessage
from orderflow.queues.servicebus import decode_body
from orderflow.settings import Settings
from orderflow.wiring import connect_azure

logger = logging.getLogger(__name__)


@cache
def dependencies() -> ActivityDeps:
    """The worker process's adapters and settings, built on first use from the app settings."""
    settings = Settings.load()
    stores, queues = connect_azure(settings)
    return ActivityDeps(
        states=stores.state, orders=stores.orders, queues=queues, clock=SystemClock(), settings=settings
    )


class TriggerMessage(Protocol):
    """What orderflow reads of a ``ServiceBusReceivedMessage`` delivered by a trigger."""

    @property
    def message_id(self) -> str | None: ...

    @property
    def body(self) -> Any: ...

    @property
    def delivery_count(self) -> int | None: ...

    @property
    def correlation_id(self) -> str | None: ...


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


@dataclass
class TriggerSettlement:
    """Settles one trigger-delivered message through the trigger's message actions.

    Service Bus has no delayed abandon: an abandoned message is redelivered at once, and the queue's
    ``maxDeliveryCount`` (infrastructure) bounds the retries before the broker dead-letters it.
    """

    name: str
    actions: MessageActions

    def complete(self, message: ReceivedMessage) -> None:
        """Complete the message."""
        self.actions.complete(message.lock_token)

    def abandon(self, message: ReceivedMessage, *, delay_s: float = 0.0) -> None:
        """Abandon the message (``delay_s`` cannot be honoured on Service Bus)."""
        self.actions.abandon(message.lock_token)

    def dead_letter(self, message: ReceivedMessage, *, reason: str, description: str) -> None:
        """Dead-letter with a reason and description (4,096 characters each at most)."""
        self.actions.deadletter(
            message.lock_token,
            deadletter_reason=reason[:4096],
            deadletter_error_description=description[:4096],
        )


def received(message: TriggerMessage) -> ReceivedMessage:
    """The port's view of a trigger-delivered message (the SDK counts deliveries from 0)."""
    message_id = message.message_id or ""
    return ReceivedMessage(
        message_id=message_id,
        body=decode_body(message.body, message_id=message_id),
        delivery_count=(message.delivery_count or 0) + 1,
        correlation_id=message.correlation_id,
        lock_token=message,
    )


def settle_trigger_message(
    queue_name: str,
    message: TriggerMessage,
    actions: MessageActions,
    handler: Callable[[str], object],
    *,
    max_delivery_count: int,
) -> Settlement:
    """Run ``handler`` on the message body and settle the message by orderflow's policy.

    Returns:
        How the message was settled.
    """
    return settle(
        TriggerSettlement(queue_name, actions),
        received(message),
        lambda m: handler(m.body),
        max_delivery_count=max_delivery_count,
    )


class DurableClientLike(Protocol):
    """The async methods of ``azure.durable_functions.DurableOrchestrationClient`` used here."""

    async def start_new(
        self, orchestration_function_name: str, instance_id: str | None = None, client_input: Any = None
    ) -> str: ...

    async def get_status(self, instance_id: str) -> Any: ...

    async def raise_event(self, instance_id: str, event_name: str, event_data: Any = None) -> None: ...


_RUNNING = frozenset({"Running", "Pending", "Suspended", "ContinuedAsNew"})


class DurableFunctionsClient:
    """:class:`~orchestrators.starter.OrchestrationClient` over the Durable Functions client binding.

    The roles are synchronous; triggers that use this run as plain (non-async) functions on the
    worker's thread pool, so each call runs the SDK's coroutine on a private event loop.
    """

    def __init__(self, client: DurableClientLike) -> None:
        self._client = client

    def start(self, name: str, instance_id: str, payload: dict[str, Any]) -> bool:
        """Start the instance unless it exists: ``start_new`` would silently replace an existing one
        (Durable Functions Python 1.x, docs/design.md §7)."""
        if self.get_status(instance_id) is not None:
            return False
        asyncio.run(self._client.start_new(name, instance_id, payload))
        return True

    def get_status(self, instance_id: str) -> InstanceStatus | None:
        """The instance's status, or None when the extension knows no such instance (HTTP 404)."""
        status = asyncio.run(self._client.get_status(instance_id))
        runtime = getattr(status, "runtime_status", None)
        if runtime is None:
            return None
        value = getattr(runtime, "value", str(runtime))
        custom = getattr(status, "custom_status", None)
        return InstanceStatus(
            running=value in _RUNNING, custom_status=custom if isinstance(custom, str) else None
        )

    def raise_event(self, instance_id: str, name: str, payload: dict[str, Any]) -> None:
        """Raise an external event (the extension answers 410 for a finished instance: raised)."""
        asyncio.run(self._client.raise_event(instance_id, name, payload))
