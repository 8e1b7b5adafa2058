"""Keys derived from an order: the client-scoped order key, orchestration instance ids, and the
idempotency, correction and undo keys sent with a step's requests."""

from __future__ import annotations

import hashlib


def order_key(client_id: str, order_id: str) -> str:
    """The key an order is stored and run under, ``{clientId}:{orderId}``: the id of its state record
    and order document (and their partition key), and the base of its instance ids and idempotency keys.

    Order ids are the client's own, so two clients may use the same one (docs/clients.md). Client ids
    are slugs and order ids hold no ``:``, so the key splits back unambiguously
    (:func:`client_order_id`).
    """
    return f"{client_id}:{order_id}"


def client_order_id(key: str) -> str:
    """The client's own order id of the order stored under ``key``: what every reply to the client
    names.

    Raises:
        ValueError: ``key`` is not ``{clientId}:{orderId}``.
    """
    client_id, sep, order_id = key.partition(":")
    if not sep or not client_id or not order_id:
        raise ValueError(f"not an order key '<client id>:<order id>': {key[:100]!r}")
    return order_id


MAX_INSTANCE_ID_CHARS = 100
"""Durable Task's limit on an orchestration instance id (characters)."""
_INSTANCE_DIGEST_CHARS = 32
"""Hex digits of the order key's SHA-256 in a bounded instance id (128 bits)."""
_INSTANCE_PREFIX_CHARS = MAX_INSTANCE_ID_CHARS - _INSTANCE_DIGEST_CHARS - 2 - len(str(2**64))
"""Characters of the order key a bounded instance id keeps: room left for any attempt below 2**64."""


def instance_id_for(order_id: str, attempt: int) -> str:
    """The attempt-specific orchestration instance id (docs/design.md §3.2): ``{orderId}:{attempt}``
    when that fits :data:`MAX_INSTANCE_ID_CHARS`, else ``{prefix}:{digest}:{attempt}`` (within the limit
    for any attempt below 2**64): a readable prefix of ``order_id`` and the first
    :data:`_INSTANCE_DIGEST_CHARS` hex digits of its SHA-256. Deterministic, and one stem for every
    attempt of an order; the bounded stem holds two ``:`` where an order key holds one, so the two forms
    never meet.
    """
    readable = f"{order_id}:{attempt}"
    if len(readable) <= MAX_INSTANCE_ID_CHARS:
        return readable
    digest = hashlib.sha256(order_id.encode()).hexdigest()[:_INSTANCE_DIGEST_CHARS]
    return f"{order_id[:_INSTANCE_PREFIX_CHARS]}:{digest}:{attempt}"


def parse_instance_id(instance_id: str) -> tuple[str, int]:
    """Split ``{orderId}:{attempt}`` into its parts (of a bounded id, :func:`instance_id_for`, the stem
    in place of the order id).

    Raises:
        ValueError: the text is not an attempt-specific instance id.
    """
    order_id, sep, attempt = instance_id.rpartition(":")
    if not sep or not order_id or not attempt.isdigit():
        raise ValueError(f"not an orderflow instance id: {instance_id!r}")
    return order_id, int(attempt)
