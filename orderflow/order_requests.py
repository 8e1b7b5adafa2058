"""Requests about an order from outside its owner: a client's cancel, a reviewer's decision, an
operator's decision (docs/design.md §3, §4).

None of them owns the record, so none writes the order's progress. Each records what it asks for with
one ETag-conditional write and leaves the rest to the owner: this module is that write, shared by the
roles that take such requests (``intake`` for a client's cancel, ``operator_api`` for a reviewer's and an
operator's decision). A write that loses the ETag race (the owner wrote first) decides again on what the
owner wrote.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Generic, TypeVar

from orderflow.clock import Clock
from orderflow.errors import ConcurrencyConflict, InvalidMessage, NotFound
from orderflow.queues.base import QueueFactory
from orderflow.records import ProcessState, StateRecord
from orderflow.replies import deliver_reply
from orderflow.state_machine import check_transition
from orderflow.stores.base import StateStore, Versioned
from orderflow.timeline import Actor, note

UNKNOWN_ORDER = "UnknownOrder"
"""``InvalidMessage.reason`` of a request that names no known order."""

MAX_CONFLICT_RETRIES = 5
"""Re-reads after losing the ETag race to the order's owner before the message is retried later."""

_T = TypeVar("_T")


@dataclass(frozen=True)
class Applied(Generic[_T]):
    """What :func:`apply_request` did: the decision, the record it was taken on (changed in place when
    written), the written version, or None when the decision wrote nothing, and the ETag of the written
    version, else of the one read (delivering a reply the write owed writes the record once more)."""

    decision: _T
    record: StateRecord
    written: Versioned[StateRecord] | None
    etag: str


class StaleVersion(Exception):
    """The record is not at the version the requester saw (an ``If-Match`` that no longer matches):
    nothing was decided or written. ``record`` and ``etag`` are the version found."""

    def __init__(self, record: StateRecord, etag: str) -> None:
        super().__init__(f"order {record.order_id} is at another version")
        self.record = record
        self.etag = etag


def same_etag(seen: str, current: str) -> bool:
    """Whether the ``If-Match`` the requester sent names the store's ETag ``current`` (which may carry
    quotes of its own), by the strong comparison RFC 9110 (13.1.1) prescribes for ``If-Match``: a weak
    tag (``W/"..."``) never matches. Nor does ``*`` or a list of tags: an action is taken only on the one
    version the requester saw (docs/operator-api.md)."""
    tag = seen.strip()
    return not tag.startswith("W/") and tag.strip('"') == current.strip('"')


def min_time(current: datetime | None, bound: datetime) -> datetime:
    """The earlier of ``current`` (None: no deadline yet) and ``bound``."""
    return bound if current is None or bound < current else current


def _read(states: StateStore, order_id: str, unscoped_id: str | None) -> Versioned[StateRecord] | None:
    for candidate in (order_id, unscoped_id):
        if candidate is not None:
            try:
                return states.get(candidate)
            except NotFound:
                pass
    return None


def apply_request(
    *,
    states: StateStore,
    queues: QueueFactory,
    clock: Clock,
    order_id: str,
    decide: Callable[[StateRecord], tuple[_T, bool]],
    what: str,
    grace_s: float | None,
    actor: Actor,
    outcome: str | None = None,
    if_match: str | None = None,
    visible: Callable[[StateRecord], bool] | None = None,
    deliver_owed_reply: bool = True,
    unscoped_id: str | None = None,
) -> Applied[_T]:
    """Read the order's record, let ``decide`` change a copy, and write it on the ETag it was read with.

    Rules every request shares: the state change is checked against the state machine; an order paused
    in ``AwaitingReview`` gets its ``completeBy`` within ``grace_s`` when the request asks it to act (its
    owner waits for a review decision, not for this request, and if it died the supervisor must not wait
    for the review deadline); a reply the write owes is delivered.

    Args:
        states / queues / clock: Dependencies.
        order_id: The order the request names.
        decide: Changes the record in place; returns its decision and whether to write.
        what: The request, for the dead-letter description (``cancel``, ``review``, ...), and the
            ``action`` of the timeline entry the write adds.
        grace_s: Seconds an owner paused for review has to act (``CLAIM_TIMEOUT_S``). None for a request
            that asks nothing of the order (suspend, resume): its ``completeBy`` stays at the review
            deadline, or the supervisor would recover a healthy owner still waiting for the review.
        actor: Who asks: the timeline entry's role and verified principal (or client).
        outcome: The timeline entry's outcome (a review's decision), if any.
        if_match: The ETag the requester saw: a record at another version is not decided on at all
            (:class:`StaleVersion`, nothing written). None: decide on whatever version is current.
        visible: Whether the requester may see the order at all (a client sees its own orders only);
            None: every order. An order it may not see is answered exactly as one that does not exist.
        unscoped_id: Where ``order_id`` is an order key, the bare order id an earlier version stored the
            same order under (:func:`orderflow.records.order_key`): read when the key is not found.
        deliver_owed_reply: Deliver a reply the written record owes. False leaves it to the reply relay
            (``REPLY_GRACE_S`` later): for a request that owes no reply of its own, whose caller must not
            be told it failed when the decision was recorded but an earlier reply could not be sent.

    Returns:
        The decision, the record and the written version (None when nothing was written).

    Raises:
        InvalidMessage: ``UnknownOrder``: there is no such order, or the requester may not see it
            (nobody to answer; dead-letter it).
        StaleVersion: ``if_match`` is not the record's ETag (also after losing a race to another
            writer: the version the requester saw is gone).
        ConcurrencyConflict: the owner kept winning the ETag race; abandon and retry.
        TransientError: the store or the reply queue is unavailable.
    """
    for _ in range(MAX_CONFLICT_RETRIES):
        found = _read(states, order_id, unscoped_id)
        if found is None or (visible is not None and not visible(found.item)):
            # The same error, word for word, whether the order is missing or someone else's.
            raise InvalidMessage(UNKNOWN_ORDER, f"no order {order_id!r} to {what}")
        if if_match is not None and not same_etag(if_match, found.etag):
            raise StaleVersion(found.item, found.etag)
        record = found.item.copied()
        decision, write = decide(record)
        if not write:
            return Applied(decision, record, None, found.etag)
        if record.process_state is not found.item.process_state:
            check_transition(found.item.process_state, record.process_state)
        if grace_s is not None and record.process_state is ProcessState.AWAITING_REVIEW:
            record.complete_by = min_time(record.complete_by, clock.now() + timedelta(seconds=grace_s))
        note(found.item, record, actor, action=what, outcome=outcome)
        try:
            written = states.replace(record, etag=found.etag)
        except ConcurrencyConflict:
            continue  # the owner wrote first: decide again on what it wrote
        if deliver_owed_reply and written.item.pending_reply is not None:
            deliver_reply(states, queues, clock, written.item, written.item.pending_reply, etag=written.etag)
        return Applied(decision, record, written, written.etag)
    raise ConcurrencyConflict(f"{what} of {order_id} kept losing the ETag race")
