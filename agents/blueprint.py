"""Azure Functions triggers of the agents: one Service Bus trigger per agent request queue."""

from __future__ import annotations

from functools import cache

import azure.durable_functions as df
from azurefunctions.extensions.bindings import servicebus

from agents.agent import handle_request
from agents.services import HttpRemoteService
from function_host import dependencies, settle_trigger_message

bp = df.Blueprint()


@cache
def _service(name: str) -> HttpRemoteService:
    return HttpRemoteService(name, dependencies().settings.DEMO_SERVICES_URL)


def _handle(
    agent: str, message: servicebus.ServiceBusReceivedMessage, actions: servicebus.ServiceBusMessageActions
) -> None:
    deps = dependencies()
    settle_trigger_message(
        deps.settings.agent_queue(agent),
        message,
        actions,
        lambda body: handle_request(
            body, service=_service(agent), queues=deps.queues, clock=deps.clock, settings=deps.settings
        ),
        max_delivery_count=deps.settings.MAX_DELIVERY_COUNT,
    )


@bp.function_name("agent_inventory")
@bp.service_bus_queue_trigger(
    arg_name="message",
    queue_name="%AGENT_QUEUE_PREFIX%inventory",
    connection="SERVICEBUS",
    auto_complete_messages=False,
)
def agent_inventory(
    message: servicebus.ServiceBusReceivedMessage, message_actions: servicebus.ServiceBusMessageActions
) -> None:
    """Inventory agent: reserve stock inside the step's deadline."""
    _handle("inventory", message, message_actions)


@bp.function_name("agent_payment")
@bp.service_bus_queue_trigger(
    arg_name="message",
    queue_name="%AGENT_QUEUE_PREFIX%payment",
    connection="SERVICEBUS",
    auto_complete_messages=False,
)
def agent_payment(
    message: servicebus.ServiceBusReceivedMessage, message_actions: servicebus.ServiceBusMessageActions
) -> None:
    """Payment agent: charge the customer inside the step's deadline."""
    _handle("payment", message, message_actions)


@bp.function_name("agent_shipping")
@bp.service_bus_queue_trigger(
    arg_name="message",
    queue_name="%AGENT_QUEUE_PREFIX%shipping",
    connection="SERVICEBUS",
    auto_complete_messages=False,
)
def agent_shipping(
    message: servicebus.ServiceBusReceivedMessage, message_actions: servicebus.ServiceBusMessageActions
) -> None:
    """Shipping agent: create the shipment inside the step's deadline."""
    _handle("shipping", message, message_actions)
