"""The sink that keeps every alert raised in a process in the alerts store, best effort.

A host builds one :class:`AlertSink` over its :class:`~orderflow.stores.base.AlertStore` and installs it
with :func:`orderflow.telemetry.use_alert_sink`; from then on :func:`orderflow.telemetry.alert` hands it
each alert after logging it. A write that fails is logged (a warning on ``orderflow.alert_sink``) and
never raised: an alert is raised where something already went wrong, and keeping it must not make that
worse. The alert's log record and metric stay the authoritative copy.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from orderflow.alerts import alert_doc
from orderflow.clock import Clock
from orderflow.stores.base import AlertStore

logger = logging.getLogger(__name__)


class AlertSink:
    """Writes alerts to ``store`` as :class:`~orderflow.alerts.AlertDoc` documents.

    Args:
        store: The alerts store.
        clock: The time of each alert (UTC).
        host_id: This process's host id, kept as the alert's ``host``.
    """

    def __init__(self, store: AlertStore, clock: Clock, host_id: str | None) -> None:
        self.store = store
        self.clock = clock
        self.host_id = host_id

    def __repr__(self) -> str:
        return f"{type(self).__name__}(store={self.store!r}, host_id={self.host_id!r})"

    def __call__(self, kind: str, fields: Mapping[str, Any]) -> bool:
        """Keep one alert; never raises.

        Args:
            kind: The alert's name (``order_gave_up``, ...).
            fields: Its structured fields, as given to :func:`orderflow.telemetry.alert`.

        Returns:
            True if the document was written, False if the write failed (logged).
        """
        try:
            self.store.add(alert_doc(kind, fields, at=self.clock.now(), host=self.host_id))
        except Exception as exc:
            logger.warning("alert %s not kept in the alerts store: %s: %s", kind, type(exc).__name__, exc)
            return False
        return True
