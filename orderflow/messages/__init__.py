"""Message envelopes (docs/design.md §5): validated on receipt, each with a ``schemaVersion``.

- :class:`SubmitOrder` arrives on the ``orders`` queue from a client.
- :class:`AgentRequest` goes from the orchestrator to an agent's request queue.
- :class:`AgentResponse` goes from an agent to the response queue named in the request.
- :class:`StatusReply` goes to the client's private reply queue.

Parsing failures raise :class:`orderflow.errors.InvalidMessage` with a short ``reason`` that becomes the
dead-letter reason (:data:`PARSE_REASONS`), and a description that says exactly what was wrong. Parsing is
strict: UTF-8 JSON (RFC 8259) without a byte-order mark, ``NaN`` or duplicate keys; numbers read exactly;
no unknown fields; no invisible or reordering characters in text (:func:`forbidden_character`).

The package's modules: :mod:`.fields` (limits, reasons, typed fields), :mod:`.envelope` (the base
message), :mod:`.parsing` (strict parsing and dispatch), :mod:`.inbound` (what the ``orders`` queue and a
reviewer send), :mod:`.agents` (agent requests and responses) and :mod:`.replies` (status replies).
"""

from __future__ import annotations

from orderflow.messages.agents import (
    AgentOutcome,
    AgentRequest,
    AgentResponse,
    request_id_for,
    step_event_name,
)
from orderflow.messages.envelope import Envelope, Traced
from orderflow.messages.fields import (
    INVALID_FIELD,
    INVALID_JSON,
    INVALID_VALUE,
    MAX_MESSAGE_BYTES,
    MISSING_FIELD,
    NOT_AN_OBJECT,
    NOT_UTF8,
    OPERATOR_ACTION_NOT_ACCEPTED,
    ORDER_KEY_PATTERN,
    PARSE_REASONS,
    REPLACEMENT_CHARACTER,
    REPLY_TO_MISMATCH,
    REPLY_TO_NOT_A_RESPONSE_QUEUE,
    REPLY_TO_NOT_REGISTERED,
    RESERVED_REPLY_QUEUE,
    SUBMISSION_REASONS,
    SUPPORTED_CURRENCIES,
    TOO_LARGE,
    UNEXPECTED_FIELD,
    UNKNOWN_MESSAGE_TYPE,
    UNSUPPORTED_SCHEMA_VERSION,
    CleanText,
    OrderId,
    OrderKey,
    QueueName,
    SchemaVersion,
    forbidden_character,
    json_type,
    printable_text,
)
from orderflow.messages.inbound import (
    CANCEL_ORDER,
    COMPENSATE_ORDER,
    MAX_QUANTITY_PER_SKU,
    OPERATOR_ACTIONS,
    ORDERS_QUEUE_TYPES,
    REVIEW_DECISION,
    CancelOrder,
    ReviewDecisionMessage,
    SubmitItem,
    SubmitOrder,
)
from orderflow.messages.message_ids import MAX_MESSAGE_ID_CHARS, bounded_message_id
from orderflow.messages.parsing import (
    client_order_key,
    decode_json_object,
    message_type,
    owned_order_key,
    parse_message,
    validate_message,
    validate_order_id,
    validate_order_key,
)
from orderflow.messages.replies import OrderStatus, StatusReply, reply_message_id

__all__ = [
    "CANCEL_ORDER",
    "COMPENSATE_ORDER",
    "INVALID_FIELD",
    "INVALID_JSON",
    "INVALID_VALUE",
    "MAX_MESSAGE_BYTES",
    "MAX_MESSAGE_ID_CHARS",
    "MAX_QUANTITY_PER_SKU",
    "MISSING_FIELD",
    "NOT_AN_OBJECT",
    "NOT_UTF8",
    "OPERATOR_ACTIONS",
    "OPERATOR_ACTION_NOT_ACCEPTED",
    "ORDERS_QUEUE_TYPES",
    "ORDER_KEY_PATTERN",
    "PARSE_REASONS",
    "REPLACEMENT_CHARACTER",
    "REPLY_TO_MISMATCH",
    "REPLY_TO_NOT_A_RESPONSE_QUEUE",
    "REPLY_TO_NOT_REGISTERED",
    "RESERVED_REPLY_QUEUE",
    "REVIEW_DECISION",
    "SUBMISSION_REASONS",
    "SUPPORTED_CURRENCIES",
    "TOO_LARGE",
    "UNEXPECTED_FIELD",
    "UNKNOWN_MESSAGE_TYPE",
    "UNSUPPORTED_SCHEMA_VERSION",
    "AgentOutcome",
    "AgentRequest",
    "AgentResponse",
    "CancelOrder",
    "CleanText",
    "Envelope",
    "OrderId",
    "OrderKey",
    "OrderStatus",
    "QueueName",
    "ReviewDecisionMessage",
    "SchemaVersion",
    "StatusReply",
    "SubmitItem",
    "SubmitOrder",
    "Traced",
    "bounded_message_id",
    "client_order_key",
    "decode_json_object",
    "forbidden_character",
    "json_type",
    "message_type",
    "owned_order_key",
    "parse_message",
    "printable_text",
    "reply_message_id",
    "request_id_for",
    "step_event_name",
    "validate_message",
    "validate_order_id",
    "validate_order_key",
]
