"""The supervisor's status document: one write per sweep, best effort.

At the end of each sweep the host that ran it writes a :class:`orderflow.alerts.SweepDoc` to the alerts
store: what the sweep scanned, recovered, gave up and held, the stuck-orders count, when, on which host
and under which leadership (a lease locally, the timer's singleton on Azure). ``GET
/api/operator/supervisor`` reads the latest of them. The same sweep is added to the tally of its minute
(:class:`orderflow.alerts.SweepTallyDoc`, an ETag-conditional read-modify-write), which ``GET
/api/operator/activity`` charts. A failed write is logged and never raised: the sweep's work is done and
recorded on the orders themselves.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Literal

from orderflow.alerts import SweepDoc, day_of, new_id, tallied
from orderflow.errors import ConcurrencyConflict
from orderflow.stores.base import AlertStore, merge_conditionally
from supervisor.sweep import SweepReport

logger = logging.getLogger(__name__)


def sweep_doc(
    report: SweepReport,
    *,
    started: datetime,
    ended: datetime,
    host_id: str,
    leadership: Literal["lease", "timer"],
) -> SweepDoc:
    """The status document of one sweep.

    Args:
        report: What the sweep did.
        started: When it began (UTC).
        ended: When it ended (UTC): the document's ``at``.
        host_id: The host that ran it.
        leadership: ``lease`` or ``timer``.
    """
    return SweepDoc(
        id=new_id(),
        day=day_of(ended),
        at=ended,
        host=host_id,
        leadership=leadership,
        scanned=report.scanned,
        recovered=len(report.requeued),
        gave_up=len(report.gave_up),
        held=len(report.held),
        stuck=report.scanned - report.skipped,
        duration_s=round(max(0.0, (ended - started).total_seconds()), 3),
        complete=report.scan_complete,
    )


TALLY_ATTEMPTS = 3
"""Tries of a tally's read-modify-write when another writer moved it (a new leader's first sweep)."""


def record_sweep(store: AlertStore | None, doc: SweepDoc) -> bool:
    """Write one sweep's status document and add it to its minute's tally; never raises.

    Args:
        store: The alerts store, or None (a host wired without one: nothing is written).
        doc: From :func:`sweep_doc`.

    Returns:
        True if written; False if there is no store or the write failed (a warning is logged).
    """
    if store is None:
        return False
    try:
        store.add(doc)
    except Exception as exc:
        logger.warning("sweep status of %s not written: %s: %s", doc.host, type(exc).__name__, exc)
        return False
    tally_sweep(store, doc)
    return True


def tally_sweep(store: AlertStore, doc: SweepDoc) -> bool:
    """Add one sweep to the tally of the minute it ended in; never raises.

    Read the tally, add, write it back conditionally (create if absent, else If-Match its ETag); on a
    conflict read again, :data:`TALLY_ATTEMPTS` times at most.

    Returns:
        True if added; False if it kept conflicting or a write failed (a warning is logged).
    """
    try:
        merge_conditionally(
            lambda: store.get_tally(doc.at),
            lambda tally, etag: store.put_tally(tally, etag=etag),
            lambda found: tallied(found, doc),
            attempts=TALLY_ATTEMPTS,
            what=f"sweep tally of {doc.host}",
        )
    except ConcurrencyConflict:
        logger.warning("sweep tally of %s not written: it kept changing", doc.host)
        return False
    except Exception as exc:
        logger.warning("sweep tally of %s not written: %s: %s", doc.host, type(exc).__name__, exc)
        return False
    return True
