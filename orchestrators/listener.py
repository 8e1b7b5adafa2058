"""Response listener: turn an agent response into an external event on the instance named in it.

A response for an instance that does not exist (here), has finished, or is not waiting on that step is
acknowledged and dropped with a log line: it can never be delivered usefully, so retrying it would only
clog the queue. The orchestration itself also ignores a payload whose request id is not the one it
awaits (docs/design.md §7), so a duplicate raise is harmless.

Where the runtime makes the status read before a raise redundant (:class:`UncheckedEventRaiser`:
durabletask, locally), an agent response is raised without it: one gRPC round trip per response instead
of two. The runtime then drops what the read would have dropped, or holds it as it holds a raise that
raced a change of status (docs/design.md §7).
"""

from __future__ import annotations

import logging
from enum import StrEnum

from orderflow import custom_status, telemetry, tracing
from orderflow.contracts import REVIEW_EVENT
from orderflow.errors import InvalidMessage, TransientError
from orderflow.messages import (
    REVIEW_DECISION,
    AgentResponse,
    ReviewDecisionMessage,
    message_type,
    parse_message,
    request_id_for,
    step_event_name,
)
from orderflow.orchestration import OrchestrationClient, UncheckedEventRaiser

logger = logging.getLogger(__name__)


class Delivery(StrEnum):
    """What the listener did with a response."""

    RAISED = "raised"
    UNKNOWN_INSTANCE = "unknown_instance"
    INSTANCE_FINISHED = "instance_finished"
    NOT_WAITING = "not_waiting"
    INCONSISTENT = "inconsistent"


def _raise_review_decision(body: str | bytes, *, client: OrchestrationClient) -> Delivery:
    """Raise a forwarded reviewer's decision as the ``ReviewDecision`` event on the waiting instance."""
    decision = parse_message(ReviewDecisionMessage, body)
    fields = {"order_id": decision.order_id, "instance_id": decision.instance_id, "step": "review"}
    if decision.instance_id is None:
        raise InvalidMessage("MissingField", "a forwarded review decision names its instanceId")
    status = client.get_status(decision.instance_id)
    if status is None:
        telemetry.event("response.dropped", reason=Delivery.UNKNOWN_INSTANCE.value, **fields)
        return Delivery.UNKNOWN_INSTANCE
    if not status.running:
        telemetry.event("response.dropped", reason=Delivery.INSTANCE_FINISHED.value, **fields)
        return Delivery.INSTANCE_FINISHED
    if not isinstance(custom_status.parse(status.custom_status), custom_status.AwaitingReview):
        # Not waiting (yet, or any more): the decision is in the record, where the attempt reads it.
        telemetry.event("response.dropped", reason=Delivery.NOT_WAITING.value, **fields)
        return Delivery.NOT_WAITING
    client.raise_event(
        decision.instance_id, REVIEW_EVENT, {"decision": decision.decision, "reviewer": decision.reviewer}
    )
    telemetry.event("response.raised", **fields)
    return Delivery.RAISED


def waiting_steps(status: str | None) -> tuple[str, ...]:
    """The steps an instance waits on, from its custom status (:mod:`orderflow.custom_status`); empty
    for any status but ``waiting``."""
    parsed = custom_status.parse(status)
    return parsed.steps if isinstance(parsed, custom_status.Waiting) else ()


def handle_response(
    body: str | bytes, *, client: OrchestrationClient, transport_traceparent: str | None = None
) -> Delivery:
    """Deliver one agent response, under an ``orderflow.response`` span (a child of the agent's span).

    Args:
        body: The raw :class:`AgentResponse` message body.
        client: The durable client of the host running the instance.
        transport_traceparent: The trace context the transport handed over with the message (an Azure
            trigger's), preferred over the response's own ``traceparent``.

    Returns:
        What was done. Every outcome means "complete the message".

    Raises:
        InvalidMessage: the body is not an agent response or a forwarded review decision (dead-letter it;
            ``UnknownMessageType`` for any other ``type``).
        TransientError: the instance exists but has not run its first episode (no custom status yet):
            abandon and retry, as for an unreachable runtime.
        Exception: the runtime is unreachable (abandon and retry).
    """
    if message_type(body, known=(REVIEW_DECISION,), untyped=AgentResponse) == REVIEW_DECISION:
        return _raise_review_decision(body, client=client)
    response = parse_message(AgentResponse, body)
    attributes = {
        **tracing.order_attributes(response.order_id, response.instance_id, step=response.step),
        **tracing.messaging_attributes(None, None, message_id=response.event_id),
    }
    with tracing.span(
        tracing.RESPONSE,
        kind=tracing.CONSUMER,
        parent=response.traceparent,
        transport_parent=transport_traceparent,
        attributes=attributes,
    ) as span:
        delivery = _deliver(response, client)
        tracing.mark_outcome(span, delivery.value)
        return delivery


def _deliver(response: AgentResponse, client: OrchestrationClient) -> Delivery:
    """:func:`handle_response` for a parsed agent response."""
    fields = {
        "order_id": response.order_id,
        "instance_id": response.instance_id,
        "step": response.step,
        "request_id": response.request_id,
    }
    if isinstance(client, UncheckedEventRaiser):
        return _raise_unchecked(response, client, fields)
    status = client.get_status(response.instance_id)
    if status is None:
        telemetry.event("response.dropped", reason=Delivery.UNKNOWN_INSTANCE.value, **fields)
        return Delivery.UNKNOWN_INSTANCE
    if not status.running:
        telemetry.event("response.dropped", reason=Delivery.INSTANCE_FINISHED.value, **fields)
        return Delivery.INSTANCE_FINISHED
    if not _consistent(response):
        # Inconsistent ids would raise an event the instance cannot use (docs/design.md §7).
        telemetry.event("response.dropped", reason=Delivery.INCONSISTENT.value, **fields)
        return Delivery.INCONSISTENT
    if not status.custom_status:
        # Not yet run its first episode: the answer is to the request the starter sent for the step the
        # claim started (docs/design.md §3.2). Not raised now: the Azure Storage backend can discard an
        # event raised on an instance still Pending (Azure/durabletask#720). The message comes back, as
        # after any transient failure, until the instance says what it waits for.
        telemetry.event("response.deferred", reason="instance_not_started", **fields)
        raise TransientError(f"instance {response.instance_id} has not run its first episode yet")
    if response.step not in waiting_steps(status.custom_status):
        telemetry.event(
            "response.dropped", reason=Delivery.NOT_WAITING.value, waiting=status.custom_status, **fields
        )
        return Delivery.NOT_WAITING
    client.raise_event(response.instance_id, response.event_name, event_payload(response))
    telemetry.event("response.raised", **fields)
    return Delivery.RAISED


def event_payload(response: AgentResponse) -> dict[str, object]:
    """The external event's payload: the response as JSON, without its trace context (the orchestration
    has no use for it, and its history keeps what it is given)."""
    return response.model_dump(mode="json", by_alias=True, exclude={"traceparent"})


def _consistent(response: AgentResponse) -> bool:
    """The response's request id and event name are those of its instance and step."""
    return response.request_id == request_id_for(response.instance_id, response.step) and (
        response.event_name == step_event_name(response.step)
    )


def _raise_unchecked(
    response: AgentResponse, client: UncheckedEventRaiser, fields: dict[str, str]
) -> Delivery:
    """Raise a consistent response without reading the instance's status first (module docstring)."""
    if not _consistent(response):
        telemetry.event("response.dropped", reason=Delivery.INCONSISTENT.value, **fields)
        return Delivery.INCONSISTENT
    payload = event_payload(response)
    if not client.raise_event_if_exists(response.instance_id, response.event_name, payload):
        telemetry.event("response.dropped", reason=Delivery.UNKNOWN_INSTANCE.value, **fields)
        return Delivery.UNKNOWN_INSTANCE
    telemetry.event("response.raised", **fields)
    return Delivery.RAISED
