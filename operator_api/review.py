"""A reviewer's decision on an order awaiting review, made through the operator API (docs/design.md §4).

The order's owner is an orchestration waiting on the ``ReviewDecision`` external event, raced against
the review's deadline. The decision is made durable first: one ETag-conditional write records it in the
record's ``review`` (the first decision wins), with the verified principal's audit id as ``decidedBy``,
so an attempt that dies while waiting loses nothing (the next attempt's step start finds it). Then it is
forwarded, with the waiting attempt's instance id, to that attempt's response queue, whose listener
raises the event on the instance (the listener runs in the process that owns the instance; the API may
not). The app's own identity sends it: only the app may send to a response queue.

Who may decide which order is :func:`may_review`'s to say.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import StrEnum

from operator_api.answers import Refused
from operator_api.decisions import apply_decision
from orderflow import telemetry
from orderflow.clients import ClientRegistry
from orderflow.clock import Clock
from orderflow.messages import REVIEW_DECISION, ReviewDecisionMessage, bounded_message_id
from orderflow.operator_auth import REVIEWER_ROLE, Principal
from orderflow.protocol.transitions import requests
from orderflow.queues.base import QueueFactory
from orderflow.records import ProcessState, ReviewDecision, StateRecord
from orderflow.stores.base import StateStore

logger = logging.getLogger(__name__)


class ReviewRefusal(StrEnum):
    """Why a decision was not taken (the API's error code; 403 for ``ReviewNotPermitted``, else 409)."""

    NOT_AWAITING_REVIEW = "NotAwaitingReview"
    """The order is not paused for a review (any more, or ever)."""
    ALREADY_DECIDED = "AlreadyDecided"
    """Another decision is in force: the first one recorded wins."""
    NOT_PERMITTED = "ReviewNotPermitted"
    """:func:`may_review` refused this principal this order."""


@dataclass(frozen=True)
class ReviewRecorded:
    """The principal's decision is the one in force, and was forwarded to the waiting attempt.

    Attributes:
        record: The record after the decision.
        etag: Its ETag.
        repeated: The same principal had made the same decision before (a retried call): nothing was
            written, the decision was forwarded again.
    """

    record: StateRecord
    etag: str
    repeated: bool = False


ReviewOutcome = ReviewRecorded | Refused
"""What :func:`review_order` did: the decision in force, or a refusal (nothing written or sent)."""


def may_review(
    principal: Principal, record: StateRecord, decision: ReviewDecision, clients: ClientRegistry
) -> bool:
    """Whether ``principal`` may take ``decision`` on the review of ``record``'s order.

    A reviewer (app role ``orderflow.reviewer``; the handler checks it before the record is read, and it
    is checked again here so that the rule stands on its own) may decide any order but one submitted
    under their own principal: nobody approves their own order (docs/design.md §9). The submitter is the
    registered client the order arrived for (``record.client_id``) and its ``principalId``; rejecting
    one's own order stops it, which its client may do anyway, so only an approval is refused.
    """
    if not principal.has_role(REVIEWER_ROLE):
        return False
    if decision is not ReviewDecision.APPROVE:
        return True
    owners = [client for client in clients if client.owns(record.client_id)]
    if not owners:
        # Whose order it is cannot be told (its client is no longer registered): nobody approves it.
        return False
    # Compared as GUIDs, any written form alike; a principal id that is not one counts as the submitter's.
    return not any(
        client.principal_id is not None and principal.may_be(client.principal_id) for client in owners
    )


def review_message_id(order_id: str, step: str) -> str:
    """Stable message id of a forwarded decision: one per order and reviewed step."""
    return bounded_message_id(f"{order_id}:{step}:review")


def review_order(
    order_id: str,
    decision: ReviewDecision,
    principal: Principal,
    *,
    states: StateStore,
    queues: QueueFactory,
    clock: Clock,
    grace_s: float,
    clients: ClientRegistry,
) -> ReviewOutcome:
    """Record ``principal``'s decision on an order awaiting review and forward it to the waiting attempt.

    Args:
        order_id: The order.
        decision: ``approve`` or ``reject``.
        principal: The verified reviewer: ``review.decidedBy`` is its audit id, ``review.decidedByName``
            its display name.
        states / queues / clock: Dependencies.
        clients: The client registry: whose principal submitted the order (:func:`may_review`).
        grace_s: Seconds the waiting attempt has to act on the decision before the supervisor may
            recover the order (``CLAIM_TIMEOUT_S``): its ``completeBy`` is brought that close.

    Returns:
        :class:`ReviewRecorded` when the principal's decision is in force (forwarded again on a
        repeated call), else a :class:`~operator_api.answers.Refused` (403 ``ReviewNotPermitted``, 409
        otherwise) with the ETag of the record as read.

    Raises:
        InvalidMessage: ``UnknownOrder``: there is no such order.
        TransientError, ConcurrencyConflict: the store or queue is unavailable, or the owner kept
            winning the ETag race; retry.
    """

    def decide(record: StateRecord) -> tuple[tuple[ReviewRefusal, str] | None, bool]:
        """None to forward the decision in force, else the refusal; and whether to write."""
        review = record.review
        if review is None or record.process_state is not ProcessState.AWAITING_REVIEW:
            return (ReviewRefusal.NOT_AWAITING_REVIEW, _not_awaiting(record)), False
        if not may_review(principal, record, decision, clients):
            return (ReviewRefusal.NOT_PERMITTED, "this reviewer may not decide this order"), False
        if review.decision is None:
            by_name = principal.display_name or None
            requests.decide_review(
                record, decision=decision, by=principal.audit_id, by_name=by_name, now=clock.now()
            )
            return None, True
        if (review.decided_by, review.decision) != (principal.audit_id, decision):
            return (ReviewRefusal.ALREADY_DECIDED, f"already decided: {_decided(record)}"), False
        return None, False  # the same decision by the same principal again: forward it again

    applied = apply_decision(
        principal=principal,
        role="reviewer",
        states=states,
        queues=queues,
        clock=clock,
        order_id=order_id,
        decide=decide,
        what="review",
        grace_s=grace_s,
        outcome=decision.value,
    )
    if applied.decision is not None:
        refusal, detail = applied.decision
        telemetry.event(
            "review.refused", order_id=order_id, reviewer=principal.audit_id, reason=refusal.value
        )
        status = 403 if refusal is ReviewRefusal.NOT_PERMITTED else 409
        return Refused(status, refusal.value, detail, etag=applied.etag)
    review = applied.record.review
    assert review is not None and review.decision is not None  # decide() forwards a decided review only
    # Forward (again, on a repeated call: the listener and the orchestration ignore a duplicate).
    forwarded = ReviewDecisionMessage(
        schema_version=1,
        type=REVIEW_DECISION,
        order_id=order_id,
        decision=review.decision.value,
        reviewer=review.decided_by or principal.audit_id,
        instance_id=applied.record.locked_by,
    )
    queues.queue(review.response_queue).send(
        forwarded.to_json(), message_id=review_message_id(order_id, review.step), correlation_id=order_id
    )
    telemetry.event(
        "review.recorded", order_id=order_id, decision=review.decision.value, reviewer=principal.audit_id
    )
    return ReviewRecorded(applied.record, applied.etag, repeated=applied.written is None)


def _decided(record: StateRecord) -> str:
    review = record.review
    if review is None or review.decision is None:
        return "undecided"
    return f"{review.decision.value} by {review.decided_by}"


def _not_awaiting(record: StateRecord) -> str:
    decided = f" (review: {_decided(record)})" if record.review is not None else ""
    return f"order is {record.process_state.value}, not awaiting review{decided}"
