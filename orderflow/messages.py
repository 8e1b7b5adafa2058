"""Message envelopes (docs/design.md §5): validated on receipt, each with a ``schemaVersion``.

- :class:`SubmitOrder` arrives on the ``orders`` queue from a client.
- :class:`AgentRequest` goes from the orchestrator to an agent's request queue.
- :class:`AgentResponse` goes from an agent to the response queue named in the request.
- :class:`StatusReply` goes to the client's private reply queue.

Parsing failures raise :class:`orderflow.errors.InvalidMessage` with a short ``reason`` that becomes the
dead-letter reason (:data:`PARSE_REASONS`), and a description that says exactly what was wrong. Parsing is
strict: UTF-8 JSON (RFC 8259) without a byte-order mark, ``NaN`` or duplicate keys; numbers read exactly;
no unknown fields; no invisible or reordering characters in text (:func:`forbidden_character`).
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Collection, Mapping
from decimal import Decimal
from enum import StrEnum
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    field_serializer,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from orderflow.errors import InvalidMessage
from orderflow.records import UtcDatetime, order_key
from orderflow.tracing import valid_traceparent

MAX_MESSAGE_BYTES = 64 * 1024
"""Largest message body accepted (bytes): the Service Bus Standard tier limit would be 256 KiB;
an order is far smaller, so anything larger is garbage or abuse."""

SUPPORTED_CURRENCIES = frozenset({"USD", "EUR", "GBP"})
"""Currencies the demo payment service settles in."""

# Dead-letter reasons (``InvalidMessage.reason``) of messages refused on receipt.
TOO_LARGE = "TooLarge"
NOT_UTF8 = "NotUtf8"
INVALID_JSON = "InvalidJson"
NOT_AN_OBJECT = "NotAnObject"
MISSING_FIELD = "MissingField"
UNEXPECTED_FIELD = "UnexpectedField"
UNSUPPORTED_SCHEMA_VERSION = "UnsupportedSchemaVersion"
INVALID_FIELD = "InvalidField"
INVALID_VALUE = "InvalidValue"
UNKNOWN_MESSAGE_TYPE = "UnknownMessageType"
RESERVED_REPLY_QUEUE = "ReservedReplyQueue"
REPLY_TO_MISMATCH = "ReplyToMismatch"
REPLY_TO_NOT_REGISTERED = "ReplyToNotRegistered"
OPERATOR_ACTION_NOT_ACCEPTED = "OperatorActionNotAccepted"
REPLY_TO_NOT_A_RESPONSE_QUEUE = "ReplyToNotAResponseQueue"
"""Dead-letter reason of an agent request whose ``replyTo`` is not one of the deployment's response
queues: an agent answers nowhere else, so a forged request cannot make it write to a client's queue."""

PARSE_REASONS = frozenset(
    {
        TOO_LARGE,
        NOT_UTF8,
        INVALID_JSON,
        NOT_AN_OBJECT,
        MISSING_FIELD,
        UNEXPECTED_FIELD,
        UNSUPPORTED_SCHEMA_VERSION,
        INVALID_FIELD,
        INVALID_VALUE,
    }
)
"""Every ``InvalidMessage.reason`` :func:`parse_message` raises (the dead-letter reasons of bad input)."""

SUBMISSION_REASONS = PARSE_REASONS | {
    UNKNOWN_MESSAGE_TYPE,
    OPERATOR_ACTION_NOT_ACCEPTED,
    RESERVED_REPLY_QUEUE,
    REPLY_TO_NOT_REGISTERED,
    REPLY_TO_MISMATCH,
}
"""Every ``InvalidMessage.reason`` a message on a client's inbound queue is dead-lettered with before any
store is touched: the parse reasons, an unknown ``type``, an operator's or reviewer's action (a call to
the operator API, never a message), and a ``replyTo`` that is not the sending client's registered reply
queue."""

_JSON_TYPES: tuple[tuple[type | tuple[type, ...], str], ...] = (
    (dict, "object"),
    (list, "array"),
    (str, "string"),
    (bool, "boolean"),  # before int: bool is an int in Python
    ((int, float, Decimal), "number"),
    (type(None), "null"),
)


def json_type(value: Any) -> str:
    """The JSON name of a decoded value's type (``object``, ``array``, ``number`` ...)."""
    for kinds, name in _JSON_TYPES:
        if isinstance(value, kinds):
            return name
    return type(value).__name__


_FORBIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
"""Unicode categories refused in every text field: controls (C0, C1), format characters (zero-width
characters, bidirectional marks, embeddings, overrides and isolates, the BOM, the soft hyphen, tags),
lone surrogates, and line and paragraph separators. They are invisible, or reorder or hide what an
operator reads; a lone surrogate cannot even be written as UTF-8."""

REPLACEMENT_CHARACTER = "\ufffd"
"""U+FFFD: what a lossy decoder leaves in place of bytes it could not read; text holding it was
mangled before it was sent, so it is refused too."""


def forbidden_character(text: str) -> str | None:
    """The first character of ``text`` that no text field may hold (see :data:`_FORBIDDEN_CATEGORIES`
    and :data:`REPLACEMENT_CHARACTER`), or None."""
    if text.isascii() and text.isprintable():
        return None
    for char in text:
        if unicodedata.category(char) in _FORBIDDEN_CATEGORIES or char == REPLACEMENT_CHARACTER:
            return char
    return None


def printable_text(text: str, *, limit: int) -> str:
    """``text`` made fit for a message's text field: every character :func:`forbidden_character` would
    refuse becomes a space, and the result is cut to ``limit`` characters.

    For text orderflow relays but does not control (a remote service's error message): the message
    carrying it must still validate, or the answer it belongs to would be lost.
    """
    if forbidden_character(text) is not None:
        text = "".join(
            " " if unicodedata.category(c) in _FORBIDDEN_CATEGORIES or c == REPLACEMENT_CHARACTER else c
            for c in text
        )
    return text[:limit]


def _describe_character(char: str) -> str:
    return f"U+{ord(char):04X} {unicodedata.name(char, '(unnamed)')}"


def _schema_version_is_an_integer(value: Any) -> Any:
    # Literal[1] alone would take true and 1.0, which equal 1 in Python but are not version 1 on the wire.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"schemaVersion must be the integer 1, not {json_type(value)}")
    return value


SchemaVersion = Annotated[Literal[1], BeforeValidator(_schema_version_is_an_integer)]
"""The contract version of every message: the JSON integer ``1``."""

OrderId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")]
ORDER_KEY_PATTERN = r"^(?:[a-z0-9](?:[a-z0-9-]{0,30}[a-z0-9])?:)?[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$"
"""An order's key, ``{clientId}:{orderId}`` (:func:`orderflow.records.order_key`), or the bare order id
an earlier version stored an order under."""
OrderKey = Annotated[str, StringConstraints(pattern=ORDER_KEY_PATTERN)]
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

_PLAIN_DECIMAL = re.compile(r"[0-9]+(?:\.[0-9]+)?")

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
        if isinstance(value, str) and (char := forbidden_character(value)) is not None:
            raise ValueError(
                f"character {_describe_character(char)} is not allowed: control, format (zero-width, "
                "bidirectional, byte-order mark) and separator characters, lone surrogates and U+FFFD "
                "are refused in text"
            )
        return value


class Traced(Envelope):
    """An envelope that may carry the sender's W3C trace context (:mod:`orderflow.tracing`).

    Attributes:
        traceparent: The span that sent the message, as a version-00 ``traceparent``; None when the
            sender traced nothing. Read leniently: a value :func:`orderflow.tracing.parse_traceparent`
            refuses (malformed, not a string, any invisible character) is dropped on receipt, never a
            reason to refuse the message, and it is used for tracing only. Left out of the wire form
            (and of every dump) when None, and out of an order's content hash.
    """

    traceparent: str | None = Field(default=None, exclude_if=lambda value: value is None)

    @model_validator(mode="before")
    @classmethod
    def _lenient_traceparent(cls, data: Any) -> Any:
        # Before the fields are validated: a bad trace context must not dead-letter the message.
        if isinstance(data, dict) and "traceparent" in data:
            data = dict(data)
            fixed = valid_traceparent(data["traceparent"])
            if fixed is None:
                del data["traceparent"]
            else:
                data["traceparent"] = fixed
        return data


MAX_QUANTITY_PER_SKU = 10_000
"""Most units of one SKU in one order, on one line or over several."""


class SubmitItem(Envelope):
    """One line of a submitted order."""

    sku: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_\-]{1,32}$")]
    quantity: int = Field(ge=1, le=MAX_QUANTITY_PER_SKU, strict=True)


class SubmitOrder(Traced):
    """An order submission (``orders`` queue).

    Attributes:
        schema_version: Must be 1.
        order_id: The client's order id; the idempotency key of the submission.
        customer_id: 1-64 letters, digits, ``_`` or ``-``.
        customer_name: 1-200 characters after trimming surrounding whitespace.
        amount: Order total, positive, at most two decimal places, below 10^9: a string of ASCII digits
            with an optional decimal point (``"12.50"``), or a JSON number (read exactly, never as a
            binary float). On the wire it is always written as a plain decimal string.
        currency: ISO 4217 code from :data:`SUPPORTED_CURRENCIES`.
        items: 1–100 lines; at most :data:`MAX_QUANTITY_PER_SKU` units of one SKU in all.
        carrier: The shipping carrier, 1-32 characters after trimming surrounding whitespace.
        reply_to: The client's private reply queue for status messages. Checked on receipt: it must be the
            reply queue the client registry holds for the client whose inbound queue the message came
            on (docs/clients.md); replies never go to a queue named only in a body.

    Every text field refuses invisible and reordering characters (:func:`forbidden_character`).
    """

    schema_version: SchemaVersion
    order_id: OrderId
    customer_id: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_\-]{1,64}$")]
    customer_name: CleanText
    currency: str
    amount: Decimal = Field(gt=0, lt=Decimal(10) ** 9, decimal_places=2)
    items: tuple[SubmitItem, ...] = Field(min_length=1, max_length=100)
    carrier: Annotated[str, StringConstraints(min_length=1, max_length=32, strip_whitespace=True)]
    reply_to: QueueName

    @field_validator("currency")
    @classmethod
    def _known_currency(cls, value: str) -> str:
        if value not in SUPPORTED_CURRENCIES:
            raise ValueError(
                f"unsupported currency {value[:16]!r}; expected one of {sorted(SUPPORTED_CURRENCIES)}"
            )
        return value

    @field_validator("amount", mode="before")
    @classmethod
    def _amount_is_exact(cls, value: Any) -> Any:
        # Floats cannot represent money exactly (JSON numbers arrive as Decimal, never float).
        if isinstance(value, bool):
            raise ValueError('amount must be a decimal string such as "12.50", not a boolean')
        if isinstance(value, float):
            raise ValueError('amount must be a decimal string such as "12.50", not a float')
        # Decimal() also reads "1_000", " 12 ", "+5", "1e3" and non-ASCII digits: money is written plainly.
        if isinstance(value, str) and not _PLAIN_DECIMAL.fullmatch(value):
            raise ValueError(
                "amount must be a decimal string of ASCII digits with an optional decimal point, "
                'such as "12.50"'
            )
        return value

    @field_validator("items")
    @classmethod
    def _quantity_per_sku_is_capped(cls, items: tuple[SubmitItem, ...]) -> tuple[SubmitItem, ...]:
        # A line's cap would mean nothing if the same SKU could be repeated over many lines.
        totals: dict[str, int] = {}
        for item in items:
            totals[item.sku] = totals.get(item.sku, 0) + item.quantity
            if totals[item.sku] > MAX_QUANTITY_PER_SKU:
                raise ValueError(
                    f"sku {item.sku!r}: {totals[item.sku]} units over several lines; "
                    f"at most {MAX_QUANTITY_PER_SKU} per order"
                )
        return items

    @field_serializer("amount", when_used="json")
    def _amount_as_plain_decimal(self, amount: Decimal) -> str:
        # Positional notation: an amount read from the JSON number 1e2 goes out as "100", not "1E+2".
        return format(amount, "f")

    def immutable_content(self) -> dict[str, Any]:
        """The fields whose hash identifies the order: everything the client sent but its trace context
        (a resubmission from another trace is the same order), the amount in one canonical form
        (``12.5`` and ``12.50`` are the same order)."""
        content = self.model_dump(mode="json", by_alias=True, exclude={"traceparent"})
        content["amount"] = f"{self.amount:.2f}"
        return content


CANCEL_ORDER = "CancelOrder"
"""``type`` of a :class:`CancelOrder` message; a body without ``type`` is a :class:`SubmitOrder`."""


class CancelOrder(Traced):
    """A client's request to cancel an order (on the ``orders`` queue, beside submissions).

    The answer goes to the reply queue the order was submitted with: ``Cancelled`` once what was done is
    undone, or ``CancelRefused`` (the order is settled, or past its point of no return).

    Attributes:
        schema_version: Must be 1.
        type: ``CancelOrder``.
        order_id: The order to cancel.
        reason: Optional free text from the client, kept in the order's ``lastError``.
    """

    schema_version: SchemaVersion
    type: Literal["CancelOrder"]
    order_id: OrderId
    reason: CleanText | None = None


COMPENSATE_ORDER = "CompensateOrder"
"""``type`` of what was once an operator's decision to compensate on the ``orders`` queue; it is a call to
the operator API now, and the queue refuses the type (:data:`OPERATOR_ACTIONS`)."""

REVIEW_DECISION = "ReviewDecision"
"""``type`` of a :class:`ReviewDecisionMessage`."""


class ReviewDecisionMessage(Envelope):
    """A reviewer's decision on an order awaiting review, as the operator API forwards it, with the
    waiting attempt's ``instanceId``, to that attempt's response queue (only the app sends there).

    Attributes:
        schema_version: Must be 1.
        type: ``ReviewDecision``.
        order_id: The order's key.
        decision: ``approve`` or ``reject``.
        reviewer: Who decided: the verified principal's audit id
            (:attr:`orderflow.operator_auth.Principal.audit_id`), as in the record's ``review.decidedBy``.
        instance_id: The attempt the decision is raised on.
    """

    schema_version: SchemaVersion
    type: Literal["ReviewDecision"]
    order_id: OrderKey
    decision: Literal["approve", "reject"]
    reviewer: CleanText = "reviewer"
    instance_id: str | None = None


ORDERS_QUEUE_TYPES = (CANCEL_ORDER,)
"""The ``type`` values the ``orders`` queue takes besides order submissions, which have no ``type``."""

OPERATOR_ACTIONS: dict[str, str] = {
    REVIEW_DECISION: "POST /api/operator/orders/{orderId}/review",
    COMPENSATE_ORDER: "POST /api/operator/orders/{orderId}/compensate",
}
"""Types of a reviewer's or an operator's action, which no client queue takes (docs/design.md §9), and
the operator API call that makes each: a message of one is dead-lettered ``OperatorActionNotAccepted``."""


def message_type(
    body: str | bytes,
    *,
    known: Collection[str],
    untyped: type[Envelope],
    operator_actions: Mapping[str, str] | None = None,
) -> str | None:
    """The ``type`` of a message body, for dispatch on a queue that carries several kinds.

    Args:
        body: The raw message body.
        known: The ``type`` values this queue takes.
        untyped: The model of a body without ``type`` on this queue (named in the error).
        operator_actions: Types this queue refuses because they are operator API calls, each with the
            call that makes it (:data:`OPERATOR_ACTIONS`).

    Returns:
        The ``type``, one of ``known``; None when the body has no ``type`` or is not a JSON object at
        all (the parser of ``untyped`` then says what is wrong with it).

    Raises:
        InvalidMessage: ``OperatorActionNotAccepted`` when ``type`` is one of ``operator_actions`` (the
            rest of the body is not read); ``UnknownMessageType`` when it is present but not one of
            ``known``.
    """
    raw = _body_bytes(body)
    # Exact and cheap: a key spelled "type" holds those four bytes unless written with \u escapes.
    if b"type" not in raw and b"\\u" not in raw:
        return None
    try:
        data = decode_json_object(raw)
    except InvalidMessage:
        return None
    if "type" not in data:
        return None
    kind = data["type"]
    actions = operator_actions or {}
    if isinstance(kind, str) and kind in actions:
        raise InvalidMessage(
            OPERATOR_ACTION_NOT_ACCEPTED,
            f"{kind} is not taken on this queue: operator and reviewer actions are calls to the operator "
            f"API ({actions[kind]}, with a bearer token), never messages",
        )
    if isinstance(kind, str) and kind in known:
        return kind
    shown = repr(kind[:64]) if isinstance(kind, str) else f"of JSON type {json_type(kind)}"
    raise InvalidMessage(
        UNKNOWN_MESSAGE_TYPE,
        f"unknown message type {shown}: this queue takes type {', '.join(known)}, "
        f"or no type for {untyped.__name__}",
    )


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

    schema_version: SchemaVersion = 1
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
    errors = error.errors()
    locations = [tuple(e["loc"]) for e in errors]
    # An error on a container caused by an error inside it ("items: at least 1 item after validation")
    # says nothing more; report the inner one.
    shown = [
        e
        for e, loc in zip(errors, locations, strict=True)
        if not any(len(other) > len(loc) and other[: len(loc)] == loc for other in locations)
    ]
    first = shown[0]
    location = ".".join(str(part) for part in first["loc"]) or "<root>"
    if location == "schemaVersion" and first["type"] != "missing":
        reason = UNSUPPORTED_SCHEMA_VERSION
    else:
        reasons = {
            "missing": MISSING_FIELD,
            "extra_forbidden": UNEXPECTED_FIELD,
            "literal_error": INVALID_VALUE,
        }
        reason = reasons.get(first["type"], INVALID_FIELD)
    details = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '<root>'}: {e['msg']}" for e in shown[:5])
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


_ORDER_ID: TypeAdapter[str] = TypeAdapter(OrderId)


def validate_order_id(order_id: str) -> str:
    """Check an order id given outside a message (a command line argument, a URL).

    Returns:
        ``order_id``.

    Raises:
        InvalidMessage: ``InvalidField``, saying what an order id may hold.
    """
    try:
        return _ORDER_ID.validate_python(order_id)
    except ValidationError as exc:
        raise InvalidMessage(
            INVALID_FIELD,
            f"{order_id[:80]!r} is not an order id: 1-64 letters, digits, '_', '.' or '-', "
            "starting with a letter or digit",
        ) from exc


def client_order_key(client_id: str, order_id: str) -> str:
    """The key of client ``client_id``'s order ``order_id``: the only order a message on that client's
    inbound queue can be about, whatever it says (docs/clients.md). The client comes from the queue the
    message arrived on, never from the message; the order id is checked first.

    Returns:
        ``{clientId}:{orderId}`` (:func:`orderflow.records.order_key`).

    Raises:
        InvalidMessage: ``InvalidField``: ``order_id`` is not an order id (another client's key is not).
    """
    return order_key(client_id, validate_order_id(order_id))


def owned_order_key(client_id: str, reference: str) -> str | None:
    """The key of the order of client ``client_id`` that ``reference`` names, or None when it names none
    of that client's: ``reference`` is one of its order ids (as its SDK sends a correlation id) or that
    order's key; another client's key, or anything that is not an order id, names none.

    The same rule as :func:`client_order_key`, for text nobody has checked yet.
    """
    scope, sep, order_id = reference.rpartition(":")
    if sep and scope != client_id:
        return None
    try:
        return client_order_key(client_id, order_id)
    except InvalidMessage:
        return None


_ORDER_KEY = re.compile(ORDER_KEY_PATTERN)


def validate_order_key(key: str) -> str:
    """Check the key of a stored order given outside a message (the operator API's URLs, the CLI):
    ``{clientId}:{orderId}`` (:func:`orderflow.records.order_key`), or the bare order id an earlier
    version stored an order under.

    Returns:
        ``key``.

    Raises:
        InvalidMessage: ``InvalidField``, saying what an order key holds.
    """
    if _ORDER_KEY.fullmatch(key) is None:
        raise InvalidMessage(
            INVALID_FIELD,
            f"{key[:100]!r} is not an order key: '<client id>:<order id>' (an order id is 1-64 letters, "
            "digits, '_', '.' or '-', starting with a letter or digit)",
        )
    return key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are unique: ``{"orderId": "a", "orderId": "b"}`` is ambiguous, and
    parsers disagree on which one wins."""
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise ValueError(f"duplicate key {key[:64]!r}")
        seen.add(key)
    return dict(pairs)


def _no_constants(name: str) -> Any:
    # Python's json reads NaN, Infinity and -Infinity; JSON (RFC 8259) has no such values.
    raise ValueError(f"{name} is not a JSON value")


def _body_bytes(body: str | bytes) -> bytes:
    """The bytes of a body. Text from a transport that kept undecodable bytes as lone surrogates
    (``surrogateescape``) gets its original bytes back; other lone surrogates are written as they are
    (``surrogatepass``), which is not UTF-8 either."""
    if isinstance(body, bytes):
        return body
    try:
        return body.encode("utf-8", errors="surrogateescape")
    except UnicodeEncodeError:
        return body.encode("utf-8", errors="surrogatepass")


def decode_json_object(body: str | bytes) -> dict[str, Any]:
    """Decode a message body into a JSON object, strictly.

    Strict JSON (RFC 8259) and more: UTF-8 without a byte-order mark, no ``NaN`` or ``Infinity``, no
    duplicate keys, numbers with a fraction or exponent read exactly as :class:`~decimal.Decimal`.

    Raises:
        InvalidMessage: ``TooLarge`` (over :data:`MAX_MESSAGE_BYTES`), ``NotUtf8``, ``InvalidJson``
            (including empty bodies, nesting deeper than the parser's recursion limit and integers of more
            than 4,300 digits) or ``NotAnObject``.
    """
    raw = _body_bytes(body)
    if len(raw) > MAX_MESSAGE_BYTES:
        raise InvalidMessage(TOO_LARGE, f"body is {len(raw)} bytes; the limit is {MAX_MESSAGE_BYTES}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidMessage(
            NOT_UTF8, f"body is not UTF-8: {exc.reason} (byte 0x{raw[exc.start]:02x} at offset {exc.start})"
        ) from exc
    if text.startswith("\ufeff"):
        raise InvalidMessage(
            INVALID_JSON, "body starts with a byte-order mark (U+FEFF); send JSON without one"
        )
    if not text.strip(" \t\r\n"):
        raise InvalidMessage(INVALID_JSON, "body is empty")
    try:
        data = json.loads(
            text, parse_float=Decimal, parse_constant=_no_constants, object_pairs_hook=_unique_keys
        )
    except RecursionError as exc:
        raise InvalidMessage(INVALID_JSON, "body nests arrays or objects too deeply to be read") from exc
    except ValueError as exc:  # JSONDecodeError, too many digits, duplicate keys, NaN
        if "int_max_str_digits" in str(exc):
            # Python's own text advises raising an interpreter limit: no use to the sender.
            raise InvalidMessage(
                INVALID_JSON, "body holds an integer of more than 4,300 digits, too large to read"
            ) from exc
        raise InvalidMessage(INVALID_JSON, f"body is not JSON: {str(exc)[:200]}") from exc
    except ArithmeticError as exc:  # decimal.InvalidOperation: an exponent beyond what Decimal holds
        raise InvalidMessage(INVALID_JSON, "body holds a number too large to read") from exc
    if not isinstance(data, dict):
        raise InvalidMessage(NOT_AN_OBJECT, f"body must be a JSON object, not {json_type(data)}")
    return data


def parse_message(model: type[_M], body: str | bytes) -> _M:
    """Parse and validate a message body.

    Args:
        model: The envelope type expected on this queue.
        body: The raw message body (UTF-8 JSON).

    Returns:
        The validated message.

    Raises:
        InvalidMessage: with a reason from :data:`PARSE_REASONS`: ``TooLarge``, ``NotUtf8``,
            ``InvalidJson``, ``NotAnObject`` (see :func:`decode_json_object`), ``MissingField``,
            ``UnexpectedField``, ``UnsupportedSchemaVersion``, ``InvalidValue`` or ``InvalidField``.
    """
    return validate_message(model, decode_json_object(body))
