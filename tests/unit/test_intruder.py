"""The chaos run's intruder (demo.intruder.attacks): its attacks against the real intake, and the count of
cross-client effects."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from demo.chaos.report import CHAOS_INVARIANTS, unexercised
from demo.intruder.attacks import (
    DEAD_LETTER_ROOM,
    INTRUDER_CLIENT,
    REPLAY_ACTION,
    UNSTOCKED_SKU,
    Attack,
    AttackKind,
    attack_counts,
    correlation_attacks,
    flood_attacks,
    hostile_text_attacks,
    message_attacks,
    same_id_order,
    with_sas_of,
)
from demo.intruder.effects import (
    CrossClientEffects,
    OperatorFindings,
    StoredAlert,
    count_cross_client_effects,
    settled_own_orders,
)
from demo.intruder.hostile_text import HOSTILE_CASES
from demo.intruder.intruder import Intruder, IntruderPlan
from demo.intruder.operator import OperatorSession, replayed_as, replayed_victims, victim_etags
from demo.outcome import all_records, catalog_records
from demo.system import catalog_settled
from intake.submission import handle_intake_message
from operator_api.deadletters import every_dead_letter
from operator_api.handler import handle_operator_request
from operator_api.routing import OperatorApiSections
from orderflow import telemetry
from orderflow.alert_sink import AlertSink
from orderflow.clients import RegisteredClient
from orderflow.clock import FakeClock
from orderflow.consumer import settle
from orderflow.errors import InvalidMessage
from orderflow.messages import (
    OPERATOR_ACTION_NOT_ACCEPTED,
    REPLY_TO_NOT_REGISTERED,
    SubmitOrder,
    parse_message,
)
from orderflow.operator_auth import OPERATOR_ROLE
from orderflow.order_requests import UNKNOWN_ORDER
from orderflow.queues.base import DeadLetter, ReceivedMessage
from orderflow.queues.memory import InMemoryQueueFactory
from orderflow.records import ProcessState, RetryBudget, StateRecord, TimelineEntry, order_key
from orderflow.replays import replay_message_id
from orderflow.settings import Settings
from orderflow.stores.memory import InMemoryOrderStore, InMemoryStateStore
from orderflow_client.operator_client import OperatorAnswer, OperatorApiClient
from tests.host_deps import HostDeps
from tests.operator_tokens import TrustedIssuer
from tests.unit.fakes import memory_deps, order_body, take_in

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


def dead(message_id: str, reason: str, delivery_count: int = 1) -> DeadLetter:
    return DeadLetter(message_id, "{}", reason, "", INTRUDER.inbound_queue, delivery_count, T0)


FLOOD = 5
"""Conflicting resends in the runs of these tests."""
CORRELATION = 3
"""``correlation_id`` attacks on one victim order."""


def alert(alert_id: str, *, client_id: str | None = None, count: int = 1, minute: int = 0) -> StoredAlert:
    kind = "conflicting_order" if client_id else "order_gave_up"
    return StoredAlert(alert_id, kind, client_id, count, T0 + timedelta(minutes=minute))


Run = tuple[list[StateRecord], dict[str, str], list[Attack], list[DeadLetter], OperatorFindings]


def _never_replayed(operator: OperatorFindings, message_id: str) -> None:
    del operator.replayed[message_id]


def clean_run() -> Run:
    """A run in which every attack was refused: victim orders o-1 (chaos-1) and o-2 (chaos-2), the
    intruder's own o-1, and a cancel, replyTo, operator actions, correlation ids (replayed by the
    operator), hostile text and foreign sends on o-2, and a flood of o-1 counted into one alert."""
    same = Attack(AttackKind.SAME_ID, "o-1", VICTIM.client_id, "o-1:submit")
    correlated = [o.attack for o in correlation_attacks(OTHER, "o-2", "r1")]
    attacks = [
        same,
        *(attack for attack, _ in message_attacks(OTHER, "o-2", "r1")),
        *correlated,
        *(o.attack for o in hostile_text_attacks(OTHER, "o-2", "r1", INTRUDER)),
        *(o.attack for o in flood_attacks(INTRUDER, same, FLOOD)),
        Attack(AttackKind.FOREIGN_QUEUE, "o-1", VICTIM.client_id, VICTIM.inbound_queue, refused=True),
        Attack(AttackKind.FOREIGN_QUEUE, "o-1", VICTIM.client_id, "agent-inventory", refused=True),
    ]
    letters = [
        dead(a.message_id, a.expected_reason)
        for a in attacks
        if a.expected_reason is not None and a.kind is not AttackKind.CORRELATION_ID
    ]
    # The operator replayed the correlation attacks: their replays were dead-lettered again.
    replays = {
        a.message_id: replay_message_id(a.message_id, queue=INTRUDER.inbound_queue, dead_letter_id=str(n))
        for n, a in enumerate(correlated)
    }
    letters += [dead(replays[a.message_id], str(a.expected_reason)) for a in correlated]
    records = [state(VICTIM, "o-1"), state(OTHER, "o-2"), state(INTRUDER, "o-1")]
    owners = {"o-1": VICTIM.reply_queue, "o-2": OTHER.reply_queue}
    operator = OperatorFindings(
        linked=[None, None, f"{INTRUDER_CLIENT}:o-2"],
        replayed=dict(replays),
        alerts=[alert("late"), alert("flood", client_id=INTRUDER_CLIENT, count=FLOOD), alert("early")],
        alert_page=3,
    )
    return records, owners, attacks, letters, operator


def effects_of(
    records: list[StateRecord],
    owners: dict[str, str],
    attacks: list[Attack],
    letters: list[DeadLetter],
    operator: OperatorFindings | None,
) -> CrossClientEffects:
    return count_cross_client_effects(
        records,
        intruder=INTRUDER,
        clients=CLIENTS,
        owners=owners,
        attacks=attacks,
        dead_letters=letters,
        operator=operator,
    )


def test_a_run_whose_attacks_were_all_refused_has_no_cross_client_effect() -> None:
    effects = effects_of(*clean_run())
    assert set(attack_counts(clean_run()[2]).values()) != {0}
    assert effects == CrossClientEffects()
    assert effects.total == 0
    assert "cross_client_effects" in CHAOS_INVARIANTS
    assert "misrouted_replies" in CHAOS_INVARIANTS


Change = Callable[[list[StateRecord], dict[str, str], list[Attack], list[DeadLetter], OperatorFindings], None]


def _retarget(records: list[StateRecord], index: int, **changes: object) -> None:
    records[index] = records[index].model_copy(update=changes)


def _reason_of(letters: list[DeadLetter], kind: AttackKind, attacks: list[Attack], reason: str) -> None:
    message_id = next(a.message_id for a in attacks if a.kind is kind)
    index = next(n for n, d in enumerate(letters) if d.message_id == message_id)
    letters[index] = replace(letters[index], reason=reason)


def _replay_on_timeline(records: list[StateRecord]) -> None:
    entry = TimelineEntry(seq=2, at=T0, role="operator", action=REPLAY_ACTION, to_state=ProcessState.PENDING)
    _retarget(records, 1, timeline=[*records[1].timeline, entry])


def _split_flood(operator: OperatorFindings) -> None:
    operator.alert_page = 10  # nothing pushed off the page: only the second alert counts
    operator.alerts[1:2] = [
        alert("flood-a", client_id=INTRUDER_CLIENT, count=2),
        alert("flood-b", client_id=INTRUDER_CLIENT, count=FLOOD - 2, minute=1),
    ]


def _correlation(attacks: list[Attack]) -> str:
    return next(a.message_id for a in attacks if a.kind is AttackKind.CORRELATION_ID)


CHANGES: dict[str, tuple[Change, str]] = {
    "a victim's record answers on the intruder's queue": (
        lambda r, o, a, d, op: _retarget(r, 0, reply_to=INTRUDER.reply_queue),
        "victim_record_not_its_clients",
    ),
    "a victim's record names the intruder as its client": (
        lambda r, o, a, d, op: _retarget(r, 1, client_id=INTRUDER.client_id),
        "victim_record_not_its_clients",
    ),
    "a record under a victim's key that no victim submitted": (
        lambda r, o, a, d, op: r.append(state(VICTIM, "o-9")),
        "victim_record_not_its_clients",
    ),
    "a victim's order with a cancel requested": (
        lambda r, o, a, d, op: _retarget(r, 1, cancel_requested_at=T0),
        "victim_cancel_requested",
    ),
    "the intruder's record answers on a victim's queue": (
        lambda r, o, a, d, op: _retarget(r, 2, reply_to=VICTIM.reply_queue),
        "intruder_record_not_its_own",
    ),
    "the intruder's record names a victim as its client": (
        lambda r, o, a, d, op: _retarget(r, 2, client_id=VICTIM.client_id),
        "intruder_record_not_its_own",
    ),
    "an intruder record from an attack other than same_id": (
        lambda r, o, a, d, op: r.append(state(INTRUDER, "o-2")),
        "intruder_record_unexpected",
    ),
    "a foreign-queue send that was accepted": (
        lambda r, o, a, d, op: a.append(
            Attack(AttackKind.FOREIGN_QUEUE, "o-1", VICTIM.client_id, "agent-responses-x", refused=False)
        ),
        "foreign_send_accepted",
    ),
    "a cancel dead-lettered for another reason": (
        lambda r, o, a, d, op: _reason_of(d, AttackKind.CANCEL, a, "InvalidMessage"),
        "attack_unrefused",
    ),
    "an operator action never dead-lettered": (
        lambda r, o, a, d, op: d.remove(next(x for x in d if x.message_id.endswith(":compensate:o-2"))),
        "attack_unrefused",
    ),
    "a same-id submission that was not recorded as the intruder's": (
        lambda r, o, a, d, op: r.remove(r[2]),
        "attack_unrefused",
    ),
    "a same-id submission that was dead-lettered": (
        lambda r, o, a, d, op: d.append(dead("o-1:submit", "ConflictingOrder")),
        "attack_unrefused",
    ),
    "hostile text dead-lettered for another reason than its own": (
        lambda r, o, a, d, op: _reason_of(d, AttackKind.HOSTILE_TEXT, a, "InvalidField"),
        "attack_unrefused",
    ),
    "a correlation-id dead letter still there after its replay": (
        lambda r, o, a, d, op: d.append(dead(_correlation(a), "UnknownOrder")),
        "attack_unrefused",
    ),
    "a correlation-id dead letter the operator never replayed": (
        lambda r, o, a, d, op: _never_replayed(op, _correlation(a)),
        "attack_unrefused",
    ),
    "a replay that wrote a victim's timeline": (
        lambda r, o, a, d, op: _replay_on_timeline(r),
        "victim_timeline_replayed",
    ),
    "a victim's record rewritten across the replays": (
        lambda r, o, a, d, op: setattr(op, "victims_changed", 1),
        "victim_record_changed_by_replay",
    ),
    "a dead-letter view linked to a victim's order": (
        lambda r, o, a, d, op: op.linked.append(order_key(OTHER.client_id, "o-2")),
        "linked_to_another_client",
    ),
    "a replay answer linked to a bare order key": (
        lambda r, o, a, d, op: op.linked.append("o-2"),
        "linked_to_another_client",
    ),
    "an operator answer that was not 200 JSON": (
        lambda r, o, a, d, op: setattr(op, "failed_answers", 1),
        "operator_answer_failed",
    ),
    "two stored conflicting_order alerts in one window instead of one": (
        lambda r, o, a, d, op: _split_flood(op),
        "intruder_alerts_not_counted",
    ),
    "a counted alert one short of the resends dead-lettered": (
        lambda r, o, a, d, op: op.alerts.__setitem__(1, replace(op.alerts[1], count=FLOOD - 1)),
        "intruder_alert_count_wrong",
    ),
    "a counted alert one over the deliveries of the resends": (
        lambda r, o, a, d, op: op.alerts.__setitem__(1, replace(op.alerts[1], count=FLOOD + 1)),
        "intruder_alert_count_wrong",
    ),
}


@pytest.mark.parametrize("change", list(CHANGES), ids=list(CHANGES))
def test_each_kind_of_cross_client_effect_is_counted_once(change: str) -> None:
    records, owners, attacks, letters, operator = clean_run()
    apply, kind = CHANGES[change]
    apply(records, owners, attacks, letters, operator)

    effects = effects_of(records, owners, attacks, letters, operator)

    assert vars(effects) == {**vars(CrossClientEffects()), kind: 1}
    assert effects.total == 1


def test_a_flood_stored_alert_by_alert_pushes_the_victims_alerts_off_the_newest_page() -> None:
    records, owners, attacks, letters, operator = clean_run()
    one_by_one = [alert(f"flood-{n}", client_id=INTRUDER_CLIENT, minute=n) for n in range(FLOOD)]
    operator.alerts = [*one_by_one, alert("late"), alert("early")]

    effects = effects_of(records, owners, attacks, letters, operator)

    # One alert per window would have left both victims' alerts on the page of 3; none is on it.
    assert (effects.intruder_alerts_not_counted, effects.victim_alerts_pushed_out) == (FLOOD - 1, 2)
    assert effects.intruder_alert_count_wrong == 0
    assert effects.total == FLOOD + 1


def test_a_flood_redelivered_may_count_each_delivery_and_no_more() -> None:
    records, owners, attacks, letters, operator = clean_run()
    flood = next(n for n, d in enumerate(letters) if d.message_id.startswith("intruder:flood:"))
    letters[flood] = replace(letters[flood], delivery_count=2)  # killed once after the alert
    counted = operator.alerts[1]

    operator.alerts[1] = replace(counted, count=FLOOD + 1)
    assert effects_of(records, owners, attacks, letters, operator).total == 0
    operator.alerts[1] = replace(counted, count=FLOOD + 2)
    assert effects_of(records, owners, attacks, letters, operator).intruder_alert_count_wrong == 1


def test_a_flood_over_two_windows_is_one_counted_alert_in_each() -> None:
    records, owners, attacks, letters, operator = clean_run()
    operator.alerts[1:2] = [
        alert("flood-next", client_id=INTRUDER_CLIENT, count=2, minute=60),
        alert("flood", client_id=INTRUDER_CLIENT, count=FLOOD - 2, minute=59),
    ]
    assert effects_of(records, owners, attacks, letters, operator).total == 0


def test_before_the_operator_replays_a_correlation_attack_is_expected_under_its_own_id() -> None:
    records, owners, attacks, _, _ = clean_run()
    letters = [dead(a.message_id, a.expected_reason) for a in attacks if a.expected_reason is not None]
    assert effects_of(records, owners, attacks, letters, None).total == 0
    replayed = effects_of(records, owners, attacks, letters, OperatorFindings(replayed={}))
    assert replayed.attack_unrefused == CORRELATION


def test_a_message_dead_lettered_twice_with_its_reason_is_one_refused_attack() -> None:
    records, owners, attacks, letters, operator = clean_run()
    assert effects_of(records, owners, attacks, [*letters, letters[0]], operator).total == 0


def test_the_attack_bodies_are_refused_by_the_real_intake_with_the_reasons_counted_on() -> None:
    states, orders, queues = InMemoryStateStore(), InMemoryOrderStore(), InMemoryQueueFactory()
    clock = FakeClock(T0)
    settings = Settings.load({}, CLIENTS=json.dumps([{"id": c.client_id} for c in CLIENTS]))

    def intake(body: str, client: RegisteredClient) -> str | None:
        try:
            handle_intake_message(
                body,
                client=client,
                orders=orders,
                states=states,
                queues=queues,
                clock=clock,
                steps=settings.steps,
                starter=settings.starter,
                queue_names=settings.queues,
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


def test_the_intruder_attacks_recorded_victim_orders_with_every_kind_then_floods_its_own_and_stops() -> None:
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
        plan=IntruderPlan(rounds=1, per_round=1, every_s=0.01, flood_resends=FLOOD),
        send_foreign=refuse,
    )
    intruder.start()
    deadline = time.monotonic() + 10
    recorded = False
    while attack_counts(intruder.snapshot())["conflict_flood"] < FLOOD and time.monotonic() < deadline:
        if intruder.own_order_ids() and not recorded:
            # The intake records its own order: only then can it be resent with other content.
            states.create(state(INTRUDER, next(iter(intruder.own_order_ids()))))
            recorded = True
        time.sleep(0.01)
    intruder.stop()

    attacks = intruder.snapshot()
    assert attack_counts(attacks) == {
        "same_id": 1,
        "cancel": 1,
        "reply_to": 1,
        "operator_action": 2,
        "foreign_queue": 2,
        "hostile_text": 2 * len(HOSTILE_CASES),
        "correlation_id": CORRELATION,
        "conflict_flood": FLOOD,
    }
    same, target = attacks[0].order_id, attacks[1].order_id
    assert same != target and {same, target} <= {"tpch-1", "tpch-2", "tpch-3"}
    assert intruder.own_order_ids() == {same}
    assert {a.order_id for a in attacks if a.kind is AttackKind.CONFLICT_FLOOD} == {same}
    # Its foreign sends carry its own SAS, on the victim's inbound queue and the agent queue.
    victim_inbound = {VICTIM.client_id: VICTIM.inbound_queue, OTHER.client_id: OTHER.inbound_queue}
    assert tried == [
        f"http://127.0.0.1:1/acct/{victim_inbound[attacks[0].victim]}?sig=abc",
        "http://127.0.0.1:1/acct/agent-inventory?sig=abc",
    ]
    inbound = queues.queue(INTRUDER.inbound_queue)
    sent = [m for _ in range(4) for m in inbound.receive(max_messages=32)]
    messages = [a for a in attacks if a.kind is not AttackKind.FOREIGN_QUEUE]
    assert sorted(m.message_id for m in sent) == sorted(a.message_id for a in messages)
    submitted = parse_message(SubmitOrder, next(m.body for m in sent if m.message_id == f"{same}:submit"))
    assert submitted.reply_to == INTRUDER.reply_queue
    victim_key = order_key(attacks[1].victim, target)
    correlations = {m.correlation_id for m in sent if ":correlation-" in m.message_id}
    assert correlations == {victim_key, target}


def test_a_plan_whose_dead_letters_one_listing_cannot_read_back_is_refused() -> None:
    plan = IntruderPlan(rounds=3, per_round=2)
    assert 0 < plan.most_dead_letters() <= DEAD_LETTER_ROOM
    with pytest.raises(ValueError, match="1024"):
        IntruderPlan(rounds=30, per_round=2)
    with pytest.raises(ValueError, match="1024"):
        IntruderPlan(flood_resends=DEAD_LETTER_ROOM)


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


def _intake(deps: HostDeps) -> Callable[[ReceivedMessage], object]:
    def handle(message: ReceivedMessage) -> object:
        client = deps.settings.clients.clients().for_inbound_queue(INTRUDER.inbound_queue)
        assert client is not None
        return take_in(deps, message, client)

    return handle


def _consume(deps: HostDeps, queue: str) -> None:
    """Settle every message on ``queue`` as the devhost's intake does."""
    handle = _intake(deps)
    while received := deps.queues.queue(queue).receive(max_messages=32):
        for message in received:
            settle(deps.queues.queue(queue), message, handle, max_delivery_count=5)


def _operator_api(deps: HostDeps, trusted: TrustedIssuer) -> OperatorApiClient:
    """An operator's client of the real handler, over ``deps`` (no network)."""

    def answer(request: httpx.Request) -> httpx.Response:
        path, _, query = request.url.raw_path.decode("ascii").partition("?")
        got = handle_operator_request(
            request.method,
            path,
            dict(request.headers),
            request.content,
            deps=deps,
            sections=OperatorApiSections.of(deps.settings),
            validator=trusted.validator,
            query=query,
        )
        return httpx.Response(got.status, content=got.content(), headers=got.all_headers())

    token = trusted.issuer.mint(name="otto", roles=[OPERATOR_ROLE])
    return OperatorApiClient("http://127.0.0.1", token=token, transport=httpx.MockTransport(answer))


def test_the_new_attacks_through_the_real_intake_and_operator_api_have_no_cross_client_effect(
    trusted: TrustedIssuer,
) -> None:
    deps = memory_deps(FakeClock(T0), CLIENTS=json.dumps([{"id": c.client_id} for c in CLIENTS]))
    sink = AlertSink(deps.alerts, deps.clock, "h1", window_s=3600) if deps.alerts is not None else None
    previous = telemetry.use_alert_sink(sink)
    inbound = deps.queues.queue(INTRUDER.inbound_queue)
    try:
        for client, order_id in ((VICTIM, "tpch-1"), (OTHER, "tpch-2")):
            handle_intake_message(
                order_body(order_id, reply_to=client.reply_queue),
                client=client,
                orders=deps.orders,
                states=deps.states,
                queues=deps.queues,
                clock=deps.clock,
                steps=deps.settings.steps,
                starter=deps.settings.starter,
                queue_names=deps.settings.queues,
            )
        same = Attack(AttackKind.SAME_ID, "tpch-1", VICTIM.client_id, "tpch-1:submit")
        own = SubmitOrder.model_validate({**same_id_order("tpch-1"), "replyTo": INTRUDER.reply_queue})
        inbound.send(own.to_json(), message_id=same.message_id)
        sent = [
            *correlation_attacks(OTHER, "tpch-2", "r1"),
            *hostile_text_attacks(OTHER, "tpch-2", "r1", INTRUDER),
            *flood_attacks(INTRUDER, same, FLOOD),
        ]
        for outgoing in sent:
            inbound.send(
                outgoing.body, message_id=outgoing.attack.message_id, correlation_id=outgoing.correlation_id
            )
        _consume(deps, INTRUDER.inbound_queue)
        attacks = [same, *(o.attack for o in sent)]
        victims_before = victim_etags(deps.states, replayed_victims(attacks))

        with _operator_api(deps, trusted) as api:
            session = OperatorSession(api, retry_s=0)
            correlated = {a.message_id for a in attacks if a.kind is AttackKind.CORRELATION_ID}
            session.replay(INTRUDER.inbound_queue, session.dead_letters(INTRUDER.inbound_queue), correlated)
            _consume(deps, INTRUDER.inbound_queue)
            session.dead_letters(INTRUDER.inbound_queue)
            session.findings.alerts = session.alerts()
    finally:
        telemetry.use_alert_sink(previous)
    findings = session.findings
    findings.victims_changed = sum(
        1
        for key, etag in victim_etags(deps.states, replayed_victims(attacks)).items()
        if victims_before[key] != etag
    )
    assert isinstance(deps.queues, InMemoryQueueFactory)
    letters = every_dead_letter(deps.queues, INTRUDER.inbound_queue)

    effects = effects_of(
        all_records(deps.states),
        {"tpch-1": VICTIM.reply_queue, "tpch-2": OTHER.reply_queue},
        attacks,
        letters,
        findings,
    )

    assert effects == CrossClientEffects(), vars(effects)
    assert set(findings.replayed) == correlated and findings.failed_answers == 0
    assert all(replay_id in {d.message_id for d in letters} for replay_id in findings.replayed.values())
    # The bare order id linked its dead letters to the intruder's own order of that id, never the victim's.
    assert {key for key in findings.linked if key is not None} == {
        f"{INTRUDER_CLIENT}:tpch-2",
        f"{INTRUDER_CLIENT}:tpch-1",
    }
    [flood] = [a for a in findings.alerts if a.kind == "conflicting_order"]
    assert (flood.client_id, flood.count) == (INTRUDER_CLIENT, FLOOD)
    reasons = {d.message_id: d.reason for d in letters}
    assert {a.message_id: a.expected_reason for a in attacks if a.kind is AttackKind.HOSTILE_TEXT} == {
        m: r
        for m, r in reasons.items()
        if m.startswith("intruder:r1:text:") or m.startswith("intruder:r1:fields:")
    }


def test_the_replay_id_is_read_from_the_answer_a_retried_call_got_a_409_with() -> None:
    replayed = {"replayMessageId": "m:replay:0123456789abcdef"}
    answers = [
        OperatorAnswer(200, replayed),
        OperatorAnswer(409, {"error": {"code": "AlreadyReplayed", "replayed": replayed}}),
        OperatorAnswer(404, {"error": {"code": "NoSuchDeadLetter"}}),
    ]
    assert [replayed_as(a) for a in answers] == [replayed["replayMessageId"]] * 2 + [None]
