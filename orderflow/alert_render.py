"""Rich renderings of the operator API's alerts and supervisor status, for the ``orderflow`` CLI.

Every value is the API's text, added as a table cell through :func:`orderflow.order_render.shown`:
nothing from a stored alert is read as markup or reaches the terminal as a control character.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.console import Group
from rich.table import Table

from orderflow.order_render import shown


def alerts_table(alerts: list[Mapping[str, Any]]) -> Table:
    """A table of alerts (``GET /alerts`` items): when, kind, order, instance, cause, suggested action."""
    table = Table(title="alerts, newest first")
    table.add_column("at", no_wrap=True)
    table.add_column("kind", no_wrap=True)
    table.add_column("order", overflow="fold")
    table.add_column("instance", overflow="fold")
    table.add_column("cause")
    table.add_column("suggested action")
    for alert in alerts:
        table.add_row(
            *(
                shown(alert.get(key))
                for key in ("at", "kind", "orderId", "instanceId", "cause", "suggestedAction")
            )
        )
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
