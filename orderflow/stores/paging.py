"""Bounds of a loop over query pages: pages, time and empty pages, beside the loop's own record bound.

A record bound alone does not end a loop whose store keeps answering pages with nothing on them: each
page carries a new continuation token, so no token repeats, and no record is ever counted. Cosmos DB
does return empty pages with a token in cross-partition queries (a partition range with nothing to
match), so a few are normal; an endless run of them is an anomaly. Every scanning loop (the
supervisor's sweep, the starter, the reply relay, retention) therefore reads its pages through a
:class:`PageBudget`, which says when to stop: after ``SCAN_MAX_PAGES`` pages, after ``SCAN_MAX_S``
seconds, or after ``SCAN_MAX_EMPTY_PAGES`` empty pages in a row, which is also logged and counted in
the ``orderflow.scan_anomalies`` metric (event ``scan.anomaly``). The loop ends its pass there, and the
next pass starts over from its first page: a pass that resumed from the token it stopped at would follow a
store that never ends for ever (the supervisor's sweep, which otherwise resumes its scan across sweeps,
starts a new one too, and alerts: :mod:`supervisor.sweep`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from orderflow import telemetry
from orderflow.settings import Scans
from orderflow.stores.base import Page

logger = logging.getLogger(__name__)


class PageStop(StrEnum):
    """Why a :class:`PageBudget` ended a pass."""

    PAGES = "pages"
    """``max_pages`` pages were read."""
    TIME = "time"
    """``max_s`` seconds passed."""
    EMPTY_PAGES = "empty_pages"
    """``max_empty_pages`` empty pages with a token came in a row: an anomaly."""


@dataclass(frozen=True)
class PageLimits:
    """The page bounds of one pass of a scanning loop.

    Attributes:
        max_pages: Most pages one pass reads (>= 1).
        max_empty_pages: Empty pages with a token in a row that end the pass as an anomaly (>= 1).
        max_s: Most seconds one pass runs, checked before each page.
    """

    max_pages: int = 50
    max_empty_pages: int = 10
    max_s: float = 10.0

    @classmethod
    def from_scans(cls, scans: Scans) -> PageLimits:
        """``SCAN_MAX_PAGES``, ``SCAN_MAX_EMPTY_PAGES`` and ``SCAN_MAX_S``."""
        return cls(scans.SCAN_MAX_PAGES, scans.SCAN_MAX_EMPTY_PAGES, scans.SCAN_MAX_S)


class PageBudget:
    """Counts the pages one pass of a loop reads and says when the pass must stop.

    Call :meth:`allows_another` before each query and :meth:`record` with each page read.

    Args:
        loop: The loop's name, for logs and the metric (``sweep``, ``starter``, ``reply_relay``,
            ``retention``).
        limits: The bounds.
        monotonic: Seconds of a monotonic clock (tests pass their own).
    """

    def __init__(
        self, loop: str, limits: PageLimits, *, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self.loop = loop
        self.limits = limits
        self._monotonic = monotonic
        self._deadline = monotonic() + limits.max_s
        self.pages = 0
        self.empty_in_a_row = 0
        self.stopped: PageStop | None = None

    def allows_another(self) -> bool:
        """Whether the pass may read one more page; once False, :attr:`stopped` says why."""
        if self.stopped is not None:
            return False
        if self.pages >= self.limits.max_pages:
            self._stop(PageStop.PAGES)
        elif self._monotonic() >= self._deadline:
            self._stop(PageStop.TIME)
        return self.stopped is None

    def record(self, page: Page[Any]) -> None:
        """Count a page read; an empty page with a token counts towards the anomaly."""
        self.pages += 1
        if page.items or page.continuation is None:
            self.empty_in_a_row = 0
            return
        self.empty_in_a_row += 1
        if self.empty_in_a_row >= self.limits.max_empty_pages:
            self._stop(PageStop.EMPTY_PAGES)

    def _stop(self, why: PageStop) -> None:
        self.stopped = why
        if why is PageStop.EMPTY_PAGES:
            logger.warning(
                "%s: %s empty pages in a row, each with a new continuation token; ending this pass, the "
                "next one starts over",
                self.loop,
                self.empty_in_a_row,
            )
            telemetry.event("scan.anomaly", loop=self.loop, empty_pages=self.empty_in_a_row, pages=self.pages)
        else:
            logger.info(
                "%s: pass bounded by %s after %s pages; the next pass starts over", self.loop, why, self.pages
            )
