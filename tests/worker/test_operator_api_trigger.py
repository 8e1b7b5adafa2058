"""The operator API's HTTP trigger as the worker runs it: ``RpcHttp`` in, ``RpcHttp`` out, real tokens.

Each invocation carries the ``TypedData.http`` the Functions host sends for an HTTP trigger (method, URL,
headers, body, the route's parameters); the worker decodes it into ``func.HttpRequest`` and encodes the
trigger's ``func.HttpResponse`` as the return value the host answers with. The bearer tokens are minted by
the local issuer and checked against its JWKS, served on loopback; the app's stores are in memory.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

from devhost.local_issuer import local_object_id
from function_host.blueprints import operator_api as operator_api_blueprint
from orderflow.messages import ReviewDecisionMessage, parse_message
from orderflow.records import ReviewDecision
from orderflow.settings import Settings
from tests.host_deps import HostDeps
from tests.operator_tokens import TrustedIssuer
from tests.unit.fakes import TEST_CLIENTS, pause_for_review, received
from tests.worker.appdeps import app_dependencies
from tests.worker.operator_http import answer, body_of, header
from tests.worker.worker import FunctionsWorker

pytestmark = pytest.mark.unit

ORDER = "/api/operator/orders/a:o-1"
RESPONSES = "agent-responses"


@pytest.fixture
def deps(monkeypatch: pytest.MonkeyPatch, trusted: TrustedIssuer) -> Iterator[HostDeps]:
    """The trigger's dependencies and token check as ``function_host.wiring`` builds them, in memory and
    trusting the local issuer; o-1 is paused for review before its charge."""
    wired, _, _ = app_dependencies()
    wired = replace(
        wired, settings=Settings.load(env={}, HOST_ID="", REVIEW_AMOUNT_ABOVE=500.0, CLIENTS=TEST_CLIENTS)
    )
    monkeypatch.setattr(operator_api_blueprint, "dependencies", lambda: wired)
    monkeypatch.setattr(operator_api_blueprint, "app_settings", lambda: wired.settings)
    monkeypatch.setattr(operator_api_blueprint, "token_validator", lambda: trusted.validator)
    pause_for_review(wired, response_queue=RESPONSES)
    yield wired


def test_without_a_token_the_trigger_answers_401_and_records_nothing(
    worker: FunctionsWorker, deps: HostDeps
) -> None:
    etag = deps.states.get("a:o-1").etag

    http = answer(
        worker, "POST", f"{ORDER}/review", {"Content-Type": "application/json"}, {"decision": "approve"}
    )

    assert http.status_code == "401"
    assert header(http, "WWW-Authenticate") == 'Bearer realm="orderflow"'
    assert body_of(http)["error"]["code"] == "Unauthenticated"
    assert deps.states.get("a:o-1").etag == etag


def test_an_operator_token_cannot_review(
    worker: FunctionsWorker, deps: HostDeps, trusted: TrustedIssuer
) -> None:
    etag = deps.states.get("a:o-1").etag

    http = answer(worker, "POST", f"{ORDER}/review", trusted.operator("otto"), {"decision": "approve"})

    assert http.status_code == "403"
    assert 'error="insufficient_scope"' in header(http, "WWW-Authenticate")
    assert deps.states.get("a:o-1").etag == etag
    assert received(deps.queues.queue(RESPONSES)) == []


def test_a_reviewer_token_approves_and_the_record_names_its_principal(
    worker: FunctionsWorker, deps: HostDeps, trusted: TrustedIssuer
) -> None:
    http = answer(worker, "POST", f"{ORDER}/review", trusted.reviewer("rita"), {"decision": "approve"})

    assert http.status_code == "200", body_of(http)
    assert header(http, "Content-Type") == "application/json; charset=utf-8"
    found = deps.states.get("a:o-1")
    assert header(http, "ETag") == found.etag  # the store's ETag is quoted already: sent once quoted
    rita = f"{trusted.issuer.tenant_id}/{local_object_id('rita')}"
    review = found.item.review
    assert review is not None
    assert (review.decision, review.decided_by, review.decided_by_name) == (
        ReviewDecision.APPROVE,
        rita,
        "rita",
    )
    assert body_of(http)["decidedBy"] == rita
    [forwarded] = received(deps.queues.queue(RESPONSES))
    assert parse_message(ReviewDecisionMessage, forwarded.body).reviewer == rita


def test_either_role_inspects_the_order(
    worker: FunctionsWorker, deps: HostDeps, trusted: TrustedIssuer
) -> None:
    http = answer(worker, "GET", ORDER, trusted.operator("otto"))

    assert http.status_code == "200"
    view = body_of(http)
    assert (view["orderId"], view["processState"]) == ("a:o-1", "AwaitingReview")
    assert "replyTo" not in view


def test_a_suspend_on_the_version_seen_holds_the_order_and_a_stale_resume_is_refused(
    worker: FunctionsWorker, deps: HostDeps, trusted: TrustedIssuer
) -> None:
    seen = deps.states.get("a:o-1").etag
    otto = trusted.operator("otto")

    unconditional = answer(worker, "POST", f"{ORDER}/resume", otto)
    suspended = answer(worker, "POST", f"{ORDER}/suspend", {**otto, "If-Match": seen})
    stale = answer(worker, "POST", f"{ORDER}/resume", {**otto, "If-Match": seen})

    assert unconditional.status_code == "409"  # not suspended: refused before any condition is needed
    assert suspended.status_code == "200", body_of(suspended)
    found = deps.states.get("a:o-1")
    assert found.item.suspended_by == f"{trusted.issuer.tenant_id}/{local_object_id('otto')}"
    assert header(suspended, "ETag") == found.etag != seen
    assert stale.status_code == "412"
    assert body_of(stale)["error"]["code"] == "PreconditionFailed"
    assert deps.states.get("a:o-1").etag == found.etag  # the stale resume wrote nothing
    resumed = answer(worker, "POST", f"{ORDER}/resume", {**otto, "If-Match": found.etag})
    assert resumed.status_code == "200", body_of(resumed)
    assert deps.states.get("a:o-1").item.suspended_at is None


def test_a_resubmit_without_if_match_is_428_and_writes_nothing(
    worker: FunctionsWorker, deps: HostDeps, trusted: TrustedIssuer
) -> None:
    etag = deps.states.get("a:o-1").etag

    http = answer(worker, "POST", f"{ORDER}/resubmit", trusted.operator("otto"))

    assert http.status_code == "428"
    assert body_of(http)["error"]["code"] == "PreconditionRequired"
    assert deps.states.get("a:o-1").etag == etag


def test_the_list_reads_its_filters_from_the_query_string_the_host_passes(
    worker: FunctionsWorker, deps: HostDeps, trusted: TrustedIssuer
) -> None:
    rita = trusted.reviewer("rita")
    waiting = answer(worker, "GET", "/api/operator/orders?state=AwaitingReview&client=a", rita)
    finished = answer(worker, "GET", "/api/operator/orders?state=Processed", rita)
    unknown = answer(worker, "GET", "/api/operator/orders?colour=red", rita)

    assert waiting.status_code == "200"
    assert [order["orderId"] for order in body_of(waiting)["orders"]] == ["a:o-1"]
    assert body_of(finished)["orders"] == []
    assert unknown.status_code == "400"
    assert body_of(unknown)["error"]["code"] == "UnexpectedField"


def test_an_encoded_slash_in_the_url_makes_no_route(
    worker: FunctionsWorker, deps: HostDeps, trusted: TrustedIssuer
) -> None:
    etag = deps.states.get("a:o-1").etag

    otto = trusted.operator("otto")
    posted = answer(worker, "POST", f"{ORDER}%2Fsuspend", {**otto, "If-Match": etag})
    read = answer(worker, "GET", f"{ORDER}%2Fsuspend", otto)

    # One segment "a:o-1/suspend": the route of one order, which takes GET, and not a valid order key.
    assert posted.status_code == "405", body_of(posted)
    assert read.status_code == "400", body_of(read)
    assert deps.states.get("a:o-1").etag == etag
    assert deps.states.get("a:o-1").item.suspended_at is None


def test_the_console_and_the_openapi_document_are_served_without_a_token(
    worker: FunctionsWorker, deps: HostDeps
) -> None:
    page = answer(worker, "GET", "/api/operator/console/", {})
    document = answer(worker, "GET", "/api/operator/openapi.json", {})

    assert page.status_code == "200"
    assert header(page, "Content-Type").startswith("text/html")
    assert "script-src 'self'" in header(page, "Content-Security-Policy")
    kind = page.body.WhichOneof("data")
    html = page.body.bytes if kind == "bytes" else page.body.string.encode()
    assert b'<script type="module"' in html
    assert document.status_code == "200"
    assert body_of(document)["openapi"].startswith("3.")
    assert "/api/operator/orders/{orderId}/resubmit" in body_of(document)["paths"]
