"""Dead letters through the operator API: list, show, replay (and the order it names taken in by the
intake), purge; only the deployment's queues, only operators, every action naming the principal."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import timedelta
from typing import Any, cast

import pytest

from devhost.local_issuer import local_object_id
from function_host.wiring import load_settings
from intake.submission import handle_intake_message
from operator_api.answers import OperatorResponse
from operator_api.deadletters import deployment_queues
from operator_api.handler import handle_operator_request
from operator_api.routing import OperatorApiSections
from orderflow import telemetry
from orderflow.clock import FakeClock
from orderflow.errors import DeadLettersBusy
from orderflow.operator_auth import OPERATOR_ROLE
from orderflow.queues.memory import InMemoryQueueFactory
from orderflow.records import ProcessState
from orderflow.replays import replay_message_id
from orderflow.settings import Settings
from orderflow.stores.base import StateStore
from orderflow.workflows import ORDER_V1
from supervisor.retention import dead_letter_sources
from tests.host_deps import HostDeps
from tests.operator_tokens import TrustedIssuer
from tests.unit.fakes import TEST_CLIENT, memory_deps, order_body, submit_and_claim

pytestmark = pytest.mark.unit

INBOUND = TEST_CLIENT.inbound_queue
BASE = "/api/operator/deadletters"


@pytest.fixture
def deps() -> HostDeps:
    return memory_deps(FakeClock())


def dead_letter(deps: HostDeps, body: str, *, message_id: str, reason: str = "HandlerFailed") -> str:
    """Send ``body`` to the inbound queue and dead-letter it; its dead letter id."""
    queue = deps.queues.queue(INBOUND)
    queue.send(body, message_id=message_id, correlation_id=None)
    [message] = queue.receive()
    queue.dead_letter(message, reason=reason, description="a bug in the handler, since fixed")
    assert isinstance(deps.queues, InMemoryQueueFactory)
    return next(
        d.dead_letter_id for d in deps.queues.dead_letter_page(INBOUND).items if d.message_id == message_id
    )


def call(
    deps: HostDeps,
    trusted: TrustedIssuer,
    method: str,
    path: str,
    body: Any = None,
    *,
    role: str = OPERATOR_ROLE,
) -> OperatorResponse:
    raw = b"" if body is None else json.dumps(body).encode()
    headers = trusted.bearer("otto", role)
    return handle_operator_request(
        method,
        path,
        headers,
        raw,
        deps=deps,
        sections=OperatorApiSections.of(deps.settings),
        validator=trusted.validator,
    )


def test_a_replay_id_is_never_the_original_and_is_the_dead_letters_own() -> None:
    first = replay_message_id("a:o-1:submit", queue=INBOUND, dead_letter_id="7")
    again = replay_message_id("a:o-1:submit", queue=INBOUND, dead_letter_id="7")
    others = {
        replay_message_id("a:o-1:submit", queue=INBOUND, dead_letter_id="8"),
        replay_message_id("a:o-1:submit", queue="orders-b", dead_letter_id="7"),
    }
    replayed_again = replay_message_id(first, queue=INBOUND, dead_letter_id="9")
    long = replay_message_id("x" * 200, queue=INBOUND, dead_letter_id="7")
    wide = replay_message_id("\U0001f4e6" * 100, queue=INBOUND, dead_letter_id="7")

    assert re.fullmatch(r"a:o-1:submit:replay:[0-9a-f]{16}", first) and first == again
    assert first not in others and len(others) == 2
    assert re.fullmatch(r"a:o-1:submit:replay:[0-9a-f]{16}", replayed_again) and replayed_again != first
    assert len(long) == 128 and long.startswith("x" * 104) and long[104:].startswith(":replay:")
    assert len(wide.encode("utf-16-le")) <= 2 * 128 and wide.startswith("\U0001f4e6" * 52 + ":replay:")


def test_the_list_pages_through_dead_letters_oldest_first(deps: HostDeps, trusted: TrustedIssuer) -> None:
    for n in range(5):
        dead_letter(deps, f'{{"n": {n}}}', message_id=f"m-{n}")

    first = call(deps, trusted, "GET", f"{BASE}/{INBOUND}?limit=3")
    token = first.body["continuation"]
    second = call(deps, trusted, "GET", f"{BASE}/{INBOUND}?limit=3&continuation={token}")

    seen = [d["messageId"] for d in first.body["deadLetters"] + second.body["deadLetters"]]
    assert (first.status, second.status, second.body["continuation"]) == (200, 200, None)
    assert sorted(seen) == [f"m-{n}" for n in range(5)] and len(set(seen)) == 5
    assert first.body["deadLetters"][0]["reason"] == "HandlerFailed"


def test_show_gives_the_body_and_an_unknown_id_is_404(deps: HostDeps, trusted: TrustedIssuer) -> None:
    dead_id = dead_letter(deps, '{"orderId": "o-5"}', message_id="m-5")

    shown = call(deps, trusted, "GET", f"{BASE}/{INBOUND}/{dead_id}")
    missing = call(deps, trusted, "GET", f"{BASE}/{INBOUND}/0000")

    assert (shown.status, shown.body["body"], shown.body["messageId"]) == (200, '{"orderId": "o-5"}', "m-5")
    assert (missing.status, missing.body["error"]["code"]) == (404, "NoSuchDeadLetter")


def test_only_the_deployments_queues_and_only_operators(deps: HostDeps, trusted: TrustedIssuer) -> None:
    dead_id = dead_letter(deps, "{}", message_id="m-1")
    deps.queues.queue("someone-elses")  # exists, but is not the deployment's

    foreign = call(deps, trusted, "GET", f"{BASE}/someone-elses")
    reviewer = call(deps, trusted, "POST", f"{BASE}/{INBOUND}/{dead_id}/replay", role="orderflow.reviewer")

    assert (foreign.status, foreign.body["error"]["code"]) == (404, "UnknownQueue")
    assert reviewer.status == 403
    assert len(call(deps, trusted, "GET", f"{BASE}/{INBOUND}").body["deadLetters"]) == 1


def test_the_queue_list_names_every_queue_orderflow_consumes_and_only_for_operators(
    trusted: TrustedIssuer,
) -> None:
    clients = json.dumps([{"id": "a"}, {"id": "b", "inboundQueue": "in-b", "replyQueue": "out-b"}])
    deps = memory_deps(FakeClock(), CLIENTS=clients, AGENT_QUEUE_PREFIX="ag-", HOST_ID="h1")

    listed = call(deps, trusted, "GET", "/api/operator/queues")
    reviewer = call(deps, trusted, "GET", "/api/operator/queues", role="orderflow.reviewer")
    extra = call(deps, trusted, "GET", "/api/operator/queues?limit=1")

    assert listed.status == 200
    assert [(q["name"], q["kind"], q["owner"]) for q in listed.body["queues"]] == [
        ("orders-a", "inbound", "a"),
        ("in-b", "inbound", "b"),
        ("ag-courier", "agent", "courier"),
        ("ag-inventory", "agent", "inventory"),
        ("ag-payment", "agent", "payment"),
        ("ag-shipping", "agent", "shipping"),
        ("agent-responses", "responses", None),
        ("agent-responses-h1", "responses", None),
    ]
    assert all(deps.settings.clients.is_deployment_queue(q["name"]) for q in listed.body["queues"])
    assert (reviewer.status, extra.status) == (403, 400)


def test_the_functions_host_lists_only_the_shared_response_queue_whatever_its_host_id() -> None:
    # Its response trigger listens on AGENT_RESPONSES_QUEUE alone: no queue is named after the host id.
    env = {"HOST_ID": "func-abc", "AGENT_RESPONSES_PER_HOST": "true", "CLIENTS": '[{"id": "a"}]'}
    settings = load_settings(env)

    assert settings.queues.HOST_ID == "func-abc"
    assert settings.queues.response_queue() == "agent-responses"
    assert [
        q.name for q in deployment_queues(settings.clients, settings.queues) if q.kind == "responses"
    ] == ["agent-responses"]
    assert "agent-responses-func-abc" not in dead_letter_sources(settings.clients, settings.queues)
    # A devhost process keeps a response queue of its own.
    assert Settings.load(env).queues.response_queue() == "agent-responses-func-abc"


def test_a_replayed_order_is_taken_in_and_the_replay_names_the_operator(
    deps: HostDeps, trusted: TrustedIssuer
) -> None:
    dead_id = dead_letter(deps, order_body("o-7"), message_id="a:o-7:submit")

    with telemetry.recording() as events:
        replayed = call(deps, trusted, "POST", f"{BASE}/{INBOUND}/{dead_id}/replay")
    [message] = deps.queues.queue(INBOUND).receive()
    handle_intake_message(
        message.body,
        client=TEST_CLIENT,
        orders=deps.orders,
        states=deps.states,
        queues=deps.queues,
        clock=deps.clock,
        steps=deps.settings.steps,
        starter=deps.settings.starter,
        queue_names=deps.settings.queues,
        definition=ORDER_V1,
    )

    assert replayed.status == 200, replayed.body
    assert replayed.body["replayMessageId"] == message.message_id
    assert message.message_id == replay_message_id("a:o-7:submit", queue=INBOUND, dead_letter_id=dead_id)
    assert replayed.body["orderId"] == f"{TEST_CLIENT.client_id}:o-7"
    assert replayed.body["replayedBy"] == f"{trusted.issuer.tenant_id}/{local_object_id('otto')}"
    assert message.body == order_body("o-7")
    assert events["operator.deadletter_replayed"] == 1
    assert deps.states.get(f"{TEST_CLIENT.client_id}:o-7").item.process_state is ProcessState.PENDING
    assert call(deps, trusted, "GET", f"{BASE}/{INBOUND}").body["deadLetters"] == []
    again = call(deps, trusted, "POST", f"{BASE}/{INBOUND}/{dead_id}/replay")
    assert (again.status, again.body["error"]["code"]) == (409, "AlreadyReplayed")
    assert again.body["error"]["replayed"]["by"] == replayed.body["replayedBy"]


def test_a_replay_about_a_known_order_is_on_its_timeline(deps: HostDeps, trusted: TrustedIssuer) -> None:
    key = f"{TEST_CLIENT.client_id}:o-1"
    submit_and_claim(deps, definition=ORDER_V1, order_id=key)
    dead_id = dead_letter(deps, order_body("o-1"), message_id=f"{key}:submit")

    replayed = call(deps, trusted, "POST", f"{BASE}/{INBOUND}/{dead_id}/replay")

    entry = deps.states.get(key).item.timeline[-1]
    assert replayed.status == 200
    assert (entry.action, entry.outcome, entry.by) == (
        "deadletter.replay",
        replay_message_id(f"{key}:submit", queue=INBOUND, dead_letter_id=dead_id),
        replayed.body["replayedBy"],
    )


class Ticks:
    """A monotonic clock for the queues that moves only when told to."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_purge_by_age_with_a_dry_run_first(trusted: TrustedIssuer) -> None:
    ticks = Ticks()
    queues = InMemoryQueueFactory(clock=ticks)
    deps = replace(memory_deps(FakeClock()), queues=queues, dead_letters=queues)
    old = dead_letter(deps, "{}", message_id="m-old")
    ticks.now += 60
    dead_letter(deps, "{}", message_id="m-new")
    [first, _] = queues.dead_letter_page(INBOUND).items
    cut = (first.dead_lettered_at + timedelta(seconds=30)).isoformat()

    dry = call(deps, trusted, "POST", f"{BASE}/{INBOUND}/purge", {"olderThan": cut, "dryRun": True})
    kept = len(queues.dead_letter_page(INBOUND).items)
    by_age = call(deps, trusted, "POST", f"{BASE}/{INBOUND}/purge", {"olderThan": cut})
    by_id = call(deps, trusted, "POST", f"{BASE}/{INBOUND}/purge", {"deadLetterId": old})
    neither = call(deps, trusted, "POST", f"{BASE}/{INBOUND}/purge", {})
    naive = call(deps, trusted, "POST", f"{BASE}/{INBOUND}/purge", {"olderThan": "2030-01-01T00:00:00"})

    assert (dry.status, dry.body["dryRun"], [d["messageId"] for d in dry.body["deadLetters"]]) == (
        200,
        True,
        ["m-old"],
    )
    assert kept == 2
    assert (by_age.status, by_age.body["count"], by_age.body["dryRun"]) == (200, 1, False)
    assert (by_id.status, by_id.body["count"]) == (200, 0)  # already gone
    assert [d.message_id for d in queues.dead_letter_page(INBOUND).items] == ["m-new"]
    assert (neither.status, naive.status) == (400, 400)


class BusyDeadLetters:
    """Dead-letter queues another operation keeps part of hidden for longer than any scan waits."""

    def dead_letter_page(self, name: str, **_: Any) -> Any:
        raise DeadLettersBusy(name)

    def remove_dead_letters(self, name: str, *_: Any, **__: Any) -> Any:
        return self.dead_letter_page(name)


def test_a_dead_letter_queue_not_read_whole_is_503_never_a_short_answer(trusted: TrustedIssuer) -> None:
    deps = replace(memory_deps(FakeClock()), dead_letters=BusyDeadLetters())

    answers = [
        call(deps, trusted, "GET", f"{BASE}/{INBOUND}"),
        call(deps, trusted, "GET", f"{BASE}/{INBOUND}/0001"),
        call(deps, trusted, "POST", f"{BASE}/{INBOUND}/0001/replay"),
        call(deps, trusted, "POST", f"{BASE}/{INBOUND}/purge", {"deadLetterId": "0001"}),
        call(deps, trusted, "POST", f"{BASE}/{INBOUND}/purge", {"olderThan": "2030-01-01T00:00:00Z"}),
    ]

    for answer in answers:
        assert (answer.status, answer.headers["Retry-After"], answer.body["error"]["code"]) == (
            503,
            "1",
            "Unavailable",
        )
        assert "being read by another operation; try again" in answer.body["error"]["message"]


@pytest.mark.parametrize(
    "name",
    [
        "agent-responses-anything-at-all",  # the response queue's prefix with a made-up host
        "agent-responses-h2",  # another host's: not on GET queues
        f"{INBOUND}-deadletter",  # a dead-letter queue is never a queue of its own
        "agent-responses-deadletter",
        "agent-nosuchagent",  # the agent prefix with no such agent
        "orders",  # the old shared submission queue: nothing consumes it
        TEST_CLIENT.reply_queue,  # a client's reply queue: orderflow dead-letters nothing there
    ],
)
def test_a_queue_not_on_the_queue_list_is_404_on_every_route_and_never_opened(
    name: str, trusted: TrustedIssuer
) -> None:
    deps = memory_deps(FakeClock(), HOST_ID="h1")
    assert isinstance(deps.queues, InMemoryQueueFactory)
    listed = {q["name"] for q in call(deps, trusted, "GET", "/api/operator/queues").body["queues"]}
    before = deps.queues.names()

    answers = [
        call(deps, trusted, "GET", f"{BASE}/{name}"),
        call(deps, trusted, "GET", f"{BASE}/{name}/0001"),
        call(deps, trusted, "POST", f"{BASE}/{name}/0001/replay"),
        call(deps, trusted, "POST", f"{BASE}/{name}/purge", {"deadLetterId": "0001"}),
    ]

    assert name not in listed
    assert [(a.status, a.body["error"]["code"]) for a in answers] == [(404, "UnknownQueue")] * 4
    assert deps.queues.names() == before


def test_every_listed_queue_is_read_by_the_dead_letter_routes(trusted: TrustedIssuer) -> None:
    deps = memory_deps(FakeClock(), HOST_ID="h1")
    listed = [q["name"] for q in call(deps, trusted, "GET", "/api/operator/queues").body["queues"]]

    answers = {name: call(deps, trusted, "GET", f"{BASE}/{name}").status for name in listed}

    assert "agent-responses-h1" in listed and answers == dict.fromkeys(listed, 200)


# --- attribution: a dead letter is linked to an order only by the queue it arrived on -------------------

TWO_CLIENTS = json.dumps([{"id": "a", "replyQueue": "client-a"}, {"id": "b"}])
OTHERS_ORDER = "b:o-9"


class RecordingStates:
    """The state store, with every call recorded: ``(method, first argument)``."""

    def __init__(self, inner: StateStore) -> None:
        self.inner = inner
        self.calls: list[tuple[str, object]] = []

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)

        def recorded(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, args[0] if args else None))
            return method(*args, **kwargs)

        return recorded


@pytest.fixture
def two_clients() -> tuple[HostDeps, RecordingStates]:
    """Clients ``a`` and ``b``, ``b`` with order ``o-9`` on record; the state store recording calls."""
    deps = memory_deps(FakeClock(), CLIENTS=TWO_CLIENTS)
    handle_intake_message(
        order_body("o-9", reply_to="replies-b"),
        client=deps.settings.clients.clients().get("b"),
        orders=deps.orders,
        states=deps.states,
        queues=deps.queues,
        clock=deps.clock,
        steps=deps.settings.steps,
        starter=deps.settings.starter,
        queue_names=deps.settings.queues,
        definition=ORDER_V1,
    )
    states = RecordingStates(deps.states)
    return replace(deps, states=cast(StateStore, states)), states


def dead_letter_on(deps: HostDeps, queue_name: str, body: str, *, correlation_id: str | None) -> str:
    """Send ``body`` to ``queue_name`` with ``correlation_id`` and dead-letter it; its dead letter id."""
    queue = deps.queues.queue(queue_name)
    queue.send(body, message_id="m-hostile", correlation_id=correlation_id)
    [message] = queue.receive()
    queue.dead_letter(message, reason="InvalidJson", description="")
    assert isinstance(deps.queues, InMemoryQueueFactory)
    [dead] = deps.queues.dead_letter_page(queue_name).items
    return dead.dead_letter_id


NOT_KEYS = [
    "b:o-9",  # another client's order
    "B:o-9",
    "a:b:o-9",
    "../b:o-9",
    "a:../b",
    "a/../../b:o-9",
    "x" * 5000,
    "o-1' OR '1'='1",
    "'; DROP TABLE orderstate; --",
    "SELECT * FROM c WHERE c.id = 'b:o-9'",
    "o-1\nb:o-9",
    "o-1\x1b[2J",
    "\ud800",
    "%2e%2e%2fb:o-9",
    ":",
    " ",
]


@pytest.mark.parametrize(
    ("body", "correlation_id"),
    [
        *[("{not json", reference) for reference in NOT_KEYS],
        # The body's orderId is read by the same rule, and so is a body naming one order with a
        # correlation id naming another.
        ('{"orderId": "b:o-9"}', None),
        ('{"orderId": 9}', "o-9"),
        (order_body("o-9"), OTHERS_ORDER),
        (order_body("o-1"), "o-2"),
    ],
)
def test_a_dead_letter_naming_no_order_of_the_client_it_came_from_is_not_linked_and_its_replay_writes_none(
    two_clients: tuple[HostDeps, RecordingStates],
    trusted: TrustedIssuer,
    monkeypatch: pytest.MonkeyPatch,
    body: str,
    correlation_id: str | None,
) -> None:
    deps, states = two_clients
    before = deps.states.get(OTHERS_ORDER)
    dead_id = dead_letter_on(deps, INBOUND, body, correlation_id=correlation_id)
    events: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(telemetry, "event", lambda name, /, **fields: events.append((name, fields)))

    listed = call(deps, trusted, "GET", f"{BASE}/{INBOUND}")
    shown = call(deps, trusted, "GET", f"{BASE}/{INBOUND}/{dead_id}")
    replayed = call(deps, trusted, "POST", f"{BASE}/{INBOUND}/{dead_id}/replay")

    after = deps.states.get(OTHERS_ORDER)
    assert (listed.status, shown.status, replayed.status) == (200, 200, 200)
    assert listed.body["deadLetters"][0]["orderId"] is None and shown.body["orderId"] is None
    assert replayed.body["orderId"] is None and replayed.body["deadLetter"]["orderId"] is None
    [audit] = [fields for name, fields in events if name == "operator.deadletter_replayed"]
    assert audit["order_id"] is None and OTHERS_ORDER not in audit.values()
    assert (after.etag, after.item) == (before.etag, before.item)
    assert [call for call in states.calls if call[0] != "get" or call[1] != OTHERS_ORDER] == []
    assert states.calls == [("get", OTHERS_ORDER)] * 2  # this test's own reads, before and after


def test_a_dead_letter_of_an_internal_queue_is_never_linked(
    two_clients: tuple[HostDeps, RecordingStates], trusted: TrustedIssuer
) -> None:
    deps, states = two_clients
    before = deps.states.get(OTHERS_ORDER)
    agent_queue = deps.settings.queues.agent_queue("payment")
    body = json.dumps({"orderId": OTHERS_ORDER, "step": "payment"})
    dead_id = dead_letter_on(deps, agent_queue, body, correlation_id=OTHERS_ORDER)

    shown = call(deps, trusted, "GET", f"{BASE}/{agent_queue}/{dead_id}")
    replayed = call(deps, trusted, "POST", f"{BASE}/{agent_queue}/{dead_id}/replay")

    after = deps.states.get(OTHERS_ORDER)
    assert (shown.status, shown.body["orderId"], shown.body["correlationId"]) == (200, None, OTHERS_ORDER)
    assert (replayed.status, replayed.body["orderId"]) == (200, None)
    assert (after.etag, after.item) == (before.etag, before.item)
    assert states.calls == [("get", OTHERS_ORDER)] * 2


@pytest.mark.parametrize("correlation_id", [None, "", "o-1", "a:o-1"])
def test_a_dead_letter_of_the_clients_own_order_stays_linked_and_its_replay_is_on_the_timeline(
    two_clients: tuple[HostDeps, RecordingStates], trusted: TrustedIssuer, correlation_id: str | None
) -> None:
    deps, _ = two_clients
    key = f"{TEST_CLIENT.client_id}:o-1"
    submit_and_claim(deps, definition=ORDER_V1, order_id=key)
    others = deps.states.get(OTHERS_ORDER)
    dead_id = dead_letter_on(deps, INBOUND, order_body("o-1"), correlation_id=correlation_id)

    shown = call(deps, trusted, "GET", f"{BASE}/{INBOUND}/{dead_id}")
    replayed = call(deps, trusted, "POST", f"{BASE}/{INBOUND}/{dead_id}/replay")

    entry = deps.states.get(key).item.timeline[-1]
    assert (shown.body["orderId"], replayed.body["orderId"]) == (key, key)
    assert (entry.action, entry.outcome) == (
        "deadletter.replay",
        replay_message_id("m-hostile", queue=INBOUND, dead_letter_id=dead_id),
    )
    assert deps.states.get(OTHERS_ORDER).etag == others.etag


def test_a_dead_letter_of_the_clients_order_not_on_record_is_linked_and_its_replay_writes_nothing(
    two_clients: tuple[HostDeps, RecordingStates], trusted: TrustedIssuer
) -> None:
    deps, states = two_clients
    dead_id = dead_letter_on(deps, INBOUND, '{"orderId": "o-3"}', correlation_id="o-3")

    replayed = call(deps, trusted, "POST", f"{BASE}/{INBOUND}/{dead_id}/replay")

    assert (replayed.status, replayed.body["orderId"]) == (200, "a:o-3")
    assert states.calls == [("get", "a:o-3")]
