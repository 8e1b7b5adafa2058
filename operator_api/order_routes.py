"""The handlers of the routes about orders: list, inspect, timeline, and the actions (review, compensate,
resubmit, suspend, resume) on one order (docs/operator-api.md).

Each decodes the call, calls the action with its dependencies and encodes the answer; an action's
refusal, a :class:`operator_api.answers.Refused` with its status, is raised for the dispatch to answer.
"""

from __future__ import annotations

from typing import Any

from operator_api.answers import OperatorResponse, Refused
from operator_api.compensate import compensate_order
from operator_api.listing import list_orders, list_query
from operator_api.resubmit import resubmit_order
from operator_api.review import review_order
from operator_api.routing import Call, Handler, OperatorApiSections
from operator_api.schemas import CompensateBody, EmptyBody, ResubmitBody, ReviewBody
from operator_api.suspension import set_suspension
from operator_api.views import entity_tag, order_view, timeline_page
from orderflow.dependencies import Dependencies
from orderflow.errors import NotFound
from orderflow.messages import decode_json_object, validate_message
from orderflow.order_requests import UNKNOWN_ORDER
from orderflow.records import ReviewDecision


def inspect(call: Call, deps: Dependencies, sections: OperatorApiSections) -> OperatorResponse:
    """``GET /orders/{orderId}``: the order's view, with its ``ETag``."""
    try:
        found = deps.states.get(call.key)
    except NotFound:
        raise Refused(404, UNKNOWN_ORDER, f"no order {call.key}") from None
    return OperatorResponse(200, order_view(found.item), {"ETag": entity_tag(found.etag)})


def timeline(call: Call, deps: Dependencies, sections: OperatorApiSections) -> OperatorResponse:
    """``GET /orders/{orderId}/timeline``: a page of the order's timeline, with its ``ETag``."""
    limit = call.limit("limit", default=10, most=100)
    call.only("limit", "continuation")
    try:
        found = deps.states.get(call.key)
    except NotFound:
        raise Refused(404, UNKNOWN_ORDER, f"no order {call.key}") from None
    page = deps.states.history(call.key, max_item_count=limit, continuation=call.query.get("continuation"))
    answer = timeline_page(found.item, page)
    return OperatorResponse(200, answer.to_body(), {"ETag": entity_tag(found.etag)})


def list_(call: Call, deps: Dependencies, sections: OperatorApiSections) -> OperatorResponse:
    """``GET /orders``: a page of the orders the query selects."""
    query, limit, continuation = list_query(call.query, deps.clock.now())
    listed = list_orders(deps.states, query, limit=limit, continuation=continuation)
    return OperatorResponse(200, listed.to_body())


def review(call: Call, deps: Dependencies, sections: OperatorApiSections) -> OperatorResponse:
    """``POST /orders/{orderId}/review``: a reviewer's decision."""
    request = validate_message(ReviewBody, decode_json_object(call.body))
    outcome = review_order(
        call.key,
        ReviewDecision(request.decision),
        call.caller,
        states=deps.states,
        queues=deps.queues,
        clock=deps.clock,
        grace_s=sections.starter.CLAIM_TIMEOUT_S,
        clients=sections.clients.clients(),
    )
    if isinstance(outcome, Refused):
        raise outcome
    review = outcome.record.review
    assert review is not None and review.decision is not None
    answer = {"orderId": call.key, "decision": review.decision.value, "decidedBy": review.decided_by}
    etag = {"ETag": entity_tag(outcome.etag)}
    return OperatorResponse(200, {**answer, "order": order_view(outcome.record)}, etag)


def _optional_body(call: Call) -> dict[str, Any]:
    """The body's JSON object; an empty body is ``{}``."""
    return decode_json_object(call.body) if call.body.strip() else {}


def compensate(call: Call, deps: Dependencies, sections: OperatorApiSections) -> OperatorResponse:
    """``POST /orders/{orderId}/compensate``: stop and undo, or retry a failed compensation."""
    request = validate_message(CompensateBody, _optional_body(call))
    outcome = compensate_order(
        call.key,
        call.caller,
        reason=request.reason,
        states=deps.states,
        queues=deps.queues,
        clock=deps.clock,
        grace_s=sections.starter.CLAIM_TIMEOUT_S,
        if_match=call.if_match(),
    )
    if isinstance(outcome, Refused):
        raise outcome
    answer = {"orderId": call.key, "outcome": outcome.action.value, "order": order_view(outcome.record)}
    return OperatorResponse(202, answer, {"ETag": entity_tag(outcome.etag)})


def resubmit(call: Call, deps: Dependencies, sections: OperatorApiSections) -> OperatorResponse:
    """``POST /orders/{orderId}/resubmit``: a new attempt, or a compensation retry; ``If-Match`` required."""
    request = validate_message(ResubmitBody, _optional_body(call))
    seen = call.if_match()
    if seen is None:
        raise Refused(428, "PreconditionRequired", "resubmit takes If-Match: the ETag of the order you saw")
    outcome = resubmit_order(
        call.key,
        call.caller,
        if_match=seen,
        states=deps.states,
        queues=deps.queues,
        clock=deps.clock,
        grace_s=sections.starter.CLAIM_TIMEOUT_S,
        retry_budget=sections.steps.RETRY_BUDGET,
        corrected=request.input,
        orders=deps.orders,
    )
    if outcome.refusal is not None:
        raise outcome.refusal
    assert outcome.action is not None, "an accepted resubmit says what it set in motion"
    answer = {"orderId": call.key, "outcome": outcome.action.value, "order": order_view(outcome.record)}
    return OperatorResponse(202, answer, {"ETag": entity_tag(outcome.etag)})


def suspension(suspend: bool) -> Handler:
    """The handler of ``POST /orders/{orderId}/suspend`` (``suspend``) or ``.../resume``."""

    def act(call: Call, deps: Dependencies, sections: OperatorApiSections) -> OperatorResponse:
        if call.body.strip():
            validate_message(EmptyBody, decode_json_object(call.body))
        outcome = set_suspension(
            call.key,
            call.caller,
            suspend=suspend,
            if_match=call.if_match(),
            states=deps.states,
            queues=deps.queues,
            clock=deps.clock,
        )
        if outcome.refusal is not None:
            raise outcome.refusal
        answer = {
            "orderId": call.key,
            "outcome": "Suspended" if suspend else "Resumed",
            "order": order_view(outcome.record),
        }
        return OperatorResponse(200, answer, {"ETag": entity_tag(outcome.etag)})

    return act
