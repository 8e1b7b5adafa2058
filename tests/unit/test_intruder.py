"""The chaos run's intruder (devhost.intruder): its attacks against the real intake, and the count of
cross-client effects."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from devhost.chaos import CHAOS_INVARIANTS, unexercised
from devhost.demo import all_records, catalog_records, catalog_settled
from devhost.intruder import (
    DEAD_LETTER_PEEK,
    INTRUDER_CLIENT,
    UNSTOCKED_SKU,
    Attack,
    AttackKind,
    CrossClientEffects,
    Intruder,
    IntruderPlan,
    attack_counts,
    count_cross_client_effects,
    message_attacks,
    same_id_order,
    settled_own_orders,
    with_sas_of,
)
from intake.submission import handle_intake_message
from orderflow.clients import RegisteredClient
from orderflow.clock import FakeClock
from orderflow.errors import InvalidMessage
from orderflow.messages import (
    OPERATOR_ACTION_NOT_ACCEPTED,
    REPLY_TO_NOT_REGISTERED,
    SubmitOrder,
    parse_message,
)
from orderflow.order_requests import UNKNOWN_ORDER
from orderflow.queues.base import DeadLetter
from orderflow.queues.memory import InMemoryQueueFactory
from orderflow.records import ProcessState, RetryBudget, StateRecord, order_key
from orderflow.settings import Settings
from orderflow.stores.memory import InMemoryOrderStore, InMemoryStateStore
from tests.unit.fakes import order_body

pytestmark = pytest.mark.unit

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
VICTIM = RegisteredClient.model_validate({"id": "chaos-1"})
OTHER = RegisteredClient.model_validate({"id": "chaos-2"})
INTRUDER = RegisteredClient.model_validate({"id": INTRUDER_CLIENT})
CLIENTS = (VICTIM, OTHER, INTRUDER)


def state(client: RegisteredClient, order_id: str, **changes: object) -> StateRecord:
    base = StateRecord(
        id=order_key(client.client_id, order_id),
        order_id=order_key(client.client_id, order_id),
        reply_to=client.reply_queue,
        client_id=client.client_id,
        retry_budget=RetryBudget(limit=24),
        workflow_version="order-v3",
        created_at=T0,
        updated_at=T0,
    )
    return base.model_copy(update=changes)


def dead(message_id: str, reason: str) -> DeadLetter:
    return DeadLetter(message_id, "{}", reason, "", INTRUDER.inbound_queue, 1, T0)


def clean_run() -> tuple[list[StateRecord], dict[str, str], list[Attack], list[DeadLetter]]:
    """A run in which every attack was refused: victim orders o-1 (chaos-1) and o-2 (chaos-2), the
    intruder's own o-1, and a cancel, replyTo, operator actions and foreign sends on o-2."""
    attacks = [
        Attack(AttackKind.SAME_ID, "o-1", VICTIM.client_id, "o-1:submit"),
        *(attack for attack, _ in message_attacks(OTHER, "o-2", "r1")),
        Attack(AttackKind.FOREIGN_QUEUE, "o-1", VICTIM.client_id, VICTIM.inbound_queue, refused=True),
        Attack(AttackKind.FOREIGN_QUEUE, "o-1", VICTIM.client_id, "agent-inventory", refused=True),
    ]
    expected = {
        AttackKind.CANCEL: UNKNOWN_ORDER,
        AttackKind.REPLY_TO: REPLY_TO_NOT_REGISTERED,
        AttackKind.OPERATOR_ACTION: OPERATOR_ACTION_NOT_ACCEPTED,
    }
    letters = [dead(a.message_id, expected[a.kind]) for a in attacks if a.kind in expected]
    records = [state(VICTIM, "o-1"), state(OTHER, "o-2"), state(INTRUDER, "o-1")]
    owners = {"o-1": VICTIM.reply_queue, "o-2": OTHER.reply_queue}
    return records, owners, attacks, letters


def effects_of(
    records: list[StateRecord], owners: dict[str, str], attacks: list[Attack], letters: list[DeadLetter]
) -> CrossClientEffects:
    return count_cross_client_effects(
        records, intruder=INTRUDER, clients=CLIENTS, owners=owners, attacks=attacks, dead_letters=letters
    )


def test_a_run_whose_attacks_were_all_refused_has_no_cross_client_effect() -> None:
    effects = effects_of(*clean_run())
    assert effects == CrossClientEffects()
    assert effects.total == 0
    assert "cross_client_effects" in CHAOS_INVARIANTS
    assert "misrouted_replies" in CHAOS_INVARIANTS


Change = Callable[[list[StateRecord], dict[str, str], list[Attack], list[DeadLetter]], None]


def _retarget(records: list[StateRecord], index: int, **changes: object) -> None:
    records[index] = records[index].model_copy(update=changes)


CHANGES: dict[str, tuple[Change, str]] = {
    "a victim's record answers on the intruder's queue": (
        lambda r, o, a, d: _retarget(r, 0, reply_to=INTRUDER.reply_queue),
        "victim_record_not_its_clients",
    ),
    "a victim's record names the intruder as its client": (
        lambda r, o, a, d: _retarget(r, 1, client_id=INTRUDER.client_id),
        "victim_record_not_its_clients",
    ),
    "a record under a victim's key that no victim submitted": (
        lambda r, o, a, d: r.append(state(VICTIM, "o-9")),
        "victim_record_not_its_clients",
    ),
    "a victim's order with a cancel requested": (
        lambda r, o, a, d: _retarget(r, 1, cancel_requested_at=T0),
        "victim_cancel_requested",
    ),
    "the intruder's record answers on a victim's queue": (
        lambda r, o, a, d: _retarget(r, 2, reply_to=VICTIM.reply_queue),
        "intruder_record_not_its_own",
    ),
    "the intruder's record names a victim as its client": (
        lambda r, o, a, d: _retarget(r, 2, client_id=VICTIM.client_id),
        "intruder_record_not_its_own",
    ),
    "an intruder record from an attack other than same_id": (
        lambda r, o, a, d: r.append(state(INTRUDER, "o-2")),
        "intruder_record_unexpected",
    ),
    "a foreign-queue send that was accepted": (
        lambda r, o, a, d: a.append(
            Attack(AttackKind.FOREIGN_QUEUE, "o-1", VICTIM.client_id, "agent-responses-x", refused=False)
        ),
        "foreign_send_accepted",
    ),
    "a cancel dead-lettered for another reason": (
        lambda r, o, a, d: d.__setitem__(0, replace(d[0], reason="InvalidMessage")),
        "attack_unrefused",
    ),
    "an operator action never dead-lettered": (lambda r, o, a, d: d.remove(d[-1]), "attack_unrefused"),
    "a same-id submission that was not recorded as the intruder's": (
        lambda r, o, a, d: r.remove(r[2]),
        "attack_unrefused",
    ),
    "a same-id submission that was dead-lettered": (
        lambda r, o, a, d: d.append(dead("o-1:submit", "ConflictingOrder")),
        "attack_unrefused",
    ),
}


@pytest.mark.parametrize("change", list(CHANGES), ids=list(CHANGES))
def test_each_kind_of_cross_client_effect_is_counted_once(change: str) -> None:
    records, owners, attacks, letters = clean_run()
    apply, kind = CHANGES[change]
    apply(records, owners, attacks, letters)

    effects = effects_of(records, owners, attacks, letters)

    assert vars(effects) == {**vars(CrossClientEffects()), kind: 1}
    assert effects.total == 1


def test_a_message_dead_lettered_twice_with_its_reason_is_one_refused_attack() -> None:
    records, owners, attacks, letters = clean_run()
    assert effects_of(records, owners, attacks, [*letters, letters[0]]).total == 0


def test_the_attack_bodies_are_refused_by_the_real_intake_with_the_reasons_counted_on() -> None:
    states, orders, queues = InMemoryStateStore(), InMemoryOrderStore(), InMemoryQueueFactory()
    clock = FakeClock(T0)
    settings = Settings(CLIENTS=json.dumps([{"id": c.client_id} for c in CLIENTS]))

    def intake(body: str, client: RegisteredClient) -> str | None:
        try:
            handle_intake_message(
                body,
                client=client,
                orders=orders,
                states=states,
                queues=queues,
                clock=clock,
                settings=settings,
            )
        except InvalidMessage as refused:
            return refused.reason
        return None

    assert intake(order_body("tpch-7", reply_to=VICTIM.reply_queue), VICTIM) is None
    reasons = {a.kind: intake(body, INTRUDER) for a, body in message_attacks(VICTIM, "tpch-7", "r1")}
    own = SubmitOrder.model_validate({**same_id_order("tpch-7"), "replyTo": INTRUDER.reply_queue})
    assert intake(own.to_json(), INTRUDER) is None

    assert reasons == {
        AttackKind.CANCEL: UNKNOWN_ORDER,
        AttackKind.REPLY_TO: REPLY_TO_NOT_REGISTERED,
        AttackKind.OPERATOR_ACTION: OPERATOR_ACTION_NOT_ACCEPTED,
    }
    victim = states.get(order_key(VICTIM.client_id, "tpch-7")).item
    assert (victim.client_id, victim.reply_to, victim.cancel_requested_at) == (
        VICTIM.client_id,
        VICTIM.reply_queue,
        None,
    )
    mine = states.get(order_key(INTRUDER.client_id, "tpch-7")).item
    assert (mine.client_id, mine.reply_to) == (INTRUDER.client_id, INTRUDER.reply_queue)
    assert orders.get(mine.order_id).items[0].sku == UNSTOCKED_SKU


def test_the_intruder_attacks_recorded_victim_orders_with_every_kind_then_stops() -> None:
    states, queues = InMemoryStateStore(), InMemoryQueueFactory()
    for client, order_id in ((VICTIM, "tpch-1"), (OTHER, "tpch-2"), (VICTIM, "tpch-3")):
        states.create(state(client, order_id))
    tried: list[str] = []

    def refuse(url: str, body: str) -> bool:
        tried.append(url)
        return True

    intruder = Intruder(
        INTRUDER,
        queues,
        f"http://127.0.0.1:1/acct/{INTRUDER.inbound_queue}?sig=abc",
        victims=[VICTIM, OTHER],
        order_ids=["tpch-1", "tpch-2", "tpch-3", "tpch-4"],  # tpch-4 was never submitted
        states=states,
        foreign_queues=["agent-inventory"],
        plan=IntruderPlan(rounds=1, per_round=1, every_s=0.01),
        send_foreign=refuse,
    )
    intruder.start()
    deadline = time.monotonic() + 10
    while len(intruder.snapshot()) < 7 and time.monotonic() < deadline:
        time.sleep(0.01)
    intruder.stop()

    attacks = intruder.snapshot()
    assert attack_counts(attacks) == {
        "same_id": 1,
        "cancel": 1,
        "reply_to": 1,
        "operator_action": 2,
        "foreign_queue": 2,
    }
    same, target = attacks[0].order_id, attacks[1].order_id
    assert same != target and {same, target} <= {"tpch-1", "tpch-2", "tpch-3"}
    assert intruder.own_order_ids() == {same}
    # Its foreign sends carry its own SAS, on the victim's inbound queue and the agent queue.
    victim_inbound = {VICTIM.client_id: VICTIM.inbound_queue, OTHER.client_id: OTHER.inbound_queue}
    assert tried == [
        f"http://127.0.0.1:1/acct/{victim_inbound[attacks[0].victim]}?sig=abc",
        "http://127.0.0.1:1/acct/agent-inventory?sig=abc",
    ]
    sent = [m for m in queues.queue(INTRUDER.inbound_queue).receive(max_messages=32)]
    assert sorted(m.message_id for m in sent) == sorted(a.message_id for a in attacks[:5])
    submitted = parse_message(SubmitOrder, next(m.body for m in sent if m.message_id == f"{same}:submit"))
    assert submitted.reply_to == INTRUDER.reply_queue


def test_a_plan_whose_dead_letters_one_peek_cannot_read_back_is_refused() -> None:
    assert IntruderPlan(rounds=3, per_round=2)  # 24 dead letters
    with pytest.raises(ValueError, match=str(DEAD_LETTER_PEEK)):
        IntruderPlan(rounds=4, per_round=2)


def test_a_foreign_url_is_the_queue_on_the_same_account_with_the_same_sas() -> None:
    own = "http://127.0.0.1:10001/devstoreaccount1/orders-chaos-intruder?sv=2024&sig=x%2F"
    assert (
        with_sas_of(own, "agent-inventory")
        == "http://127.0.0.1:10001/devstoreaccount1/agent-inventory?sv=2024&sig=x%2F"
    )


def test_an_intruder_that_attacked_nothing_is_unexercised() -> None:
    asked: dict[str, Any] = {
        "kill_every_s": 0.0,
        "duplicate_share": 0.0,
        "late_share": 0.0,
        "pause_every_s": 0.0,
    }
    assert unexercised({"orders": 60, "intruder_attacks": attack_counts([])}, **asked) == ["intruder"]
    assert unexercised({"orders": 60}, **asked) == []  # no intruder ran
    attacked = {**attack_counts([]), "cancel": 1}
    assert unexercised({"orders": 60, "intruder_attacks": attacked}, **asked) == []


def test_the_demo_counts_only_the_catalog_clients_orders() -> None:
    states = InMemoryStateStore()
    settled = {"process_state": ProcessState.PROCESSED}
    for record in (
        state(VICTIM, "o-1", **settled),
        state(VICTIM, "o-2"),
        state(INTRUDER, "o-1", process_state=ProcessState.COMPENSATED),
        state(INTRUDER, "o-2"),
    ):
        states.create(record)

    kept = catalog_records(all_records(states), [INTRUDER.client_id])
    assert sorted(r.order_id for r in kept) == ["chaos-1:o-1", "chaos-1:o-2"]
    # A record under another key that names the intruder as its client is left out too.
    assert catalog_records([state(VICTIM, "o-3", client_id=INTRUDER.client_id)], [INTRUDER.client_id]) == []
    assert catalog_settled(states, [INTRUDER.client_id]) == 1
    assert catalog_settled(states) == 2
    assert settled_own_orders(all_records(states), INTRUDER.client_id) == (2, 1)
