"""Rich renderings of the operator API's alerts and supervisor status, for the ``orderflow`` CLI.

Every value is the API's text, added as a table cell through :func:`orderflow_client.order_render.shown`:
nothing from a stored alert is read as markup or reaches the terminal as a control character.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Group
from rich.table import Table

from orderflow_client.order_render import shown

_NO_WRAP: dict[str, Any] = {"no_wrap": True}
_FOLD: dict[str, Any] = {"overflow": "fold"}

ALERT_COLUMNS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("last seen", "lastSeen", _NO_WRAP),
    ("count", "count", _NO_WRAP),
    ("first seen", "firstSeen", _NO_WRAP),
    ("kind", "kind", _NO_WRAP),
    ("order", "orderId", _FOLD),
    ("instance", "instanceId", _FOLD),
    ("cause", "cause", {}),
    ("suggested action", "suggestedAction", {}),
)
"""The alerts table's columns: title, ``GET /alerts`` field, how the cell wraps. A counted alert (one
client's alerts of one kind within a window) is one row with its count and its first and last times."""


def alerts_table(alerts: list[Mapping[str, Any]]) -> Table:
    """A table of alerts (``GET /alerts`` items): when last and first raised, how many times, kind, order,
    instance, cause, suggested action."""
    table = Table(title="alerts, newest first")
    for title, _, wrapping in ALERT_COLUMNS:
        table.add_column(title, **wrapping)
    for alert in alerts:
        table.add_row(*(shown(alert.get(key)) for _, key, _ in ALERT_COLUMNS))
    return table


SWEEP_COLUMNS = (
    ("at", "at"),
    ("host", "host"),
    ("scanned", "scanned"),
    ("recovered", "recovered"),
    ("gave up", "gaveUp"),
    ("held", "held"),
    ("stuck", "stuck"),
    ("seconds", "durationS"),
)


def supervisor_panel(status: Mapping[str, Any]) -> Group:
    """The supervisor's status (``GET /supervisor``): who leads, the stuck-orders gauge, the last sweeps."""
    leader = status.get("leader")
    leadership = status.get("leadership")
    if leader:
        heading = f"leader: {leader} ({leadership}); stuck orders: {status.get('stuckOrders')}"
    elif leadership:
        heading = (
            f"no sweep in the last {status.get('staleAfterS')} s (last: {status.get('lastSweepAt')} "
            f"by {leadership}): no leader known"
        )
    else:
        heading = "no sweep recorded: no supervisor has run (or none keeps its status)"
    table = Table(title="last sweeps, newest first")
    for title, _ in SWEEP_COLUMNS:
        table.add_column(title, no_wrap=True)
    for sweep in status.get("sweeps") or []:
        table.add_row(*(shown(sweep.get(key)) for _, key in SWEEP_COLUMNS))
    return Group(shown(heading), table)
