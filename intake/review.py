"""A reviewer's decision on an order awaiting review, from the submission path (docs/design.md §4).

The order's owner is an orchestration waiting on the ``ReviewDecision`` external event, raced against
the review's deadline. The decision is made durable first: one ETag-conditional write records it in the
record's ``review`` (the first decision wins), so an attempt that dies while waiting loses nothing (the
next attempt's step start finds it). Then it is forwarded, with the waiting attempt's instance id, to
that attempt's response queue, whose listener raises the event on the instance (the listener runs in
the process that owns the instance; this path may not).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from orderflow import telemetry
from orderflow.clock import Clock
from orderflow.messages import ReviewDecisionMessage, parse_message
from orderflow.order_requests import apply_request
from orderflow.queues.base import QueueFactory
from orderflow.records import ProcessState, ReviewDecision, StateRecord
from orderflow.stores.base import StateStore

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReviewResult:
    """What a decision did: ``recorded`` (and forwarded), or ``ignored`` with why."""

    order_id: str
    recorded: bool
    reason: str | None = None


def review_message_id(order_id: str, step: str) -> str:
    """Stable message id of a forwarded decision: one per order and reviewed step."""
    return f"{order_id}:{step}:review"


def handle_review_decision(
    body: str | bytes, *, states: StateStore, queues: QueueFactory, clock: Clock, grace_s: float = 30.0
) -> ReviewResult:
    """Record a reviewer's decision and forward it to the waiting attempt.

    Args:
        body: The raw :class:`ReviewDecisionMessage`.
        states / queues / clock: Dependencies.
        grace_s: Seconds the waiting attempt has to act on the decision before the supervisor may
            recover the order (``CLAIM_TIMEOUT_S``): its ``completeBy`` is brought that close.

    Returns:
        ``recorded`` True when this decision is the one in force; False (with the reason) when the order
        awaits no review or was already decided: the message is completed either way.

    Raises:
        InvalidMessage: the body is not a decision, or names no known order (dead-letter it).
        TransientError, ConcurrencyConflict: the store or queue is unavailable, or the owner kept
            winning the ETag race; abandon and retry.
    """
    message = parse_message(ReviewDecisionMessage, body)

    def decide(record: StateRecord) -> tuple[str | None, bool]:
        """None to forward the decision in force, else why it is ignored; and whether to write."""
        review = record.review
        if review is None or record.process_state is not ProcessState.AWAITING_REVIEW:
            return f"order is {record.process_state.value}, not awaiting review", False
        if review.decision is None:
            review.decision = ReviewDecision(message.decision)
            review.decided_by = message.reviewer
            review.decided_at = record.updated_at = clock.now()
            return None, True
        if review.decided_by != message.reviewer or review.decision.value != message.decision:
            return "already decided", False
        return None, False  # a redelivery of the decision in force: forward it again

    applied = apply_request(
        states=states,
        queues=queues,
        clock=clock,
        order_id=message.order_id,
        decide=decide,
        what="review",
        grace_s=grace_s,
    )
    review = applied.record.review
    if applied.decision is not None or review is None or review.decision is None:
        telemetry.event("review.ignored", order_id=message.order_id, reason=applied.decision)
        return ReviewResult(message.order_id, recorded=False, reason=applied.decision)
    # Forward (again, on a redelivery: the listener and the orchestration ignore a duplicate).
    forwarded = message.model_copy(
        update={"instance_id": applied.record.locked_by, "decision": review.decision.value}
    )
    queues.queue(review.response_queue).send(
        forwarded.to_json(),
        message_id=review_message_id(message.order_id, review.step),
        correlation_id=message.order_id,
    )
    telemetry.event(
        "review.recorded",
        order_id=message.order_id,
        decision=review.decision.value,
        reviewer=message.reviewer,
    )
    return ReviewResult(message.order_id, recorded=True)
