"""Requests about an order from outside its owner: a client's cancel, a reviewer's decision, an
operator's decision (docs/design.md §3, §4).

None of them owns the record, so none writes the order's progress. Each records what it asks for with
one conditional write (:func:`orderflow.protocol.conditional.update`) and leaves the rest to the owner:
this module is the request layer over that write, shared by the roles that take such requests
(``intake`` for a client's cancel, ``operator_api`` for a reviewer's and an operator's decision). A write
that loses the ETag race (the owner wrote first) decides again on what the owner wrote.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from orderflow.clock import Clock
from orderflow.errors import InvalidMessage, NotFound
from orderflow.protocol import transitions
from orderflow.protocol.conditional import Note, update
from orderflow.queues.base import QueueFactory
from orderflow.records import StateRecord
from orderflow.replies import deliver_reply
from orderflow.stores.base import StateStore, Versioned
from orderflow.timeline import Actor

UNKNOWN_ORDER = "UnknownOrder"
"""``InvalidMessage.reason`` of a request that names no known order."""

MAX_CONFLICT_RETRIES = 5
"""Tries after losing the ETag race to the order's owner before the message is retried later."""

_T = TypeVar("_T")


@dataclass(frozen=True)
class Applied(Generic[_T]):
    """What :func:`apply_request` did: the decision, the record it was taken on (as written, when
    written), the written version, or None when the decision wrote nothing, and the ETag of the written
    version, else of the one read (delivering a reply the write owed writes the record once more)."""

    decision: _T
    record: StateRecord
    written: Versioned[StateRecord] | None
    etag: str


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
    housekeeping: bool = False,
) -> Applied[_T]:
    """Let ``decide`` change a copy of the order's record, and write it with
    :func:`orderflow.protocol.conditional.update`.

    Rules every request shares, besides the conditional write's own: an order paused in
    ``AwaitingReview`` gets its ``completeBy`` within ``grace_s`` when the request asks it to act
    (:func:`orderflow.protocol.transitions.requests.owner_acts_within`); a reply the write owes is
    delivered.

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
            (:class:`~orderflow.protocol.conditional.StaleVersion`, nothing written). None: decide on
            whatever version is current.
        visible: Whether the requester may see the order at all (a client sees its own orders only);
            None: every order. An order it may not see is answered exactly as one that does not exist.
        housekeeping: The request moves nothing (a suspension is a flag, not a state): it may be
            recorded on a finished order too (:func:`orderflow.protocol.conditional.check_change`).
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
        IllegalTransition: the decision makes a change the state machine forbids.
        ConcurrencyConflict: the owner kept winning the ETag race; abandon and retry.
        TransientError: the store or the reply queue is unavailable.
    """
    decided: list[_T] = []  # the decision of the last run of decide

    def decision(record: StateRecord) -> StateRecord | None:
        if visible is not None and not visible(record):
            raise _unknown(order_id, what)
        answer, write = decide(record)
        decided[:] = [answer]
        if not write:
            return None
        if grace_s is not None:
            transitions.requests.owner_acts_within(record, clock.now(), grace_s)
        return record

    try:
        done = update(
            states,
            order_id,
            decision,
            clock=clock,
            actor=Note(actor, action=what, outcome=outcome),
            if_match=if_match,
            attempts=MAX_CONFLICT_RETRIES,
            housekeeping=housekeeping,
        )
    except NotFound:
        # The same error, word for word, whether the order is missing or someone else's.
        raise _unknown(order_id, what) from None
    written = done.written
    if deliver_owed_reply and written is not None and written.item.pending_reply is not None:
        deliver_reply(states, queues, clock, written.item, written.item.pending_reply, etag=written.etag)
    return Applied(decided[0], done.record, written, done.etag)


def _unknown(order_id: str, what: str) -> InvalidMessage:
    return InvalidMessage(UNKNOWN_ORDER, f"no order {order_id!r} to {what}")
