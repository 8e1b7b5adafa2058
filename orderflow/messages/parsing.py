"""Strict parsing of a message body: UTF-8 JSON objects without duplicate keys or constants, validated
into a model with a dead-letter reason for each failure; order ids and keys checked; a body's ``type``
for dispatch."""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from decimal import Decimal
from typing import Any, TypeVar

from pydantic import (
    TypeAdapter,
    ValidationError,
)

from orderflow.errors import InvalidMessage
from orderflow.messages.envelope import Envelope
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
    TOO_LARGE,
    UNEXPECTED_FIELD,
    UNKNOWN_MESSAGE_TYPE,
    UNSUPPORTED_SCHEMA_VERSION,
    OrderId,
    json_type,
)
from orderflow.records import order_key

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
    ``{clientId}:{orderId}`` (:func:`orderflow.records.order_key`); an order id without its client
    prefix names no order.

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


def body_bytes(body: str | bytes) -> bytes:
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
    raw = body_bytes(body)
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
    raw = body_bytes(body)
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
