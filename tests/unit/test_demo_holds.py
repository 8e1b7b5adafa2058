"""The demo services enforce holds on their own clock: stock released and authorisations voided at
expiry, a commit of an expired hold refused for good, an undo of one answered as already undone, a
re-acquisition releasing the hold it replaces."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from agents.services import classify_http
from demo.faults import FaultPlan
from demo.outcome import INVARIANTS, classify, holds_report
from demo.services.app import create_app
from demo.services.common import Stored
from demo.services.ledger import Ledger
from demo.tpch import DemoOrder
from orderflow.clock import FakeClock
from orderflow.compensation_trigger import HOLD_EXPIRED
from orderflow.errors import PermanentError
from orderflow.records import Hold, LastError, ProcessState, parse_utc
from orderflow.workflows import ORDER_V6
from tests.unit.fakes import memory_deps, submit_and_claim
from tests.unit.test_demo_services import BROKE_CUSTOMER, GOOD_CUSTOMER, available, make_catalog, post

pytestmark = pytest.mark.unit


class Ticks:
    """The services' monotonic clock, moved by the test."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def ticks() -> Ticks:
    return Ticks()


@pytest.fixture
def client(ticks: Ticks) -> Iterator[TestClient]:
    with TestClient(create_app(make_catalog(), FaultPlan(), auth=None, clock=ticks)) as test_client:
        yield test_client


def hold_stock(client: TestClient, key: str, quantity: int = 4, **more: Any) -> httpx.Response:
    body = {"orderId": "o-1", "items": [{"sku": "10", "quantity": quantity}], "holdS": 30, **more}
    return post(client, "/inventory/reservations", body, key)


def authorize(client: TestClient, key: str, customer: str = GOOD_CUSTOMER, **more: Any) -> httpx.Response:
    body = {
        "orderId": "o-1",
        "customerId": customer,
        "amount": "12.50",
        "currency": "USD",
        "holdS": 30,
        **more,
    }
    return post(client, "/payments/authorizations", body, key)


def test_a_reservation_hold_expires_on_the_services_clock_and_its_commit_is_refused(
    client: TestClient, ticks: Ticks
) -> None:
    held = hold_stock(client, "o-1:reserve_inventory")
    assert held.status_code == 201
    answer = held.json()
    assert answer["holdId"] == answer["reservationId"]
    expires = parse_utc(answer["expiresAt"])
    assert timedelta(seconds=29) < expires - datetime.now(UTC) <= timedelta(seconds=30)
    assert available(client, "10") == 6
    ticks.now += 29.9
    assert available(client, "10") == 6
    ticks.now += 0.1
    assert available(client, "10") == 10
    commit = post(
        client, "/inventory/reservations/commit", {"orderId": "o-1", "holdId": answer["holdId"]}, "c"
    )
    assert (commit.status_code, commit.json()["error"], commit.json()["permanent"]) == (
        409,
        "hold_expired",
        True,
    )
    assert available(client, "10") == 10
    undo = post(
        client,
        "/inventory/reservations/release",
        {"orderId": "o-1", "forwardKey": "o-1:reserve_inventory"},
        "u",
    )
    assert undo.status_code == 200
    assert (undo.json()["undone"], undo.json()["alreadyUndone"]) == (True, True)
    assert available(client, "10") == 10
    holds = client.get("/audit").json()["holds"]
    assert holds == {
        "acquired": 1,
        "expired": 1,
        "committed": 0,
        "commitsRefused": 1,
        "commitsOnExpired": 1,
        "live": 0,
    }


def test_a_committed_reservation_no_longer_expires_and_a_reacquisition_replaces_the_hold(
    client: TestClient, ticks: Ticks
) -> None:
    first = hold_stock(client, "o-1:reserve_inventory").json()
    again = hold_stock(client, "o-1:reserve_inventory:reacquire-1", replacesKey="o-1:reserve_inventory")
    assert again.status_code == 201
    assert available(client, "10") == 6  # the first hold was released when the second was taken
    body = {"orderId": "o-1", "holdId": again.json()["holdId"]}
    assert post(client, "/inventory/reservations/commit", body, "c").json()["committed"] is True
    ticks.now += 3600
    assert available(client, "10") == 6
    facts = client.get("/orders/o-1/facts").json()
    assert [(r["reservationId"], r["released"]) for r in facts["reservations"]] == [
        (first["reservationId"], True),
        (again.json()["reservationId"], False),
    ]


def test_an_authorisation_expires_voided_is_captured_before_and_a_void_refunds_a_capture(
    client: TestClient, ticks: Ticks
) -> None:
    assert authorize(client, "o-1:authorize_payment", customer=BROKE_CUSTOMER).status_code == 402
    held = authorize(client, "o-1:authorize_payment:reacquire-1").json()
    capture = post(
        client, "/payments/authorizations/capture", {"orderId": "o-1", "holdId": held["holdId"]}, "cap"
    )
    assert capture.status_code == 200 and capture.json()["chargeId"].startswith("ch_")
    void = {"orderId": "o-1", "forwardKey": "o-1:authorize_payment:reacquire-1"}
    undone = post(client, "/payments/authorizations/void", void, "o-1:authorize_payment:undo").json()
    assert (undone["undone"], undone["amount"], undone["expired"]) == (True, "12.50", False)
    assert client.get("/orders/o-1/facts").json()["summary"]["netCharged"] == "0.00"

    lapsing = authorize(client, "o-2:authorize_payment", orderId="o-2").json()
    ticks.now += 31
    refused = post(
        client, "/payments/authorizations/capture", {"orderId": "o-2", "holdId": lapsing["holdId"]}, "c2"
    )
    assert (refused.status_code, refused.json()["error"]) == (409, "hold_expired")
    undo = post(
        client,
        "/payments/authorizations/void",
        {"orderId": "o-2", "forwardKey": "o-2:authorize_payment"},
        "u2",
    )
    assert (undo.json()["undone"], undo.json()["alreadyUndone"], undo.json()["expired"]) == (True, True, True)
    summary = client.get("/orders/o-2/facts").json()["summary"]
    assert (summary["activeAuthorizations"], summary["netCharged"]) == (0, "0.00")


def test_the_fault_plan_refuses_marked_keys_and_delays_one_endpoint() -> None:
    plan = FaultPlan(refuse_keys_containing=(":reacquire-",), delay_s={"inventory.commit": 0.3})
    with TestClient(create_app(make_catalog(), plan, auth=None)) as client:
        refused = hold_stock(client, "o-1:reserve_inventory:reacquire-1")
        assert (refused.status_code, refused.json()) == (409, {"error": "refused", "permanent": True})
        held = hold_stock(client, "o-1:reserve_inventory").json()
        started = datetime.now(UTC)
        post(client, "/inventory/reservations/commit", {"orderId": "o-1", "holdId": held["holdId"]}, "c")
        assert datetime.now(UTC) - started >= timedelta(seconds=0.3)


def test_a_plan_capping_holds_keeps_both_kinds_shorter_than_asked_and_says_so_in_expires_at(
    ticks: Ticks,
) -> None:
    plan = FaultPlan(hold_s_max=5.0)
    with TestClient(create_app(make_catalog(), plan, auth=None, clock=ticks)) as capped:
        stock = hold_stock(capped, "o-1:reserve_inventory").json()  # asks for 30 s
        money = authorize(capped, "o-1:authorize_payment").json()
        for answer in (stock, money):
            left = parse_utc(answer["expiresAt"]) - datetime.now(UTC)
            assert timedelta(seconds=4) < left <= timedelta(seconds=5)
        ticks.now += 5.1
        assert available(capped, "10") == 10
        facts = capped.get("/orders/o-1/facts").json()["summary"]
        assert facts["activeAuthorizations"] == 0
    assert FaultPlan().hold_lifetime_s(30) == 30
    assert plan.hold_lifetime_s(3) == 3


def test_a_commit_counts_as_arriving_on_an_expired_hold_by_when_it_arrived_not_when_it_ran() -> None:
    # A hung commit that arrived while its hold was live is refused once it runs, but the hold rule
    # sent it in time: only an arrival at or after the expiry counts.
    ledger = Ledger(FaultPlan(), clock=lambda: 0.0)
    ledger.stored["in-time"] = Stored(fingerprint="f", started_at=99.0, endpoint="inventory.commit")
    ledger.stored["late"] = Stored(fingerprint="f", started_at=100.0, endpoint="inventory.commit")
    assert not ledger.arrived_after("in-time", 100.0)
    assert ledger.arrived_after("late", 100.0)
    assert ledger.arrived_after("never-stored", 100.0)


def test_the_demo_report_counts_holds_and_commits_that_arrived_on_expired_ones() -> None:
    record = submit_and_claim(memory_deps(FakeClock(datetime(2026, 1, 1, tzinfo=UTC))), definition=ORDER_V6)
    at = datetime(2026, 1, 1, tzinfo=UTC)
    record.holds["reserve_inventory"] = Hold(
        hold_id="r", expires_at=at, commit="commit", idempotency_key="k", acquired_at=at, reacquired=1
    )
    audit = {
        "acquired": 3,
        "expired": 1,
        "committed": 2,
        "commitsRefused": 1,
        "commitsOnExpired": 1,
        "live": 0,
    }
    assert holds_report({"o-1": record}, audit) == {
        "holds_acquired": 3,
        "holds_expired": 1,
        "holds_reacquired": 1,
        "holds_committed": 2,
        "committed_on_expired_hold": 1,
    }
    assert "committed_on_expired_hold" in INVARIANTS


def test_the_agent_classifies_a_commit_of_an_expired_hold_as_permanent(
    client: TestClient, ticks: Ticks
) -> None:
    held = hold_stock(client, "o-1:reserve_inventory").json()
    ticks.now += 31
    refused = post(
        client, "/inventory/reservations/commit", {"orderId": "o-1", "holdId": held["holdId"]}, "c"
    )
    error = classify_http(refused.status_code, refused.json(), service="inventory")
    assert isinstance(error, PermanentError) and error.code == HOLD_EXPIRED


def test_an_order_whose_recoveries_outlasted_a_hold_is_exhausted_not_mismatched() -> None:
    deps = memory_deps(FakeClock(datetime(2026, 1, 1, tzinfo=UTC)))
    record = submit_and_claim(deps, definition=ORDER_V6)
    record.process_state = ProcessState.COMPENSATED
    record.last_error = LastError(kind="permanent", code=HOLD_EXPIRED, message="lapsed", at=record.created_at)
    order = DemoOrder(
        order_id="o-1",
        order_key=1,
        customer_key=1,
        customer_name="Customer#1",
        customer_balance=Decimal("100.00"),
        amount=Decimal("10.00"),
        currency="USD",
        items=(),
        carrier="TRUCK",
        order_date="1996-01-02",
        order_priority="1-URGENT",
    )
    assert (
        classify(order, record, {"summary": {}}, max_failures=3) == "mismatched:compensated for hold_expired"
    )
    record.failure_count = 1
    assert classify(order, record, {"summary": {}}, max_failures=3) == "exhausted"
