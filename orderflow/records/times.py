"""UTC times as the stores keep them: one fixed-width ISO 8601 form that compares as text, and the
bounds of a time a caller may query by."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from pydantic import AfterValidator, PlainSerializer


def ensure_utc(value: datetime) -> datetime:
    """``value`` in UTC.

    Raises:
        ValueError: it has no zone, or its UTC is off the calendar.
    """
    if value.tzinfo is None:
        raise ValueError("datetimes must be timezone-aware (UTC)")
    try:
        return value.astimezone(UTC)
    except OverflowError:  # 0001-01-01T00:00+01:00 is before the first instant a datetime holds
        raise ValueError(f"{value.isoformat()} is out of range in UTC") from None


def format_utc(value: datetime) -> str:
    """Format an aware datetime as the fixed-width UTC string the stores compare lexicographically:
    ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` (a four-digit year even before 1000, where ``strftime`` drops the
    zeros)."""
    return ensure_utc(value).replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def parse_utc(text: str) -> datetime:
    """Parse an ISO 8601 time (``Z`` or offset) into an aware UTC datetime.

    Raises:
        ValueError: not such a time, one without a zone, or one whose UTC is off the calendar
            (``0001-01-01T00:00:00+23:59``).
    """
    return ensure_utc(datetime.fromisoformat(text.replace("Z", "+00:00")))


EARLIEST_TIME = datetime(1970, 1, 1, tzinfo=UTC)
"""The earliest time a query parameter may name (:func:`parse_query_time`): the epoch."""
LATEST_TIME = datetime(9999, 1, 1, tzinfo=UTC)
"""The first time a query parameter may no longer name: a window or a day range a year long still ends
on the calendar (the last instant a datetime holds is in 9999)."""


QUERY_TIME_FORMAT = "an ISO 8601 time with a zone (2026-03-01T12:00:00Z), from 1970-01-01 up to 9999-01-01"
"""What :func:`parse_query_time` takes, in the words of a refusal."""


def parse_query_time(text: str) -> datetime:
    """:func:`parse_utc` of a time a caller gives to select by (``since``, ``failedSince``), from
    :data:`EARLIEST_TIME` up to (not including) :data:`LATEST_TIME`, so that what is computed from it
    (a window's end, the stores' fixed-width strings, the day partitions) stays on the calendar.

    Raises:
        ValueError: as :func:`parse_utc`, or out of that range.
    """
    moment = parse_utc(text)
    if not EARLIEST_TIME <= moment < LATEST_TIME:
        raise ValueError("out of range: from 1970-01-01T00:00:00Z up to 9999-01-01T00:00:00Z")
    return moment


UtcDatetime = Annotated[
    datetime,
    AfterValidator(ensure_utc),
    PlainSerializer(format_utc, return_type=str, when_used="json"),
]
"""An aware UTC datetime that serialises as ``YYYY-MM-DDTHH:MM:SS.ffffffZ``."""
