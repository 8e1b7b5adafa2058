"""The dashboard's charts over time in headless Chromium, against a real devhost system: alerts and
supervisor sweeps stored at known times in the last hour, a malformed message the intake dead-letters
now, and the live supervisor's own sweeps. Each chart's buckets (their ``data-start`` and ``data-value``)
must be what was stored, bucket by bucket, and what ``GET activity`` answers for the same window.
Screenshots go to ``.test-artifacts/``.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from orderflow.alerts import alert_doc, minute_of
from supervisor.status import record_sweep, sweep_doc
from supervisor.sweep import SweepReport
from tests.browser.helpers import Console, running_console, shoot

pytestmark = pytest.mark.browser

ALERTS = [(50, "order_gave_up"), (50, "order_gave_up"), (31, "breaker_open"), (12, "max_delivery_count")]
"""Alerts stored (minutes before the test's start, kind)."""
SWEEPS = [(44, 2, 3), (44, 1, 6), (23, 4, 1)]
"""Sweeps recorded (minutes before the test's start, orders re-queued, stuck orders found)."""


@pytest.fixture(scope="module")
def console() -> Iterator[Console]:
    with running_console() as console:
        yield console


def parse(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def shown(page: Any, test_id: str) -> dict[str, str]:
    """The chart's buckets as the page has them: {data-start: data-value}."""
    bars = page.locator(f"[data-testid={test_id}] g[data-start]")
    return {bar.get_attribute("data-start"): bar.get_attribute("data-value") for bar in bars.all()}


def expected(since: datetime, bucket_s: int, buckets: int, events: list[tuple[datetime, int]]) -> list[int]:
    """The count of each bucket ``[since + i*bucket_s, since + (i+1)*bucket_s)`` of weighted events."""
    counts = [0] * buckets
    for at, weight in events:
        index = (at - since) // timedelta(seconds=bucket_s)
        if 0 <= index < buckets:
            counts[index] += weight
    return counts


def test_the_charts_over_time_show_what_was_stored_bucket_by_bucket(
    page: Any, console: Console, artifacts: Path
) -> None:
    system = console.system
    alerts = system.deps.alerts
    assert alerts is not None
    start = datetime.now(UTC)
    for minutes, kind in ALERTS:
        at = start - timedelta(minutes=minutes)
        alerts.add(
            alert_doc(kind, {"order_id": system.key("tpch-1"), "reason": "test"}, at=at, host="h-test")
        )
    for minutes, recovered, stuck in SWEEPS:
        at = start - timedelta(minutes=minutes)
        report = SweepReport(scanned=stuck, requeued=[f"r-{n}" for n in range(recovered)])
        record_sweep(alerts, sweep_doc(report, started=at, ended=at, host_id="h-test", leadership="lease"))
    inbound = system.client.orders_queue
    system.deps.queues.queue(inbound).send("{not json", message_id="broken-1")  # the intake dead-letters it
    dead_letters = system.deps.dead_letters
    assert dead_letters is not None
    system.wait_until(lambda: len(dead_letters.dead_letter_page(inbound).items) == 1, timeout_s=15)
    [dead] = dead_letters.dead_letter_page(inbound).items

    page.goto(f"{console.url}#/")
    page.reload()  # signing in showed the dashboard before any of this was stored
    page.wait_for_selector("[data-testid=chart-recoveries-over-time] g[data-start]")
    activity = page.locator("[data-testid=activity]")
    since = parse(str(activity.get_attribute("data-since")))
    assert parse(str(activity.get_attribute("data-until"))) - since == timedelta(hours=1)
    starts = [since + timedelta(minutes=5 * i) for i in range(12)]
    iso = [s.strftime("%Y-%m-%dT%H:%M:%SZ") for s in starts]

    def values(test_id: str) -> list[str]:
        bars = shown(page, test_id)
        assert list(bars) == iso
        return list(bars.values())

    stored_alerts = [(start - timedelta(minutes=m), 1) for m, _ in ALERTS]
    assert values("chart-alerts-over-time") == [str(n) for n in expected(since, 300, 12, stored_alerts)]
    recoveries = [(minute_of(start - timedelta(minutes=m)), r) for m, r, _ in SWEEPS]
    assert values("chart-recoveries-over-time") == [str(n) for n in expected(since, 300, 12, recoveries)]
    assert values("chart-dead-letters-over-time") == [
        str(n) for n in expected(since, 300, 12, [(dead.dead_lettered_at, 1)])
    ]
    stuck_shown = values("chart-stuck-over-time")
    for minutes, largest in ((44, "6"), (23, "1")):
        assert stuck_shown[(start - timedelta(minutes=minutes) - since) // timedelta(minutes=5)] == largest
    assert stuck_shown[0] == "none"  # no sweep tallied then: not known, not zero

    # The API says the same of the same window.
    answer = console.api("GET", f"activity?since={iso[0]}&bucketS=300&buckets=12").json()
    assert [str(b["alerts"]) for b in answer["buckets"]] == values("chart-alerts-over-time")
    assert [str(b["recoveries"]) for b in answer["buckets"]] == values("chart-recoveries-over-time")
    assert [str(b["deadLetters"]) for b in answer["buckets"]] == values("chart-dead-letters-over-time")
    live_stuck = ["none" if b["stuckOrders"] is None else str(b["stuckOrders"]) for b in answer["buckets"]]
    assert live_stuck[:-1] == stuck_shown[:-1]  # the last bucket is the live supervisor's, still sweeping

    # The text alternatives: the figure's summary and the table under its disclosure.
    chart = page.locator("[data-testid=chart-recoveries-over-time]")
    assert "7 in all" in chart.locator("svg").get_attribute("aria-label")
    chart.locator("summary").click()
    rows = chart.locator("table tbody tr").all_inner_texts()
    assert len(rows) == 12 and all(" UTC" in row for row in rows)
    shoot(page, artifacts, "dashboard-activity")

    page.click("[data-window='24h']")
    page.wait_for_selector("[data-testid=chart-alerts-over-time][data-bucket-s='3600']")
    day = shown(page, "chart-alerts-over-time")
    assert len(day) == 24 and sum(int(v) for v in day.values()) == len(ALERTS)
    assert sum(int(v) for v in shown(page, "chart-recoveries-over-time").values()) == 7
    shoot(page, artifacts, "dashboard-activity-24h")
