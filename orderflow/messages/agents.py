"""An orchestration's request to an agent and the agent's response, and the ids derived for them."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import (
    Field,
)

from orderflow.messages.envelope import Traced
from orderflow.messages.fields import (
    QueueName,
    SchemaVersion,
)
from orderflow.records import UtcDatetime


class AgentOutcome(StrEnum):
    """How an agent's work ended."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"


class AgentRequest(Traced):
    """A request from an orchestration to an agent.

    Attributes:
        request_id: ``{instanceId}:{step}``, unique per attempt and step; stable across activity re-runs.
        instance_id: The orchestration instance to answer (``{orderId}:{attempt}``).
        step: Workflow step name.
        operation: What the agent must do (``reserve``, ``charge``, ``ship`` ...).
        idempotency_key: ``{orderId}:{step}``, the same across attempts (docs/design.md §3.6);
            ``...:fallback`` on the fallback provider, ``...:correction-{n}`` once an operator corrected
            the step's input (:func:`orderflow.protocol.keys.corrected_key`).
        deadline: The step's ``completeBy`` (UTC): no new call starts after it.
        reply_to: The response queue of the host that runs the instance.
        payload: What the remote service needs (small: ids, amounts, lines).
        max_calls: Calls this request may make (what is left of the order's retry budget).
    """

    schema_version: SchemaVersion = 1
    request_id: str
    order_id: str
    instance_id: str
    step: str
    operation: str
    idempotency_key: str
    deadline: UtcDatetime
    reply_to: QueueName
    payload: dict[str, Any]
    max_calls: int = Field(ge=0)


class AgentResponse(Traced):
    """An agent's answer, turned into the external event ``event_name`` on ``instance_id``.

    Attributes:
        event_name: ``{step}:response``, unique within the instance (docs/design.md §7).
        event_id: ``{requestId}:response``: stable, so duplicates are recognisable.
        outcome: ``succeeded`` or ``failed``.
        error_kind / error_code / error_message: For failures: ``transient``, ``permanent`` or
            ``timeout``; the remote code (``out_of_stock``); a short text.
        result: Small summary of the remote answer (ids, amounts).
        calls: Remote calls this request made (spent from the retry budget).
    """

    schema_version: SchemaVersion = 1
    request_id: str
    event_id: str
    event_name: str
    order_id: str
    instance_id: str
    step: str
    outcome: AgentOutcome
    error_kind: str | None = None
    error_code: str | None = None
    error_message: str | None = Field(default=None, max_length=500)
    result: dict[str, str] = Field(default_factory=dict)
    calls: int = 0
    completed_at: UtcDatetime


def step_event_name(step: str) -> str:
    """The external event an orchestration waits on for a step's agent response."""
    return f"{step}:response"


def request_id_for(instance_id: str, step: str) -> str:
    """The request id of a step in an attempt: ``{orderId}:{attempt}:{step}``."""
    return f"{instance_id}:{step}"
