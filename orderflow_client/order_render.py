"""Rich renderings of the operator API's answers, for ``orderflow orders show`` and ``orders list``.

They take the API's JSON as it comes (the public view of a state record, a page of orders) and print
every text through :func:`shown`: a record holds text clients and others wrote, which is never read as
markup and whose control characters are shown, never sent to the terminal.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from orderflow.client_text import visible


def shown(value: object) -> Text:
    """``value`` (None as empty) as a terminal shows text others wrote: plain :class:`~rich.text.Text`,
    never markup, made :func:`~orderflow.client_text.visible` (no control character, no bidi override).
    Every CLI rendering of the API's answers and of stored records goes through it."""
    return Text(visible("" if value is None else str(value)))


def _table(title: str, *columns: str) -> Table:
    table = Table(title=shown(title), title_justify="left")
    for column in columns:
        table.add_column(column)
    return table


def _add(table: Table, *cells: object) -> None:
    table.add_row(*(shown(cell) for cell in cells))


def _steps(view: dict[str, Any]) -> Table:
    table = _table("steps", "step", "status", "attempts", "result")
    for name, step in (view.get("steps") or {}).items():
        _add(table, name, step.get("status"), step.get("attempts"), step.get("result") or "")
    return table


def _compensation(view: dict[str, Any]) -> Table:
    table = _table("compensation log", "step", "did", "undo", "status", "undo result")
    for entry in view.get("compensationLog") or []:
        undo = entry.get("undo") or "irreversible"
        _add(
            table,
            entry.get("step"),
            entry.get("action"),
            undo,
            entry.get("status"),
            entry.get("undoResult") or "",
        )
    return table


def _holds(view: dict[str, Any]) -> Table:
    table = _table("holds", "step", "hold", "expires at", "commit", "key", "re-acquired", "committed at")
    for step, hold in (view.get("holds") or {}).items():
        _add(
            table,
            step,
            hold.get("holdId"),
            hold.get("expiresAt"),
            hold.get("commit"),
            hold.get("idempotencyKey"),
            hold.get("reacquired"),
            hold.get("committedAt") or "",
        )
    return table


def _corrections(view: dict[str, Any]) -> Table:
    table = _table("input corrections", "#", "step", "input", "key", "by", "at")
    for correction in view.get("corrections") or []:
        by = correction.get("by") or ""
        if correction.get("byName"):
            by = f"{by} ({correction['byName']})"
        _add(
            table,
            correction.get("number"),
            correction.get("step"),
            correction.get("input") or "",
            correction.get("idempotencyKey"),
            by,
            correction.get("at"),
        )
    return table


def _step_changes(entry: dict[str, Any]) -> str:
    return ", ".join(
        f"{c.get('step')} {c.get('fromStatus') or '-'}→{c.get('toStatus')}" for c in entry.get("steps") or []
    )


def timeline_table(entries: Iterable[dict[str, Any]], *, title: str = "timeline") -> Table:
    """The timeline entries as a table: seq, time, who, what, state change, steps, outcome, error."""
    table = _table(title, "#", "at", "role", "by", "action", "state", "steps", "outcome", "attempt", "error")
    for entry in entries:
        by = entry.get("by") or ""
        if entry.get("byName"):
            by = f"{by} ({entry['byName']})"
        state = f"{entry.get('fromState') or '-'}→{entry.get('toState')}"
        _add(
            table,
            entry.get("seq"),
            entry.get("at"),
            entry.get("role"),
            by,
            _what(entry),
            state,
            _step_changes(entry),
            entry.get("outcome") or "",
            entry.get("attempt"),
            entry.get("errorCode") or "",
        )
    return table


def _what(entry: dict[str, Any]) -> str:
    """The entry's action, with the fields of an input correction it recorded."""
    action = str(entry.get("action") or "")
    corrected = entry.get("correctedFields") or []
    return f"{action} (corrected {', '.join(map(str, corrected))})" if corrected else action


def _summary(view: dict[str, Any], etag: str | None) -> Table:
    table = _table(f"order {view.get('orderId')}", "field", "value")
    budget = view.get("retryBudget") or {}
    rows: list[tuple[str, object]] = [
        ("processState", view.get("processState")),
        ("workflowVersion", view.get("workflowVersion")),
        ("attempt", view.get("attempt")),
        ("lockedBy", view.get("lockedBy")),
        ("completeBy", view.get("completeBy")),
        ("failureCount", view.get("failureCount")),
        ("retry budget", f"{budget.get('spent')} of {budget.get('limit')} calls spent"),
        (
            "suspended",
            f"by {view.get('suspendedBy')} at {view.get('suspendedAt')}" if view.get("suspendedAt") else "no",
        ),
        ("etag", etag),
    ]
    error = view.get("lastError")
    if error:
        rows.append(("lastError", f"{error.get('kind')} {error.get('code')}: {error.get('message')}"))
    for name, value in rows:
        _add(table, name, value)
    return table


def replies_sent(entries: Iterable[dict[str, Any]]) -> list[tuple[str, str]]:
    """(time, status) of each reply the timeline shows sent to the client."""
    return [(str(e.get("at")), str(e.get("outcome"))) for e in entries if e.get("action") == "reply"]


def order_panel(view: dict[str, Any], *, timeline: list[dict[str, Any]], etag: str | None) -> RenderableType:
    """Everything ``orders show`` prints: the state, steps, compensation log, retry budget, holds with
    their expiry and input corrections (when there are any), replies sent and the whole ``timeline``
    (the history's entries and the record's, oldest first)."""
    replies = _table("replies sent", "at", "status")
    for at, status in replies_sent(timeline):
        _add(replies, at, status)
    parts: list[RenderableType] = [_summary(view, etag), _steps(view), _compensation(view)]
    if view.get("holds"):
        parts.append(_holds(view))
    if view.get("corrections"):
        parts.append(_corrections(view))
    return Group(*parts, replies, timeline_table(timeline))


def orders_table(orders: Iterable[dict[str, Any]]) -> Table:
    """A page of ``GET /orders`` as a table."""
    table = _table(
        "orders",
        "order",
        "client",
        "state",
        "version",
        "attempt",
        "failures",
        "suspended",
        "error",
        "updated",
    )
    for order in orders:
        _add(
            table,
            order.get("orderId"),
            order.get("clientId"),
            order.get("processState"),
            order.get("workflowVersion"),
            order.get("attempt"),
            order.get("failureCount"),
            "yes" if order.get("suspended") else "",
            order.get("lastErrorCode") or "",
            order.get("updatedAt"),
        )
    return table
