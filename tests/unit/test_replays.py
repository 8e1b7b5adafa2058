"""A dead letter's replay, raced and recorded: two operators replaying one dead letter at once both leave
an audit event (the loser's names the winner), the replayed order is taken in once, and the replay's
entry reaches the order's timeline once its record exists: never another client's order."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import pytest

from devhost.local_issuer import local_object_id
from intake.submission import IntakeResult
from operator_api.answers import OperatorResponse
from operator_api.handler import handle_operator_request
from operator_api.routing import OperatorApiSections
from orderflow import telemetry
from orderflow.alerts import NOT_ALERTS, REPLAY_KIND, ReplayDoc
from orderflow.clients import RegisteredClient
from orderflow.clock import FakeClock
from orderflow.errors import NotFound, TransientError
from orderflow.operator_auth import OPERATOR_ROLE
from orderflow.queues.base import ReceivedMessage
from orderflow.queues.memory import InMemoryQueueFactory
from orderflow.records import TimelineEntry
from orderflow.replays import (
    REPLAY_ACTION,
    is_replay_message_id,
    note_replayed_message,
    replay_message_id,
)
from orderflow.stores.base import AlertQuery
from orderflow.stores.memory import InMemoryAlertStore
from orderflow.workflows import ORDER_V1
from tests.host_deps import HostDeps
from tests.operator_tokens import TrustedIssuer
from tests.unit.fakes import TEST_CLIENT, memory_deps, order_body, received, submit_and_claim
from tests.unit.fakes import take_in as intake_of

pytestmark = pytest.mark.unit

INBOUND = TEST_CLIENT.inbound_queue
BASE = "/api/operator/deadletters"
KEY = f"{TEST_CLIENT.client_id}:o-7"

Events = list[tuple[str, dict[str, Any]]]


@pytest.fixture
def deps() -> HostDeps:
    return memory_deps(FakeClock())


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> Iterator[Events]:
    """Every event reported while the test runs, by any thread, with its fields (still logged too)."""
    seen: Events = []
    report = telemetry.event

    def recorded(name: str, /, **fields: Any) -> None:
        seen.append((name, fields))
        report(name, **fields)

    monkeypatch.setattr(telemetry, "event", recorded)
    yield seen


def audit_id(trusted: TrustedIssuer, name: str) -> str:
    return f"{trusted.issuer.tenant_id}/{local_object_id(name)}"


def dead_letter(
    deps: HostDeps, body: str, *, message_id: str, queue: str = INBOUND, correlation_id: str | None = None
) -> str:
    """Send ``body`` to ``queue`` and dead-letter it; its dead letter id."""
    assert isinstance(deps.queues, InMemoryQueueFactory)
    before = {d.dead_letter_id for d in deps.queues.dead_letter_page(queue).items}
    sent = deps.queues.queue(queue)
    sent.send(body, message_id=message_id, correlation_id=correlation_id)
    [message] = sent.receive()
    sent.dead_letter(message, reason="HandlerFailed", description="a bug in the handler, since fixed")
    [dead] = [d for d in deps.queues.dead_letter_page(queue).items if d.dead_letter_id not in before]
    return dead.dead_letter_id


def replay(deps: HostDeps, trusted: TrustedIssuer, operator: str, dead_id: str) -> OperatorResponse:
    headers = trusted.bearer(operator, OPERATOR_ROLE)
    path = f"{BASE}/{INBOUND}/{dead_id}/replay"
    return handle_operator_request(
        "POST",
        path,
        headers,
        b"",
        deps=deps,
        sections=OperatorApiSections.of(deps.settings),
        validator=trusted.validator,
    )


def at_once(*calls: Callable[[], OperatorResponse]) -> list[OperatorResponse]:
    """Run ``calls`` on threads released together; their answers, in order."""
    start = threading.Barrier(len(calls))

    def run(call: Callable[[], OperatorResponse]) -> OperatorResponse:
        start.wait()
        return call()

    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(run, calls))


def take_in(deps: HostDeps, message: ReceivedMessage, client: RegisteredClient = TEST_CLIENT) -> IntakeResult:
    """The intake of ``message`` from ``client``'s inbound queue, as a host runs it."""
    result: IntakeResult = intake_of(
        deps, message, client, definition=ORDER_V1, message_id=message.message_id, replays=deps.alerts
    )
    return result


def replay_entries(deps: HostDeps, key: str) -> list[TimelineEntry]:
    return [entry for entry in deps.states.get(key).item.timeline if entry.action == REPLAY_ACTION]


def test_two_operators_replaying_one_dead_letter_at_once_are_both_audited_and_it_is_taken_in_once(
    deps: HostDeps, trusted: TrustedIssuer, events: Events
) -> None:
    dead_id = dead_letter(deps, order_body("o-7"), message_id=f"{KEY}:submit")

    answers = at_once(
        lambda: replay(deps, trusted, "otto", dead_id), lambda: replay(deps, trusted, "olga", dead_id)
    )
    messages = received(deps.queues.queue(INBOUND))
    results = [take_in(deps, message) for message in messages]

    [won] = [a for a in answers if a.status == 200]
    [lost] = [a for a in answers if a.status != 200]
    winner = won.body["replayedBy"]
    replay_id = replay_message_id(f"{KEY}:submit", queue=INBOUND, dead_letter_id=dead_id)
    winner_name, loser_name = ("otto", "olga") if winner == audit_id(trusted, "otto") else ("olga", "otto")
    loser = audit_id(trusted, loser_name)
    assert (lost.status, lost.body["error"]["code"]) == (409, "AlreadyReplayed")
    assert lost.body["error"]["replayed"] == {
        "by": winner,
        "byName": winner_name,
        "at": lost.body["error"]["replayed"]["at"],
        "replayMessageId": replay_id,
        "orderId": KEY,
    }
    assert winner in lost.body["error"]["message"]
    audit = [
        (name, f["operator"], f.get("reason"), f.get("replayed_by")) for name, f in events if "operator" in f
    ]
    assert sorted(audit) == sorted(
        [
            ("operator.deadletter_replayed", winner, "HandlerFailed", None),
            ("operator.refused", loser, "AlreadyReplayed", winner),
        ]
    )
    assert [(m.message_id, r.order_id, r.outcome.value) for m, r in zip(messages, results, strict=True)] == [
        (replay_id, KEY, "accepted")
    ]
    [entry] = replay_entries(deps, KEY)
    assert (entry.by, entry.outcome, entry.role) == (winner, replay_id, "operator")
    assert [e.action for e in deps.states.get(KEY).item.timeline] == ["submit", REPLAY_ACTION]


def test_the_replay_entry_is_written_once_whichever_of_replay_and_intake_finds_the_record(
    deps: HostDeps, trusted: TrustedIssuer
) -> None:
    # o-1 is on record before its replay: the replay writes the entry, the intake finds it there.
    submit_and_claim(deps, definition=ORDER_V1, order_id=f"{TEST_CLIENT.client_id}:o-1")
    known = dead_letter(deps, order_body("o-1"), message_id="a:o-1:submit")
    # o-2 is not: the intake writes it when it creates the record, and a redelivery adds nothing.
    new = dead_letter(deps, order_body("o-2"), message_id="a:o-2:submit")

    first = replay(deps, trusted, "otto", known)
    on_record_at_once = replay_entries(deps, "a:o-1")
    second = replay(deps, trusted, "olga", new)
    with pytest.raises(NotFound):
        deps.states.get("a:o-2")
    messages = received(deps.queues.queue(INBOUND))
    for message in [*messages, *messages]:  # each delivered twice
        take_in(deps, message)

    assert (first.status, second.status) == (200, 200)
    assert [e.by for e in on_record_at_once] == [first.body["replayedBy"]]
    assert [e.by for e in replay_entries(deps, "a:o-1")] == [first.body["replayedBy"]]
    assert [(e.by, e.outcome) for e in replay_entries(deps, "a:o-2")] == [
        (second.body["replayedBy"], replay_message_id("a:o-2:submit", queue=INBOUND, dead_letter_id=new))
    ]


TWO_CLIENTS = json.dumps([{"id": "a", "replyQueue": "client-a"}, {"id": "b"}])


def test_the_replay_entry_never_goes_to_another_clients_order(trusted: TrustedIssuer) -> None:
    deps = memory_deps(FakeClock(), CLIENTS=TWO_CLIENTS)
    b = deps.settings.clients.clients().get("b")
    assert b is not None
    submit = ReceivedMessage(
        message_id="b:o-9:submit", body=order_body("o-9", reply_to="replies-b"), delivery_count=1
    )
    take_in(deps, submit, b)
    others = deps.states.get("b:o-9")
    # On client a's queue, a correlation id naming b's order: not linked to any order.
    forged = dead_letter(deps, order_body("o-9"), message_id="m-forged", correlation_id="b:o-9")
    # A dead letter of a's own order, linked to it; then b sends a message under its replay's id.
    own = dead_letter(deps, order_body("o-1"), message_id="m-own", correlation_id="o-1")

    answers = [replay(deps, trusted, "otto", forged), replay(deps, trusted, "otto", own)]
    for message in received(deps.queues.queue(INBOUND)):
        take_in(deps, message)
    own_replay = replay_message_id("m-own", queue=INBOUND, dead_letter_id=own)
    copied = ReceivedMessage(
        message_id=own_replay, body=order_body("o-1", reply_to="replies-b"), delivery_count=1
    )
    take_in(deps, copied, b)

    assert [(a.status, a.body["orderId"]) for a in answers] == [(200, None), (200, "a:o-1")]
    assert (deps.states.get("b:o-9").etag, replay_entries(deps, "b:o-9")) == (others.etag, [])
    assert replay_entries(deps, "a:o-9") == [] and replay_entries(deps, "b:o-1") == []
    assert [e.outcome for e in replay_entries(deps, "a:o-1")] == [own_replay]


def test_a_replay_of_a_dead_letter_never_replayed_is_404_and_audited(
    deps: HostDeps, trusted: TrustedIssuer, events: Events
) -> None:
    missing = replay(deps, trusted, "otto", "0000")

    assert (missing.status, missing.body["error"]["code"]) == (404, "NoSuchDeadLetter")
    assert "replayed" not in missing.body["error"]
    assert [(n, f["operator"], f["reason"], f["replayed_by"]) for n, f in events] == [
        ("operator.refused", audit_id(trusted, "otto"), "NoSuchDeadLetter", None)
    ]


class UnreadableRecords(InMemoryAlertStore):
    def find_replays(
        self, queue: str, *, dead_letter_id: str | None = None, replay_message_id: str | None = None
    ) -> list[ReplayDoc]:
        raise TransientError("the alerts container is unavailable")


def test_a_replay_that_cannot_read_the_records_is_503_and_still_audited(
    trusted: TrustedIssuer, events: Events
) -> None:
    deps = replace(memory_deps(FakeClock()), alerts=UnreadableRecords())

    answer = replay(deps, trusted, "otto", "0000")

    assert (answer.status, answer.body["error"]["code"]) == (503, "Unavailable")
    assert [(n, f["operator"], f["reason"]) for n, f in events] == [
        ("operator.refused", audit_id(trusted, "otto"), "Unavailable")
    ]


def test_replay_records_are_not_alerts_and_only_replay_ids_are_looked_up(
    deps: HostDeps, trusted: TrustedIssuer, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead_id = dead_letter(deps, order_body("o-7"), message_id=f"{KEY}:submit")
    replay(deps, trusted, "otto", dead_id)
    assert deps.alerts is not None

    listed = deps.alerts.list_documents(AlertQuery(exclude_kinds=NOT_ALERTS), max_item_count=10)
    stored = deps.alerts.list_documents(AlertQuery(kind=REPLAY_KIND), max_item_count=10)
    lookups: list[str] = []
    find = deps.alerts.find_replays

    def find_replays(queue: str, **kwargs: Any) -> Any:
        lookups.append(queue)
        return find(queue, **kwargs)

    monkeypatch.setattr(deps.alerts, "find_replays", find_replays)
    plain = note_replayed_message(
        deps.alerts, deps.states, queue=INBOUND, message_id=f"{KEY}:submit", order_id=KEY
    )

    assert listed.items == []
    assert [(d["deadLetterId"], d["ttl"]) for d in stored.items] == [
        (dead_id, int(deps.settings.supervisor.DEAD_LETTER_RETENTION_S))
    ]
    assert (plain, lookups) == (0, [])
    forms = ("a:replay:0123456789abcdef", ":replay:0123456789abcdef", "a:replay:1", "a:replay:x", "a", None)
    assert [is_replay_message_id(i) for i in forms] == [True, True, False, False, False, False]


def test_two_operators_purging_one_dead_letter_at_once_are_both_audited(
    deps: HostDeps, trusted: TrustedIssuer, events: Events
) -> None:
    dead_id = dead_letter(deps, "{}", message_id="m-1")

    def purge(operator: str) -> OperatorResponse:
        headers = trusted.bearer(operator, OPERATOR_ROLE)
        body = json.dumps({"deadLetterId": dead_id}).encode()
        path = f"{BASE}/{INBOUND}/purge"
        return handle_operator_request(
            "POST",
            path,
            headers,
            body,
            deps=deps,
            sections=OperatorApiSections.of(deps.settings),
            validator=trusted.validator,
        )

    answers = at_once(lambda: purge("otto"), lambda: purge("olga"))

    assert sorted((a.status, a.body["count"]) for a in answers) == [(200, 0), (200, 1)]
    audit = sorted((f["operator"], f["count"]) for name, f in events if name == "operator.deadletter_purged")
    assert sorted(operator for operator, _ in audit) == sorted(audit_id(trusted, n) for n in ("otto", "olga"))
    assert sorted(count for _, count in audit) == [0, 1]


def detect_duplicates(monkeypatch: pytest.MonkeyPatch, deps: HostDeps, queue: str = INBOUND) -> list[str]:
    """From now on ``queue`` drops a message sent under an id it was sent under before, as Service Bus
    duplicate detection does inside its window (here: the rest of the test); the ids it dropped."""
    target = deps.queues.queue(queue)
    send, seen, dropped = target.send, set[str](), list[str]()

    def deduplicated(body: str, *, message_id: str, **options: Any) -> None:
        if message_id in seen:
            dropped.append(message_id)
            return
        seen.add(message_id)
        send(body, message_id=message_id, **options)

    monkeypatch.setattr(target, "send", deduplicated)
    return dropped


def test_two_dead_letters_of_one_order_replayed_in_a_row_go_under_two_ids_and_both_are_taken_in(
    deps: HostDeps, trusted: TrustedIssuer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The client sent its order twice, more than a window apart: both got in, both were dead-lettered.
    first = dead_letter(deps, order_body("o-7"), message_id=f"{KEY}:submit")
    second = dead_letter(deps, order_body("o-7"), message_id=f"{KEY}:submit")
    dropped = detect_duplicates(monkeypatch, deps)

    answers = [replay(deps, trusted, "otto", first), replay(deps, trusted, "otto", second)]
    messages = received(deps.queues.queue(INBOUND))
    results = [take_in(deps, message) for message in messages]

    ids = [a.body["replayMessageId"] for a in answers]
    assert [a.status for a in answers] == [200, 200]
    assert ids[0] != ids[1] and all(i.startswith(f"{KEY}:submit:replay:") for i in ids)
    assert (dropped, [m.message_id for m in messages]) == ([], ids)
    assert [r.outcome.value for r in results] == ["accepted", "duplicate"]
    assert sorted(e.outcome or "" for e in replay_entries(deps, KEY)) == sorted(ids)


def test_a_replay_retried_after_it_sent_but_failed_goes_under_the_same_id_and_is_taken_in_once(
    deps: HostDeps, trusted: TrustedIssuer, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead_id = dead_letter(deps, order_body("o-7"), message_id=f"{KEY}:submit")
    dropped = detect_duplicates(monkeypatch, deps)
    assert isinstance(deps.alerts, InMemoryAlertStore)
    put = deps.alerts.put_replay
    failures = iter([TransientError("the alerts container is unavailable")])

    def put_once_failing(record: ReplayDoc) -> None:
        for failure in failures:
            raise failure  # after the send, before the dead letter is deleted
        put(record)

    monkeypatch.setattr(deps.alerts, "put_replay", put_once_failing)

    failed = replay(deps, trusted, "otto", dead_id)
    retried = replay(deps, trusted, "olga", dead_id)
    messages = received(deps.queues.queue(INBOUND))

    assert (failed.status, retried.status) == (503, 200)
    assert dropped == [retried.body["replayMessageId"]]
    assert [m.message_id for m in messages] == dropped


def test_a_client_sending_under_a_replay_id_first_cannot_make_the_replay_vanish(
    deps: HostDeps, trusted: TrustedIssuer, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead_id = dead_letter(deps, order_body("o-7"), message_id=f"{KEY}:submit")
    dropped = detect_duplicates(monkeypatch, deps)
    # The client claims the ids a replay of its dead letter could be expected to go under.
    claimed = [f"{KEY}:submit:replay:{n}" for n in (1, 2)]
    for message_id in claimed:
        deps.queues.queue(INBOUND).send(order_body("o-7"), message_id=message_id)

    replayed = replay(deps, trusted, "otto", dead_id)
    messages = received(deps.queues.queue(INBOUND))
    for message in messages:
        take_in(deps, message)

    replay_id = replayed.body["replayMessageId"]
    assert (replayed.status, dropped) == (200, [])
    assert replay_id not in claimed
    assert [m.message_id for m in messages] == [*claimed, replay_id]
    assert [e.outcome for e in replay_entries(deps, KEY)] == [replay_id]
