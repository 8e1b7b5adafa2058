"""Structured operational events and counters.

Every role reports what it did through :func:`event` (one log record per event on the
``orderflow.events`` logger, with the correlation ids ``orderId``, ``instanceId`` and ``attempt`` as
structured fields) and raises operator alerts through :func:`alert` (``orderflow.alerts``, level ERROR).
On Azure, azure-monitor-opentelemetry exports these log records with their fields as custom dimensions;
locally they go to the console and the counters below feed the demo summary.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from typing import Any

events_logger = logging.getLogger("orderflow.events")
alerts_logger = logging.getLogger("orderflow.alerts")

_counters: Counter[str] = Counter()
_lock = threading.Lock()


def event(name: str, /, **fields: Any) -> None:
    """Record a structured event and count it.

    Args:
        name: Event name, e.g. ``claim``, ``step.start``, ``step.timeout``, ``recovery``.
        **fields: Structured fields; use ``order_id``, ``instance_id``, ``attempt`` for correlation.
    """
    with _lock:
        _counters[name] += 1
    if events_logger.isEnabledFor(logging.INFO):
        rendered = " ".join(f"{key}={value}" for key, value in fields.items())
        events_logger.info("%s %s", name, rendered, extra={"event": name, "fields": fields})


def alert(name: str, /, **fields: Any) -> None:
    """Raise an operator alert: an ERROR record on ``orderflow.alerts`` plus an ``alert.<name>`` count."""
    with _lock:
        _counters[f"alert.{name}"] += 1
    rendered = " ".join(f"{key}={value}" for key, value in fields.items())
    alerts_logger.error("ALERT %s %s", name, rendered, extra={"event": f"alert.{name}", "fields": fields})


def counters() -> dict[str, int]:
    """A snapshot of every event and alert count since the process started."""
    with _lock:
        return dict(_counters)
