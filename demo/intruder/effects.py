"""What the intruder achieved: :func:`count_cross_client_effects` reads the state store, the intruder's
dead letters, what the operator was shown and the stored alerts; anything one client caused on
another's orders is a ``cross_client_effect``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from demo.intruder.attacks import CONFLICTING_ALERT, REPLAY_ACTION, Attack, AttackKind
from orderflow.alerts import window_start
from orderflow.clients import RegisteredClient
from orderflow.errors import ConflictingOrder
from orderflow.protocol.state_machine import SETTLED_STATES
from orderflow.queues.base import DeadLetter
from orderflow.records import StateRecord, client_order_id, order_key


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
    """What the driver, as an operator, was shown once the run was over (:mod:`demo.intruder.operator`).

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


def key_client(key: str) -> str:
    """The client id of an order key ``{clientId}:{orderId}``.

    Raises:
        ValueError: ``key`` is not an order key.
    """
    client, sep, order_id = key.partition(":")
    if not sep or not client or not order_id:
        raise ValueError(f"not an order key '<client id>:<order id>': {key[:100]!r}")
    return client


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
            (:attr:`demo.system.Settling.owners`).
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
    # A key without a client prefix is nobody's, so never the intruder's own.
    return sum(1 for key in linked if key is not None and not key.startswith(f"{intruder_id}:"))


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


def settled_own_orders(records: Iterable[StateRecord], client_id: str) -> tuple[int, int]:
    """The orders under ``client_id``'s keys, and how many of them have settled."""
    mine = [r for r in records if key_client(r.order_id) == client_id]
    return len(mine), sum(1 for r in mine if r.process_state in SETTLED_STATES)
