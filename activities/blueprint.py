"""Azure Functions triggers of the activities role: submission (Service Bus) and the orchestration's
activities. Each trigger decodes its binding and calls the plain role function; nothing more."""

from __future__ import annotations

from functools import cache
from typing import Any

import azure.durable_functions as df
from azurefunctions.extensions.bindings import servicebus

from activities.admission import AdmissionControl
from activities.submission import handle_submission
from activities.table import ACTIVITIES, Activity
from function_host import ActivityPayload, dependencies, redelivery, settle_trigger_delivery

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
    """PeekLock submission: valid orders are recorded, bad input is dead-lettered with its reason."""
    deps = dependencies()
    settle_trigger_delivery(
        deps.settings.ORDERS_QUEUE,
        message,
        message_actions,
        lambda received: handle_submission(
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


def _register(activity: Activity[Any, Any]) -> None:
    """Register ``activity`` as a Durable Functions activity trigger under its contract's name."""

    def run(payload: ActivityPayload) -> ActivityPayload:
        return activity.run(payload, dependencies())

    run.__name__ = run.__qualname__ = f"{activity.name}_activity"
    run.__doc__ = activity.summary
    bp.function_name(activity.name)(bp.activity_trigger(input_name="payload")(run))


for _activity in ACTIVITIES:
    _register(_activity)
