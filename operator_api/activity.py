"""``GET /api/operator/activity``: what happened over a window of time, in equal buckets, for the
dashboard's charts (docs/operator-api.md, "Activity over time").

Each series is counted from what orderflow stores, read in bounded page loops
(:class:`orderflow.stores.paging.PageBudget`):

- **alerts**: the alerts container's alerts raised in the window, by ``at`` and ``kind`` (one day's
  partition per page, newest first; the composite index ``(kind, at DESC)``);
- **recoveries**, **gave up**, **sweeps** and the **stuck-orders** gauge: the supervisor's per-minute
  tallies (:class:`orderflow.alerts.SweepTallyDoc`, kind ``supervisor_tally``), at most one document a
  minute, whatever the sweep cadence; the gauge of a bucket is the largest count a sweep in it found;
- **dead letters**: the dead letters still held on the deployment's queues, by when they were
  dead-lettered. A replay or a purge removes a dead letter from its queue, and so from the chart.

Buckets are half-open: bucket ``i`` holds what happened at ``since + i*bucketS`` or later and before
``since + (i+1)*bucketS``. A tally is a whole minute and buckets are whole minutes on whole-minute
edges, so a minute is never split between two buckets.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from operator_api.deadletters import deployment_queues
from operator_api.schemas import ActivityAnswer, ActivityBucket, ActivityCompleteness
from orderflow.alerts import NOT_ALERTS, TALLY_KIND, TALLY_S, SweepTallyDoc
from orderflow.errors import InvalidMessage
from orderflow.queues.base import MAX_DEAD_LETTER_SCAN, DeadLetterQueues
from orderflow.records import QUERY_TIME_FORMAT, parse_query_time, parse_utc
from orderflow.settings import Clients, Queues
from orderflow.stores.base import AlertQuery, AlertStore, Page
from orderflow.stores.paging import PageBudget, PageLimits

T = TypeVar("T")

ACTIVITY_PARAMETERS = ("since", "bucketS", "buckets")
DEFAULT_BUCKET_S = 300
DEFAULT_BUCKETS = 12
"""The default window: the last hour in five-minute buckets (the bucket holding now is the last)."""
MIN_BUCKET_S = TALLY_S
MAX_BUCKET_S = 3600
MAX_BUCKETS = 288
MAX_WINDOW_S = 24 * 3600
"""Longest window: the tallies are kept a little longer (:data:`orderflow.alerts.TALLY_TTL_S`)."""

PAGE_SIZE = 100
DEAD_LETTER_PAGE = MAX_DEAD_LETTER_SCAN
"""A queue's dead letters in one page where the transport allows: a Storage queue longer than 32 is read
by receiving it, once per page call, so one call rather than several."""
SERIES_LIMITS = PageLimits(max_pages=30, max_empty_pages=10, max_s=5.0)
"""The bound of each series' loop: 30 pages of 100 (a day's 1,440 tallies take 15), 5 seconds."""
DEAD_LETTER_LIMITS = PageLimits(max_pages=60, max_empty_pages=10, max_s=5.0)
"""The bound of the dead-letter loop over every queue (each queue at most ``MAX_DEAD_LETTER_SCAN``)."""


@dataclass(frozen=True)
class Window:
    """``buckets`` buckets of ``bucket_s`` seconds from ``since`` (UTC), each half-open."""

    since: datetime
    bucket_s: int
    buckets: int

    @property
    def until(self) -> datetime:
        """The window's end, excluded."""
        return self.since + timedelta(seconds=self.bucket_s * self.buckets)

    def starts(self) -> list[datetime]:
        """Each bucket's start, oldest first."""
        return [self.since + timedelta(seconds=self.bucket_s * i) for i in range(self.buckets)]

    def index(self, at: datetime) -> int | None:
        """The bucket ``at`` falls in, or None outside ``[since, until)``."""
        if at < self.since or at >= self.until:
            return None
        return (at - self.since) // timedelta(seconds=self.bucket_s)


def bucket_counts(window: Window, times: Iterable[datetime]) -> list[int]:
    """How many of ``times`` fall in each bucket of ``window``; times outside it are not counted."""
    counts = [0] * window.buckets
    for at in times:
        index = window.index(at)
        if index is not None:
            counts[index] += 1
    return counts


def _invalid(name: str, detail: str) -> InvalidMessage:
    return InvalidMessage("InvalidValue", f"{name}: {detail}")


def _whole(params: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    text = params.get(name)
    if text is None:
        return default
    if not text.isascii() or not text.isdigit() or not low <= int(text) <= high:
        raise _invalid(name, f"a whole number from {low} to {high}")
    return int(text)


def activity_window(params: Mapping[str, str], *, now: datetime) -> Window:
    """The window a request asks for.

    Args:
        params: ``bucketS`` (seconds, a multiple of 60 from 60 to 3600; default 300), ``buckets`` (1 ..
            288, and ``bucketS * buckets`` at most 24 h; default 12), ``since`` (ISO 8601 with a zone, a
            whole minute; default: the window whose last bucket holds ``now``, on edges that are
            multiples of ``bucketS`` since the epoch).
        now: The time the default window ends around (UTC).

    Raises:
        InvalidMessage: ``UnexpectedField`` for another parameter, ``InvalidValue`` for a bad value.
    """
    unexpected = sorted(set(params) - set(ACTIVITY_PARAMETERS))
    if unexpected:
        raise InvalidMessage("UnexpectedField", f"unknown query parameter {unexpected[0]!r}")
    bucket_s = _whole(params, "bucketS", DEFAULT_BUCKET_S, MIN_BUCKET_S, MAX_BUCKET_S)
    if bucket_s % TALLY_S:
        raise _invalid("bucketS", f"a multiple of {TALLY_S}")
    buckets = _whole(params, "buckets", DEFAULT_BUCKETS, 1, MAX_BUCKETS)
    if bucket_s * buckets > MAX_WINDOW_S:
        raise _invalid("buckets", f"bucketS * buckets at most {MAX_WINDOW_S} s")
    if not params.get("since"):
        epoch_s = int(now.timestamp())
        last = datetime.fromtimestamp(epoch_s - epoch_s % bucket_s, UTC)
        return Window(last - timedelta(seconds=bucket_s * (buckets - 1)), bucket_s, buckets)
    try:
        since = parse_query_time(params["since"])
    except ValueError:
        raise _invalid("since", QUERY_TIME_FORMAT) from None
    if since.second or since.microsecond:
        raise _invalid("since", "a whole minute")
    return Window(since, bucket_s, buckets)


def _pages(fetch: Callable[[str | None], Page[T]], budget: PageBudget) -> Iterator[T]:
    """The items of every page ``fetch`` answers, following its tokens while ``budget`` allows."""
    token: str | None = None
    while budget.allows_another():
        page = fetch(token)
        budget.record(page)
        yield from page.items
        token = page.continuation
        if token is None:
            return


@dataclass
class _Series:
    alerts: list[int]
    by_kind: list[dict[str, int]]
    recoveries: list[int]
    gave_up: list[int]
    sweeps: list[int]
    stuck: list[int | None]
    dead_letters: list[int] | None = None
    complete: dict[str, bool] = field(default_factory=dict)


def _alert_series(store: AlertStore, window: Window, series: _Series) -> None:
    query = AlertQuery(exclude_kinds=NOT_ALERTS, since=window.since)
    budget = PageBudget("activity.alerts", SERIES_LIMITS)
    pages = _pages(lambda t: store.list_documents(query, max_item_count=PAGE_SIZE, continuation=t), budget)
    for doc in pages:
        index = window.index(parse_utc(str(doc["at"])))
        if index is not None:
            # A counted alert keeps no time of its occurrences between its first and its last: all of
            # them are put in the bucket of its last.
            stored = doc.get("count")
            count = stored if isinstance(stored, int) and stored >= 1 else 1
            series.alerts[index] += count
            kind = str(doc.get("kind"))
            series.by_kind[index][kind] = series.by_kind[index].get(kind, 0) + count
    series.complete["alerts"] = budget.stopped is None


def _sweep_series(store: AlertStore, window: Window, series: _Series) -> None:
    query = AlertQuery(kind=TALLY_KIND, since=window.since)
    budget = PageBudget("activity.sweeps", SERIES_LIMITS)
    pages = _pages(lambda t: store.list_documents(query, max_item_count=PAGE_SIZE, continuation=t), budget)
    for doc in pages:
        tally = SweepTallyDoc.from_stored(doc)
        index = window.index(tally.at)
        if index is None:
            continue
        series.recoveries[index] += tally.recovered
        series.gave_up[index] += tally.gave_up
        series.sweeps[index] += tally.sweeps
        before = series.stuck[index]
        series.stuck[index] = tally.stuck_max if before is None else max(before, tally.stuck_max)
    series.complete["sweeps"] = budget.stopped is None


def _dead_letter_series(
    dead_letters: DeadLetterQueues, clients: Clients, queue_names: Queues, window: Window, series: _Series
) -> None:
    budget = PageBudget("activity.dead_letters", DEAD_LETTER_LIMITS)
    counts = [0] * window.buckets
    complete = True
    for queue in deployment_queues(clients, queue_names):

        def fetch(token: str | None, name: str = queue.name) -> Page[Any]:
            found = dead_letters.dead_letter_page(name, max_messages=DEAD_LETTER_PAGE, continuation=token)
            return Page(list(found.items), found.continuation)

        for seen, dead in enumerate(_pages(fetch, budget), start=1):
            index = window.index(dead.dead_lettered_at)
            if index is not None:
                counts[index] += 1
            if seen >= MAX_DEAD_LETTER_SCAN:
                complete = False
                break
    series.dead_letters = counts
    series.complete["deadLetters"] = complete and budget.stopped is None


def activity(
    window: Window,
    *,
    alerts: AlertStore,
    dead_letters: DeadLetterQueues | None,
    clients: Clients,
    queue_names: Queues,
) -> ActivityAnswer:
    """Every series of ``window``, bucketed.

    Args:
        window: From :func:`activity_window`.
        alerts: The alerts store (alerts and the sweep tallies).
        dead_letters: The dead-letter queues, or None: the dead-letter series is null.
        clients / queue_names: For the deployment's queues.

    Returns:
        The answer; ``complete`` says per series whether its loop read everything (False: the page or
        time bound, or a queue's :data:`MAX_DEAD_LETTER_SCAN`, stopped it: the counts are lower bounds).

    Raises:
        TransientError: a store or queue is unavailable.
    """
    n = window.buckets
    series = _Series([0] * n, [{} for _ in range(n)], [0] * n, [0] * n, [0] * n, [None] * n)
    _alert_series(alerts, window, series)
    _sweep_series(alerts, window, series)
    if dead_letters is not None:
        _dead_letter_series(dead_letters, clients, queue_names, window, series)
    buckets = [
        ActivityBucket(
            start=start,
            alerts=series.alerts[i],
            alerts_by_kind=series.by_kind[i],
            dead_letters=None if series.dead_letters is None else series.dead_letters[i],
            recoveries=series.recoveries[i],
            gave_up=series.gave_up[i],
            sweeps=series.sweeps[i],
            stuck_orders=series.stuck[i],
        )
        for i, start in enumerate(window.starts())
    ]
    complete = ActivityCompleteness(
        alerts=series.complete["alerts"],
        sweeps=series.complete["sweeps"],
        dead_letters=series.complete.get("deadLetters"),
    )
    return ActivityAnswer(
        since=window.since, until=window.until, bucket_s=window.bucket_s, buckets=buckets, complete=complete
    )
