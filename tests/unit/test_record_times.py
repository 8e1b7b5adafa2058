"""The stored form of a time: fixed width, UTC, and in the same order as the instants it names."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from orderflow.records import format_utc, parse_utc

AWARE = st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC))


def test_a_stored_time_is_utc_with_microseconds_and_a_z() -> None:
    moment = datetime(2026, 12, 1, 21, 5, 3, 7, tzinfo=timezone(timedelta(hours=2)))
    assert format_utc(moment) == "2026-12-01T19:05:03.000007Z"


def test_a_year_before_1000_keeps_four_digits() -> None:
    # strftime's %Y drops the zeros there, which broke both the width and the order.
    assert format_utc(datetime(1, 1, 1, tzinfo=UTC)) == "0001-01-01T00:00:00.000000Z"
    assert format_utc(datetime(999, 12, 31, 23, 59, tzinfo=UTC)) < format_utc(
        datetime(1000, 1, 1, tzinfo=UTC)
    )


@given(AWARE, AWARE)
def test_stored_times_sort_as_their_instants_and_read_back_equal(a: datetime, b: datetime) -> None:
    left, right = format_utc(a), format_utc(b)
    assert len(left) == len(right) == 27
    assert (left < right) == (a < b)
    assert parse_utc(left) == a
