"""Azure Functions triggers of the intake role: one Service Bus trigger (PeekLock) per registered client.

A client is identified by the queue its message arrived on (docs/clients.md): each client's inbound
queue has a trigger of its own, registered by :func:`register_client_triggers`, which ``function_app.py``
calls with the client registry (``CLIENTS``) when the app is indexed; that trigger hands
:func:`intake.submission.handle_intake_message` the client it was registered for.
Every message (an order or a client's cancel) goes there; bad input is dead-lettered with its reason, and
so is a reviewer's or an operator's action, which only the operator API takes. A client registered later
gets its trigger when the app restarts.

Each trigger also takes a durable client binding: a new order is claimed and its orchestration started
from the trigger itself (``CLAIM_ON_SUBMIT``, :mod:`intake.claim_on_submit`), on the app's one shared
response queue, so it waits for no starter timer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterable
from functools import cache
from typing import Any

import azure.durable_functions as df
import azure.functions as func
from azurefunctions.extensions.bindings import servicebus

from function_host.durable_client import DurableFunctionsClient
from function_host.settlement import settle_trigger_delivery
from function_host.trace_context import trigger_traceparent
from function_host.wiring import app_settings, dependencies, redelivery
from intake.client_admission import ClientAdmission
from intake.submission import handle_intake_message
from orderflow.attempts import AttemptStarts, first_requests_for
from orderflow.clients import RegisteredClient


@cache
def _admission() -> ClientAdmission:
    """The worker process's admission control, shared by every submission invocation."""
    deps, settings = dependencies(), app_settings()
    return ClientAdmission.from_clients(settings.clients, states=deps.states, queues=deps.queues)


def _handle(
    client: RegisteredClient,
    message: servicebus.ServiceBusReceivedMessage,
    actions: servicebus.ServiceBusMessageActions,
    context: func.Context | None,
    durable: DurableFunctionsClient,
) -> None:
    deps, settings = dependencies(), app_settings()
    traceparent = trigger_traceparent(context)
    starts = AttemptStarts(
        client=durable,
        # One task hub, one shared response queue on Azure.
        response_queue=settings.queues.AGENT_RESPONSES_QUEUE,
        on_claimed=deps.cache.put,
        breakers=deps.breakers,
        first_requests=first_requests_for(deps, settings.starter),
    )
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
            steps=settings.steps,
            starter=settings.starter,
            queue_names=settings.queues,
            admission=_admission(),
            transport_traceparent=traceparent,
            order_cache=deps.order_cache,
            message_id=received.message_id,
            replays=deps.alerts,
            claim_on_submit=starts,
        ),
        max_delivery_count=settings.consumers.MAX_DELIVERY_COUNT,
        redelivery=redelivery(),
    )


def submission_function_name(client: RegisteredClient) -> str:
    """The function that consumes ``client``'s inbound queue: ``submission_<id>`` (``-`` as ``_``)."""
    return f"submission_{client.client_id.replace('-', '_')}"


def register_client_triggers(app: df.Blueprint, registry: Iterable[RegisteredClient]) -> None:
    """Register, on ``app``, one PeekLock Service Bus trigger per client of ``registry``: the function
    :func:`submission_function_name` names, on the client's inbound queue, connection ``SERVICEBUS``, with
    a durable client binding (``client``) that starts the new orders' orchestrations.

    A registry's client ids are distinct slugs, so the names are distinct too; the Functions library
    refuses a repeated name (``ValueError``) when the app is indexed, not here.
    """
    for client in registry:
        with_client = app.durable_client_input(client_name="client")(_client_trigger(client))
        trigger = app.service_bus_queue_trigger(
            arg_name="message",
            queue_name=client.inbound_queue,
            connection="SERVICEBUS",
            auto_complete_messages=False,
        )(with_client)
        app.function_name(submission_function_name(client))(trigger)


def _client_trigger(registered: RegisteredClient) -> Callable[..., Coroutine[Any, Any, None]]:
    """The trigger function of ``registered``'s inbound queue, which hands every message to the intake as
    ``registered``'s (``client`` is the durable client binding)."""

    async def submission(
        message: servicebus.ServiceBusReceivedMessage,
        message_actions: servicebus.ServiceBusMessageActions,
        client: df.DurableOrchestrationClient,
        context: func.Context = None,  # type: ignore[assignment]  # the worker wants this exact type
    ) -> None:
        """PeekLock intake of one client: record orders, start them, dead-letter bad input."""
        durable = DurableFunctionsClient(client, asyncio.get_running_loop())
        # The role is synchronous: run it in a thread; its durable-client calls come back to this loop.
        await asyncio.to_thread(_handle, registered, message, message_actions, context, durable)

    return submission
