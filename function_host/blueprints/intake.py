"""Azure Functions triggers of the intake role: one Service Bus trigger (PeekLock) per registered client.

A client is identified by the queue its message arrived on (docs/clients.md): each client's inbound
queue has a trigger of its own, generated when the app is indexed from the client registry (``CLIENTS``),
and that trigger hands :func:`intake.submission.handle_intake_message` the client it was generated for.
Every message (an order or a client's cancel) goes there; bad input is dead-lettered with its reason, and
so is a reviewer's or an operator's action, which only the operator API takes. A client registered later
gets its trigger when the app restarts.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import azure.durable_functions as df
import azure.functions as func
from azurefunctions.extensions.bindings import servicebus

from function_host.settlement import settle_trigger_delivery
from function_host.trace_context import trigger_traceparent
from function_host.wiring import dependencies, redelivery
from intake.admission import ClientAdmission
from intake.submission import handle_intake_message
from orderflow.clients import RegisteredClient
from orderflow.settings import Settings

bp = df.Blueprint()


@cache
def _admission() -> ClientAdmission:
    """The worker process's admission control, shared by every submission invocation."""
    deps = dependencies()
    return ClientAdmission.from_settings(deps.settings, states=deps.states, queues=deps.queues)


def _handle(
    client: RegisteredClient,
    message: servicebus.ServiceBusReceivedMessage,
    actions: servicebus.ServiceBusMessageActions,
    context: func.Context | None,
) -> None:
    deps = dependencies()
    traceparent = trigger_traceparent(context)
    settle_trigger_delivery(
        client.inbound_queue,
        message,
        actions,
        lambda received: handle_intake_message(
            received.body,
            client=client,
            reply_to=received.reply_to,
            orders=deps.orders,
            states=deps.states,
            queues=deps.queues,
            clock=deps.clock,
            settings=deps.settings,
            admission=_admission(),
            transport_traceparent=traceparent,
            order_cache=deps.order_cache,
            message_id=received.message_id,
            replays=deps.alerts,
        ),
        max_delivery_count=deps.settings.MAX_DELIVERY_COUNT,
        redelivery=redelivery(),
    )


def submission_function_name(client: RegisteredClient) -> str:
    """The function that consumes ``client``'s inbound queue: ``submission_<id>`` (``-`` as ``_``)."""
    return f"submission_{client.client_id.replace('-', '_')}"


def _trigger(client: RegisteredClient) -> Callable[..., None]:
    """The Service Bus trigger of one client's inbound queue."""

    def trigger(
        message: servicebus.ServiceBusReceivedMessage,
        message_actions: servicebus.ServiceBusMessageActions,
        context: func.Context = None,  # type: ignore[assignment]  # the worker wants this exact type
    ) -> None:
        _handle(client, message, message_actions, context)

    name = submission_function_name(client)
    trigger.__name__ = trigger.__qualname__ = name
    trigger.__doc__ = f"PeekLock intake of client {client.client_id}: record orders, dead-letter bad input."
    return bp.function_name(name)(  # type: ignore[no-any-return]
        bp.service_bus_queue_trigger(
            arg_name="message",
            queue_name=client.inbound_queue,
            connection="SERVICEBUS",
            auto_complete_messages=False,
        )(trigger)
    )


# One trigger per registered client; the registry is read (and validated) once, at indexing.
for _client in Settings.load().clients():
    globals()[submission_function_name(_client)] = _trigger(_client)
