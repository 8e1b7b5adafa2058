"""The sink that keeps every alert raised in a process in the alerts store, best effort.

A host builds one :class:`AlertSink` over its :class:`~orderflow.stores.base.AlertStore` and installs it
with :func:`orderflow.telemetry.use_alert_sink`; from then on :func:`orderflow.telemetry.alert` hands it
each alert after logging it. A write that fails is logged (a warning on ``orderflow.alert_sink``) and
never raised: an alert is raised where something already went wrong, and keeping it must not make that
worse. The alert's log record and metric stay the authoritative copy.

An alert of a kind a client can raise at will (:attr:`orderflow.alerts.AlertKind.counted_by`) is counted
into the one stored alert of its kind, client and window (``ALERT_WINDOW_S``) instead of being stored on
its own: so one client resending one bad message cannot push every other alert out of the newest page.
The count is a read-modify-write, created if absent and otherwise replaced If-Match the ETag read,
read again on a conflict: concurrent writers on any host lose no count.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Final

from orderflow.alerts import (
    AlertDoc,
    alert_doc,
    check_window,
    counted,
    counted_alert_id,
    counted_source,
    window_start,
)
from orderflow.clock import Clock
from orderflow.stores.base import AlertStore, merge_conditionally

logger = logging.getLogger(__name__)

COUNT_ATTEMPTS: Final = 16
"""Tries of a counted alert's read-modify-write while other writers move it."""
COUNT_BACKOFF_S: Final = 0.005
"""Seconds of jitter, times the try's number, before a counted alert is read again after a conflict:
writers that met once do not meet again in lockstep."""


def count_alert(store: AlertStore, occurrence: AlertDoc) -> AlertDoc:
    """Add ``occurrence`` (an alert with its counted id) to its stored alert: create it if absent, else
    replace it If-Match the ETag read; on a 409 or 412 read again.

    Returns:
        The stored alert as written.

    Raises:
        ConcurrencyConflict: it kept changing for :data:`COUNT_ATTEMPTS` tries.
        TransientError: the store is unavailable.
    """
    return merge_conditionally(
        lambda: store.get_alert(occurrence.id, day=occurrence.day),
        lambda doc, etag: store.put_alert(doc, etag=etag),
        lambda found: counted(found, occurrence),
        attempts=COUNT_ATTEMPTS,
        pause_s=COUNT_BACKOFF_S,
        what=f"alert {occurrence.id}",
    )


class AlertSink:
    """Writes alerts to ``store`` as :class:`~orderflow.alerts.AlertDoc` documents.

    Args:
        store: The alerts store.
        clock: The time of each alert (UTC).
        host_id: This process's host id, kept as the alert's ``host``.
        window_s: Seconds of one counting window (``ALERT_WINDOW_S``): 1 to a day.

    Raises:
        ValueError: ``window_s`` is out of range.
    """

    def __init__(self, store: AlertStore, clock: Clock, host_id: str | None, *, window_s: int) -> None:
        self.store = store
        self.clock = clock
        self.host_id = host_id
        self.window_s = check_window(window_s)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(store={self.store!r}, host_id={self.host_id!r}, "
            f"window_s={self.window_s!r})"
        )

    def __call__(self, kind: str, fields: Mapping[str, Any]) -> bool:
        """Keep one alert (counted into its window's alert when its kind is counted); never raises.

        Args:
            kind: The alert's name (``order_gave_up``, ...).
            fields: Its structured fields, as given to :func:`orderflow.telemetry.alert`.

        Returns:
            True if the document was written, False if the write failed (logged).
        """
        try:
            at = self.clock.now()
            doc = alert_doc(kind, fields, at=at, host=self.host_id)
            source = counted_source(kind, fields)
            if source is None:
                self.store.add(doc)
            else:
                start = window_start(at, self.window_s)
                count_alert(self.store, doc.model_copy(update={"id": counted_alert_id(kind, source, start)}))
        except Exception as exc:
            logger.warning("alert %s not kept in the alerts store: %s: %s", kind, type(exc).__name__, exc)
            return False
        return True
