"""Activity over time (operator_api.activity, ``GET /api/operator/activity``): the bucketing as a property,
the window a request asks for, the sweep tallies, and the route over the in-memory stores and queues."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from operator_api import activity as activity_module
from operator_api.activity import MAX_WINDOW_S, Window, activity_window, bucket_counts
from operator_api.answers import OperatorResponse
from operator_api.handler import handle_operator_request
from operator_api.routing import OperatorApiSections
from orderflow.alerts import SweepDoc, SweepTallyDoc, alert_doc, minute_of, tallied
from orderflow.clock import FakeClock
from orderflow.errors import ConcurrencyConflict, InvalidMessage
from orderflow.operator_auth import OPERATOR_ROLE, REVIEWER_ROLE
from orderflow.stores.memory import InMemoryAlertStore
from orderflow.stores.paging import PageLimits
from supervisor.status import record_sweep, sweep_doc, tally_sweep
from supervisor.sweep import SweepReport
from tests.host_deps import HostDeps
from tests.operator_tokens import TrustedIssuer
from tests.unit.fakes import TEST_CLIENT, memory_deps

pytestmark = pytest.mark.unit

EPOCH = datetime(2026, 3, 1, tzinfo=UTC)


@st.composite
def windows(draw: st.DrawFn) -> Window:
    bucket_s = 60 * draw(st.integers(1, 60))
    buckets = draw(st.integers(1, max(1, min(40, MAX_WINDOW_S // bucket_s))))
    return Window(EPOCH + timedelta(minutes=draw(st.integers(0, 10_000))), bucket_s, buckets)


@st.composite
def window_and_times(draw: st.DrawFn) -> tuple[Window, list[datetime]]:
    window = draw(windows())
    span = int((window.until - window.since).total_seconds())
    offsets = st.one_of(
        st.integers(-span, 2 * span).map(lambda s: timedelta(seconds=s)),
        st.floats(-span, 2 * span, allow_nan=False).map(lambda s: timedelta(seconds=s)),
        st.integers(0, window.buckets).map(lambda i: timedelta(seconds=i * window.bucket_s)),  # the edges
        st.integers(1, window.buckets).map(lambda i: timedelta(seconds=i * window.bucket_s, microseconds=-1)),
    )
    return window, [window.since + offset for offset in draw(st.lists(offsets, max_size=60))]


@given(window_and_times())
@settings(max_examples=300, deadline=None)
def test_counts_per_bucket_sum_to_the_events_in_the_window_and_edges_are_half_open(
    case: tuple[Window, list[datetime]],
) -> None:
    window, times = case
    counts = bucket_counts(window, times)

    inside = [t for t in times if window.since <= t < window.until]
    assert len(counts) == window.buckets and sum(counts) == len(inside)
    for i, start in enumerate(window.starts()):
        end = start + timedelta(seconds=window.bucket_s)
        assert counts[i] == sum(1 for t in times if start <= t < end)
    assert bucket_counts(window, [window.until]) == [0] * window.buckets  # the end is excluded
    assert bucket_counts(window, [window.since])[0] == 1  # the start is included
    last_instant = window.until - timedelta(microseconds=1)
    assert bucket_counts(window, [last_instant])[-1] == 1


def test_the_default_window_ends_with_the_bucket_that_holds_now() -> None:
    now = datetime(2026, 3, 1, 12, 34, 56, tzinfo=UTC)

    hour = activity_window({}, now=now)
    assert (hour.since, hour.bucket_s, hour.buckets) == (datetime(2026, 3, 1, 11, 35, tzinfo=UTC), 300, 12)
    assert hour.index(now) == 11 and hour.until == datetime(2026, 3, 1, 12, 35, tzinfo=UTC)
    day = activity_window({"bucketS": "3600", "buckets": "24"}, now=now)
    assert (day.since, day.until) == (
        datetime(2026, 2, 28, 13, tzinfo=UTC),
        datetime(2026, 3, 1, 13, tzinfo=UTC),
    )
    given_since = activity_window(
        {"since": "2026-03-01T10:00:00+01:00", "bucketS": "60", "buckets": "5"}, now=now
    )
    assert given_since == Window(datetime(2026, 3, 1, 9, tzinfo=UTC), 60, 5)


@pytest.mark.parametrize(
    ("params", "reason"),
    [
        ({"bucketS": "90"}, "InvalidValue"),  # not whole minutes
        ({"bucketS": "30"}, "InvalidValue"),
        ({"bucketS": "7200"}, "InvalidValue"),
        ({"bucketS": "3600", "buckets": "25"}, "InvalidValue"),  # over 24 h
        ({"buckets": "0"}, "InvalidValue"),
        ({"since": "2026-03-01T10:00:30Z"}, "InvalidValue"),  # not a whole minute
        ({"since": "2026-03-01T10:00:00"}, "InvalidValue"),  # no zone
        ({"since": "yesterday"}, "InvalidValue"),
        ({"until": "2026-03-01T10:00:00Z"}, "UnexpectedField"),
    ],
)
def test_a_window_out_of_bounds_is_refused(params: dict[str, str], reason: str) -> None:
    with pytest.raises(InvalidMessage) as refused:
        activity_window(params, now=EPOCH)
    assert refused.value.reason == reason


def sweep(
    at: datetime, *, recovered: int = 0, gave_up: int = 0, stuck: int = 0, host: str = "h1"
) -> SweepDoc:
    report = SweepReport(
        scanned=stuck,
        requeued=[f"a:r-{n}" for n in range(recovered)],
        gave_up=[f"a:g-{n}" for n in range(gave_up)],
    )
    return sweep_doc(report, started=at, ended=at, host_id=host, leadership="lease")


@given(st.lists(st.tuples(st.integers(0, 59), st.integers(0, 5), st.integers(0, 9)), min_size=1, max_size=20))
def test_a_minutes_tally_adds_up_its_sweeps(sweeps: list[tuple[int, int, int]]) -> None:
    tally: SweepTallyDoc | None = None
    for second, recovered, stuck in sweeps:
        tally = tallied(tally, sweep(EPOCH + timedelta(seconds=second), recovered=recovered, stuck=stuck))
    assert tally is not None
    assert (tally.at, tally.id, tally.sweeps) == (EPOCH, "tally-20260301T0000", len(sweeps))
    assert tally.recovered == sum(r for _, r, _ in sweeps)
    assert tally.stuck_max == max(s for _, _, s in sweeps)
    latest = max(range(len(sweeps)), key=lambda i: (sweeps[i][0], i))
    assert tally.stuck_last == sweeps[latest][2]
    with pytest.raises(ValueError, match="not in the tally"):
        tallied(tally, sweep(EPOCH + timedelta(minutes=1)))


class RacedAlerts(InMemoryAlertStore):
    """Another supervisor adds a sweep between this one's read and write, ``races`` times."""

    def __init__(self, races: int) -> None:
        super().__init__(clock=FakeClock(EPOCH))
        self.races = races

    def put_tally(self, doc: SweepTallyDoc, *, etag: str | None) -> None:
        if self.races:
            self.races -= 1
            found = self.get_tally(doc.at)
            raced = tallied(None if found is None else found.item, sweep(doc.at, recovered=10))
            super().put_tally(raced, etag=None if found is None else found.etag)
        super().put_tally(doc, etag=etag)


def test_a_tally_write_that_lost_a_race_reads_again_and_keeps_both_sweeps() -> None:
    store = RacedAlerts(races=2)
    assert tally_sweep(store, sweep(EPOCH, recovered=1))
    found = store.get_tally(EPOCH)
    assert found is not None
    assert (found.item.sweeps, found.item.recovered) == (3, 21)  # two raced sweeps of 10, then ours


class AlwaysRaced(InMemoryAlertStore):
    def put_tally(self, doc: SweepTallyDoc, *, etag: str | None) -> None:
        raise ConcurrencyConflict("moved (412)")


def test_a_tally_that_keeps_changing_is_given_up_with_a_warning_and_the_sweep_document_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = AlwaysRaced(clock=FakeClock(EPOCH))
    assert record_sweep(store, sweep(EPOCH, recovered=1)) is True
    assert store.get_tally(EPOCH) is None
    assert "sweep tally of h1 not written: it kept changing" in caplog.text


def call(deps: HostDeps, trusted: TrustedIssuer, query: str, *roles: str) -> OperatorResponse:
    headers = trusted.bearer("otto", *(roles or (OPERATOR_ROLE,)))
    return handle_operator_request(
        "GET",
        "/api/operator/activity",
        headers,
        b"",
        deps=deps,
        sections=OperatorApiSections.of(deps.settings),
        validator=trusted.validator,
        query=query,
    )


def dead_letter(deps: HostDeps, n: int) -> None:
    inbound = deps.queues.queue(TEST_CLIENT.inbound_queue)
    inbound.send(json.dumps({"orderId": f"o-{n}"}), message_id=f"m-{n}")
    [message] = inbound.receive()
    inbound.dead_letter(message, reason="InvalidMessage", description="for the chart")


def test_the_route_buckets_alerts_tallies_and_dead_letters_as_stored(trusted: TrustedIssuer) -> None:
    # The in-memory queues stamp dead letters with the machine's time: the window is around it.
    now = minute_of(datetime.now(UTC))
    deps = memory_deps(FakeClock(now))
    assert deps.alerts is not None
    since = now - timedelta(minutes=9)
    kinds = [(0, "order_gave_up"), (0, "breaker_open"), (4, "order_gave_up"), (9, "max_delivery_count")]
    for minute, kind in [*kinds, (-1, "order_gave_up"), (12, "order_gave_up")]:  # the last two outside
        deps.alerts.add(
            alert_doc(kind, {"order_id": "a:o-1"}, at=since + timedelta(minutes=minute, seconds=5), host="h1")
        )
    # A counted alert (one client's conflicting orders, three of them) adds its count at its last time.
    conflicts = alert_doc("conflicting_order", {"client_id": "a"}, at=since + timedelta(minutes=7), host="h1")
    deps.alerts.add(conflicts.model_copy(update={"count": 3, "first_seen": since}))
    for minute, recovered, stuck in [(0, 2, 3), (0, 1, 5), (3, 4, 1), (-2, 7, 9)]:
        record_sweep(
            deps.alerts,
            sweep(since + timedelta(minutes=minute, seconds=30), recovered=recovered, stuck=stuck),
        )
    dead_letter(deps, 1)
    dead_letter(deps, 2)

    answer = call(deps, trusted, f"since={iso(since)}&bucketS=180&buckets=4")

    assert answer.status == 200
    body: dict[str, Any] = answer.body
    assert (body["bucketS"], body["since"], body["until"]) == (
        180,
        iso(since),
        iso(since + timedelta(minutes=12)),
    )
    buckets = body["buckets"]
    assert [b["start"] for b in buckets] == [iso(since + timedelta(minutes=3 * i)) for i in range(4)]
    assert [b["alerts"] for b in buckets] == [2, 1, 3, 1]
    assert buckets[0]["alertsByKind"] == {"order_gave_up": 1, "breaker_open": 1}
    assert buckets[2]["alertsByKind"] == {"conflicting_order": 3}
    assert buckets[3]["alertsByKind"] == {"max_delivery_count": 1}
    assert [b["recoveries"] for b in buckets] == [3, 4, 0, 0]
    assert [b["sweeps"] for b in buckets] == [2, 1, 0, 0]
    assert [b["stuckOrders"] for b in buckets] == [5, 1, None, None]
    assert [b["deadLetters"] for b in buckets] == [0, 0, 0, 2]  # dead-lettered now: the last bucket
    assert body["complete"] == {"alerts": True, "sweeps": True, "deadLetters": True}

    # A purge takes the dead letter off its queue, and so off the chart; the alerts stay.
    assert deps.dead_letters is not None
    deps.dead_letters.remove_dead_letters(TEST_CLIENT.inbound_queue, lambda d: d.message_id == "m-1")
    after = call(deps, trusted, f"since={iso(since)}&bucketS=180&buckets=4", REVIEWER_ROLE).body
    assert [b["deadLetters"] for b in after["buckets"]] == [0, 0, 0, 1]
    assert [b["alerts"] for b in after["buckets"]] == [2, 1, 3, 1]


def iso(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_the_route_refuses_without_a_token_and_a_bad_window_and_answers_503_without_a_store(
    trusted: TrustedIssuer,
) -> None:
    deps = memory_deps(FakeClock())
    unauthenticated = handle_operator_request(
        "GET",
        "/api/operator/activity",
        {},
        b"",
        deps=deps,
        sections=OperatorApiSections.of(deps.settings),
        validator=trusted.validator,
    )
    assert unauthenticated.status == 401
    assert call(deps, trusted, "bucketS=61").body["error"]["code"] == "InvalidValue"
    deps.alerts = None
    assert call(deps, trusted, "").status == 503


def test_a_series_its_page_bound_stopped_is_marked_incomplete_and_counts_what_was_read(
    trusted: TrustedIssuer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        activity_module, "SERIES_LIMITS", PageLimits(max_pages=2, max_empty_pages=2, max_s=5.0)
    )
    deps = memory_deps(FakeClock(EPOCH + timedelta(minutes=30)))
    assert deps.alerts is not None
    for n in range(250):
        deps.alerts.add(
            alert_doc("breaker_open", {"dependency": "d"}, at=EPOCH + timedelta(seconds=n), host="h")
        )

    body = call(deps, trusted, f"since={iso(EPOCH)}&bucketS=600&buckets=3").body

    assert [b["alerts"] for b in body["buckets"]] == [200, 0, 0]  # two pages of 100, newest first
    assert body["complete"] == {"alerts": False, "sweeps": True, "deadLetters": True}


def test_a_token_with_neither_app_role_reads_no_activity(trusted: TrustedIssuer) -> None:
    deps = memory_deps(FakeClock())

    refused = call(deps, trusted, "", "orderflow.unknown")

    assert (refused.status, refused.body["error"]["code"]) == (403, "Forbidden")
