"""Message envelopes (docs/design.md §5): validated on receipt, each with a ``schemaVersion``.

- :class:`SubmitOrder` arrives on the ``orders`` queue from a client.
- :class:`AgentRequest` goes from the orchestrator to an agent's request queue.
- :class:`AgentResponse` goes from an agent to the response queue named in the request.
- :class:`StatusReply` goes to the client's private reply queue.

Parsing failures raise :class:`orderflow.errors.InvalidMessage` with a short ``reason`` that becomes the
dead-letter reason, and a description that says exactly what was wrong.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal
from enum import StrEnum
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
)
from pydantic.alias_generators import to_camel

from orderflow.errors import InvalidMessage
from orderflow.records import UtcDatetime

MAX_MESSAGE_BYTES = 64 * 1024
"""Largest message body accepted (bytes): the Service Bus Standard tier limit would be 256 KiB;
an order is far smaller, so anything larger is garbage or abuse."""

SUPPORTED_CURRENCIES = frozenset({"USD", "EUR", "GBP"})
"""Currencies the demo payment service settles in."""

_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff]")
"""C0 and C1 controls, line/paragraph separators, zero-width and bidirectional formatting characters and
the BOM: invisible, or able to reorder what an operator reads, in any text field."""

OrderId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")]
"""Order ids: 1–64 characters of letters, digits, ``_ . -``; no ``:`` (instance ids use it as separator)
and nothing Cosmos DB forbids in an id (``/ \\ ? #``)."""

_QUEUE_NAME = re.compile(r"^[a-z0-9](?:[a-z0-9]|-(?!-)){1,50}[a-z0-9]$")


def _valid_queue_name(value: str) -> str:
    if not _QUEUE_NAME.fullmatch(value) or "--" in value:
        raise ValueError(
            f"{value!r} is not a valid queue name: 3-52 lowercase letters, digits and single hyphens, "
            "starting and ending with a letter or digit"
        )
    return value


QueueName = Annotated[str, AfterValidator(_valid_queue_name)]
"""Queue names valid on both Azure Storage queues and Service Bus: 3–52 lowercase letters, digits and
single hyphens, not starting or ending with a hyphen. 52, not Storage's 63, so that the local
dead-letter queue ``<name>-deadletter`` is a valid name too: a reply queue that could not be
dead-lettered would fail after the order was recorded."""

CleanText = Annotated[str, StringConstraints(min_length=1, max_length=200, strip_whitespace=True)]


class Envelope(BaseModel):
    """Base of every message: camelCase on the wire, unknown fields rejected, immutable."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)

    def to_json(self) -> str:
        """The wire form (camelCase JSON)."""
        return self.model_dump_json(by_alias=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_control_characters(cls, value: Any) -> Any:
        if isinstance(value, str) and _CONTROL_CHARS.search(value):
            raise ValueError("control characters are not allowed")
        return value


class SubmitItem(Envelope):
    """One line of a submitted order."""

    sku: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_\-]{1,32}$")]
    quantity: int = Field(ge=1, le=10_000, strict=True)


class SubmitOrder(Envelope):
    """An order submission (``orders`` queue).

    Attributes:
        schema_version: Must be 1.
        order_id: The client's order id; the idempotency key of the submission.
        amount: Order total, positive, at most two decimal places, below 10^9.
        currency: ISO 4217 code from :data:`SUPPORTED_CURRENCIES`.
        items: 1–100 lines.
        reply_to: The client's private reply queue for status messages.
    """

    schema_version: Literal[1]
    order_id: OrderId
    customer_id: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_\-]{1,64}$")]
    customer_name: CleanText
    currency: str
    amount: Decimal = Field(gt=0, lt=Decimal(10) ** 9, decimal_places=2)
    items: tuple[SubmitItem, ...] = Field(min_length=1, max_length=100)
    carrier: Annotated[str, StringConstraints(min_length=1, max_length=32)]
    reply_to: QueueName

    @field_validator("currency")
    @classmethod
    def _known_currency(cls, value: str) -> str:
        if value not in SUPPORTED_CURRENCIES:
            raise ValueError(
                f"unsupported currency {value!r}; expected one of {sorted(SUPPORTED_CURRENCIES)}"
            )
        return value

    @field_validator("amount", mode="before")
    @classmethod
    def _amount_is_not_float(cls, value: Any) -> Any:
        # Floats cannot represent money exactly; accept strings and integers only.
        if isinstance(value, (float, bool)):
            raise ValueError('amount must be a decimal string such as "12.50", not a float')
        return value

    def immutable_content(self) -> dict[str, Any]:
        """The fields whose hash identifies the order: everything the client sent, the amount in one
        canonical form (``12.5`` and ``12.50`` are the same order)."""
        content = self.model_dump(mode="json", by_alias=True)
        content["amount"] = f"{self.amount:.2f}"
        return content


CANCEL_ORDER = "CancelOrder"
"""``type`` of a :class:`CancelOrder` message; a body without ``type`` is a :class:`SubmitOrder`."""


class CancelOrder(Envelope):
    """A client's request to cancel an order (on the ``orders`` queue, beside submissions).

    The answer goes to the reply queue the order was submitted with: ``Cancelled`` once what was done is
    undone, or ``CancelRefused`` (the order is settled, or past its point of no return).

    Attributes:
        schema_version: Must be 1.
        type: ``CancelOrder``.
        order_id: The order to cancel.
        reason: Optional free text from the client, kept in the order's ``lastError``.
    """

    schema_version: Literal[1]
    type: Literal["CancelOrder"]
    order_id: OrderId
    reason: CleanText | None = None


COMPENSATE_ORDER = "CompensateOrder"
"""``type`` of a :class:`CompensateOrder` message."""


class CompensateOrder(Envelope):
    """An operator's decision to undo an order (on the ``orders`` queue): stop one in flight and
    compensate it, or retry the compensation of a ``CompensationFailed`` one.

    Attributes:
        schema_version: Must be 1.
        type: ``CompensateOrder``.
        order_id: The order.
        operator: Who decided (kept in the record).
        reason: Why (kept in ``lastError`` for an order stopped in flight).
    """

    schema_version: Literal[1]
    type: Literal["CompensateOrder"]
    order_id: OrderId
    operator: CleanText
    reason: CleanText | None = None


REVIEW_DECISION = "ReviewDecision"
"""``type`` of a :class:`ReviewDecisionMessage`."""


class ReviewDecisionMessage(Envelope):
    """A reviewer's decision on an order awaiting review (on the ``orders`` queue; forwarded, with the
    waiting attempt's ``instanceId``, to that attempt's response queue).

    Attributes:
        schema_version: Must be 1.
        type: ``ReviewDecision``.
        order_id: The order.
        decision: ``approve`` or ``reject``.
        reviewer: Who decided (kept in the record's ``review.decidedBy``).
        instance_id: Set when forwarded: the attempt the decision is raised on.
    """

    schema_version: Literal[1]
    type: Literal["ReviewDecision"]
    order_id: OrderId
    decision: Literal["approve", "reject"]
    reviewer: CleanText = "reviewer"
    instance_id: str | None = None


def message_type(body: str | bytes) -> str | None:
    """The ``type`` of a JSON object body, or None (a submission, or not a JSON object at all).

    Cheap for submissions: bodies that cannot name a cancel are not parsed here.
    """
    raw = body.encode("utf-8", errors="surrogatepass") if isinstance(body, str) else body
    if len(raw) > MAX_MESSAGE_BYTES or not any(
        kind.encode() in raw for kind in (CANCEL_ORDER, REVIEW_DECISION, COMPENSATE_ORDER)
    ):
        return None
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    kind = data.get("type") if isinstance(data, dict) else None
    return kind if isinstance(kind, str) else None


class AgentOutcome(StrEnum):
    """How an agent's work ended."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"


class AgentRequest(Envelope):
    """A request from an orchestration to an agent.

    Attributes:
        request_id: ``{instanceId}:{step}``, unique per attempt and step; stable across activity re-runs.
        instance_id: The orchestration instance to answer (``{orderId}:{attempt}``).
        step: Workflow step name.
        operation: What the agent must do (``reserve``, ``charge``, ``ship`` ...).
        idempotency_key: ``{orderId}:{step}``, the same across attempts (docs/design.md §3.6).
        deadline: The step's ``completeBy`` (UTC): no new call starts after it.
        reply_to: The response queue of the host that runs the instance.
        payload: What the remote service needs (small: ids, amounts, lines).
        max_calls: Calls this request may make (what is left of the order's retry budget).
    """

    schema_version: Literal[1] = 1
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


class AgentResponse(Envelope):
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

    schema_version: Literal[1] = 1
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


class OrderStatus(StrEnum):
    """Status values a client sees on its reply queue."""

    RECEIVED = "Received"
    REJECTED = "Rejected"
    PROCESSED = "Processed"
    FAILED = "Failed"
    AWAITING_REVIEW = "AwaitingReview"
    COMPENSATED = "Compensated"
    COMPENSATION_FAILED = "CompensationFailed"
    CANCELLED = "Cancelled"
    CANCEL_REFUSED = "CancelRefused"


class StatusReply(Envelope):
    """A status message on the client's private reply queue; ``order_id`` correlates it."""

    schema_version: Literal[1] = 1
    order_id: str
    status: OrderStatus
    reason: str | None = None
    detail: str | None = Field(default=None, max_length=500)
    retry_after_s: float | None = None
    at: UtcDatetime


def step_event_name(step: str) -> str:
    """The external event an orchestration waits on for a step's agent response."""
    return f"{step}:response"


def request_id_for(instance_id: str, step: str) -> str:
    """The request id of a step in an attempt: ``{orderId}:{attempt}:{step}``."""
    return f"{instance_id}:{step}"


def reply_message_id(order_id: str, status: OrderStatus) -> str:
    """Stable message id of a status reply, so a re-sent reply is recognisably the same."""
    return f"{order_id}:{status.value}"


_M = TypeVar("_M", bound=Envelope)


def _describe(error: ValidationError) -> tuple[str, str]:
    first = error.errors()[0]
    location = ".".join(str(part) for part in first["loc"]) or "<root>"
    error_type = first["type"]
    reasons = {
        "missing": "MissingField",
        "extra_forbidden": "UnexpectedField",
        "literal_error": "UnsupportedSchemaVersion" if location == "schemaVersion" else "InvalidValue",
    }
    reason = reasons.get(error_type, "InvalidField")
    details = "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or '<root>'}: {e['msg']}" for e in error.errors()[:5]
    )
    return reason, details[:500]


def validate_message(model: type[_M], data: dict[str, Any]) -> _M:
    """Validate already-decoded message data.

    Raises:
        InvalidMessage: with the same reasons as :func:`parse_message` for field errors.
    """
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        reason, details = _describe(exc)
        raise InvalidMessage(reason, details) from exc


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are unique: ``{"orderId": "a", "orderId": "b"}`` is ambiguous, and
    parsers disagree on which one wins."""
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise ValueError(f"duplicate key {key!r}")
        seen.add(key)
    return dict(pairs)


def parse_message(model: type[_M], body: str | bytes) -> _M:
    """Parse and validate a message body.

    Args:
        model: The envelope type expected on this queue.
        body: The raw message body (UTF-8 JSON).

    Returns:
        The validated message.

    Raises:
        InvalidMessage: with reason ``TooLarge``, ``NotUtf8``, ``InvalidJson``, ``NotAnObject``,
            ``MissingField``, ``UnexpectedField``, ``UnsupportedSchemaVersion`` or ``InvalidField``.
    """
    raw = body.encode("utf-8", errors="surrogatepass") if isinstance(body, str) else body
    if len(raw) > MAX_MESSAGE_BYTES:
        raise InvalidMessage("TooLarge", f"body is {len(raw)} bytes; the limit is {MAX_MESSAGE_BYTES}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidMessage("NotUtf8", f"body is not UTF-8: {exc.reason} at byte {exc.start}") from exc
    try:
        data = json.loads(text, parse_float=Decimal, object_pairs_hook=_unique_keys)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, too many digits, duplicate keys
        raise InvalidMessage("InvalidJson", f"body is not JSON: {str(exc)[:200]}") from exc
    if not isinstance(data, dict):
        raise InvalidMessage("NotAnObject", f"body must be a JSON object, not {type(data).__name__}")
    return validate_message(model, data)
