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
  agent response queue (Azurite must refuse each with 403).

After the run :func:`count_cross_client_effects` reads the state store, the intruder's dead letters and
the attacks' outcomes: anything one client caused on another's orders is a ``cross_client_effect``.
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
from enum import StrEnum
from typing import Any

from azure.core.exceptions import AzureError, HttpResponseError
from azure.storage.queue import QueueClient

from orderflow.client import OrderflowClient, submission_message_id
from orderflow.clients import RegisteredClient
from orderflow.errors import NotFound, OrderflowError
from orderflow.messages import (
    CANCEL_ORDER,
    COMPENSATE_ORDER,
    OPERATOR_ACTION_NOT_ACCEPTED,
    REPLY_TO_NOT_REGISTERED,
    REVIEW_DECISION,
)
from orderflow.order_requests import UNKNOWN_ORDER
from orderflow.queues.base import DeadLetter, QueueFactory
from orderflow.records import StateRecord, client_order_id, order_key
from orderflow.state_machine import SETTLED_STATES
from orderflow.stores.base import StateStore

logger = logging.getLogger(__name__)

INTRUDER_CLIENT = "chaos-intruder"
"""The intruder's client id (queues ``orders-chaos-intruder`` and ``replies-chaos-intruder``)."""

UNSTOCKED_SKU = "intruder-unstocked"
"""The SKU of the intruder's own orders: not a TPC-H part, so the demo inventory has none of it."""

DEAD_LETTER_PEEK = 32
"""Most dead letters one read of a Storage dead-letter queue returns (a peek, the service's limit)."""

DEAD_LETTERED_PER_TARGET = 4
"""Messages of one round's target that must be dead-lettered: a cancel, a replyTo, two operator actions."""

FORBIDDEN = 403
"""What Azurite answers a SAS used on a queue it was not signed for."""


class AttackKind(StrEnum):
    """What the intruder tries (see the module docstring)."""

    SAME_ID = "same_id"
    CANCEL = "cancel"
    REPLY_TO = "reply_to"
    OPERATOR_ACTION = "operator_action"
    FOREIGN_QUEUE = "foreign_queue"


EXPECTED_DEAD_LETTER: Mapping[AttackKind, str] = {
    AttackKind.CANCEL: UNKNOWN_ORDER,
    AttackKind.REPLY_TO: REPLY_TO_NOT_REGISTERED,
    AttackKind.OPERATOR_ACTION: OPERATOR_ACTION_NOT_ACCEPTED,
}
"""The dead-letter reason each message attack must get on the intruder's inbound queue."""


@dataclass(frozen=True)
class Attack:
    """One attempt.

    Attributes:
        kind: What was tried.
        order_id: The victim's own order id it names.
        victim: The victim's client id.
        message_id: The message's id on the intruder's inbound queue; for ``foreign_queue``, the queue
            the send was tried on.
        refused: For ``foreign_queue``: Azurite refused the send with 403. None for the other kinds.
    """

    kind: AttackKind
    order_id: str
    victim: str
    message_id: str
    refused: bool | None = None


@dataclass
class CrossClientEffects:
    """Each kind of effect one client had on another's orders (all must be 0).

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
            dead-lettered with its expected reason.
    """

    victim_record_not_its_clients: int = 0
    victim_cancel_requested: int = 0
    intruder_record_not_its_own: int = 0
    intruder_record_unexpected: int = 0
    foreign_send_accepted: int = 0
    attack_unrefused: int = 0

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
    """
    by_reply_queue = {c.reply_queue: c for c in clients if c.client_id != intruder.client_id}
    same_ids = {a.order_id for a in attacks if a.kind is AttackKind.SAME_ID}
    effects = CrossClientEffects()
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
    effects.foreign_send_accepted = sum(
        1 for a in attacks if a.kind is AttackKind.FOREIGN_QUEUE and not a.refused
    )
    effects.attack_unrefused = unrefused_attacks(attacks, own, dead_letters)
    return effects


def unrefused_attacks(
    attacks: Iterable[Attack], own: Collection[str], dead_letters: Iterable[DeadLetter]
) -> int:
    """Message attacks that were neither accepted as the intruder's own order (a record under its key,
    ``own`` by order id, and no dead letter) nor dead-lettered with their :data:`EXPECTED_DEAD_LETTER`.

    A message dead-lettered twice (a consumer killed between the two writes) is one attack.
    """
    reasons: dict[str, set[str]] = {}
    for dead in dead_letters:
        reasons.setdefault(dead.message_id, set()).add(dead.reason)
    unrefused = 0
    for attack in attacks:
        if attack.kind is AttackKind.FOREIGN_QUEUE:
            continue
        got = reasons.get(attack.message_id, set())
        if attack.kind is AttackKind.SAME_ID:
            unrefused += int(attack.order_id not in own or bool(got))
        else:
            unrefused += int(got != {EXPECTED_DEAD_LETTER[attack.kind]})
    return unrefused


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
    """

    rounds: int = 3
    per_round: int = 2
    every_s: float = 3.0
    seed: int = 20261129

    def __post_init__(self) -> None:
        # Every dead letter must be seen in one peek of the dead-letter queue, duplicates left room.
        if self.rounds * self.per_round * DEAD_LETTERED_PER_TARGET > DEAD_LETTER_PEEK * 3 // 4:
            raise ValueError(
                f"{self.rounds} rounds of {self.per_round} targets dead-letter more than one peek of "
                f"{DEAD_LETTER_PEEK} reads back with room for duplicates"
            )


@dataclass
class _Targets:
    """The victim orders found so far, in the sampled order, and those already used."""

    candidates: list[str]
    used: set[str] = field(default_factory=set)


class Intruder:
    """The chaos run's intruder (see the module docstring): a thread that attacks in rounds, until its
    plan is done or it is stopped.

    Args:
        client: The intruder's registration.
        queues: Its own queues on its own credentials (:meth:`devhost.demo.DemoSystem.client_queues`).
        inbound_sas_url: Its inbound queue's SAS URL (what it tries on foreign queues).
        victims: The clients it attacks.
        order_ids: The victims' order ids it may sample from (each is looked for under every victim).
        states: The state store, to see which victim orders are recorded yet.
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
        done = 0
        while done < self.plan.rounds and not self._stop.is_set():
            started = time.monotonic()
            try:
                if self._round(done):
                    done += 1
            except OrderflowError as exc:  # a store or queue hiccup under chaos: try again next tick
                logger.warning("intruder round %s failed: %s", done + 1, exc)
            self._stop.wait(max(0.5, self.plan.every_s - (time.monotonic() - started)))

    def _round(self, number: int) -> bool:
        """One round; False (nothing tried) while too few victim orders are recorded yet."""
        found = self._recorded_targets(2 * self.plan.per_round)
        if found is None:
            return False
        for victim, order_id in found[: self.plan.per_round]:
            self.sdk.submit(same_id_order(order_id))
            self._add(Attack(AttackKind.SAME_ID, order_id, victim.client_id, submission_message_id(order_id)))
        for victim, order_id in found[self.plan.per_round :]:
            for attack, body in message_attacks(victim, order_id, f"r{number + 1}"):
                self.sdk.send_raw(body, message_id=attack.message_id)
                self._add(attack)
        victim, order_id = found[0]
        for queue in [victim.inbound_queue, *self._foreign]:
            body = json.dumps({**same_id_order(order_id), "replyTo": victim.reply_queue})
            refused = self._send_foreign(with_sas_of(self._sas_url, queue), body)
            self._add(Attack(AttackKind.FOREIGN_QUEUE, order_id, victim.client_id, queue, refused))
        return True

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
        for victim in self._victims:
            try:
                self._states.get(order_key(victim.client_id, order_id))
            except NotFound:
                continue
            return victim
        return None

    def _add(self, attack: Attack) -> None:
        with self._lock:
            self.attacks.append(attack)


def settled_own_orders(records: Iterable[StateRecord], client_id: str) -> tuple[int, int]:
    """The orders under ``client_id``'s keys, and how many of them have settled."""
    mine = [r for r in records if key_client(r.order_id) == client_id]
    return len(mine), sum(1 for r in mine if r.process_state in SETTLED_STATES)
