"""The agent request that runs a step: what it carries and where it goes (Scheduler–Agent–Supervisor).

A step's request is sent once the step is Running for an attempt in the state record (its calls
reserved, ``completeBy`` written): by the orchestration's ``start_step`` activity, or by the starter
for the first step its claim started (docs/design.md §3.2). Both send the same message, under the same
message id (:func:`orderflow.messages.request_id_for`), so a re-send is a duplicate the agent and the
listener already handle.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from orderflow import tracing
from orderflow.contracts import fallback_step_name, reacquire_step_name
from orderflow.errors import IllegalTransition
from orderflow.messages import AgentRequest, bounded_message_id, request_id_for
from orderflow.queues.base import QueueFactory
from orderflow.records import Hold, OrderDocument, StateRecord
from orderflow.settings import Queues
from orderflow.workflows import StepDefinition

AGENT_MARGIN_SHARE = 0.2
"""Share of a step's remaining time kept back from the agent for its answer's trip back."""

AGENT_MARGIN_MAX_S = 1.0
"""Largest margin, seconds: a queue hop and an event raise take well under a second."""


def request_payload(
    step: StepDefinition,
    order: OrderDocument,
    *,
    fallback: bool = False,
    corrected: dict[str, Any] | None = None,
    committed: Hold | None = None,
) -> dict[str, Any]:
    """What the remote service behind ``step``'s operation needs from the order: small and explicit; the
    fallback provider gets the step's ``fallback_payload`` over it.

    Args:
        corrected: An operator's corrections of the step's input (wire name -> value,
            :meth:`StateRecord.corrected_input`), laid over the order document's fields.
        committed: The hold a committing step makes permanent (its ``holdId`` and key go in the body).
    """
    if corrected:
        order = OrderDocument.model_validate({**order.to_json_dict(), **corrected})
    items = [{"sku": item.sku, "quantity": item.quantity} for item in order.items]
    payload: dict[str, Any]
    if committed is not None:
        payload = {"holdId": committed.hold_id, "holdKey": committed.idempotency_key}
    elif step.operation == "reserve":
        payload = {"items": items}
    elif step.operation in ("charge", "authorize"):
        # Customer ids are the client's own: the service is told whose (docs/clients.md).
        payload = {
            "customerId": order.customer_id,
            "amount": str(order.amount),
            "currency": order.currency,
            "clientId": order.client_id,
        }
    elif step.operation == "ship":
        payload = {"carrier": order.carrier, "items": items}
    else:
        payload = {"orderId": order.order_id}
    if fallback:
        payload.update(dict(step.fallback_payload))
    if step.hold is not None:
        payload["holdS"] = step.hold.lifetime_s
    return payload


def agent_deadline(complete_by: datetime, now: datetime) -> datetime:
    """The deadline (UTC) an agent request carries: a little before the step's ``complete_by``, so the
    agent stops early enough for its answer to travel back before the step's timer fires (an answer that
    arrives after it is dropped, and its calls are wasted)."""
    left_s = max(0.0, (complete_by - now).total_seconds())
    return complete_by - timedelta(seconds=min(AGENT_MARGIN_MAX_S, AGENT_MARGIN_SHARE * left_s))


def send_step_request(
    queues: QueueFactory,
    queue_names: Queues,
    *,
    record: StateRecord,
    step_def: StepDefinition,
    order: OrderDocument,
    instance_id: str,
    response_queue: str,
    now: datetime,
    reacquire: bool = False,
) -> datetime:
    """Send the agent request of ``step_def``, which ``record`` shows Running for ``instance_id``; returns
    the step's ``completeBy`` (UTC), where the orchestration's timer fires.

    The request carries the step's idempotency key and reserved calls as the record holds them, and a
    deadline a little before the record's ``completeBy`` (:func:`agent_deadline`). It goes to the provider
    the record names for the step: its fallback provider once the step moved there, in this attempt or an
    earlier one (the key, the payload and the provider go together; an undo goes to the same provider).
    The fallback provider answers as its own pseudo-step (``{step}:fallback``), so a late answer of the
    primary is never taken for it.

    Args:
        queues: Where the agents' request queues are.
        queue_names: The agents' queue names (``agent_queue``).
        record: The record as written by the write that started the step.
        step_def: The step's definition.
        order: The order document (the payload's source).
        instance_id: The attempt's instance id (``lockedBy``).
        response_queue: Where the agent answers.
        now: The time the step started (UTC), for the deadline's margin.
        reacquire: The request re-acquires the step's hold
            (:func:`orderflow.protocol.transitions.holds.start_reacquire`): it answers as
            ``{step}:reacquire``, under the step's new key, and names the hold it replaces
            (``replacesKey``) for the service to release.

    Raises:
        IllegalTransition: the record has no ``completeBy`` (the step was not started by a write).
        TransientError: the queue could not take the message; re-sending is safe.
    """
    complete_by = record.complete_by
    if complete_by is None:
        raise IllegalTransition(f"order {record.order_id} is Running without a completeBy")
    step = record.steps[step_def.name]
    fallback = step.fallback and not reacquire
    request_step = fallback_step_name(step_def.name) if fallback else step_def.name
    if reacquire:
        request_step = reacquire_step_name(step_def.name)
    payload = request_payload(
        step_def,
        order,
        fallback=fallback,
        corrected=record.corrected_input(step_def.name),
        committed=record.holds.get(step_def.commits) if step_def.commits else None,
    )
    if reacquire:
        payload["replacesKey"] = record.holds[step_def.name].idempotency_key
    request_id = request_id_for(instance_id, request_step)
    request = AgentRequest(
        request_id=request_id,
        order_id=record.order_id,
        instance_id=instance_id,
        step=request_step,
        operation=step_def.operation,
        idempotency_key=step.idempotency_key,
        deadline=agent_deadline(complete_by, now),
        reply_to=response_queue,
        payload=payload,
        max_calls=step.reserved_calls,
        traceparent=tracing.current_traceparent(),
    )
    agent = step_def.fallback_agent if fallback and step_def.fallback_agent else step_def.agent
    queues.queue(queue_names.agent_queue(agent)).send(
        request.to_json(), message_id=bounded_message_id(request_id), correlation_id=record.order_id
    )
    return complete_by
