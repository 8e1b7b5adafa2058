"""Azure Functions triggers of the scheduler: the order orchestrator, the starter and the response
listener. Each trigger decodes its binding and calls the plain role function."""

from __future__ import annotations

import asyncio

import azure.durable_functions as df
import azure.functions as func
from azurefunctions.extensions.bindings import servicebus

from function_host.durable import durable_functions_orchestrator
from function_host.durable_client import DurableFunctionsClient
from function_host.settlement import settle_trigger_message
from function_host.trace_context import trigger_traceparent
from function_host.wiring import app_settings, dependencies, redelivery
from orchestrators.listener import handle_response
from orchestrators.starter import run_starter_pass
from orchestrators.workflow import order_workflow
from orderflow.attempts import first_requests_for
from orderflow.contracts import ORDER_WORKFLOW

bp = df.Blueprint()

order_orchestrator = bp.function_name(ORDER_WORKFLOW)(
    bp.orchestration_trigger(context_name="context")(durable_functions_orchestrator(order_workflow))
)
"""The order workflow body, run by Durable Functions through the workflow-context adapter."""


@bp.function_name("starter")
@bp.timer_trigger(arg_name="timer", schedule="%STARTER_SCHEDULE%", run_on_startup=False)
@bp.durable_client_input(client_name="client")
async def starter(timer: func.TimerRequest, client: df.DurableOrchestrationClient) -> None:
    """Claim ready Pending records and start their attempt-specific instances."""
    deps, settings = dependencies(), app_settings()
    # The role is synchronous: run it in a thread; its durable-client calls come back to this loop.
    await asyncio.to_thread(
        run_starter_pass,
        states=deps.states,
        client=DurableFunctionsClient(client, asyncio.get_running_loop()),
        clock=deps.clock,
        starter=settings.starter,
        steps=settings.steps,
        scans=settings.scans,
        queue_names=settings.queues,
        # One task hub, one shared response queue on Azure.
        response_queue=settings.queues.AGENT_RESPONSES_QUEUE,
        capacity=settings.starter.STARTER_BATCH,
        on_claimed=deps.cache.put,
        breakers=deps.breakers,
        first_requests=first_requests_for(deps, settings.starter),
    )


@bp.function_name("response_listener")
@bp.service_bus_queue_trigger(
    arg_name="message",
    queue_name="%AGENT_RESPONSES_QUEUE%",
    connection="SERVICEBUS",
    auto_complete_messages=False,
)
@bp.durable_client_input(client_name="client")
async def response_listener(
    message: servicebus.ServiceBusReceivedMessage,
    message_actions: servicebus.ServiceBusMessageActions,
    client: df.DurableOrchestrationClient,
    context: func.Context = None,  # type: ignore[assignment]  # the worker wants this exact type
) -> None:
    """Turn an agent response into the external event of the instance named in it."""
    dependencies()  # wires the process on first use, its alert sink included, as every trigger does
    settings = app_settings()
    durable = DurableFunctionsClient(client, asyncio.get_running_loop())
    traceparent = trigger_traceparent(context)
    await asyncio.to_thread(
        settle_trigger_message,
        settings.queues.AGENT_RESPONSES_QUEUE,
        message,
        message_actions,
        lambda body: handle_response(body, client=durable, transport_traceparent=traceparent),
        max_delivery_count=settings.consumers.MAX_DELIVERY_COUNT,
        redelivery=redelivery(),
    )
