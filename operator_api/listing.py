"""``GET /api/operator/orders``: orders by state, client, workflow version, stuck or failed time, paged.

The filters become one :class:`orderflow.stores.base.StateQuery` (``processState IN (...)`` with one
``updatedAt`` range and optional ``clientId`` / ``workflowVersion`` equalities), which the Cosmos
container's composite indexes serve (infra/modules/cosmos.bicep); pages follow the store's continuation
token, handed to the caller as it is (docs/operator-api.md#listing-orders).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta

from operator_api.schemas import OrderList, OrderSummary
from operator_api.views import entity_tag
from orderflow.errors import InvalidMessage
from orderflow.protocol.state_machine import SETTLED_STATES
from orderflow.records import QUERY_TIME_FORMAT, ProcessState, StateRecord, format_utc, parse_query_time
from orderflow.stores.base import StateQuery, StateStore

DEFAULT_LIMIT = 50
"""Orders per page when ``limit`` is not given."""
MAX_LIMIT = 100
"""Most orders one page holds."""

STUCK_STATES = tuple(state for state in ProcessState if state not in SETTLED_STATES)
"""States ``stuckFor`` looks in when no ``state`` is given: an order still on its way."""
FAILED_STATES = (ProcessState.ERROR, ProcessState.COMPENSATION_FAILED)
"""States ``failedSince`` looks in when no ``state`` is given: an order that needs a person."""

PARAMETERS = ("state", "client", "workflowVersion", "stuckFor", "failedSince", "limit", "continuation")
"""The query parameters the route takes."""


def _invalid(name: str, detail: str) -> InvalidMessage:
    return InvalidMessage("InvalidValue", f"{name}: {detail}")


def _states(text: str | None) -> tuple[ProcessState, ...]:
    if not text:
        return ()
    try:
        return tuple(ProcessState(part.strip()) for part in text.split(","))
    except ValueError:
        known = ", ".join(state.value for state in ProcessState)
        raise _invalid("state", f"one or more (comma-separated) of {known}") from None


def _positive_int(name: str, text: str | None, *, default: int, most: int) -> int:
    if text is None:
        return default
    if not text.isascii() or not text.isdigit() or not 1 <= int(text) <= most:
        raise _invalid(name, f"a whole number from 1 to {most}")
    return int(text)


def _time(name: str, text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        return parse_query_time(text)
    except ValueError:
        raise _invalid(name, QUERY_TIME_FORMAT) from None


def list_query(params: Mapping[str, str], now: datetime) -> tuple[StateQuery, int, str | None]:
    """The store query, page size and continuation of a list request's query parameters.

    Args:
        params: ``state`` (comma-separated ``processState`` values), ``client`` (client id),
            ``workflowVersion``, ``stuckFor`` (seconds without a write, 1 .. 10^9), ``failedSince``
            (an ISO 8601 time: last written at or after it), ``limit`` (1 .. :data:`MAX_LIMIT`),
            ``continuation`` (the previous page's token).
        now: The time ``stuckFor`` counts back from (UTC).

    Raises:
        InvalidMessage: ``UnexpectedField`` for another parameter, ``InvalidValue`` for a bad value or
            for ``stuckFor`` with ``failedSince`` and no ``state`` (they default to disjoint states).
    """
    unexpected = sorted(set(params) - set(PARAMETERS))
    if unexpected:
        raise InvalidMessage("UnexpectedField", f"unknown query parameter {unexpected[0]!r}")
    states = _states(params.get("state"))
    stuck_s = params.get("stuckFor")
    stuck = None if stuck_s is None else _positive_int("stuckFor", stuck_s, default=0, most=10**9)
    failed_since = _time("failedSince", params.get("failedSince"))
    if not states and stuck is not None and failed_since is not None:
        raise _invalid("state", "give the states to look in when asking for both stuckFor and failedSince")
    if not states:
        states = STUCK_STATES if stuck is not None else FAILED_STATES if failed_since is not None else ()
    query = StateQuery(
        process_states=states,
        client_id=params.get("client") or None,
        workflow_version=params.get("workflowVersion") or None,
        updated_before=None if stuck is None else now - timedelta(seconds=stuck),
        updated_after=failed_since,
    )
    limit = _positive_int("limit", params.get("limit"), default=DEFAULT_LIMIT, most=MAX_LIMIT)
    return query, limit, params.get("continuation") or None


def order_summary(record: StateRecord, etag: str) -> OrderSummary:
    """One order in a list: key, client, state, progress counters, times, the last error's code and the
    version listed (``etag``, the store's, given as the entity tag an ``If-Match`` names)."""
    error = record.last_error
    return OrderSummary(
        order_id=record.order_id,
        client_id=record.client_id,
        process_state=record.process_state.value,
        workflow_version=record.workflow_version,
        attempt=record.attempt,
        failure_count=record.failure_count,
        locked_by=record.locked_by,
        suspended=record.suspended_at is not None,
        last_error_code=None if error is None else error.code or error.kind,
        updated_at=format_utc(record.updated_at),
        etag=entity_tag(etag),
    )


def list_orders(states: StateStore, query: StateQuery, *, limit: int, continuation: str | None) -> OrderList:
    """One page of matching orders, summarised.

    Raises:
        InvalidContinuation: the token is not this query's (or no longer accepted).
        TransientError: the store is unavailable.
    """
    page = states.query(query, max_item_count=limit, continuation=continuation)
    return OrderList(
        orders=[order_summary(found.item, found.etag) for found in page.items], continuation=page.continuation
    )
