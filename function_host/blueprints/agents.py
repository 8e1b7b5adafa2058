"""Azure Functions triggers of the agents: one Service Bus trigger per agent request queue.

Each agent any deployed workflow version uses (:func:`orderflow.workflows.agent_names`, fallback
providers included) has its trigger written out here, on ``%AGENT_QUEUE_PREFIX%<agent>``; a workflow
that adds an agent adds its trigger here too (tests/unit/test_function_app.py checks the two agree).
"""

from __future__ import annotations

from functools import cache

import azure.durable_functions as df
import azure.functions as func
from azurefunctions.extensions.bindings import servicebus

from agents.agent import TakenRequests, handle_request
from agents.services import HttpRemoteService
from function_host.settlement import NO_RETRY, settle_trigger_delivery
from function_host.trace_context import trigger_traceparent
from function_host.wiring import app_settings, dependencies
from orderflow.bindings import CachedTokens, EntraAuth, ServiceBindings
from orderflow.wiring import azure_credential

bp = df.Blueprint()


@cache
def _tokens() -> CachedTokens:
    """The agents' bearer tokens, from the app's identity (``DefaultAzureCredential``, the user-assigned
    identity first), cached per scope and refreshed before they expire."""
    return CachedTokens(azure_credential(app_settings().connections))


@cache
def _service(name: str) -> HttpRemoteService:
    """``name``'s service as ``SERVICE_BINDINGS`` binds it (start-up has refused bindings missing one)."""
    settings = app_settings()
    binding = ServiceBindings.parse(settings.agents.SERVICE_BINDINGS).services[name]
    return HttpRemoteService(name, binding, tokens=_tokens() if isinstance(binding.auth, EntraAuth) else None)


@cache
def _taken(name: str) -> TakenRequests:
    return TakenRequests()


def _handle(
    agent: str,
    message: servicebus.ServiceBusReceivedMessage,
    actions: servicebus.ServiceBusMessageActions,
    context: func.Context | None,
) -> None:
    """Perform ``agent``'s request in ``message`` and settle it."""
    deps, settings = dependencies(), app_settings()
    traceparent = trigger_traceparent(context)
    # The delivery count goes with the body: a redelivered request makes no call (agents.agent).
    settle_trigger_delivery(
        settings.queues.agent_queue(agent),
        message,
        actions,
        lambda received: handle_request(
            received.body,
            delivery_count=received.delivery_count,
            service=_service(agent),
            queues=deps.queues,
            clock=deps.clock,
            agents=settings.agents,
            queue_names=settings.queues,
            taken=_taken(agent),
            breakers=deps.breakers,
            transport_traceparent=traceparent,
        ),
        max_delivery_count=settings.consumers.MAX_DELIVERY_COUNT,
        # A redelivered request makes no call: retrying one is never of use (settlement.NoRetry).
        redelivery=NO_RETRY,
    )


@bp.function_name("agent_inventory")
@bp.service_bus_queue_trigger(
    arg_name="message",
    queue_name="%AGENT_QUEUE_PREFIX%inventory",
    connection="SERVICEBUS",
    auto_complete_messages=False,
)
def agent_inventory(
    message: servicebus.ServiceBusReceivedMessage,
    message_actions: servicebus.ServiceBusMessageActions,
    context: func.Context = None,  # type: ignore[assignment]  # the worker wants this exact type
) -> None:
    """Inventory agent: reserve or release stock inside the step's deadline, then answer."""
    _handle("inventory", message, message_actions, context)


@bp.function_name("agent_payment")
@bp.service_bus_queue_trigger(
    arg_name="message",
    queue_name="%AGENT_QUEUE_PREFIX%payment",
    connection="SERVICEBUS",
    auto_complete_messages=False,
)
def agent_payment(
    message: servicebus.ServiceBusReceivedMessage,
    message_actions: servicebus.ServiceBusMessageActions,
    context: func.Context = None,  # type: ignore[assignment]  # the worker wants this exact type
) -> None:
    """Payment agent: charge or refund inside the step's deadline, then answer."""
    _handle("payment", message, message_actions, context)


@bp.function_name("agent_shipping")
@bp.service_bus_queue_trigger(
    arg_name="message",
    queue_name="%AGENT_QUEUE_PREFIX%shipping",
    connection="SERVICEBUS",
    auto_complete_messages=False,
)
def agent_shipping(
    message: servicebus.ServiceBusReceivedMessage,
    message_actions: servicebus.ServiceBusMessageActions,
    context: func.Context = None,  # type: ignore[assignment]  # the worker wants this exact type
) -> None:
    """Shipping agent: book or cancel a shipment with the order's carrier inside the step's deadline,
    then answer."""
    _handle("shipping", message, message_actions, context)


@bp.function_name("agent_courier")
@bp.service_bus_queue_trigger(
    arg_name="message",
    queue_name="%AGENT_QUEUE_PREFIX%courier",
    connection="SERVICEBUS",
    auto_complete_messages=False,
)
def agent_courier(
    message: servicebus.ServiceBusReceivedMessage,
    message_actions: servicebus.ServiceBusMessageActions,
    context: func.Context = None,  # type: ignore[assignment]  # the worker wants this exact type
) -> None:
    """Courier agent, the fallback carrier: ship by mail or cancel that shipment inside the step's
    deadline, then answer."""
    _handle("courier", message, message_actions, context)
