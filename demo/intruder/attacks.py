"""The intruder's attacks: their kinds, what each must be refused with, and the messages each sends."""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from azure.core.exceptions import AzureError, HttpResponseError
from azure.storage.queue import QueueClient

from demo.intruder.hostile_text import HOSTILE_CASES, hostile_messages
from orderflow.clients import RegisteredClient
from orderflow.errors import ConflictingOrder
from orderflow.messages import (
    CANCEL_ORDER,
    COMPENSATE_ORDER,
    INVALID_JSON,
    OPERATOR_ACTION_NOT_ACCEPTED,
    REPLY_TO_NOT_REGISTERED,
    REVIEW_DECISION,
)
from orderflow.order_requests import UNKNOWN_ORDER
from orderflow.queues.base import MAX_DEAD_LETTER_SCAN
from orderflow.records import order_key

logger = logging.getLogger(__name__)

INTRUDER_CLIENT = "chaos-intruder"
"""The intruder's client id (queues ``orders-chaos-intruder`` and ``replies-chaos-intruder``)."""

UNSTOCKED_SKU = "intruder-unstocked"
"""The SKU of the intruder's own orders: not a TPC-H part, so the demo inventory has none of it."""

DEAD_LETTER_ROOM = MAX_DEAD_LETTER_SCAN * 3 // 4
"""Most dead letters a plan may make: what one listing reads back (:data:`MAX_DEAD_LETTER_SCAN`), with
room for a message dead-lettered twice (a consumer killed between the two writes)."""

CORRELATION_PER_TARGET = 3
"""``correlation_id`` messages per victim order: a cancel and a body that is not JSON naming the victim's
order key, and a cancel naming its bare order id."""

DEAD_LETTERED_PER_TARGET = 4 + CORRELATION_PER_TARGET
"""Messages of one round's target that must be dead-lettered: a cancel, a replyTo, two operator actions
and the ``correlation_id`` messages."""

FLOOD_RESENDS = 30
"""Conflicting resends of one of the intruder's own orders (``conflict_flood``): enough to fill a page of
alerts were each stored on its own, few enough to leave the run's timing as it is."""

CONFLICTING_ALERT = "conflicting_order"
"""The alert kind a conflicting resend raises (:data:`orderflow.alerts.ALERT_KINDS`)."""

REPLAY_ACTION = "deadletter.replay"
"""The timeline action of a dead-letter replay (:mod:`operator_api.deadletters`): never on a victim's."""

FORBIDDEN = 403
"""What Azurite answers a SAS used on a queue it was not signed for."""


class AttackKind(StrEnum):
    """What the intruder tries (see the module docstring)."""

    SAME_ID = "same_id"
    CANCEL = "cancel"
    REPLY_TO = "reply_to"
    OPERATOR_ACTION = "operator_action"
    FOREIGN_QUEUE = "foreign_queue"
    HOSTILE_TEXT = "hostile_text"
    CORRELATION_ID = "correlation_id"
    CONFLICT_FLOOD = "conflict_flood"


EXPECTED_DEAD_LETTER: Mapping[AttackKind, str] = {
    AttackKind.CANCEL: UNKNOWN_ORDER,
    AttackKind.REPLY_TO: REPLY_TO_NOT_REGISTERED,
    AttackKind.OPERATOR_ACTION: OPERATOR_ACTION_NOT_ACCEPTED,
    AttackKind.CONFLICT_FLOOD: ConflictingOrder.reason,
}
"""The dead-letter reason each message attack of a fixed reason must get on the intruder's inbound
queue; a ``hostile_text`` or ``correlation_id`` attack carries its own (:attr:`Attack.reason`)."""


@dataclass(frozen=True)
class Attack:
    """One attempt.

    Attributes:
        kind: What was tried.
        order_id: The victim's own order id it names (for ``conflict_flood``, the intruder's own order
            it resends, which reuses that victim's id).
        victim: The victim's client id.
        message_id: The message's id on the intruder's inbound queue; for ``foreign_queue``, the queue
            the send was tried on.
        refused: For ``foreign_queue``: Azurite refused the send with 403. None for the other kinds.
        reason: The dead-letter reason the message must get, when its kind has no fixed one
            (:data:`EXPECTED_DEAD_LETTER`).
    """

    kind: AttackKind
    order_id: str
    victim: str
    message_id: str
    refused: bool | None = None
    reason: str | None = None

    @property
    def expected_reason(self) -> str | None:
        """The dead-letter reason it must get; None for ``same_id`` and ``foreign_queue``."""
        return self.reason or EXPECTED_DEAD_LETTER.get(self.kind)


def attack_counts(attacks: Iterable[Attack]) -> dict[str, int]:
    """Attempts per :class:`AttackKind` (every kind listed, 0 included)."""
    counts = Counter(a.kind.value for a in attacks)
    return {kind.value: counts[kind.value] for kind in AttackKind}


def same_id_order(order_id: str) -> dict[str, Any]:
    """The intruder's own order under ``order_id``: one unit of :data:`UNSTOCKED_SKU`, 1.00 USD (the
    client SDK sets ``replyTo``)."""
    return {
        "schemaVersion": 1,
        "orderId": order_id,
        "customerId": "intruder",
        "customerName": "Chaos Intruder",
        "currency": "USD",
        "amount": "1.00",
        "items": [{"sku": UNSTOCKED_SKU, "quantity": 1}],
        "carrier": "MAIL",
    }


def message_attacks(victim: RegisteredClient, order_id: str, tag: str) -> list[tuple[Attack, str]]:
    """The dead-lettered message attacks on ``victim``'s order ``order_id``, each with its body; message
    ids ``intruder:<tag>:<kind>...`` (``tag`` tells rounds apart)."""
    key = order_key(victim.client_id, order_id)
    bodies = [
        (AttackKind.CANCEL, "cancel", {"schemaVersion": 1, "type": CANCEL_ORDER, "orderId": order_id}),
        (AttackKind.REPLY_TO, "reply-to", {**same_id_order(order_id), "replyTo": victim.reply_queue}),
        (
            AttackKind.OPERATOR_ACTION,
            "review",
            {"schemaVersion": 1, "type": REVIEW_DECISION, "orderId": key, "decision": "approve"},
        ),
        (
            AttackKind.OPERATOR_ACTION,
            "compensate",
            {"schemaVersion": 1, "type": COMPENSATE_ORDER, "orderId": key},
        ),
    ]
    return [
        (Attack(kind, order_id, victim.client_id, f"intruder:{tag}:{name}:{order_id}"), json.dumps(body))
        for kind, name, body in bodies
    ]


@dataclass(frozen=True)
class Outgoing:
    """A message attack with what it is sent with: its body and correlation id."""

    attack: Attack
    body: str
    correlation_id: str | None = None


def correlation_attacks(victim: RegisteredClient, order_id: str, tag: str) -> list[Outgoing]:
    """The ``correlation_id`` attacks on ``victim``'s order ``order_id``: a cancel and a body that is not
    JSON whose correlation id is the victim's order key, and a cancel whose correlation id is its bare
    order id (which, on the intruder's queue, can only name the intruder's own order of that id)."""
    key = order_key(victim.client_id, order_id)
    cancel = json.dumps({"schemaVersion": 1, "type": CANCEL_ORDER, "orderId": order_id})
    cases = [
        ("key-cancel", cancel, key, UNKNOWN_ORDER),
        ("key-not-json", f"replay me as {key}", key, INVALID_JSON),
        ("bare-cancel", cancel, order_id, UNKNOWN_ORDER),
    ]
    return [
        Outgoing(
            Attack(
                AttackKind.CORRELATION_ID,
                order_id,
                victim.client_id,
                f"intruder:{tag}:correlation-{name}:{order_id}",
                reason=reason,
            ),
            body,
            correlation,
        )
        for name, body, correlation, reason in cases
    ]


def hostile_text_attacks(
    victim: RegisteredClient, order_id: str, tag: str, intruder: RegisteredClient
) -> list[Outgoing]:
    """Every case of :data:`demo.intruder.hostile_text.HOSTILE_CASES`, text naming ``victim``'s order
    ``order_id`` where it names one (:func:`demo.intruder.hostile_text.hostile_messages`)."""
    order = {**same_id_order(order_id), "replyTo": intruder.reply_queue}
    key = order_key(victim.client_id, order_id)
    return [
        Outgoing(
            Attack(AttackKind.HOSTILE_TEXT, order_id, victim.client_id, sent.message_id, reason=sent.reason),
            sent.body,
            sent.correlation_id,
        )
        for case in HOSTILE_CASES
        for sent in hostile_messages(case, prefix=f"intruder:{tag}", victim_key=key, order=order)
    ]


def flood_attacks(intruder: RegisteredClient, own: Attack, resends: int) -> list[Outgoing]:
    """``resends`` orders under the order id of ``own`` (a ``same_id`` attack, recorded as the intruder's
    own order), each with another amount than it and than each other."""
    return [
        Outgoing(
            Attack(AttackKind.CONFLICT_FLOOD, own.order_id, own.victim, f"intruder:flood:{n}:{own.order_id}"),
            json.dumps(
                {**same_id_order(own.order_id), "amount": f"{n + 1}.00", "replyTo": intruder.reply_queue}
            ),
        )
        for n in range(1, resends + 1)
    ]


def with_sas_of(sas_url: str, queue: str) -> str:
    """The URL of ``queue`` on the account of ``sas_url``, carrying ``sas_url``'s SAS (a token used on
    a queue it was not signed for)."""
    base, _, sas = sas_url.partition("?")
    return f"{base.rsplit('/', 1)[0]}/{queue}?{sas}"


def refused_with_403(url: str, body: str) -> bool:
    """Send ``body`` to the queue of ``url``; True when Azurite refuses it with 403, False when the send
    is accepted or refused otherwise (a connection failure is retried by the SDK, then counts as False)."""
    client = QueueClient.from_queue_url(url)
    try:
        client.send_message(body)
    except HttpResponseError as error:
        return error.status_code == FORBIDDEN
    except AzureError as error:
        logger.warning("foreign-queue send failed without an answer: %s", error)
        return False
    finally:
        client.close()
    return False
