"""The renderings of client text (orderflow.client_text), the one-line log records
(orderflow.telemetry.guard_log_records) and the operator API's encoding of any answer."""

from __future__ import annotations

import ast
import json
import logging
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from operator_api import routes
from operator_api.answers import OperatorResponse
from operator_api.handler import handle_operator_request
from operator_api.routing import OperatorApiSections
from orderflow import telemetry
from orderflow.client_text import MAX_LOG_VALUE_CHARS, encodable, log_value, visible
from orderflow.clock import FakeClock
from tests.hostile_text import unsafe_characters
from tests.operator_tokens import TrustedIssuer
from tests.unit.fakes import memory_deps

pytestmark = pytest.mark.unit

ANY_TEXT = st.text(st.characters(codec=None, min_codepoint=0, max_codepoint=0x10FFFF), max_size=60)
"""Any ``str``, lone surrogates included."""


@given(ANY_TEXT)
def test_visible_text_is_printable_and_changes_nothing_printable(text: str) -> None:
    shown = visible(text)
    assert shown.isprintable() and unsafe_characters(shown) == []
    assert visible(shown) == shown
    if text.isprintable():
        assert shown is text


def test_visible_shows_each_escape_as_python_writes_it() -> None:
    assert visible("Zoë 東京 ok") == "Zoë 東京 ok"
    assert visible("a\nb\r\tc") == "a\\nb\\r\\tc"
    assert visible("\x1b]52;c;eA==\x07") == "\\x1b]52;c;eA==\\x07"
    assert visible("\x9b31m\u202eabc\u2028\udc80\U000e0041") == "\\x9b31m\\u202eabc\\u2028\\udc80\\U000e0041"


@given(ANY_TEXT)
def test_encodable_text_encodes_as_utf8_and_keeps_everything_else(text: str) -> None:
    made = encodable(text)
    made.encode("utf-8")
    assert len(made) == len(text)
    assert all(
        a == b or (b == "\ufffd" and 0xD800 <= ord(a) <= 0xDFFF) for a, b in zip(text, made, strict=True)
    )


@given(ANY_TEXT)
def test_a_log_value_is_one_field_that_reads_back_as_the_value(text: str) -> None:
    value = log_value(text)
    assert value.isprintable()
    if value.startswith('"'):
        assert ast.literal_eval(value) == text
    else:
        assert value == text and set(value).isdisjoint(' ="\\')


def test_a_log_value_is_bare_only_when_it_is_one_printable_word() -> None:
    assert [log_value(v) for v in ("a:o-1", 3, None, "")] == ["a:o-1", "3", "None", '""']
    assert log_value('x y="z"\\') == '"x y=\\"z\\"\\\\"'
    long = log_value("é" * (MAX_LOG_VALUE_CHARS + 10))
    assert long == '"' + "é" * MAX_LOG_VALUE_CHARS + '"+10'


def test_the_record_factory_is_wrapped_once_however_often_the_guard_is_installed() -> None:
    # tests/conftest.py installed it, as configure_telemetry does in each host.
    installed = logging.getLogRecordFactory()
    telemetry.guard_log_records()
    assert logging.getLogRecordFactory() is installed


def test_a_guarded_record_is_one_printable_line_and_a_clean_one_is_untouched(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = logging.getLogger("orderflow.test")
    with caplog.at_level(logging.INFO, logger="orderflow.test"):
        log.info("dead-lettering message %s from %s", "m-1\nERROR forged line\x1b[2J", "orders-a")
        log.info("plain message %s of %d", "m-2", 3)

    forged, plain = caplog.records
    assert forged.getMessage() == "dead-lettering message m-1\\nERROR forged line\\x1b[2J from orders-a"
    assert (plain.msg, plain.args) == ("plain message %s of %d", ("m-2", 3))


def test_an_event_line_cannot_be_given_a_field_by_a_value(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="orderflow.events"):
        telemetry.event("message.dead_lettered", queue="orders-a", message_id="m-3 order_id=a:o-9\nx=1")

    (record,) = caplog.records
    expected = 'message.dead_lettered queue=orders-a message_id="m-3 order_id=a:o-9\\nx=1"'
    assert record.getMessage() == expected
    assert (
        record.__dict__["orderflow.message_id"] == "m-3 order_id=a:o-9\nx=1"
    )  # exported structured, as sent


def test_an_answer_that_cannot_be_encoded_is_a_500_in_the_error_shape(
    trusted: TrustedIssuer, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_: object) -> OperatorResponse:
        return OperatorResponse(200, {"queues": [object()]})

    monkeypatch.setattr(
        routes,
        "ROUTES",
        tuple(replace(r, handler=broken) if r.path == "/queues" else r for r in routes.ROUTES),
    )
    deps = memory_deps(FakeClock())

    answer = handle_operator_request(
        "GET",
        "/api/operator/queues",
        trusted.operator(),
        b"",
        deps=deps,
        sections=OperatorApiSections.of(deps.settings),
        validator=trusted.validator,
    )

    assert answer.status == 500
    assert json.loads(answer.content().decode("utf-8")) == {
        "error": {"code": "InternalError", "message": "the operator API failed; the failure is logged"}
    }
