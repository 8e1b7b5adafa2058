"""Every idempotency key the protocol derives, in one place (docs/design.md §3.6).

A key is stable per order and step, the same in every attempt, so overlapping attempts cannot double an
effect downstream. Another call (a corrected input, another provider, an undo) gets another key.
"""

from __future__ import annotations


def idempotency_key(order_id: str, step: str) -> str:
    """The stable idempotency key of a step, the same in every attempt: ``{orderId}:{step}``."""
    return f"{order_id}:{step}"


def corrected_key(order_id: str, step: str, number: int) -> str:
    """The idempotency key of a step from its input correction ``number`` on:
    ``{orderId}:{step}:correction-{number}``. Another input is another call: under the failed call's key
    the remote service would answer with its stored refusal (or refuse the new body as a key reused)."""
    return f"{order_id}:{step}:correction-{number}"


def fallback_key(order_id: str, step: str, correction: int | None = None) -> str:
    """Idempotency key of a step run on its fallback provider (another provider: another key):
    ``{orderId}:{step}:fallback``, or ``{orderId}:{step}:correction-{n}:fallback`` once an operator
    corrected the step's input (correction ``n``: another input, another call)."""
    base = (
        idempotency_key(order_id, step) if correction is None else corrected_key(order_id, step, correction)
    )
    return f"{base}:fallback"


def undo_key(order_id: str, step: str) -> str:
    """The stable idempotency key of a step's compensation: ``{orderId}:{step}:undo``."""
    return f"{order_id}:{step}:undo"


def reacquire_key(order_id: str, step: str, number: int) -> str:
    """The idempotency key of re-acquisition ``number`` of a step's hold:
    ``{orderId}:{step}:reacquire-{number}``. A new hold is a new call: under the step's own key the
    service would answer with the hold it made first, expired or about to."""
    return f"{order_id}:{step}:reacquire-{number}"
