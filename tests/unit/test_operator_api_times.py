"""The operator API's time parameters at the edges of the calendar, and its answer to an unexpected
exception: a time out of range is ``400 InvalidValue``, a window past every stored day is empty, and no
request is ever answered with anything but the JSON error shape (docs/operator-api.md#status-codes)."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta, timezone
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from operator_api.answers import OperatorResponse
from operator_api.handler import handle_operator_request
from operator_api.routing import OperatorApiSections
from orderflow.clock import FakeClock
from orderflow.operator_auth import OPERATOR_ROLE, REVIEWER_ROLE
from orderflow.records import EARLIEST_TIME, LATEST_TIME, parse_query_time, parse_utc
from tests.host_deps import HostDeps
from tests.operator_tokens import TrustedIssuer
from tests.unit.fakes import memory_deps

pytestmark = pytest.mark.unit

API = "/api/operator"
TIME_PARAMETERS = [("orders", "failedSince"), ("alerts", "since"), ("activity", "since")]
"""Every time parameter of every GET route (docs/operator-api.md#routes)."""


def get(deps: HostDeps, trusted: TrustedIssuer, url: str) -> OperatorResponse:
    """``GET url`` as a reviewer (the role enough for every route with a time parameter)."""
    headers = trusted.bearer("rita", REVIEWER_ROLE)
    return handle_operator_request(
        "GET",
        url,
        headers,
        b"",
        deps=deps,
        sections=OperatorApiSections.of(deps.settings),
        validator=trusted.validator,
    )


def error_code(response: OperatorResponse) -> tuple[int, str]:
    return response.status, response.body["error"]["code"]


@pytest.mark.parametrize(
    "text", ["0001-01-01T00:00:00+23:59", "9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+00:01"]
)
def test_a_time_whose_utc_is_off_the_calendar_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError, match="out of range"):
        parse_utc(text)


def test_a_query_time_is_from_1970_up_to_9999() -> None:
    assert parse_query_time("1970-01-01T00:00:00Z") == EARLIEST_TIME
    assert parse_query_time("9998-12-31T23:59:00+00:00") < LATEST_TIME
    for text in ["1969-12-31T23:59:59Z", "9999-01-01T00:00:00Z", "0001-01-01T00:00:00Z"]:
        with pytest.raises(ValueError, match="1970"):
            parse_query_time(text)


@pytest.mark.parametrize(
    "url",
    [
        "/activity?since=9999-12-31T23:59:00Z",
        "/alerts?since=9999-12-31T23:59:59Z",
        "/activity?since=0001-01-01T00:00:00%2B23:59",
        "/orders?failedSince=9999-12-31T23:59:59-23:59",
        "/alerts?since=1969-12-31T23:59:59Z",
    ],
)
def test_an_extreme_time_is_400_invalid_value_naming_the_parameter(url: str, trusted: TrustedIssuer) -> None:
    answer = get(memory_deps(FakeClock()), trusted, API + url)

    assert error_code(answer) == (400, "InvalidValue")
    assert url.split("?")[1].split("=", maxsplit=1)[0] in answer.body["error"]["message"]


def test_a_since_after_tomorrow_is_an_empty_answer(trusted: TrustedIssuer) -> None:
    answer = get(memory_deps(FakeClock()), trusted, f"{API}/alerts?since=9000-01-01T00:00:00Z")

    assert (answer.status, answer.body["alerts"], answer.body["continuation"]) == (200, [], None)


def test_an_unexpected_exception_is_logged_and_answered_500_in_the_error_shape(
    trusted: TrustedIssuer, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps = memory_deps(FakeClock())

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug somewhere below the handler")

    monkeypatch.setattr(deps.states, "query", broken)
    with caplog.at_level(logging.ERROR, logger="operator_api.handler"):
        answer = get(deps, trusted, f"{API}/orders?state=Error")

    assert error_code(answer) == (500, "InternalError")
    assert "RuntimeError" not in answer.body["error"]["message"]  # no internals in the answer
    assert json.loads(answer.content())["error"]["code"] == "InternalError"
    assert answer.all_headers()["Content-Type"].startswith("application/json")
    [record] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "GET /api/operator/orders" in record.getMessage() and record.exc_info is not None


def test_a_purge_older_than_the_first_day_of_the_calendar_purges_nothing(trusted: TrustedIssuer) -> None:
    # A time whose UTC is before year 1 compares as such (no overflow): nothing is older.
    deps = memory_deps(FakeClock())
    queue = deps.queues.queue("orders-a")
    queue.send("{}", message_id="m-1", correlation_id=None)
    [message] = queue.receive()
    queue.dead_letter(message, reason="HandlerFailed", description="kept")
    body = json.dumps({"olderThan": "0001-01-01T00:00:00+23:59"}).encode()

    answer = handle_operator_request(
        "POST",
        f"{API}/deadletters/orders-a/purge",
        trusted.bearer("otto", OPERATOR_ROLE),
        body,
        deps=deps,
        sections=OperatorApiSections.of(deps.settings),
        validator=trusted.validator,
    )

    assert (answer.status, answer.body["count"]) == (200, 0)
    assert deps.dead_letters is not None
    assert len(deps.dead_letters.dead_letter_page("orders-a").items) == 1


def _iso_like() -> st.SearchStrategy[str]:
    """Strings shaped like ISO 8601 times, valid or not: any year, month, day, hour and minute, any
    offset up to ±25:59 (or Z, or none), with or without seconds and a fraction."""

    def two(*edges: int) -> st.SearchStrategy[str]:  # the calendar's edges often, any two digits too
        return (st.sampled_from(edges) | st.integers(0, 99)).map(lambda n: f"{n:02d}")

    zone = st.one_of(
        st.sampled_from(["", "Z", "z", "+00:00", "+23:59", "-23:59"]),
        st.tuples(st.sampled_from("+-"), st.integers(0, 25), st.integers(0, 59)).map(
            lambda t: f"{t[0]}{t[1]:02d}:{t[2]:02d}"
        ),
    )
    seconds = st.sampled_from(["", ":00", ":59", ":00.123456", ":60"]) | two(0, 59).map(lambda s: f":{s}")
    return st.builds(
        lambda y, mo, d, sep, h, mi, s, z: f"{y:04d}-{mo}-{d}{sep}{h}:{mi}{s}{z}",
        st.sampled_from([1, 1969, 1970, 2026, 9998, 9999]) | st.integers(0, 9999),
        two(1, 12),
        two(1, 28, 31),
        st.sampled_from(["T", " ", "t"]),
        two(0, 23),
        two(0, 59),
        seconds,
        zone,
    )


_EDGES = [datetime.min, datetime.max, datetime(1970, 1, 1), datetime(9999, 1, 1), datetime(2026, 3, 1)]
"""Where the calendar, or the range the API takes, ends (and one ordinary day)."""


def _near(edge: datetime, shift: timedelta) -> datetime:
    try:
        return edge + shift
    except OverflowError:
        return edge


def _zoned_times() -> st.SearchStrategy[str]:
    """Real times within hours or days of an edge of the calendar or of the API's range, in any zone to the
    minute, as ``isoformat`` writes them: with seconds, or cut to the minute."""
    offsets = st.integers(-(24 * 60 - 1), 24 * 60 - 1).map(lambda m: timezone(timedelta(minutes=m)))
    shifts = st.timedeltas(-timedelta(hours=2), timedelta(hours=2)) | st.timedeltas(
        -timedelta(days=2), timedelta(days=2)
    )
    naive = st.builds(_near, st.sampled_from(_EDGES), shifts) | st.datetimes()
    zoned = st.builds(lambda t, z: t.replace(microsecond=0, tzinfo=z), naive, offsets)
    return st.one_of(
        zoned.map(lambda t: t.isoformat()),
        zoned.map(lambda t: t.replace(second=0).isoformat()),
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(TIME_PARAMETERS), _zoned_times() | _iso_like() | st.text(max_size=40))
@example(("activity", "since"), "9999-12-31T23:59:00Z")
@example(("alerts", "since"), "9999-12-31T23:59:59Z")
@example(("activity", "since"), "0001-01-01T00:00:00+23:59")
@example(("orders", "failedSince"), "9999-12-31T23:59:59-23:59")
def test_any_time_for_any_time_parameter_is_200_or_400(
    trusted: TrustedIssuer, parameter: tuple[str, str], text: str
) -> None:
    route, name = parameter
    answer = get(
        memory_deps(FakeClock(datetime(2026, 3, 1, 12, tzinfo=UTC))),
        trusted,
        f"{API}/{route}?{name}={quote(text, safe='')}",
    )

    assert answer.status in (200, 400), (text, answer.body)
    if answer.status == 400:
        assert answer.body["error"]["code"] in ("InvalidValue", "UnexpectedField")
