"""The one write every operator and reviewer decision makes (review, compensate, resubmit, suspend).

Each is :func:`orderflow.order_requests.apply_request` with the same two rules: the verified principal is
the timeline's actor, and a decision owes no reply of its own (a reply the record already owes is the
relay's to send, so the caller is never told a recorded decision failed because an earlier reply could
not be sent).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from orderflow.clock import Clock
from orderflow.operator_auth import Principal
from orderflow.order_requests import Applied, apply_request
from orderflow.queues.base import QueueFactory
from orderflow.records import StateRecord
from orderflow.stores.base import StateStore
from orderflow.timeline import Actor

_T = TypeVar("_T")


def apply_decision(
    *,
    principal: Principal,
    role: str,
    states: StateStore,
    queues: QueueFactory,
    clock: Clock,
    order_id: str,
    decide: Callable[[StateRecord], tuple[_T, bool]],
    what: str,
    grace_s: float | None,
    if_match: str | None = None,
    outcome: str | None = None,
    housekeeping: bool = False,
) -> Applied[_T]:
    """``principal``'s decision ``what`` on ``order_id``, written as :func:`apply_request` writes it, with
    ``Actor(role, principal.audit_id, display name)`` on the timeline (``role``: ``operator`` or
    ``reviewer``); ``housekeeping``: the decision moves nothing (a suspension).

    Raises:
        As :func:`orderflow.order_requests.apply_request` (``StaleVersion`` when ``if_match`` is not the
        record's ETag, ``InvalidMessage`` ``UnknownOrder``, ``TransientError``, ``ConcurrencyConflict``).
    """
    return apply_request(
        states=states,
        queues=queues,
        clock=clock,
        order_id=order_id,
        decide=decide,
        what=what,
        grace_s=grace_s,
        actor=Actor(role, principal.audit_id, principal.display_name or None),
        outcome=outcome,
        if_match=if_match,
        deliver_owed_reply=False,
        housekeeping=housekeeping,
    )
