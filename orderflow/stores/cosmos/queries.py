"""The parameterised Cosmos SQL of the stores' queries: state records, alerts and replay records."""

from __future__ import annotations

from datetime import datetime

from orderflow.alerts import REPLAY_KIND, replay_filter
from orderflow.records import format_utc
from orderflow.stores.base import AlertQuery, StateQuery
from orderflow.stores.cosmos.container import Parameters


def _flag_conditions(query: StateQuery) -> list[tuple[bool, str]]:
    return [
        (query.unlocked, "(NOT IS_DEFINED(c.lockedBy) OR IS_NULL(c.lockedBy))"),
        (query.not_suspended, "(NOT IS_DEFINED(c.suspendedAt) OR IS_NULL(c.suspendedAt))"),
        (query.reply_pending, "(IS_DEFINED(c.pendingReply) AND NOT IS_NULL(c.pendingReply))"),
    ]


def _valued_conditions(query: StateQuery) -> list[tuple[datetime | str | int | None, str, str]]:
    # (value, parameter, condition): a condition applies when its value is given.
    return [
        (query.client_id, "@clientId", "c.clientId = @clientId"),
        (query.workflow_version, "@workflowVersion", "c.workflowVersion = @workflowVersion"),
        (
            query.complete_by_before,
            "@completeByBefore",
            "(IS_STRING(c.completeBy) AND c.completeBy < @completeByBefore)",
        ),
        (
            query.complete_by_after,
            "@completeByAfter",
            "(IS_STRING(c.completeBy) AND c.completeBy >= @completeByAfter)",
        ),
        (
            query.ready_at,
            "@readyAt",
            "(NOT IS_DEFINED(c.nextAttemptAt) OR IS_NULL(c.nextAttemptAt) OR c.nextAttemptAt <= @readyAt)",
        ),
        (query.updated_before, "@updatedBefore", "(IS_STRING(c.updatedAt) AND c.updatedAt < @updatedBefore)"),
        (query.updated_after, "@updatedAfter", "(IS_STRING(c.updatedAt) AND c.updatedAt >= @updatedAfter)"),
        (
            query.purge_version_below,
            "@purgeVersionBelow",
            "(NOT IS_DEFINED(c.dataPurgeVersion) OR IS_NULL(c.dataPurgeVersion)"
            " OR c.dataPurgeVersion < @purgeVersionBelow)",
        ),
    ]


def state_query_sql(query: StateQuery, *, select: str = "*") -> tuple[str, Parameters]:
    """The parameterised Cosmos SQL for a :class:`StateQuery` (values are never formatted in).

    The query stays *streamable* (no ORDER BY, DISTINCT, TOP or aggregates on pages) so that the
    gateway serves it across partitions and its continuation token resumes it; ORDER BY would move
    execution into the SDK's client-side aggregator, which cannot resume from a token.

    Args:
        query: The filter.
        select: The projection, ``*`` for pages or ``VALUE COUNT(1)`` for :meth:`CosmosStateStore.count`.

    Returns:
        The SQL text and its parameters.
    """
    conditions: list[str] = []
    params: Parameters = []
    states = sorted({str(state) for state in query.process_states})
    if states:
        names = [f"@state{i}" for i in range(len(states))]
        conditions.append(f"c.processState IN ({', '.join(names)})")
        params += [{"name": name, "value": state} for name, state in zip(names, states, strict=True)]
    conditions += [condition for flag, condition in _flag_conditions(query) if flag]
    for value, name, condition in _valued_conditions(query):
        if value is not None:
            conditions.append(condition)
            params.append(
                {"name": name, "value": format_utc(value) if isinstance(value, datetime) else value}
            )
    where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
    return f"SELECT {select} FROM c{where}", params


def alert_query_sql(query: AlertQuery, day: str) -> tuple[str, Parameters]:
    """The parameterised Cosmos SQL of one day's partition of an :class:`AlertQuery`, newest first.

    A single-partition ORDER BY is served from the index and resumes from its continuation token (a
    cross-partition one would not: :func:`state_query_sql`), which is why documents are partitioned by day.
    """
    conditions = ["c.day = @day"]
    params: Parameters = [{"name": "@day", "value": day}]
    if query.kind is not None:
        conditions.append("c.kind = @kind")
        params.append({"name": "@kind", "value": query.kind})
    for n, excluded in enumerate(query.exclude_kinds):
        conditions.append(f"c.kind != @excludeKind{n}")
        params.append({"name": f"@excludeKind{n}", "value": excluded})
    if query.since is not None:
        conditions.append("(IS_STRING(c.at) AND c.at >= @since)")
        params.append({"name": "@since", "value": format_utc(query.since)})
    return f"SELECT * FROM c WHERE {' AND '.join(conditions)} ORDER BY c.at DESC", params


def replay_query_sql(
    queue: str, *, dead_letter_id: str | None, replay_message_id: str | None
) -> tuple[str, Parameters]:
    """The parameterised Cosmos SQL of a lookup of replay records (across the day partitions).

    Raises:
        ValueError: not exactly one of ``dead_letter_id`` and ``replay_message_id``.
    """
    field, value = replay_filter(dead_letter_id=dead_letter_id, replay_message_id=replay_message_id)
    sql = f"SELECT * FROM c WHERE c.kind = @kind AND c.queue = @queue AND c.{field} = @value"
    params: Parameters = [
        {"name": "@kind", "value": REPLAY_KIND},
        {"name": "@queue", "value": queue},
        {"name": "@value", "value": value},
    ]
    return sql, params
