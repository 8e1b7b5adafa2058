"""The chaos run's intruder: one more registered client, on its own credentials only, that attacks the
other clients' orders while they run (``make chaos``, :mod:`devhost.chaos`).

A client's identity is the inbound queue it may send to (docs/clients.md). The intruder holds exactly
what the devhost issues a client: a SAS to add to its own inbound queue and one to read its own reply
queue. Once the victims' orders are recorded it takes a sample of their order ids and, round after
round, tries each kind of :class:`AttackKind`:

- ``same_id``: an order of its own under a victim's order id, for an item no demo service stocks (so it
  is declined at reservation and compensated, taking nothing from the victims' stock);
- ``cancel``: a ``CancelOrder`` of a victim's order id it never submitted;
- ``reply_to``: an order naming a victim's reply queue as ``replyTo``;
- ``operator_action``: a ``ReviewDecision`` (approve) and a ``CompensateOrder`` of a victim's order key;
- ``foreign_queue``: its inbound SAS used on a victim's inbound queue, an agent request queue and an
  agent response queue (Azurite must refuse each with 403);
- ``hostile_text``: every case of :data:`devhost.hostile_text.HOSTILE_CASES` (control characters, a
  forged log line naming a victim's order, escape sequences, bidi overrides, rich markup, text UTF-8
  cannot encode) in a message id, a correlation id and a body that is not JSON, and in an order's fields;
- ``correlation_id``: messages the intake dead-letters whose correlation id is a victim's order key or
  its bare order id; after the run the driver, as an operator, lists and replays them through the
  operator API (:mod:`devhost.intruder_operator`), and no answer may link them to a victim's order, nor
  may the replay write a victim's record;
- ``conflict_flood``: one of its own orders resent :data:`FLOOD_RESENDS` times with other content: one
  counted ``conflicting_order`` alert per alert window, and the victims' alerts stay on the newest page.

After the run :func:`count_cross_client_effects` reads the state store, the intruder's dead letters,
what the operator was shown and the stored alerts: anything one client caused on another's orders is a
``cross_client_effect``.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from azure.core.exceptions import AzureError, HttpResponseError
from azure.storage.queue import QueueClient

from devhost.hostile_text import HOSTILE_CASES, hostile_messages
from orderflow.alerts import window_start
from orderflow.client import OrderflowClient, submission_message_id
from orderflow.clients import RegisteredClient
from orderflow.errors import ConflictingOrder, NotFound, OrderflowError
from orderflow.messages import (
    CANCEL_ORDER,
    COMPENSATE_ORDER,
    INVALID_JSON,
    OPERATOR_ACTION_NOT_ACCEPTED,
    REPLY_TO_NOT_REGISTERED,
    REVIEW_DECISION,
)
from orderflow.order_requests import UNKNOWN_ORDER
from orderflow.protocol.state_machine import SETTLED_STATES
from orderflow.queues.base import MAX_DEAD_LETTER_SCAN, DeadLetter, QueueFactory
from orderflow.records import StateRecord, client_order_id, order_key
from orderflow.stores.base import StateStore

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


@dataclass(frozen=True)
class StoredAlert:
    """A stored alert as the operator API lists it.

    Attributes:
        id: Its document id.
        kind: Its kind (``conflicting_order`` ...).
        client_id: The client it is counted for (``details.client_id``), or None.
        count: Times it was raised.
        first_seen: When it was first raised (UTC): its counting window is the one this falls in.
    """

    id: str
    kind: str
    client_id: str | None
    count: int
    first_seen: datetime


@dataclass
class OperatorFindings:
    """What the driver, as an operator, was shown once the run was over (:mod:`devhost.intruder_operator`).

    Attributes:
        linked: The ``orderId`` of every dead-letter view and replay answer (None: not linked).
        failed_answers: Answers that were not 200 with a JSON object.
        replayed: The message id of each dead letter it replayed, and the id the replay went under as
            the API answered it (None: no answer said).
        victims_changed: Victim records named by a replayed dead letter whose ETag changed across the
            replays.
        alerts: Every stored alert, newest first (the listing's order).
        alert_page: Alerts on the listing's newest page.
        alert_window_s: Seconds of one alert-counting window (``ALERT_WINDOW_S``).
    """

    linked: list[str | None] = field(default_factory=list)
    failed_answers: int = 0
    replayed: dict[str, str | None] = field(default_factory=dict)
    victims_changed: int = 0
    alerts: list[StoredAlert] = field(default_factory=list)
    alert_page: int = 100
    alert_window_s: int = 3600


@dataclass
class CrossClientEffects:
    """Each kind of effect one client had on another's orders, or on what operators see (all must be 0).

    Attributes:
        victim_record_not_its_clients: A victim's record under another key, ``clientId`` or ``replyTo``
            than its submitting client's (or a record no victim submitted).
        victim_cancel_requested: A victim's record with a cancel requested (the victims never cancel).
        intruder_record_not_its_own: A record under the intruder's key whose ``clientId``/``replyTo``
            is not the intruder's.
        intruder_record_unexpected: An intruder record other than its same-id submissions.
        foreign_send_accepted: A send on a foreign queue that Azurite accepted (or refused otherwise
            than with 403).
        attack_unrefused: A message attack neither accepted as the intruder's own order nor
            dead-lettered with its expected reason (a ``correlation_id`` one: after its replay, under the
            replay's id).
        victim_timeline_replayed: A victim's record whose timeline has a dead-letter replay (none of
            theirs is ever replayed).
        victim_record_changed_by_replay: A victim's record named by a replayed dead letter whose ETag
            changed across the replays.
        linked_to_another_client: A dead-letter view or replay answer whose ``orderId`` is not null and
            not under the intruder's key.
        operator_answer_failed: An operator API answer (a dead-letter or alert page, a replay) that was
            not 200 with a JSON object.
        intruder_alerts_not_counted: Stored ``conflicting_order`` alerts for the intruder beyond one per
            alert window.
        intruder_alert_count_wrong: How far their summed count lies outside what was dead-lettered (at
            least one per conflicting resend dead-lettered, at most one per delivery of them).
        victim_alerts_pushed_out: Other alerts that one counted alert per window would have left on the
            listing's newest page, and that are not on it.
    """

    victim_record_not_its_clients: int = 0
    victim_cancel_requested: int = 0
    intruder_record_not_its_own: int = 0
    intruder_record_unexpected: int = 0
    foreign_send_accepted: int = 0
    attack_unrefused: int = 0
    victim_timeline_replayed: int = 0
    victim_record_changed_by_replay: int = 0
    linked_to_another_client: int = 0
    operator_answer_failed: int = 0
    intruder_alerts_not_counted: int = 0
    intruder_alert_count_wrong: int = 0
    victim_alerts_pushed_out: int = 0

    @property
    def total(self) -> int:
        """The sum of every kind."""
        return sum(vars(self).values())


def key_client(key: str) -> str | None:
    """The client id of an order key ``{clientId}:{orderId}``; None for a bare key (an earlier version's)."""
    client, sep, _ = key.partition(":")
    return client if sep else None


def count_cross_client_effects(
    records: Iterable[StateRecord],
    *,
    intruder: RegisteredClient,
    clients: Iterable[RegisteredClient],
    owners: Mapping[str, str],
    attacks: Sequence[Attack],
    dead_letters: Iterable[DeadLetter],
    operator: OperatorFindings | None = None,
) -> CrossClientEffects:
    """What the intruder (or anything else) caused on another client's orders, by kind.

    Args:
        records: Every state record.
        intruder: The intruder's registration.
        clients: Every registered client (the victims are those other than ``intruder``).
        owners: The reply queue of the victim that submitted each order, by its order id
            (:attr:`devhost.demo.Settling.owners`).
        attacks: What the intruder tried.
        dead_letters: The dead letters of the intruder's inbound queue.
        operator: What the operator was shown after the run; None before it acted (a ``correlation_id``
            attack is then expected dead-lettered under its own id, and the operator's kinds are 0).
    """
    letters = list(dead_letters)
    effects = CrossClientEffects()
    own = _count_records(effects, records, intruder=intruder, clients=clients, owners=owners, attacks=attacks)
    effects.foreign_send_accepted = sum(
        1 for a in attacks if a.kind is AttackKind.FOREIGN_QUEUE and not a.refused
    )
    replayed = operator.replayed if operator is not None else None
    effects.attack_unrefused = unrefused_attacks(attacks, own, letters, replayed=replayed)
    if operator is not None:
        effects.victim_record_changed_by_replay = operator.victims_changed
        effects.linked_to_another_client = linked_elsewhere(operator.linked, intruder.client_id)
        effects.operator_answer_failed = operator.failed_answers
        (
            effects.intruder_alerts_not_counted,
            effects.intruder_alert_count_wrong,
            effects.victim_alerts_pushed_out,
        ) = alert_flood_effects(
            operator.alerts,
            intruder_id=intruder.client_id,
            bounds=flood_bounds(attacks, letters),
            window_s=operator.alert_window_s,
            page=operator.alert_page,
        )
    return effects


def _count_records(
    effects: CrossClientEffects,
    records: Iterable[StateRecord],
    *,
    intruder: RegisteredClient,
    clients: Iterable[RegisteredClient],
    owners: Mapping[str, str],
    attacks: Sequence[Attack],
) -> set[str]:
    """Add the state records' effects to ``effects``; returns the intruder's own order ids."""
    by_reply_queue = {c.reply_queue: c for c in clients if c.client_id != intruder.client_id}
    same_ids = {a.order_id for a in attacks if a.kind is AttackKind.SAME_ID}
    own: set[str] = set()
    for record in records:
        order_id = client_order_id(record.order_id)
        if key_client(record.order_id) == intruder.client_id:
            own.add(order_id)
            effects.intruder_record_not_its_own += int(
                record.client_id != intruder.client_id or record.reply_to != intruder.reply_queue
            )
            effects.intruder_record_unexpected += int(order_id not in same_ids)
            continue
        submitter = by_reply_queue.get(owners.get(order_id, ""))
        effects.victim_record_not_its_clients += int(
            submitter is None
            or record.order_id != order_key(submitter.client_id, order_id)
            or record.client_id != submitter.client_id
            or record.reply_to != submitter.reply_queue
        )
        effects.victim_cancel_requested += int(record.cancel_requested_at is not None)
        effects.victim_timeline_replayed += int(any(e.action == REPLAY_ACTION for e in record.timeline))
    return own


def unrefused_attacks(
    attacks: Iterable[Attack],
    own: Collection[str],
    dead_letters: Iterable[DeadLetter],
    *,
    replayed: Mapping[str, str | None] | None = None,
) -> int:
    """Message attacks that were neither accepted as the intruder's own order (a record under its key,
    ``own`` by order id, and no dead letter) nor dead-lettered with their expected reason.

    A message dead-lettered twice (a consumer killed between the two writes) is one attack. Once the
    operator replayed (``replayed``: the message ids replayed, each with its replay's; None: not yet), a
    ``correlation_id`` attack must have been replayed, its dead letter gone, and its replay dead-lettered
    with its reason.
    """
    reasons: dict[str, set[str]] = {}
    for dead in dead_letters:
        reasons.setdefault(dead.message_id, set()).add(dead.reason)
    unrefused = 0
    for attack in attacks:
        if attack.kind is AttackKind.FOREIGN_QUEUE:
            continue
        if attack.kind is AttackKind.SAME_ID:
            unrefused += int(attack.order_id not in own or attack.message_id in reasons)
        else:
            unrefused += int(_dead_lettered_as(attack, reasons, replayed) != {attack.expected_reason})
    return unrefused


def _dead_lettered_as(
    attack: Attack, reasons: Mapping[str, set[str]], replayed: Mapping[str, str | None] | None
) -> set[str]:
    """The reasons ``attack``'s message was dead-lettered with (after a replay, its replay's)."""
    if attack.kind is not AttackKind.CORRELATION_ID or replayed is None:
        return reasons.get(attack.message_id, set())
    replay_id = replayed.get(attack.message_id)
    if replay_id is None or attack.message_id in reasons:
        return set()  # never replayed (or no answer said how), or its dead letter outlived the replay
    return reasons.get(replay_id, set())


def linked_elsewhere(linked: Iterable[str | None], intruder_id: str) -> int:
    """The ``orderId`` values shown that name an order not under the intruder's key."""
    return sum(1 for key in linked if key is not None and key_client(key) != intruder_id)


def flood_bounds(attacks: Iterable[Attack], dead_letters: Iterable[DeadLetter]) -> tuple[int, int]:
    """What the count of the intruder's ``conflicting_order`` alerts must lie within: at least its
    conflicting resends dead-lettered ``ConflictingOrder``, at most the deliveries of them (a consumer
    killed after the alert and before the dead letter raises it again on the next delivery).

    Returns:
        ``(least, most)``.
    """
    flood = {a.message_id for a in attacks if a.kind is AttackKind.CONFLICT_FLOOD}
    deliveries: dict[str, int] = {}
    for dead in dead_letters:
        if dead.message_id in flood and dead.reason == ConflictingOrder.reason:
            deliveries[dead.message_id] = max(deliveries.get(dead.message_id, 0), dead.delivery_count)
    return len(deliveries), sum(deliveries.values())


def flood_alerts(alerts: Iterable[StoredAlert], intruder_id: str) -> list[StoredAlert]:
    """The intruder's own ``conflicting_order`` alerts among ``alerts`` (its conflict flood's)."""
    return [a for a in alerts if a.kind == CONFLICTING_ALERT and a.client_id == intruder_id]


def alert_flood_effects(
    alerts: Sequence[StoredAlert], *, intruder_id: str, bounds: tuple[int, int], window_s: int, page: int
) -> tuple[int, int, int]:
    """The alert effects of the conflict flood.

    Args:
        alerts: Every stored alert, newest first.
        intruder_id: The intruder's client id.
        bounds: What the summed count must lie within (:func:`flood_bounds`).
        window_s: Seconds of one counting window.
        page: Alerts on the listing's newest page.

    Returns:
        The intruder's ``conflicting_order`` alerts beyond one per window; how far their summed count
        lies outside ``bounds``; the other alerts pushed off the newest page (those one alert per window
        would have left on it, and that are not on it).
    """
    mine = {a.id for a in flood_alerts(alerts, intruder_id)}
    windows: set[datetime] = set()
    counted: list[StoredAlert] = []
    for alert in alerts:
        if alert.id in mine:
            start = window_start(alert.first_seen, window_s)
            if start in windows:
                continue
            windows.add(start)
        counted.append(alert)
    total = sum(a.count for a in alerts if a.id in mine)
    least, most = bounds
    wrong = max(0, least - total) + max(0, total - most)

    def others(listed: Sequence[StoredAlert]) -> set[str]:
        return {a.id for a in listed[:page] if a.id not in mine}

    return len(mine) - len(windows), wrong, len(others(counted) - others(alerts))


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
    """Every case of :data:`devhost.hostile_text.HOSTILE_CASES`, text naming ``victim``'s order
    ``order_id`` where it names one (:func:`devhost.hostile_text.hostile_messages`)."""
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


@dataclass
class IntruderPlan:
    """How hard the intruder tries.

    Attributes:
        rounds: Rounds of attacks.
        per_round: Victim orders attacked by each message attack in a round, and as many others given
            to ``same_id`` (never the same ids: a cancel of an id the intruder submitted would be its own).
        every_s: Seconds between rounds, start to start.
        seed: Seed of the sample of victim orders.
        flood_resends: Conflicting resends of ``conflict_flood``, once one of its own orders is recorded.
    """

    rounds: int = 3
    per_round: int = 2
    every_s: float = 3.0
    seed: int = 20261129
    flood_resends: int = FLOOD_RESENDS

    def __post_init__(self) -> None:
        if self.most_dead_letters() > DEAD_LETTER_ROOM:
            raise ValueError(
                f"{self.rounds} rounds of {self.per_round} targets and {self.flood_resends} conflicting "
                f"resends dead-letter {self.most_dead_letters()} messages, more than one listing of "
                f"{MAX_DEAD_LETTER_SCAN} reads back with room for duplicates"
            )

    def most_dead_letters(self) -> int:
        """The dead letters the plan makes, each message once."""
        per_round = self.per_round * DEAD_LETTERED_PER_TARGET + 2 * len(HOSTILE_CASES)
        return self.rounds * per_round + self.flood_resends


@dataclass
class _Targets:
    """The victim orders found so far, in the sampled order, and those already used."""

    candidates: list[str]
    used: set[str] = field(default_factory=set)


class Intruder:
    """The chaos run's intruder (see the module docstring): a thread that attacks in rounds, then floods
    once one of its own orders is recorded, until its plan is done or it is stopped.

    Args:
        client: The intruder's registration.
        queues: Its own queues on its own credentials (:meth:`devhost.demo.DemoSystem.client_queues`).
        inbound_sas_url: Its inbound queue's SAS URL (what it tries on foreign queues).
        victims: The clients it attacks.
        order_ids: The victims' order ids it may sample from (each is looked for under every victim).
        states: The state store, to see which victim orders (and which of its own) are recorded yet.
        foreign_queues: The queues its SAS is tried on besides the victims' inbound queues (an agent
            request queue, an agent response queue).
        plan: How hard it tries.
        send_foreign: Tries one send on a foreign queue URL with a body; True when it was refused with
            403 (default: :func:`refused_with_403`, on Azurite).

    Attributes:
        attacks: What it tried so far.
        sdk: Its client SDK (its replies are in ``sdk.replies``).
    """

    def __init__(
        self,
        client: RegisteredClient,
        queues: QueueFactory,
        inbound_sas_url: str,
        *,
        victims: Sequence[RegisteredClient],
        order_ids: Sequence[str],
        states: StateStore,
        foreign_queues: Sequence[str],
        plan: IntruderPlan | None = None,
        send_foreign: Callable[[str, str], bool] = refused_with_403,
    ) -> None:
        self.client = client
        self.plan = plan or IntruderPlan()
        self.sdk = OrderflowClient(queues, reply_queue=client.reply_queue, orders_queue=client.inbound_queue)
        self._inbound = queues.queue(client.inbound_queue)
        self._sas_url = inbound_sas_url
        self._victims = list(victims)
        self._states = states
        self._foreign = list(foreign_queues)
        self._send_foreign = send_foreign
        candidates = list(order_ids)
        random.Random(self.plan.seed).shuffle(candidates)
        self._targets = _Targets(candidates)
        self.attacks: list[Attack] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-intruder", daemon=True)

    def start(self) -> None:
        """Start attacking: the first round as soon as victim orders are recorded."""
        self._thread.start()

    def stop(self) -> None:
        """Stop attacking (a round under way finishes)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=120)

    def snapshot(self) -> list[Attack]:
        """A copy of :attr:`attacks`."""
        with self._lock:
            return list(self.attacks)

    def own_order_ids(self) -> set[str]:
        """The order ids it submitted as its own (its ``same_id`` attacks)."""
        return {a.order_id for a in self.snapshot() if a.kind is AttackKind.SAME_ID}

    def _run(self) -> None:
        done, flooded = 0, self.plan.flood_resends == 0
        while (done < self.plan.rounds or not flooded) and not self._stop.is_set():
            started = time.monotonic()
            try:
                if done < self.plan.rounds and self._round(done):
                    done += 1
                if done and not flooded:
                    flooded = self._flood()
            except OrderflowError as exc:  # a store or queue hiccup under chaos: try again next tick
                logger.warning("intruder round %s failed: %s", done + 1, exc)
            self._stop.wait(max(0.5, self.plan.every_s - (time.monotonic() - started)))

    def _round(self, number: int) -> bool:
        """One round; False (nothing tried) while too few victim orders are recorded yet."""
        found = self._recorded_targets(2 * self.plan.per_round)
        if found is None:
            return False
        tag = f"r{number + 1}"
        for victim, order_id in found[: self.plan.per_round]:
            self.sdk.submit(same_id_order(order_id))
            self._add(Attack(AttackKind.SAME_ID, order_id, victim.client_id, submission_message_id(order_id)))
        targets = found[self.plan.per_round :]
        for victim, order_id in targets:
            for attack, body in message_attacks(victim, order_id, tag):
                self._send(Outgoing(attack, body))
            for outgoing in correlation_attacks(victim, order_id, tag):
                self._send(outgoing)
        for outgoing in hostile_text_attacks(*targets[0], tag, self.client):
            self._send(outgoing)
        victim, order_id = found[0]
        for queue in [victim.inbound_queue, *self._foreign]:
            body = json.dumps({**same_id_order(order_id), "replyTo": victim.reply_queue})
            refused = self._send_foreign(with_sas_of(self._sas_url, queue), body)
            self._add(Attack(AttackKind.FOREIGN_QUEUE, order_id, victim.client_id, queue, refused))
        return True

    def _flood(self) -> bool:
        """Resend one of its own recorded orders with other content; False while none is recorded yet."""
        mine = [a for a in self.snapshot() if a.kind is AttackKind.SAME_ID]
        own = next((a for a in mine if self._recorded(order_key(self.client.client_id, a.order_id))), None)
        if own is None:
            return False
        for outgoing in flood_attacks(self.client, own, self.plan.flood_resends):
            self._send(outgoing)
        return True

    def _send(self, outgoing: Outgoing) -> None:
        self._inbound.send(
            outgoing.body, message_id=outgoing.attack.message_id, correlation_id=outgoing.correlation_id
        )
        self._add(outgoing.attack)

    def _recorded_targets(self, wanted: int) -> list[tuple[RegisteredClient, str]] | None:
        """``wanted`` unused victim orders already recorded, each with its victim; None if fewer are."""
        found: list[tuple[RegisteredClient, str]] = []
        for order_id in self._targets.candidates:
            if order_id in self._targets.used:
                continue
            victim = self._owner(order_id)
            if victim is not None:
                found.append((victim, order_id))
                if len(found) == wanted:
                    self._targets.used.update(oid for _, oid in found)
                    return found
        return None

    def _owner(self, order_id: str) -> RegisteredClient | None:
        return next((v for v in self._victims if self._recorded(order_key(v.client_id, order_id))), None)

    def _recorded(self, key: str) -> bool:
        try:
            self._states.get(key)
        except NotFound:
            return False
        return True

    def _add(self, attack: Attack) -> None:
        with self._lock:
            self.attacks.append(attack)


def settled_own_orders(records: Iterable[StateRecord], client_id: str) -> tuple[int, int]:
    """The orders under ``client_id``'s keys, and how many of them have settled."""
    mine = [r for r in records if key_client(r.order_id) == client_id]
    return len(mine), sum(1 for r in mine if r.process_state in SETTLED_STATES)
