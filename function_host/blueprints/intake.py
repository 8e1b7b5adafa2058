"""Azure Functions trigger of the intake role: the submission path (Service Bus, PeekLock).

Every message of the orders queue (an order or a client's cancel) goes to
:func:`intake.submission.handle_intake_message`; bad input is dead-lettered with its reason, and so is a
reviewer's or an operator's action, which only the operator API takes.
"""

from __future__ import annotations

from functools import cache

import azure.durable_functions as df
from azurefunctions.extensions.bindings import servicebus

from function_host.settlement import settle_trigger_delivery
from function_host.wiring import dependencies, redelivery
from intake.admission import AdmissionControl
from intake.submission import handle_intake_message

bp = df.Blueprint()


@cache
def _admission() -> AdmissionControl:
    """The worker process's admission control, shared by every submission invocation."""
    deps = dependencies()
    return AdmissionControl.from_settings(deps.settings, states=deps.states, queues=deps.queues)


@bp.function_name("submission")
@bp.service_bus_queue_trigger(
    arg_name="message", queue_name="%ORDERS_QUEUE%", connection="SERVICEBUS", auto_complete_messages=False
)
def submission(
    message: servicebus.ServiceBusReceivedMessage, message_actions: servicebus.ServiceBusMessageActions
) -> None:
    """PeekLock intake: valid orders are recorded, requests handed on, bad input dead-lettered."""
    deps = dependencies()
    settle_trigger_delivery(
        deps.settings.ORDERS_QUEUE,
        message,
        message_actions,
        lambda received: handle_intake_message(
            received.body,
            reply_to=received.reply_to,
            orders=deps.orders,
            states=deps.states,
            queues=deps.queues,
            clock=deps.clock,
            settings=deps.settings,
            admission=_admission(),
        ),
        max_delivery_count=deps.settings.MAX_DELIVERY_COUNT,
        redelivery=redelivery(),
    )
