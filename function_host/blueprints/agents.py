"""Azure Functions triggers of the agents: one Service Bus trigger per agent request queue."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import azure.durable_functions as df
import azure.functions as func
from azurefunctions.extensions.bindings import servicebus

from agents.agent import TakenRequests, handle_request
from agents.services import HttpRemoteService
from function_host.settlement import NO_RETRY, settle_trigger_delivery
from function_host.trace_context import trigger_traceparent
from function_host.wiring import dependencies
from orderflow.workflows import agent_names

bp = df.Blueprint()


@cache
def _service(name: str) -> HttpRemoteService:
    return HttpRemoteService(name, dependencies().settings.DEMO_SERVICES_URL)


@cache
def _taken(name: str) -> TakenRequests:
    return TakenRequests()


def _handle(
    agent: str,
    message: servicebus.ServiceBusReceivedMessage,
    actions: servicebus.ServiceBusMessageActions,
    context: func.Context | None,
) -> None:
    deps = dependencies()
    traceparent = trigger_traceparent(context)
    # The delivery count goes with the body: a redelivered request makes no call (agents.agent).
    settle_trigger_delivery(
        deps.settings.agent_queue(agent),
        message,
        actions,
        lambda received: handle_request(
            received.body,
            delivery_count=received.delivery_count,
            service=_service(agent),
            queues=deps.queues,
            clock=deps.clock,
            settings=deps.settings,
            taken=_taken(agent),
            breakers=deps.breakers,
            transport_traceparent=traceparent,
        ),
        max_delivery_count=deps.settings.MAX_DELIVERY_COUNT,
        # A redelivered request makes no call: retrying one is never of use (settlement.NoRetry).
        redelivery=NO_RETRY,
    )


def _trigger(agent: str) -> Callable[..., None]:
    """The Service Bus trigger of one agent's request queue (``%AGENT_QUEUE_PREFIX%<agent>``)."""

    def trigger(
        message: servicebus.ServiceBusReceivedMessage,
        message_actions: servicebus.ServiceBusMessageActions,
        context: func.Context = None,  # type: ignore[assignment]  # the worker wants this exact type
    ) -> None:
        _handle(agent, message, message_actions, context)

    name = f"agent_{agent}"
    trigger.__name__ = trigger.__qualname__ = name
    trigger.__doc__ = f"{agent.capitalize()} agent: perform the step inside its deadline, then answer."
    return bp.function_name(name)(  # type: ignore[no-any-return]
        bp.service_bus_queue_trigger(
            arg_name="message",
            queue_name=f"%AGENT_QUEUE_PREFIX%{agent}",
            connection="SERVICEBUS",
            auto_complete_messages=False,
        )(trigger)
    )


# One trigger per agent any deployed workflow version uses: a new agent gets its trigger with it.
for _agent in agent_names():
    globals()[f"agent_{_agent}"] = _trigger(_agent)
