"""The intruder itself: a thread that, round after round, sends every kind of attack at a sample of the
victims' orders (:class:`Intruder`).
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from demo.intruder.attacks import (
    DEAD_LETTER_ROOM,
    DEAD_LETTERED_PER_TARGET,
    FLOOD_RESENDS,
    Attack,
    AttackKind,
    Outgoing,
    correlation_attacks,
    flood_attacks,
    hostile_text_attacks,
    message_attacks,
    refused_with_403,
    same_id_order,
    with_sas_of,
)
from demo.intruder.hostile_text import HOSTILE_CASES
from orderflow.clients import RegisteredClient
from orderflow.errors import NotFound, OrderflowError
from orderflow.queues.base import MAX_DEAD_LETTER_SCAN, QueueFactory
from orderflow.records import order_key
from orderflow.stores.base import StateStore
from orderflow_client.client import OrderflowClient, submission_message_id

logger = logging.getLogger(__name__)


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
        queues: Its own queues on its own credentials (:meth:`demo.system.DemoSystem.client_queues`).
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
