"""How the in-memory stores evaluate a query on a stored document, with Cosmos SQL's semantics, and the
fingerprint that binds a continuation token to its query."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from orderflow.records import format_utc
from orderflow.stores.base import AlertQuery, StateQuery


def query_fingerprint(query: StateQuery) -> str:
    """A short stable hash of a query's conditions; binds continuation tokens to their query.

    The order and repetition of ``process_states`` do not matter.
    """
    canonical = {
        "states": sorted({str(state) for state in query.process_states}),
        "before": format_utc(query.complete_by_before) if query.complete_by_before else None,
        "after": format_utc(query.complete_by_after) if query.complete_by_after else None,
        "unlocked": query.unlocked,
        "ready": format_utc(query.ready_at) if query.ready_at else None,
        "reply": query.reply_pending,
        "updated": format_utc(query.updated_before) if query.updated_before else None,
        "purge_below": query.purge_version_below,
        "client": query.client_id,
        "updated_after": format_utc(query.updated_after) if query.updated_after else None,
        "workflow": query.workflow_version,
        "not_suspended": query.not_suspended,
    }
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def matches(query: StateQuery, doc: dict[str, Any]) -> bool:
    """Whether a stored state document satisfies ``query``, with Cosmos SQL semantics.

    Mirrors the SQL that :class:`orderflow.stores.cosmos.CosmosStateStore` sends: a missing field is
    treated like null, and UTC times compare as the fixed-width strings they are stored as (a
    comparison with a non-string is false, as in Cosmos SQL).

    Args:
        query: The filter.
        doc: A stored state record (camelCase JSON).
    """
    if query.process_states and doc.get("processState") not in {str(s) for s in query.process_states}:
        return False
    if query.unlocked and doc.get("lockedBy") is not None:
        return False
    if not _equalities_hold(query, doc):
        return False
    complete_by = doc.get("completeBy")
    if query.complete_by_before is not None and not (
        isinstance(complete_by, str) and complete_by < format_utc(query.complete_by_before)
    ):
        return False
    if query.complete_by_after is not None and not (
        isinstance(complete_by, str) and complete_by >= format_utc(query.complete_by_after)
    ):
        return False
    if query.ready_at is not None:
        next_attempt_at = doc.get("nextAttemptAt")
        if next_attempt_at is not None and not (
            isinstance(next_attempt_at, str) and next_attempt_at <= format_utc(query.ready_at)
        ):
            return False
    if query.reply_pending and doc.get("pendingReply") is None:
        return False
    if query.purge_version_below is not None and not _purge_version_below(
        doc.get("dataPurgeVersion"), query.purge_version_below
    ):
        return False
    updated_at = doc.get("updatedAt")
    if query.updated_after is not None and not (
        isinstance(updated_at, str) and updated_at >= format_utc(query.updated_after)
    ):
        return False
    return query.updated_before is None or (
        isinstance(updated_at, str) and updated_at < format_utc(query.updated_before)
    )


def _equalities_hold(query: StateQuery, doc: dict[str, Any]) -> bool:
    """The query's equality conditions: client, workflow version, not suspended."""
    if query.client_id is not None and doc.get("clientId") != query.client_id:
        return False
    if query.workflow_version is not None and doc.get("workflowVersion") != query.workflow_version:
        return False
    return not (query.not_suspended and doc.get("suspendedAt") is not None)


def _purge_version_below(version: Any, bound: int) -> bool:
    # Cosmos SQL: a missing or null version matches; a non-number compared with a number is false.
    if version is None:
        return True
    return isinstance(version, int | float) and not isinstance(version, bool) and version < bound


def alert_matches(query: AlertQuery, doc: dict[str, Any]) -> bool:
    """Whether a stored alerts-container document satisfies ``query`` (Cosmos SQL semantics, as
    :func:`orderflow.stores.cosmos.alert_query_sql`)."""
    kind = doc.get("kind")
    if query.kind is not None and kind != query.kind:
        return False
    if kind in query.exclude_kinds:
        return False
    at = doc.get("at")
    return query.since is None or (isinstance(at, str) and at >= format_utc(query.since))
