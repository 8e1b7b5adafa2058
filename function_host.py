"""Azure Functions host support shared by the blueprints: wiring, Service Bus settlement, durable client.

Like ``function_app.py`` this is host code: the blueprints import it, role code never does.

- :func:`dependencies` builds the adapters once per worker process from the app settings, with
  identity-based connections (``DefaultAzureCredential``): Cosmos DB for both stores, Service Bus for
  every queue. No keys.
- :func:`settle_trigger_message` applies orderflow's one settlement policy
  (:func:`orderflow.consumer.settle`) to a message delivered by a Service Bus trigger with
  ``auto_complete_messages=False``, through the trigger's ``ServiceBusMessageActions``;
  :func:`settle_trigger_delivery` does the same for a handler that needs the whole delivery (its
  delivery count), not only the body.
- :class:`DurableFunctionsClient` is the roles' :class:`~orderflow.orchestration.OrchestrationClient`
  over the Durable Functions client binding.
"""

from __future__ import annotations

import asyncio
import logging
import os
import typing
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any, Protocol, TypeVar

from pydantic import ValidationError

from orderflow.clock import SystemClock
from orderflow.consumer import Settlement, settle
from orderflow.dependencies import Dependencies
from orderflow.errors import TransientError
from orderflow.orchestration import InstanceStatus
from orderflow.queues.base import ReceivedMessage
from orderflow.queues.servicebus import (
    ReceivedMessageLike,
    ServiceBusQueueFactory,
    decode_body,
    delivery_count,
)
from orderflow.settings import (
    Settings,
    UnsafeAzureSetting,
    describe_invalid_settings,
    host_connection_refusals,
    on_azure,
)
from orderflow.wiring import connect_azure

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

ActivityPayload = typing.Dict[str, Any]  # noqa: UP006
"""An activity's JSON input or output, as the Durable extension passes it and the worker decodes it.

A ``typing`` generic on purpose: the Python worker refuses a ``dict[str, Any]`` annotation on a binding
(a ``types.GenericAlias`` is neither a class nor a ``typing`` generic to its check: "invalid non-type
annotation") and the host then loads no function of the app at all.
"""


@cache
def _connections() -> tuple[Dependencies, ServiceBusQueueFactory]:
    settings = Settings.load()
    stores, queues = connect_azure(settings)
    deps = Dependencies(
        states=stores.state, orders=stores.orders, queues=queues, clock=SystemClock(), settings=settings
    )
    return deps, queues


def check_start_up(environ: Mapping[str, str] | None = None) -> None:
    """Refuse to start on Azure with a setting that has no safe value there (``function_app`` calls
    this on import, so the worker's indexing fails and the host loads no function, with the reason).

    Raises:
        UnsafeAzureSetting: on Azure (:func:`orderflow.settings.on_azure` of ``environ``, default
            ``os.environ``), the first unsafe setting, named in a one-line message.
        ValueError: on Azure, a setting that does not parse, in one line naming it (a secret's value is
            never shown).
    """
    if not on_azure(environ):
        return
    refused = next(iter(host_connection_refusals(os.environ if environ is None else environ)), None)
    if refused is not None:
        raise UnsafeAzureSetting(*refused)
    try:
        settings = Settings.load(env=environ)
    except ValidationError as exc:
        raise ValueError(describe_invalid_settings(exc)) from None
    settings.check_azure()


def dependencies() -> Dependencies:
    """The worker process's adapters and settings, built on first use from the app settings."""
    return _connections()[0]


def redelivery() -> Redelivery:
    """How the worker process redelivers a trigger-delivered message with a delay: through its own
    Service Bus client (:meth:`orderflow.queues.servicebus.ServiceBusQueueFactory.redeliver`)."""
    return _connections()[1]


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


class DurableClientLike(Protocol):
    """The async methods of ``azure.durable_functions.DurableOrchestrationClient`` used here."""

    async def start_new(
        self, orchestration_function_name: str, instance_id: str | None = None, client_input: Any = None
    ) -> str: ...

    async def get_status(self, instance_id: str) -> Any: ...

    async def raise_event(self, instance_id: str, event_name: str, event_data: Any = None) -> None: ...


_RUNNING = frozenset({"Running", "Pending", "Suspended", "ContinuedAsNew"})


class DurableFunctionsClient:
    """:class:`~orderflow.orchestration.OrchestrationClient` over the Durable Functions client binding.

    The client's methods are coroutines bound to the worker's event loop (the SDK shares one aiohttp
    session per process). The roles are synchronous, so an ``async`` trigger runs the role function
    in a thread (``asyncio.to_thread``) and this adapter submits each coroutine back to the trigger's
    loop and waits for it. Never call it on the loop's own thread: it would wait on itself.

    Args:
        client: The ``DurableOrchestrationClient`` from the binding.
        loop: The trigger's running loop; None runs each call on a private loop (scripts and tests).
        timeout_s: Longest wait for one call, seconds.
    """

    def __init__(
        self,
        client: DurableClientLike,
        loop: asyncio.AbstractEventLoop | None = None,
        *,
        timeout_s: float = 30.0,
    ) -> None:
        self._client = client
        self._loop = loop
        self._timeout_s = timeout_s

    def _run(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        if self._loop is None:
            return asyncio.run(coroutine)
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(self._timeout_s)

    def start(self, name: str, instance_id: str, payload: dict[str, Any]) -> bool:
        """Start the instance unless it exists: ``start_new`` would silently replace an existing one
        (Durable Functions Python 1.x, docs/design.md §7)."""
        if self.get_status(instance_id) is not None:
            return False
        self._run(self._client.start_new(name, instance_id, payload))
        return True

    def get_status(self, instance_id: str) -> InstanceStatus | None:
        """The instance's status, or None when the extension knows no such instance (HTTP 404).

        The SDK's ``get_status`` hides the HTTP status: it returns a status object for a 500 too, built
        from the extension's error document and without a runtime status. Only the 404, which has no
        body (``DurableOrchestrationStatus(message="")``), means "no such instance".

        Raises:
            TransientError: the extension answered with an error instead of a status.
        """
        status = self._run(self._client.get_status(instance_id))
        runtime = getattr(status, "runtime_status", None)
        if runtime is None:
            if status is None or getattr(status, "message", None) == "":
                return None
            detail = getattr(status, "ExceptionMessage", None) or getattr(status, "Message", None)
            raise TransientError(f"the status query of {instance_id} failed: {detail or 'no status'}")
        value = getattr(runtime, "value", str(runtime))
        custom = getattr(status, "custom_status", None)
        return InstanceStatus(
            running=value in _RUNNING, custom_status=custom if isinstance(custom, str) else None
        )

    def raise_event(self, instance_id: str, name: str, payload: dict[str, Any]) -> None:
        """Raise an external event (the extension answers 410 for a finished instance: raised)."""
        self._run(self._client.raise_event(instance_id, name, payload))
