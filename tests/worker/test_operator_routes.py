"""Every operator API route, invoked through the worker's HTTP trigger with real tokens.

The table :data:`CASES` holds one case per route of :data:`operator_api.routes.ROUTES` (method and path
template): it sets the store up, invokes the route through the worker (``RpcHttp`` in, ``RpcHttp`` out)
and asserts the status the route declares, the body's shape (its answer model, round-tripped) and the
effect on the store. A route added without a case fails
:func:`test_every_route_has_a_case_through_the_worker`.
The refusals are generated from the same table of routes: no token, a token without the route's role,
an order named without its client or of another client, the method the route does not take; each
leaves the store as it was and is answered by the worker exactly as by the handler alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

import pytest

from devhost.local_issuer import local_object_id
from operator_api.console import console_files
from operator_api.deadletters import deployment_queues
from operator_api.routes import IF_MATCH, ROUTES, openapi_document
from operator_api.routing import Route
from operator_api.schemas import Answer as AnswerModel
from operator_api.views import order_view
from orderflow import telemetry
from orderflow.alert_sink import AlertSink
from orderflow.alerts import ALERT_KINDS
from orderflow.clock import FakeClock
from orderflow.contracts import StartStepInput, StepResult
from orderflow.messages import ReviewDecisionMessage, parse_message
from orderflow.operator_auth import OPERATOR_ROLE, REVIEWER_ROLE
from orderflow.queues.memory import InMemoryQueueFactory
from orderflow.records import LastError, ProcessState, ReviewDecision, StepStatus
from orderflow.replays import replay_message_id
from orderflow.timeline import TIMELINE_WINDOW, Actor, note
from orderflow.workflows import ORDER_V1, ORDER_V2
from supervisor.status import record_sweep, sweep_doc
from supervisor.sweep import SweepReport
from tests.activity_json import start_step
from tests.host_deps import HostDeps
from tests.operator_tokens import TrustedIssuer
from tests.unit.fakes import TEST_CLIENT, order_body, received, submit_and_claim
from tests.worker.operator_http import Answer, OperatorCall, operator_call, operator_dependencies
from tests.worker.worker import FunctionsWorker

pytestmark = pytest.mark.unit

KEY = "a:o-1"
INBOUND = TEST_CLIENT.inbound_queue
RESERVE, CHARGE = "reserve_inventory", "charge_payment"
RESERVED = StepResult(step=RESERVE, result={"reservationId": "r-1"}, calls=1)


@pytest.fixture
def deps() -> HostDeps:
    return operator_dependencies(FakeClock(), REVIEW_AMOUNT_ABOVE=500.0, RETRY_BUDGET=12)


@pytest.fixture
def api(
    monkeypatch: pytest.MonkeyPatch, worker: FunctionsWorker, deps: HostDeps, trusted: TrustedIssuer
) -> Iterator[OperatorCall]:
    yield from operator_call(monkeypatch, worker, deps, trusted)


# --- the store: orders in the states the routes act on, dead letters, alerts ------------------------------


def start(deps: HostDeps, step: str, *, key: str = KEY, version: str, **changes: Any) -> Any:
    request = StartStepInput(
        order_id=key,
        instance_id=f"{key}:1",
        workflow_version=version,
        step=step,
        timeout_s=8,
        response_queue=deps.settings.queues.response_queue(),
        **changes,
    )
    return start_step(request.to_payload(), deps)


def awaiting_review(deps: HostDeps, key: str = KEY) -> None:
    """``key`` (1000.50, order-v2) paused for review before its charge."""
    submit_and_claim(deps, definition=ORDER_V2, order_id=key, amount="1000.50")
    start(deps, RESERVE, key=key, version=ORDER_V2.version)
    assert start(deps, CHARGE, key=key, version=ORDER_V2.version, completed=RESERVED)["outcome"] == (
        "awaiting_review"
    )


def running(deps: HostDeps, key: str = KEY) -> None:
    """``key`` (order-v1) with its first step running."""
    submit_and_claim(deps, definition=ORDER_V1, order_id=key, amount="100.00")
    start(deps, RESERVE, key=key, version=ORDER_V1.version)


def failed(deps: HostDeps, key: str = KEY) -> None:
    """``key`` (order-v1) as its attempt left it when the charge failed for good: ``Error``, unlocked."""
    submit_and_claim(deps, definition=ORDER_V1, order_id=key)
    found = deps.states.get(key)
    record = found.item.model_copy(deep=True)
    record.process_state = ProcessState.ERROR
    record.locked_by = record.complete_by = None
    record.steps[RESERVE].status = StepStatus.COMPLETED
    record.steps[CHARGE].status = StepStatus.FAILED
    record.retry_budget.spent = record.retry_budget.limit
    record.last_error = LastError(
        kind="permanent", message="declined", step=CHARGE, code="declined", at=deps.clock.now()
    )
    note(found.item, record, Actor("orchestrator", f"{key}:1"))
    deps.states.replace(record, etag=found.etag)


def dead_letter(deps: HostDeps, body: str, *, message_id: str) -> str:
    """Send ``body`` to the test client's inbound queue and dead-letter it; its dead letter id."""
    queue = deps.queues.queue(INBOUND)
    queue.send(body, message_id=message_id, correlation_id=None)
    [message] = queue.receive()
    queue.dead_letter(message, reason="HandlerFailed", description="a bug in the handler, since fixed")
    return next(d for d, m in dead_letters(deps).items() if m == message_id)


def dead_letters(deps: HostDeps, queue: str = INBOUND) -> dict[str, str | None]:
    """The dead letters of ``queue``: dead letter id -> message id, oldest first."""
    assert isinstance(deps.queues, InMemoryQueueFactory)
    return {d.dead_letter_id: d.message_id for d in deps.queues.dead_letters(queue)}


def fake_clock(deps: HostDeps) -> FakeClock:
    assert isinstance(deps.clock, FakeClock)
    return deps.clock


def raise_alerts(deps: HostDeps, *alerts: tuple[str, dict[str, Any]]) -> None:
    """Raise each (kind, fields) as the worker's alert sink keeps it (``function_host.wiring``)."""
    assert deps.alerts is not None
    previous = telemetry.use_alert_sink(AlertSink(deps.alerts, deps.clock, "func-1", window_s=3600))
    try:
        for kind, fields in alerts:
            telemetry.alert(kind, **fields)
            fake_clock(deps).advance(1)
    finally:
        telemetry.use_alert_sink(previous)


def audit_id(trusted: TrustedIssuer, name: str = "otto") -> str:
    return f"{trusted.issuer.tenant_id}/{local_object_id(name)}"


# --- what every case asserts ------------------------------------------------------------------------------


def route_of(method: str, template: str) -> Route:
    [route] = [r for r in ROUTES if (r.method, r.path) == (method, template)]
    return route


def accepted(
    api: OperatorCall,
    method: str,
    template: str,
    path: str,
    headers: dict[str, str] | None = None,
    body: Any = None,
) -> Answer:
    """Call ``path`` (of the route ``method`` ``template``) through the worker: the status is the one the
    route declares and the body is its answer model, field for field."""
    route = route_of(method, template)
    answered = api(method, path, headers, body)
    assert answered.status == route.status, answered.content[:500]
    model = route.model
    if model is not None and issubclass(model, AnswerModel):
        assert model.model_validate(answered.body).to_body() == answered.body
    return answered


Case = Callable[[OperatorCall], None]
"""One route's case: sets the store up, calls the route through the worker, asserts what it did."""

CASES: dict[tuple[str, str], Case] = {}
"""(method, path template) -> the case of that route through the worker."""


def case(method: str, template: str) -> Callable[[Case], Case]:
    """Register the decorated function as the case of the route ``method`` ``template``."""

    def register(test: Case) -> Case:
        assert (method, template) not in CASES, f"two cases of {method} {template}"
        CASES[(method, template)] = test
        return test

    return register


# --- the cases: one per route -----------------------------------------------------------------------------


@case("GET", "/orders")
def _list(api: OperatorCall) -> None:
    awaiting_review(api.deps)
    for key in ("a:e-1", "a:e-2"):
        failed(api.deps, key)
    reviewer = api.trusted.reviewer()

    first = accepted(api, "GET", "/orders", "/orders?state=Error&limit=1", reviewer)
    token = first.body["continuation"]
    query = urlencode({"state": "Error", "limit": 1, "continuation": token})
    second = accepted(api, "GET", "/orders", f"/orders?{query}", reviewer)
    waiting = accepted(api, "GET", "/orders", "/orders?state=AwaitingReview&client=a", reviewer)

    assert [o["orderId"] for o in first.body["orders"] + second.body["orders"]] == ["a:e-1", "a:e-2"]
    assert second.body["continuation"] is None
    assert first.body["orders"][0]["etag"] == api("GET", "/orders/a:e-1", reviewer).headers["etag"]
    assert [o["orderId"] for o in waiting.body["orders"]] == [KEY]


@case("GET", "/orders/{orderId}")
def _inspect(api: OperatorCall) -> None:
    awaiting_review(api.deps)

    answered = accepted(api, "GET", "/orders/{orderId}", f"/orders/{KEY}", api.trusted.operator())

    found = api.deps.states.get(KEY)
    assert answered.body == order_view(found.item)
    assert answered.headers["etag"] == found.etag
    assert "replyTo" not in answered.body


@case("GET", "/orders/{orderId}/timeline")
def _timeline(api: OperatorCall) -> None:
    running(api.deps)
    for n in range(2 * TIMELINE_WINDOW):  # past the window twice: two chunks move to the history
        found = api.deps.states.get(KEY)
        record = found.item.model_copy(deep=True)
        record.updated_at += timedelta(seconds=1)
        note(found.item, record, Actor("operator", f"t/{n}"), action="inspect")
        api.deps.states.replace(record, etag=found.etag)

    pages, token = [], None
    while True:
        query = urlencode({"limit": 1, **({"continuation": token} if token else {})})
        path = f"/orders/{KEY}/timeline?{query}"
        page = accepted(api, "GET", "/orders/{orderId}/timeline", path, api.trusted.reviewer())
        assert page.body["orderId"] == KEY
        pages.append(page.body["entries"])
        token = page.body["continuation"]
        if token is None:
            break

    record = api.deps.states.get(KEY).item
    assert len(pages) >= 2
    assert [e["seq"] for entries in pages for e in entries] == list(range(1, record.timeline_seq + 1))
    assert pages[0][0]["role"] == "intake"


@case("POST", "/orders/{orderId}/review")
def _review(api: OperatorCall) -> None:
    awaiting_review(api.deps)
    responses = api.deps.queues.queue(api.deps.settings.queues.response_queue())
    received(responses)

    answered = accepted(
        api, "POST", "/orders/{orderId}/review", f"/orders/{KEY}/review", api.trusted.reviewer("rita"),
        {"decision": "reject"},
    )  # fmt: skip

    review = api.deps.states.get(KEY).item.review
    assert review is not None
    assert (review.decision, review.decided_by) == (ReviewDecision.REJECT, audit_id(api.trusted, "rita"))
    assert (answered.body["decision"], answered.body["decidedBy"]) == ("reject", review.decided_by)
    [forwarded] = received(responses)
    assert parse_message(ReviewDecisionMessage, forwarded.body).reviewer == review.decided_by


@case("POST", "/orders/{orderId}/compensate")
def _compensate(api: OperatorCall) -> None:
    running(api.deps)
    seen = api.deps.states.get(KEY).etag
    headers = {**api.trusted.operator(), "If-Match": seen}

    answered = accepted(
        api,
        "POST",
        "/orders/{orderId}/compensate",
        f"/orders/{KEY}/compensate",
        headers,
        {"reason": "dispute"},
    )

    found = api.deps.states.get(KEY)
    assert answered.body["outcome"] == "StopRequested"
    assert answered.headers["etag"] == found.etag != seen
    assert (found.item.stop_requested_by, found.item.stop_reason) == (
        f"operator:{audit_id(api.trusted)}",
        "dispute",
    )


@case("POST", "/orders/{orderId}/resubmit")
def _resubmit(api: OperatorCall) -> None:
    failed(api.deps)
    headers = {**api.trusted.operator(), "If-Match": api.deps.states.get(KEY).etag}

    answered = accepted(api, "POST", "/orders/{orderId}/resubmit", f"/orders/{KEY}/resubmit", headers)

    record = api.deps.states.get(KEY).item
    assert answered.body["outcome"] == "NewAttempt"
    assert (record.process_state, record.locked_by, record.retry_budget.remaining) == (
        ProcessState.PENDING,
        None,
        12,
    )
    entry = record.timeline[-1]
    assert (entry.action, entry.by, entry.by_name) == ("resubmit", audit_id(api.trusted), "otto")
    assert (entry.from_state, entry.to_state) == (ProcessState.ERROR, ProcessState.PENDING)


@case("POST", "/orders/{orderId}/suspend")
def _suspend(api: OperatorCall) -> None:
    running(api.deps)
    headers = {**api.trusted.operator(), "If-Match": api.deps.states.get(KEY).etag}

    answered = accepted(api, "POST", "/orders/{orderId}/suspend", f"/orders/{KEY}/suspend", headers, {})

    found = api.deps.states.get(KEY)
    assert answered.headers["etag"] == found.etag
    assert found.item.suspended_by == audit_id(api.trusted)
    assert found.item.suspended_at == api.deps.clock.now()


@case("POST", "/orders/{orderId}/resume")
def _resume(api: OperatorCall) -> None:
    running(api.deps)
    otto = api.trusted.operator()
    api("POST", f"/orders/{KEY}/suspend", {**otto, "If-Match": api.deps.states.get(KEY).etag})
    assert api.deps.states.get(KEY).item.suspended_at is not None

    headers = {**otto, "If-Match": api.deps.states.get(KEY).etag}
    answered = accepted(api, "POST", "/orders/{orderId}/resume", f"/orders/{KEY}/resume", headers)

    found = api.deps.states.get(KEY)
    assert answered.headers["etag"] == found.etag
    assert (found.item.suspended_at, found.item.process_state) == (None, ProcessState.PROCESSING)


@case("GET", "/queues")
def _queues(api: OperatorCall) -> None:
    answered = accepted(api, "GET", "/queues", "/queues", api.trusted.operator())

    settings = api.deps.settings
    expected = [(q.name, q.kind, q.owner) for q in deployment_queues(settings.clients, settings.queues)]
    assert [(q["name"], q["kind"], q["owner"]) for q in answered.body["queues"]] == expected
    names = [q["name"] for q in answered.body["queues"]]
    assert INBOUND in names and "agent-responses" in names
    assert not any(name.startswith("agent-responses-") for name in names)  # no per-host queue on Azure


@case("GET", "/deadletters/{queue}")
def _dead_letter_list(api: OperatorCall) -> None:
    for n in range(3):
        dead_letter(api.deps, f'{{"n": {n}}}', message_id=f"m-{n}")
    otto = api.trusted.operator()

    first = accepted(api, "GET", "/deadletters/{queue}", f"/deadletters/{INBOUND}?limit=2", otto)
    query = urlencode({"limit": 2, "continuation": first.body["continuation"]})
    second = accepted(api, "GET", "/deadletters/{queue}", f"/deadletters/{INBOUND}?{query}", otto)

    listed = first.body["deadLetters"] + second.body["deadLetters"]
    assert sorted(d["messageId"] for d in listed) == ["m-0", "m-1", "m-2"]
    assert {d["reason"] for d in listed} == {"HandlerFailed"}
    assert (first.body["queue"], second.body["continuation"]) == (INBOUND, None)


@case("GET", "/deadletters/{queue}/{deadLetterId}")
def _dead_letter_show(api: OperatorCall) -> None:
    dead_id = dead_letter(api.deps, '{"orderId": "o-5"}', message_id="m-5")
    template, otto = "/deadletters/{queue}/{deadLetterId}", api.trusted.operator()

    shown = accepted(api, "GET", template, f"/deadletters/{INBOUND}/{dead_id}", otto)
    missing = api("GET", f"/deadletters/{INBOUND}/0000", otto)

    assert (shown.body["body"], shown.body["messageId"]) == ('{"orderId": "o-5"}', "m-5")
    assert (missing.status, missing.code) == (404, "NoSuchDeadLetter")


@case("POST", "/deadletters/{queue}/{deadLetterId}/replay")
def _dead_letter_replay(api: OperatorCall) -> None:
    dead_id = dead_letter(api.deps, order_body("o-7"), message_id="a:o-7:submit")
    path, otto = f"/deadletters/{INBOUND}/{dead_id}/replay", api.trusted.operator()

    replayed = accepted(api, "POST", "/deadletters/{queue}/{deadLetterId}/replay", path, otto)
    again = api("POST", path, otto)

    message_id = replay_message_id("a:o-7:submit", queue=INBOUND, dead_letter_id=dead_id)
    [message] = received(api.deps.queues.queue(INBOUND))
    assert (message.message_id, message.body) == (message_id, order_body("o-7"))
    assert (replayed.body["replayMessageId"], replayed.body["orderId"]) == (message_id, "a:o-7")
    assert replayed.body["replayedBy"] == audit_id(api.trusted)
    assert dead_letters(api.deps) == {}
    assert (again.status, again.code) == (409, "AlreadyReplayed")
    assert again.body["error"]["replayed"]["by"] == audit_id(api.trusted)


@case("POST", "/deadletters/{queue}/purge")
def _dead_letter_purge(api: OperatorCall) -> None:
    first, kept = (dead_letter(api.deps, "{}", message_id=f"m-{n}") for n in range(2))
    path, otto = f"/deadletters/{INBOUND}/purge", api.trusted.operator()

    dry = accepted(
        api, "POST", "/deadletters/{queue}/purge", path, otto, {"deadLetterId": first, "dryRun": True}
    )
    assert (dry.body["dryRun"], dry.body["count"], len(dead_letters(api.deps))) == (True, 1, 2)
    purged = accepted(api, "POST", "/deadletters/{queue}/purge", path, otto, {"deadLetterId": first})

    assert (purged.body["dryRun"], purged.body["count"]) == (False, 1)
    assert [d["deadLetterId"] for d in purged.body["deadLetters"]] == [first]
    assert list(dead_letters(api.deps)) == [kept]


@case("GET", "/console-config")
def _console_config(api: OperatorCall) -> None:
    # No token is read: not even a malformed one is refused.
    answered = accepted(
        api, "GET", "/console-config", "/console-config", {"Authorization": "Bearer nonsense"}
    )

    assert answered.body == {"authority": None, "clientId": None, "scope": None}


@case("GET", "/activity")
def _activity(api: OperatorCall) -> None:
    raise_alerts(api.deps, ("order_gave_up", {"order_id": KEY, "reason": "too_many_failures"}))
    dead_letter(api.deps, "{}", message_id="m-1")
    reviewer = api.trusted.reviewer()

    answered = accepted(api, "GET", "/activity", "/activity?bucketS=60&buckets=5", reviewer)
    uneven = api("GET", "/activity?bucketS=7", reviewer)

    buckets = answered.body["buckets"]
    assert (answered.body["bucketS"], len(buckets)) == (60, 5)
    assert sum(b["alerts"] for b in buckets) == 1
    assert [b["alertsByKind"] for b in buckets if b["alerts"]] == [{"order_gave_up": 1}]
    assert all(b["deadLetters"] is not None for b in buckets)
    assert (uneven.status, uneven.code) == (400, "InvalidValue")


@case("GET", "/alerts")
def _alerts(api: OperatorCall) -> None:
    raise_alerts(
        api.deps,
        ("order_gave_up", {"order_id": KEY, "instance_id": f"{KEY}:1", "reason": "too_many_failures"}),
        ("breaker_open", {"dependency": "payment"}),
    )
    operator = api.trusted.operator()

    everything = accepted(api, "GET", "/alerts", "/alerts", api.trusted.reviewer())
    one = accepted(api, "GET", "/alerts", "/alerts?kind=order_gave_up&limit=1", operator)

    assert [(a["kind"], a["orderId"]) for a in everything.body["alerts"]] == [
        ("breaker_open", None),
        ("order_gave_up", KEY),
    ]
    [gave_up] = one.body["alerts"]
    assert (gave_up["instanceId"], gave_up["host"]) == (f"{KEY}:1", "func-1")
    assert gave_up["suggestedAction"] == ALERT_KINDS["order_gave_up"].action
    assert one.body["continuation"] is None


@case("GET", "/supervisor")
def _supervisor(api: OperatorCall) -> None:
    assert api.deps.alerts is not None
    report = SweepReport(scanned=4, requeued=[KEY], gave_up=["a:o-2"], held=["a:o-3"], skipped=1)
    for host in ("func-0", "func-1"):
        now = api.deps.clock.now()
        doc = sweep_doc(report, started=now, ended=now, host_id=host, leadership="timer")
        assert record_sweep(api.deps.alerts, doc)
        fake_clock(api.deps).advance(2)

    status = accepted(api, "GET", "/supervisor", "/supervisor?limit=1", api.trusted.reviewer())

    assert (status.body["leader"], status.body["leadership"]) == ("func-1", "timer (singleton)")
    [sweep] = status.body["sweeps"]  # the newest only
    assert sweep["host"] == "func-1"
    assert (sweep["scanned"], sweep["recovered"], sweep["gaveUp"], sweep["held"]) == (4, 1, 1, 1)
    assert status.body["stuckOrders"] == sweep["stuck"]


@case("GET", "/openapi.json")
def _openapi(api: OperatorCall) -> None:
    answered = accepted(api, "GET", "/openapi.json", "/openapi.json")

    assert answered.body == openapi_document()


@case("GET", "/console")
def _console_folder(api: OperatorCall) -> None:
    answered = accepted(api, "GET", "/console", "/console")

    assert answered.headers["location"] == "/api/operator/console/"


@case("GET", "/console/{*file}")
def _console(api: OperatorCall) -> None:
    files = console_files()
    for name, (data, content_type) in files.items():
        served = accepted(api, "GET", "/console/{*file}", f"/console/{name}")
        assert (served.content, served.headers["content-type"]) == (data, content_type), name
        assert "script-src 'self'" in served.headers["content-security-policy"]
    index = accepted(api, "GET", "/console/{*file}", "/console/")
    escape = api("GET", "/console/../console.py")

    assert index.content == files["index.html"][0]
    assert (escape.status, escape.code) == (404, "NoSuchRoute")


def case_id(key: tuple[str, str]) -> str:
    return " ".join(key)


def test_every_route_has_a_case_through_the_worker() -> None:
    routes = {(route.method, route.path) for route in ROUTES}

    assert sorted(routes - set(CASES)) == [], "routes no worker test invokes"
    assert sorted(set(CASES) - routes) == [], "cases of routes that do not exist"


@pytest.mark.parametrize("key", sorted(CASES), ids=case_id)
def test_the_route_through_the_worker(api: OperatorCall, key: tuple[str, str]) -> None:
    CASES[key](api)


# --- refusals, for every route that reads a token ---------------------------------------------------------

GUARDED = [route for route in ROUTES if route.roles]
ORDER_ROUTES = [route for route in GUARDED if "{orderId}" in route.path]


def route_id(route: Route) -> str:
    return f"{route.method} {route.path}"


BODIES = {"review": {"decision": "approve"}, "deadletters.purge": {"dryRun": True}}
"""A valid body of each route that reads one (``{}`` unless named here)."""


def request_of(route: Route, *, order: str = KEY, dead_letter_id: str = "1") -> tuple[str, Any]:
    """The route's path, filled in, and a valid body for it."""
    path = route.path.replace("{orderId}", order).replace("{queue}", INBOUND)
    path = path.replace("{deadLetterId}", dead_letter_id).replace("{*file}", "index.html")
    return path, (BODIES.get(route.name, {}) if route.body is not None else None)


@pytest.fixture
def populated(deps: HostDeps) -> str:
    """o-1 awaiting review, e-1 failed, r-1 running, a dead letter and an alert; the dead letter's id."""
    awaiting_review(deps)
    failed(deps, "a:e-1")
    running(deps, "a:r-1")
    raise_alerts(deps, ("breaker_open", {"dependency": "payment"}))
    return dead_letter(deps, order_body("o-9"), message_id="a:o-9:submit")


def snapshot(deps: HostDeps) -> Any:
    """Everything a refused call could have written: the records' versions, every queue's messages and
    dead letters, the alert documents."""
    assert isinstance(deps.queues, InMemoryQueueFactory)
    queues = {
        name: (
            [m.message_id for m in deps.queues.queue(name).peek_all()],
            list(dead_letters(deps, name)),
        )
        for name in deps.queues.names()
        if not name.endswith("-deadletter")  # the in-memory queues' dead letters: read through their queue
    }
    versions = {key: deps.states.get(key).etag for key in (KEY, "a:e-1", "a:r-1")}
    return versions, queues, repr(deps.alerts)


def refused_alike(api: OperatorCall, route: Route, headers: dict[str, str], **request: str) -> Answer:
    """Call the route through the worker, then the handler alone: the same answer, nothing written."""
    path, body = request_of(route, **request)
    before = snapshot(api.deps)

    answered = api(route.method, path, headers, body)

    assert snapshot(api.deps) == before
    assert answered == api.handler(route.method, path, headers, body)
    return answered


@pytest.mark.parametrize("route", GUARDED, ids=route_id)
def test_without_a_token_every_guarded_route_answers_401(
    api: OperatorCall, populated: str, route: Route
) -> None:
    answered = refused_alike(
        api, route, {"If-Match": api.deps.states.get(KEY).etag}, dead_letter_id=populated
    )

    assert (answered.status, answered.code) == (401, "Unauthenticated")
    assert answered.headers["www-authenticate"] == 'Bearer realm="orderflow"'
    assert answered.headers["content-type"] == "application/json; charset=utf-8"


def wrong_role(trusted: TrustedIssuer, route: Route) -> dict[str, str]:
    """A token with an app role, but not one of the route's (none at all for a route either role calls)."""
    others = [role for role in (OPERATOR_ROLE, REVIEWER_ROLE) if role not in route.roles]
    return trusted.bearer("mallory", *others)


@pytest.mark.parametrize("route", GUARDED, ids=route_id)
def test_a_token_without_the_routes_role_is_403(api: OperatorCall, populated: str, route: Route) -> None:
    headers = {**wrong_role(api.trusted, route), "If-Match": api.deps.states.get(KEY).etag}

    answered = refused_alike(api, route, headers, dead_letter_id=populated)

    assert (answered.status, answered.code) == (403, "Forbidden")
    assert 'error="insufficient_scope"' in answered.headers["www-authenticate"]


@pytest.mark.parametrize("route", ORDER_ROUTES, ids=route_id)
def test_an_order_named_without_its_client_or_of_another_client_is_refused(
    api: OperatorCall, populated: str, route: Route
) -> None:
    token = api.trusted.bearer("otto", *route.roles)
    headers = {**token, "If-Match": api.deps.states.get(KEY).etag}

    bare = refused_alike(api, route, headers, order="o-1")
    foreign = refused_alike(api, route, headers, order="b:o-1")

    # A bare id could name whichever client's order has it: refused before any store is read.
    assert (bare.status, bare.code) == (400, "InvalidField")
    assert "'<client id>:<order id>'" in bare.body["error"]["message"]
    assert (foreign.status, foreign.code) == (404, "UnknownOrder")


OTHER_METHOD = {"GET": "POST", "POST": "GET"}


@pytest.mark.parametrize("route", ROUTES, ids=route_id)
def test_another_method_on_every_route_is_answered_as_the_handler_answers_it(
    api: OperatorCall, populated: str, route: Route
) -> None:
    token = api.trusted.bearer("otto", OPERATOR_ROLE, REVIEWER_ROLE)
    path, _ = request_of(route, dead_letter_id=populated)
    method = OTHER_METHOD[route.method]
    before = snapshot(api.deps)

    answered = api(method, path, token)

    assert snapshot(api.deps) == before
    assert answered == api.handler(method, path, token)
    segments = path.removeprefix("/").split("/")  # no segment here needs decoding
    if not any(other.fit(segments, segments) for other in ROUTES if other.method == method):
        assert (answered.status, answered.code) == (405, "MethodNotAllowed")
        assert answered.headers["allow"] == route.method


CONDITIONAL = [route for route in ROUTES if IF_MATCH in route.parameters]
"""The actions taken only on the version of the order the operator saw (``If-Match``)."""

ACTED_ON = {"compensate": "a:r-1", "resubmit": "a:e-1", "suspend": "a:r-1", "resume": "a:r-1"}
"""The order of ``populated`` each conditional action is taken on: one in a state for it."""


@pytest.mark.parametrize("route", CONDITIONAL, ids=route_id)
def test_a_conditional_action_on_a_version_since_replaced_is_412_with_the_current_etag(
    api: OperatorCall, populated: str, route: Route
) -> None:
    key = ACTED_ON[route.name]
    otto = api.trusted.operator()
    if route.name == "resume":
        api("POST", f"/orders/{key}/suspend", {**otto, "If-Match": api.deps.states.get(key).etag})
    seen = api.deps.states.get(key)
    moved = seen.item.model_copy(deep=True)
    moved.updated_at = moved.updated_at + timedelta(seconds=1)
    current = api.deps.states.replace(moved, etag=seen.etag)  # someone wrote since the operator looked

    answered = refused_alike(api, route, {**otto, "If-Match": seen.etag}, order=key)

    assert (answered.status, answered.code) == (412, "PreconditionFailed")
    assert answered.headers["etag"] == current.etag
