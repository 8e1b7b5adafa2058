"""The operator API's dead-letter routes on Azurite: reading, replaying or purging never creates a queue,
whatever name the path holds (docs/operator-api.md#dead-letter-queues); two operators replaying one dead
letter at once re-send it once and are both audited."""

from __future__ import annotations

import json
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import pytest
from azure.storage.queue import QueueClient, QueueServiceClient

from devhost.emulators import LocalEndpoints
from devhost.local_issuer import local_object_id
from devhost.queues import dead_letter_scan
from devhost.queues.factory import StorageQueueFactory
from intake.submission import handle_intake_message
from operator_api.answers import OperatorResponse
from operator_api.deadletters import every_dead_letter
from operator_api.handler import handle_operator_request
from operator_api.routing import OperatorApiSections
from orderflow import telemetry
from orderflow.clock import FakeClock
from orderflow.errors import DeadLettersBusy
from orderflow.operator_auth import OPERATOR_ROLE
from orderflow.queues.base import ReceivedMessage
from orderflow.replays import REPLAY_ACTION, replay_message_id
from orderflow.settings import Settings
from orderflow.workflows import ORDER_V1
from tests.host_deps import HostDeps
from tests.operator_tokens import TrustedIssuer
from tests.unit.fakes import memory_deps, order_body

pytestmark = pytest.mark.integration

BASE = "/api/operator/deadletters"


def _call(
    deps: HostDeps,
    trusted: TrustedIssuer,
    method: str,
    path: str,
    body: object = None,
    *,
    operator: str = "otto",
) -> OperatorResponse:
    raw = b"" if body is None else json.dumps(body).encode()
    headers = trusted.bearer(operator, OPERATOR_ROLE)
    return handle_operator_request(
        method,
        path,
        headers,
        raw,
        deps=deps,
        sections=OperatorApiSections.of(deps.settings),
        validator=trusted.validator,
    )


def test_no_dead_letter_route_creates_a_queue(
    local_endpoints: LocalEndpoints, trusted: TrustedIssuer
) -> None:
    run = uuid.uuid4().hex[:8]
    overrides = {
        "CLIENTS": json.dumps([{"id": f"c{run}"}]),
        "AGENT_QUEUE_PREFIX": f"agent-{run}-",
        "AGENT_RESPONSES_QUEUE": f"agent-responses-{run}",
        "HOST_ID": "h1",
    }
    settings = Settings.load(env={}, **overrides)
    queues = StorageQueueFactory.from_connection_string(
        local_endpoints.storage_connection_string, creatable=settings.clients.is_deployment_queue
    )
    deps = replace(memory_deps(FakeClock(), **overrides), queues=queues, dead_letters=queues)
    (client,) = settings.clients.clients()
    inbound = client.inbound_queue
    queues.queue(inbound)  # the inbound queue exists, as a running host makes it; its dead-letter queue not
    account = QueueServiceClient.from_connection_string(local_endpoints.storage_connection_string)

    def names() -> set[str]:
        return {q.name for q in account.list_queues() if run in q.name}

    before = names()
    forged = [f"agent-responses-{run}-anything-at-all", f"{inbound}-deadletter", f"agent-{run}-nosuch"]
    refused = [
        _call(deps, trusted, method, f"{BASE}/{name}{suffix}", body)
        for name in forged
        for method, suffix, body in [
            ("GET", "", None),
            ("GET", "/0001", None),
            ("POST", "/0001/replay", None),
            ("POST", "/purge", {"deadLetterId": "0001"}),
        ]
    ]
    listed = _call(deps, trusted, "GET", f"{BASE}/{inbound}")
    shown = _call(deps, trusted, "GET", f"{BASE}/{inbound}/0001")
    replayed = _call(deps, trusted, "POST", f"{BASE}/{inbound}/0001/replay")
    purged = _call(deps, trusted, "POST", f"{BASE}/{inbound}/purge", {"olderThan": "2030-01-01T00:00:00Z"})
    after = names()
    queues.close()
    account.close()

    assert before == {inbound}
    assert {(r.status, r.body["error"]["code"]) for r in refused} == {(404, "UnknownQueue")}
    assert (listed.status, listed.body["deadLetters"], listed.body["continuation"]) == (200, [], None)
    assert (shown.status, shown.body["error"]["code"]) == (404, "NoSuchDeadLetter")
    assert (replayed.status, replayed.body["error"]["code"]) == (404, "NoSuchDeadLetter")
    assert (purged.status, purged.body["count"]) == (200, 0)
    assert after == before


def _azurite_deps(endpoints: LocalEndpoints, run: str) -> tuple[HostDeps, StorageQueueFactory, str]:
    """Dependencies whose queues are Azurite's, for one client ``c<run>``; and its inbound queue."""
    overrides = {"CLIENTS": json.dumps([{"id": f"c{run}"}]), "AGENT_QUEUE_PREFIX": f"agent-{run}-"}
    settings = Settings.load(env={}, **overrides)
    queues = StorageQueueFactory.from_connection_string(
        endpoints.storage_connection_string, creatable=settings.clients.is_deployment_queue
    )
    deps = replace(memory_deps(FakeClock(), **overrides), queues=queues, dead_letters=queues)
    (client,) = settings.clients.clients()
    return deps, queues, client.inbound_queue


def _dead_letter_many(queues: StorageQueueFactory, name: str, count: int) -> list[str]:
    """Dead-letter ``count`` messages on ``name``; their dead letter ids, oldest first."""
    queue = queues.queue(name)
    for n in range(count):
        queue.send(f'{{"n": {n}}}', message_id=f"m-{n}")
    left = count
    while left:
        for message in queue.receive(max_messages=32, lock_s=30):
            queue.dead_letter(message, reason="HandlerFailed", description="")
            left -= 1
    page = queues.dead_letter_page(name, max_messages=count)
    return [dead.dead_letter_id for dead in page.items]


def _visible_ids(endpoints: LocalEndpoints, name: str) -> list[str]:
    """The ids of every dead letter of ``name`` a receive gets now (hidden ones are not got), each made
    visible again at once."""
    client = QueueClient.from_connection_string(endpoints.storage_connection_string, f"{name}-deadletter")
    held = []
    try:
        while batch := list(
            client.receive_messages(messages_per_page=32, max_messages=32, visibility_timeout=5)
        ):
            held += batch
        return sorted(message.id for message in held)
    finally:
        for message in held:
            client.update_message(message.id, message.pop_receipt, visibility_timeout=0)
        client.close()


def test_two_operators_purging_two_dead_letters_at_once_both_succeed_and_hide_no_other(
    local_endpoints: LocalEndpoints, trusted: TrustedIssuer
) -> None:
    deps, queues, inbound = _azurite_deps(local_endpoints, uuid.uuid4().hex[:8])
    ids = _dead_letter_many(queues, inbound, 45)
    # Pairs on both sides of the first 32 (what one receive returns) and both beyond it.
    pairs = [(ids[3], ids[40]), (ids[35], ids[5]), (ids[33], ids[44]), (ids[0], ids[31]), (ids[20], ids[36])]
    answers: list[OperatorResponse] = []

    def purge(start: threading.Barrier, dead_letter_id: str) -> OperatorResponse:
        start.wait()
        return _call(deps, trusted, "POST", f"{BASE}/{inbound}/purge", {"deadLetterId": dead_letter_id})

    try:
        for pair in pairs:
            start = threading.Barrier(len(pair))
            with ThreadPoolExecutor(len(pair)) as pool:
                answers += list(pool.map(purge, [start] * len(pair), pair))
        left = sorted(
            dead.dead_letter_id for dead in queues.dead_letter_page(inbound, max_messages=100).items
        )
        visible = _visible_ids(local_endpoints, inbound)
    finally:
        queues.close()

    purged = {dead_letter_id for pair in pairs for dead_letter_id in pair}
    assert [(a.status, a.body["count"]) for a in answers] == [(200, 1)] * len(purged)
    assert left == visible == sorted(set(ids) - purged)


def _receive_all(queues: StorageQueueFactory, name: str) -> list[ReceivedMessage]:
    """Every message on ``name`` now (each completed), however many receives that takes."""
    queue, found = queues.queue(name), []
    while batch := queue.receive(max_messages=32, lock_s=30):
        for message in batch:
            queue.complete(message)
        found += batch
    return found


def test_two_operators_replaying_one_dead_letter_at_once_re_send_it_once_and_are_both_audited(
    local_endpoints: LocalEndpoints, trusted: TrustedIssuer, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps, queues, inbound = _azurite_deps(local_endpoints, uuid.uuid4().hex[:8])
    (client,) = deps.settings.clients.clients()
    account = QueueServiceClient.from_connection_string(local_endpoints.storage_connection_string)
    account.create_queue(client.reply_queue)  # a registered client's, made when it is registered
    key = f"{client.client_id}:o-7"
    queue = queues.queue(inbound)
    queue.send(order_body("o-7", reply_to=client.reply_queue), message_id=f"{key}:submit")
    [message] = queue.receive(lock_s=30)
    queue.dead_letter(message, reason="HandlerFailed", description="a bug in the handler, since fixed")
    [dead] = queues.dead_letter_page(inbound).items
    events: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(telemetry, "event", lambda name, /, **fields: events.append((name, fields)))
    start = threading.Barrier(2)

    def replay(operator: str) -> OperatorResponse:
        start.wait()
        path = f"{BASE}/{inbound}/{dead.dead_letter_id}/replay"
        return _call(deps, trusted, "POST", path, operator=operator)

    try:
        with ThreadPoolExecutor(2) as pool:
            answers = list(pool.map(replay, ["otto", "olga"]))
        resent = _receive_all(queues, inbound)
        taken = [
            handle_intake_message(
                m.body,
                client=client,
                orders=deps.orders,
                states=deps.states,
                queues=queues,
                clock=deps.clock,
                steps=deps.settings.steps,
                starter=deps.settings.starter,
                queue_names=deps.settings.queues,
                definition=ORDER_V1,
                message_id=m.message_id,
                replays=deps.alerts,
            )
            for m in resent
        ]
        left = queues.dead_letter_page(inbound).items
    finally:
        queues.close()
        account.close()

    ids = {name: f"{trusted.issuer.tenant_id}/{local_object_id(name)}" for name in ("otto", "olga")}
    [won] = [a for a in answers if a.status == 200]
    [lost] = [a for a in answers if a.status != 200]
    winner = won.body["replayedBy"]
    [loser] = [audit for audit in ids.values() if audit != winner]
    assert (lost.status, lost.body["error"]["code"], lost.body["error"]["replayed"]["by"]) == (
        409,
        "AlreadyReplayed",
        winner,
    )
    audit = sorted((name, f["operator"], f.get("replayed_by")) for name, f in events if "operator" in f)
    assert audit == sorted(
        [("operator.deadletter_replayed", winner, None), ("operator.refused", loser, winner)]
    )
    assert [(m.message_id, t.outcome.value) for m, t in zip(resent, taken, strict=True)] == [
        (replay_message_id(f"{key}:submit", queue=inbound, dead_letter_id=dead.dead_letter_id), "accepted")
    ]
    assert left == []
    timeline = deps.states.get(key).item.timeline
    assert [(e.action, e.by) for e in timeline] == [("submit", client.client_id), (REPLAY_ACTION, winner)]


def test_two_dead_letters_of_one_order_replayed_in_a_row_go_under_two_ids_and_both_are_re_sent(
    local_endpoints: LocalEndpoints, trusted: TrustedIssuer
) -> None:
    deps, queues, inbound = _azurite_deps(local_endpoints, uuid.uuid4().hex[:8])
    (client,) = deps.settings.clients.clients()
    key = f"{client.client_id}:o-7"
    queue = queues.queue(inbound)
    for _ in range(2):  # the SDK sends every submission of one order under one id
        queue.send(order_body("o-7"), message_id=f"{key}:submit")
        [message] = queue.receive(lock_s=30)
        queue.dead_letter(message, reason="HandlerFailed", description="a bug in the handler, since fixed")
    try:
        dead = queues.dead_letter_page(inbound).items
        answers = [_call(deps, trusted, "POST", f"{BASE}/{inbound}/{d.dead_letter_id}/replay") for d in dead]
        resent = _receive_all(queues, inbound)
    finally:
        queues.close()

    expected = [replay_message_id(d.message_id, queue=inbound, dead_letter_id=d.dead_letter_id) for d in dead]
    assert [d.message_id for d in dead] == [f"{key}:submit"] * 2
    assert [(a.status, a.body["replayMessageId"]) for a in answers] == [(200, i) for i in expected]
    assert len(set(expected)) == 2 and sorted(m.message_id for m in resent) == sorted(expected)


def test_two_operators_purging_one_dead_letter_at_once_remove_it_once_and_are_both_audited(
    local_endpoints: LocalEndpoints, trusted: TrustedIssuer, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps, queues, inbound = _azurite_deps(local_endpoints, uuid.uuid4().hex[:8])
    [dead_id] = _dead_letter_many(queues, inbound, 1)
    events: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(telemetry, "event", lambda name, /, **fields: events.append((name, fields)))
    start = threading.Barrier(2)

    def purge(operator: str) -> OperatorResponse:
        start.wait()
        body = {"deadLetterId": dead_id}
        return _call(deps, trusted, "POST", f"{BASE}/{inbound}/purge", body, operator=operator)

    try:
        with ThreadPoolExecutor(2) as pool:
            answers = list(pool.map(purge, ["otto", "olga"]))
        left = queues.dead_letter_page(inbound).items
    finally:
        queues.close()

    ids = {name: f"{trusted.issuer.tenant_id}/{local_object_id(name)}" for name in ("otto", "olga")}
    counts = {answer.body["count"]: name for answer, name in zip(answers, ("otto", "olga"), strict=True)}
    audit = sorted((f["operator"], f["count"]) for name, f in events if name == "operator.deadletter_purged")
    assert sorted(counts) == [0, 1] and left == []
    assert audit == sorted([(ids[counts[1]], 1), (ids[counts[0]], 0)])


def test_lists_and_purges_at_once_are_complete_or_busy_never_short(
    local_endpoints: LocalEndpoints, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three operators list the dead letters over and over while ten purge one each: every purge
    removes its dead letter, and every list holds every dead letter nobody purges, or is
    ``DeadLettersBusy`` (a Storage queue is read by receiving, which hides what one reader holds)."""
    # A shorter base retry time meets, on an idle machine and within seconds, the race a loaded one
    # meets at the default's 10 s.
    monkeypatch.setattr(dead_letter_scan, "DEAD_LETTER_SCAN_RETRY_S", 2.0)
    _, queues, inbound = _azurite_deps(local_endpoints, uuid.uuid4().hex[:8])
    ids = _dead_letter_many(queues, inbound, 80)
    targets = ids[::8]  # ten, spread over the queue
    purging = threading.Event()
    lists: list[set[str] | None] = []  # None: the list was refused as busy

    def list_until_done(start: threading.Barrier) -> None:
        start.wait()
        while purging.is_set():
            try:
                lists.append({dead.dead_letter_id for dead in every_dead_letter(queues, inbound)})
            except DeadLettersBusy:
                lists.append(None)

    def purge(start: threading.Barrier, dead_letter_id: str) -> list[str] | None:
        start.wait()
        try:
            removed = queues.remove_dead_letters(
                inbound, lambda d: d.dead_letter_id == dead_letter_id, most=1
            )
        except DeadLettersBusy:
            return None
        return [dead.dead_letter_id for dead in removed]

    start = threading.Barrier(3 + len(targets))
    purging.set()
    try:
        with ThreadPoolExecutor(3 + len(targets)) as pool:
            listers = [pool.submit(list_until_done, start) for _ in range(3)]
            purged = list(pool.map(purge, [start] * len(targets), targets))
            purging.clear()
            for lister in listers:
                lister.result()
        left = {dead.dead_letter_id for dead in every_dead_letter(queues, inbound)}
    finally:
        queues.close()

    kept = set(ids) - set(targets)
    short = sorted(len(found) for found in lists if found is not None and not kept <= found)
    assert purged == [[dead_letter_id] for dead_letter_id in targets]
    assert left == kept
    assert lists and short == [], f"{len(short)} of {len(lists)} lists short of {len(kept)}: {short}"


def test_dead_letters_another_host_holds_make_the_routes_503_never_short(
    local_endpoints: LocalEndpoints, trusted: TrustedIssuer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another host's reader holds five dead letters hidden (it crashed mid-pass): a list and a purge of
    a held one answer 503 with the reason, a purge of one not held succeeds, and once the five are back
    the list is whole."""
    monkeypatch.setattr(dead_letter_scan, "DEAD_LETTER_SCAN_RETRY_S", 0.5)
    monkeypatch.setattr(dead_letter_scan, "DEAD_LETTER_SCAN_RETRY_PER_MESSAGE_S", 0.0)
    deps, queues, inbound = _azurite_deps(local_endpoints, uuid.uuid4().hex[:8])
    ids = _dead_letter_many(queues, inbound, 40)
    other = QueueClient.from_connection_string(
        local_endpoints.storage_connection_string, f"{inbound}-deadletter"
    )
    held = list(other.receive_messages(messages_per_page=5, max_messages=5, visibility_timeout=30))
    [free] = [dead_letter_id for dead_letter_id in ids if dead_letter_id not in {m.id for m in held}][:1]
    try:
        listed = _call(deps, trusted, "GET", f"{BASE}/{inbound}?limit=100")
        busy = _call(deps, trusted, "POST", f"{BASE}/{inbound}/purge", {"deadLetterId": held[0].id})
        purged = _call(deps, trusted, "POST", f"{BASE}/{inbound}/purge", {"deadLetterId": free})
        for message in held:
            other.update_message(message.id, message.pop_receipt, visibility_timeout=0)
        after = _call(deps, trusted, "GET", f"{BASE}/{inbound}?limit=100")
    finally:
        other.close()
        queues.close()

    for refused in (listed, busy):
        assert (refused.status, refused.headers.get("Retry-After"), refused.body["error"]["code"]) == (
            503,
            "1",
            "Unavailable",
        )
        assert "is being read by another operation; try again" in refused.body["error"]["message"]
    assert (purged.status, purged.body.get("count")) == (200, 1), purged.body
    assert sorted(d["deadLetterId"] for d in after.body["deadLetters"]) == sorted(set(ids) - {free})
