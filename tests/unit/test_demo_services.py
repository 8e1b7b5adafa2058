"""The demo remote services: idempotency the Stripe way, relative stock, declines, injected faults."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator, MutableMapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from fastapi.testclient import TestClient

from demo.faults import FAULT_PRIORITY, FaultKind, FaultPlan, uniform
from demo.services import cli as services
from demo.services.app import create_app
from demo.services.cli import parse_args
from demo.services.common import INSTANCE_HEADER
from demo.services.payments import RefundPolicy
from demo.tpch import Catalog
from devhost.serving import serve_in_thread, server_url, stop

pytestmark = pytest.mark.unit

GOOD_CUSTOMER = "1"
BROKE_CUSTOMER = "2"


def make_catalog() -> Catalog:
    return Catalog(
        orders=[],
        stock={10: 10, 20: 5, 30: 100},
        balances={1: Decimal("500.00"), 2: Decimal("-0.01")},
        stock_divisor=1,
    )


def make_client(plan: FaultPlan | None = None) -> TestClient:
    return TestClient(create_app(make_catalog(), plan or FaultPlan(), auth=None))


@pytest.fixture
def client() -> Iterator[TestClient]:
    with make_client() as test_client:
        yield test_client


def post(client: TestClient, path: str, body: dict[str, Any], key: str | None) -> httpx.Response:
    headers = {"Idempotency-Key": key} if key is not None else {}
    response: httpx.Response = client.post(path, json=body, headers=headers)
    return response


def reserve(
    client: TestClient, order: str, items: list[tuple[str, int]], key: str | None = None
) -> httpx.Response:
    body = {"orderId": order, "items": [{"sku": sku, "quantity": qty} for sku, qty in items]}
    return post(client, "/inventory/reservations", body, key or f"{order}:reserve")


def charge(
    client: TestClient, order: str, customer: str, amount: str, currency: str = "USD"
) -> httpx.Response:
    body = {"orderId": order, "customerId": customer, "amount": amount, "currency": currency}
    return post(client, "/payments/charges", body, f"{order}:charge")


def available(client: TestClient, sku: str) -> int:
    value = client.get(f"/stock/{sku}").json()["available"]
    assert isinstance(value, int)
    return value


def audit(client: TestClient) -> dict[str, Any]:
    body = client.get("/audit").json()
    assert isinstance(body, dict)
    return body


# --- idempotency --------------------------------------------------------------


def test_replay_returns_the_same_response_without_a_second_effect(client: TestClient) -> None:
    first = reserve(client, "o1", [("10", 3)])
    again = reserve(client, "o1", [("10", 3)])

    assert first.status_code == 201
    assert first.json()["orderId"] == "o1"
    assert first.json()["items"] == [{"sku": "10", "quantity": 3}]
    assert "Idempotent-Replayed" not in first.headers
    assert again.status_code == 201
    assert again.json() == first.json()
    assert again.headers["Idempotent-Replayed"] == "true"
    assert available(client, "10") == 7
    entry = client.get("/audit/o1:reserve").json()
    assert (entry["calls"], entry["effects"], entry["status"], entry["orderId"]) == (2, 1, 201, "o1")
    assert audit(client)["duplicate_effects"] == 0


def test_the_audit_keeps_each_calls_arrival_and_instance(client: TestClient) -> None:
    body = {"orderId": "o1", "items": [{"sku": "10", "quantity": 1}]}
    before = datetime.now(UTC)
    headers = {"Idempotency-Key": "o1:reserve"}
    client.post("/inventory/reservations", json=body, headers={**headers, INSTANCE_HEADER: "o1:1"})
    client.post("/inventory/reservations", json=body, headers={**headers, INSTANCE_HEADER: "o1:2"})
    client.post("/inventory/reservations", json=body, headers=headers)

    received = client.get("/audit/o1:reserve").json()["received"]
    assert [r["instance"] for r in received] == ["o1:1", "o1:2", None]
    arrivals = [datetime.fromisoformat(r["at"].replace("Z", "+00:00")) for r in received]
    assert before <= arrivals[0] <= arrivals[1] <= arrivals[2] <= datetime.now(UTC)


def test_missing_idempotency_key_is_rejected(client: TestClient) -> None:
    response = post(
        client, "/inventory/reservations", {"orderId": "o1", "items": [{"sku": "10", "quantity": 1}]}, None
    )

    assert response.status_code == 400
    assert response.json()["error"] == "idempotency_key_required"
    assert available(client, "10") == 10


def test_key_reuse_with_a_different_body_is_refused(client: TestClient) -> None:
    assert reserve(client, "o1", [("10", 3)]).status_code == 201

    reused = reserve(client, "o1", [("10", 4)], key="o1:reserve")
    elsewhere = post(
        client, "/shipping/shipments", {"orderId": "o1", "carrier": "AIR", "items": []}, "o1:reserve"
    )

    assert reused.status_code == 422
    assert reused.json() == {"error": "idempotency_key_reuse", "permanent": True, "key": "o1:reserve"}
    assert elsewhere.status_code == 422  # an invalid body is refused before the key is looked at
    assert available(client, "10") == 7


def test_a_body_that_fails_validation_is_not_stored(client: TestClient) -> None:
    bad = reserve(client, "o1", [("10", 0)])
    good = reserve(client, "o1", [("10", 2)])

    assert bad.status_code == 422
    assert bad.json()["error"] == "invalid_request"
    assert bad.json()["permanent"] is True
    assert good.status_code == 201  # not "idempotency_key_reuse": nothing was stored
    assert available(client, "10") == 8


def test_a_second_request_while_the_first_is_in_flight_gets_409() -> None:
    app = create_app(make_catalog(), FaultPlan(hang_rate=1.0, hang_s=0.3), auth=None)
    body = {"orderId": "o1", "items": [{"sku": "10", "quantity": 4}]}
    headers = {"Idempotency-Key": "o1:reserve"}

    async def scenario() -> tuple[httpx.Response, httpx.Response, httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://demo") as http:

            async def later() -> httpx.Response:
                await asyncio.sleep(0.05)
                return await http.post("/inventory/reservations", json=body, headers=headers)

            first, second = await asyncio.gather(
                http.post("/inventory/reservations", json=body, headers=headers), later()
            )
            await http.put("/faults", json={})
            third = await http.post("/inventory/reservations", json=body, headers=headers)
            return first, second, third

    first, second, third = asyncio.run(scenario())

    assert second.status_code == 409
    assert second.json()["error"] == "request_in_progress"
    assert second.json()["permanent"] is False
    assert first.status_code == 201
    assert third.status_code == 201
    assert third.json() == first.json()
    assert third.headers["Idempotent-Replayed"] == "true"
    with TestClient(app) as client:
        assert available(client, "10") == 6
        entry = client.get("/audit/o1:reserve").json()
        assert (entry["calls"], entry["effects"]) == (3, 1)
        assert [f["kind"] for f in entry["faults"]] == ["hang", "hang"]


# --- inventory ----------------------------------------------------------------


def test_out_of_stock_reserves_nothing(client: TestClient) -> None:
    response = reserve(client, "o1", [("10", 2), ("20", 3), ("20", 3)])

    assert response.status_code == 409
    assert response.json() == {
        "error": "out_of_stock",
        "permanent": True,
        "sku": "20",
        "requested": 6,
        "available": 5,
    }
    assert (available(client, "10"), available(client, "20")) == (10, 5)
    facts = client.get("/orders/o1/facts").json()
    assert facts["reservations"] == []
    assert facts["declines"][0]["sku"] == "20"
    assert facts["declines"][0]["available"] == 5
    assert facts["summary"]["declined"] == "out_of_stock"
    # A stored business outcome: the retry replays it even though stock has not changed.
    assert reserve(client, "o1", [("10", 2), ("20", 3), ("20", 3)]).headers["Idempotent-Replayed"] == "true"


def test_unknown_sku_is_out_of_stock(client: TestClient) -> None:
    response = reserve(client, "o1", [("999", 1)])

    assert response.status_code == 409
    assert response.json()["available"] == 0
    assert client.get("/stock/999").status_code == 404


def test_release_restores_stock_relatively(client: TestClient) -> None:
    first = reserve(client, "o1", [("10", 3)]).json()["reservationId"]
    assert reserve(client, "o2", [("10", 4)]).status_code == 201
    assert available(client, "10") == 3

    released = post(client, f"/inventory/reservations/{first}/release", {}, "o1:reserve:undo")

    assert released.status_code == 200
    assert released.json()["released"] is True
    assert available(client, "10") == 6  # 3 + 3 back: o2 keeps its 4, no reset to 10
    replay = post(client, f"/inventory/reservations/{first}/release", {}, "o1:reserve:undo")
    assert replay.headers["Idempotent-Replayed"] == "true"
    other_key = post(client, f"/inventory/reservations/{first}/release", {}, "operator:release")
    assert other_key.status_code == 200
    assert other_key.json()["alreadyReleased"] is True
    assert available(client, "10") == 6
    assert post(client, "/inventory/reservations/res_nope/release", {}, "x:undo").status_code == 404
    assert client.get("/orders/o1/facts").json()["summary"]["activeReservations"] == 0


# --- payments -----------------------------------------------------------------


def test_negative_balance_declines_the_card(client: TestClient) -> None:
    declined = charge(client, "o1", BROKE_CUSTOMER, "10.00")
    charged = charge(client, "o2", GOOD_CUSTOMER, "10.5")
    stranger = charge(client, "o3", "cust-unknown", "1.00")

    assert declined.status_code == 402
    assert declined.json()["error"] == "card_declined"
    assert declined.json()["permanent"] is True
    assert charged.status_code == 201
    assert charged.json()["amount"] == "10.50"
    assert charged.json()["currency"] == "USD"
    assert stranger.status_code == 201
    facts = client.get("/orders/o1/facts").json()
    assert facts["charges"] == []
    assert facts["declines"][0]["error"] == "card_declined"
    assert facts["declines"][0]["balance"] == "-0.01"
    assert audit(client)["keys"]["o1:charge"]["effects"] == 0


def test_unknown_currency_and_bad_amounts_are_permanent_422(client: TestClient) -> None:
    assert (
        charge(client, "o1", GOOD_CUSTOMER, "10.00", currency="JPY").json()["error"] == "unsupported_currency"
    )
    assert charge(client, "o2", GOOD_CUSTOMER, "10.001").json()["error"] == "invalid_request"
    assert charge(client, "o3", GOOD_CUSTOMER, "-1").json()["error"] == "invalid_request"
    assert charge(client, "o4", GOOD_CUSTOMER, "abc").status_code == 422


def test_partial_refunds_never_exceed_the_charge(client: TestClient) -> None:
    charge_id = charge(client, "o1", GOOD_CUSTOMER, "100.00").json()["chargeId"]
    path = f"/payments/charges/{charge_id}/refund"

    first = post(client, path, {"amount": "40.00"}, "o1:charge:undo")
    too_much = post(client, path, {"amount": "70.00"}, "o1:charge:undo-2")
    rest = post(client, path, {"amount": "60"}, "o1:charge:undo-3")

    assert first.status_code == 200
    assert first.json()["amount"] == "40.00"
    assert first.json()["refundId"]
    assert too_much.status_code == 422
    assert too_much.json()["error"] == "refund_exceeds_charge"
    assert too_much.json()["refundable"] == "60.00"
    assert rest.status_code == 200
    assert rest.json()["refundedTotal"] == "100.00"
    facts = client.get("/orders/o1/facts").json()
    assert facts["summary"]["netCharged"] == "0.00"
    assert [r["amount"] for r in facts["refunds"]] == ["40.00", "60.00"]


# --- shipping -----------------------------------------------------------------


def test_shipments_need_a_tpch_carrier_and_cancel_once(client: TestClient) -> None:
    items = [{"sku": "10", "quantity": 1}]
    bad = post(
        client, "/shipping/shipments", {"orderId": "o1", "carrier": "PIGEON", "items": items}, "o1:ship"
    )
    good = post(
        client, "/shipping/shipments", {"orderId": "o2", "carrier": "REG AIR", "items": items}, "o2:ship"
    )

    assert bad.status_code == 422
    assert bad.json()["error"] == "unknown_carrier"
    assert good.status_code == 201
    assert good.json()["carrier"] == "REG AIR"
    shipment = good.json()["shipmentId"]
    cancelled = post(client, f"/shipping/shipments/{shipment}/cancel", {}, "o2:ship:undo")
    assert cancelled.status_code == 200
    assert cancelled.json()["alreadyCancelled"] is False
    again = post(client, f"/shipping/shipments/{shipment}/cancel", {}, "operator:cancel")
    assert again.json()["alreadyCancelled"] is True
    assert client.get("/orders/o2/facts").json()["summary"]["activeShipments"] == 0
    assert audit(client)["effects_total"] == 2  # the shipment and one cancel


# --- faults -------------------------------------------------------------------


def test_lost_response_applies_exactly_one_effect_across_the_retry() -> None:
    plan = FaultPlan(lost_response_rate=0.5, seed=7)
    key = next(
        f"o{i}:reserve"
        for i in range(1000)
        if plan.decide(f"o{i}:reserve", 1) is FaultKind.LOST_RESPONSE
        and plan.decide(f"o{i}:reserve", 2) is None
    )
    order = key.split(":")[0]

    with make_client(plan) as client:
        lost = reserve(client, order, [("10", 4)], key=key)
        retry = reserve(client, order, [("10", 4)], key=key)

        assert lost.status_code == 500
        assert lost.json() == {"error": "connection_reset", "permanent": False}
        assert retry.status_code == 201
        assert retry.headers["Idempotent-Replayed"] == "true"
        assert available(client, "10") == 6
        entry = client.get(f"/audit/{key}").json()
        assert (entry["calls"], entry["effects"]) == (2, 1)
        assert entry["faults"] == [{"call": 1, "kind": "lost_response"}]
        facts = client.get(f"/orders/{order}/facts").json()
        assert [r["reservationId"] for r in facts["reservations"]] == [retry.json()["reservationId"]]


def test_transient_503_applies_nothing_and_stores_nothing() -> None:
    with make_client(FaultPlan(transient_rate=1.0)) as client:
        response = charge(client, "o1", GOOD_CUSTOMER, "5.00")

        assert response.status_code == 503
        assert response.json() == {"error": "unavailable", "permanent": False}
        assert client.get("/orders/o1/facts").json()["charges"] == []

        assert client.put("/faults", json={}).json()["transient_rate"] == 0.0
        retry = charge(client, "o1", GOOD_CUSTOMER, "5.00")
        assert retry.status_code == 201
        assert "Idempotent-Replayed" not in retry.headers  # executed now, not replayed
        assert client.get("/audit/o1:charge").json()["effects"] == 1


def test_undo_endpoints_are_not_faulted_unless_asked(client: TestClient) -> None:
    reservation = reserve(client, "o1", [("10", 1)]).json()["reservationId"]
    client.put("/faults", json={"transient_rate": 1.0})

    release = post(client, f"/inventory/reservations/{reservation}/release", {}, "o1:reserve:undo")
    assert release.status_code == 200
    assert reserve(client, "o2", [("10", 1)]).status_code == 503

    client.put("/faults", json={"transient_rate": 1.0, "faults_on_undo": True})
    reservation = charge(client, "o3", GOOD_CUSTOMER, "1.00")
    assert reservation.status_code == 503


def test_an_unavailable_service_answers_503_to_every_call_and_the_others_work() -> None:
    with make_client(FaultPlan(unavailable_services=("payments",))) as client:
        assert reserve(client, "o1", [("10", 1)]).status_code == 201
        for _ in range(3):
            assert charge(client, "o1", GOOD_CUSTOMER, "5.00").status_code == 503
        refund = post(client, "/payments/refunds", {"orderId": "o1", "forwardKey": "o1:charge"}, "o1:undo")
        assert refund.status_code == 503
        assert client.get("/orders/o1/facts").json()["charges"] == []
        entry = client.get("/audit/o1:charge").json()
        assert (entry["calls"], entry["effects"]) == (3, 0)
        assert [f["kind"] for f in entry["faults"]] == ["transient"] * 3

        client.put("/faults", json={})
        assert charge(client, "o1", GOOD_CUSTOMER, "5.00").status_code == 201


def test_fault_decisions_are_deterministic_per_seed() -> None:
    keys = [f"tpch-{i}:{step}" for i in range(300) for step in ("reserve", "charge", "ship")]

    def decisions(seed: int) -> list[FaultKind | None]:
        plan = FaultPlan(transient_rate=0.2, lost_response_rate=0.1, hang_rate=0.05, seed=seed)
        return [plan.decide(key, call) for key in keys for call in (1, 2)]

    assert decisions(1) == decisions(1)
    assert decisions(1) != decisions(2)
    transient = decisions(1).count(FaultKind.TRANSIENT) / (2 * len(keys))
    assert 0.17 < transient < 0.23
    assert uniform(3, "transient", "k", 1) == uniform(3, "transient", "k", 1)
    assert 0.0 <= uniform(3, "transient", "k", 1) < 1.0


def test_at_most_one_fault_per_call_in_priority_order() -> None:
    everything = FaultPlan(transient_rate=1.0, latency_rate=1.0, hang_rate=1.0, lost_response_rate=1.0)

    assert everything.decide("k", 1) is FAULT_PRIORITY[0] is FaultKind.TRANSIENT
    assert FaultPlan(hang_rate=1.0, lost_response_rate=1.0).decide("k", 1) is FaultKind.HANG
    assert FaultPlan(latency_rate=1.0).decide("k", 1) is FaultKind.LATENCY
    assert FaultPlan().decide("k", 1) is None
    assert everything.decide("k", 1, undo=True) is None
    with pytest.raises(ValueError):
        FaultPlan(transient_rate=1.5)


def test_duplicate_effects_stay_zero_under_retries() -> None:
    plan = FaultPlan(transient_rate=0.3, lost_response_rate=0.3, latency_rate=0.2, latency_s=0.0, seed=11)
    with make_client(plan) as client:
        for i in range(20):
            order = f"o{i}"
            item = [{"sku": "30", "quantity": 1}]
            requests: list[tuple[str, str, dict[str, Any]]] = [
                ("reserve", "/inventory/reservations", {"orderId": order, "items": item}),
                (
                    "charge",
                    "/payments/charges",
                    {"orderId": order, "customerId": "1", "amount": "9.99", "currency": "EUR"},
                ),
                ("ship", "/shipping/shipments", {"orderId": order, "carrier": "SHIP", "items": item}),
            ]
            for step, path, body in requests:
                for _ in range(20):
                    if post(client, path, body, f"{order}:{step}").status_code < 500:
                        break
                else:
                    pytest.fail(f"{order}:{step} never got through")

        report = audit(client)
        stock_left = available(client, "30")

    assert report["duplicate_effects"] == 0
    assert report["duplicate_order_effects"] == 0
    assert report["effects_total"] == 60
    assert report["calls_per_key_max"] > 1
    assert report["faults_total"] > 0
    assert stock_left == 80  # 100 units, one per order


# --- admin and running --------------------------------------------------------


def test_fault_plan_can_be_read_and_replaced(client: TestClient) -> None:
    assert client.get("/faults").json()["hang_s"] == 30.0

    replaced = client.put("/faults", json={"transient_rate": 0.25, "seed": 3})

    assert replaced.status_code == 200
    assert client.get("/faults").json()["transient_rate"] == 0.25
    assert client.put("/faults", json={"transient_rate": 2}).status_code == 422
    assert client.put("/faults", json={"nonsense": 1}).status_code == 422
    assert client.get("/healthz").json()["status"] == "ok"


def test_a_hung_request_applies_its_effect_after_the_client_gave_up() -> None:
    app: FastAPI = create_app(make_catalog(), FaultPlan(hang_rate=1.0, hang_s=0.3), auth=None)
    server, thread = serve_in_thread(app, "127.0.0.1", 0)
    try:
        base = server_url(server)
        body = {"orderId": "o1", "items": [{"sku": "20", "quantity": 2}]}
        headers = {"Idempotency-Key": "o1:reserve"}
        with httpx.Client(base_url=base, timeout=0.1) as http:
            with pytest.raises(httpx.ReadTimeout):
                http.post("/inventory/reservations", json=body, headers=headers)
            assert http.get("/stock/20").json()["available"] == 5  # still sleeping
            deadline = time.monotonic() + 5.0
            while http.get("/stock/20").json()["available"] != 3:
                assert time.monotonic() < deadline, "the hung request never applied its effect"
                time.sleep(0.05)
            http.put("/faults", json={})
            retry = http.post("/inventory/reservations", json=body, headers=headers)
            assert retry.status_code == 201
            assert retry.headers["Idempotent-Replayed"] == "true"
            assert http.get("/audit").json()["effects_total"] == 1
    finally:
        stop(server, thread)
    assert not thread.is_alive()


def test_the_audit_reads_the_header_the_agents_send() -> None:
    from agents.services import INSTANCE_HEADER as SENT  # noqa: PLC0415 (one test's cross-check)

    assert SENT == INSTANCE_HEADER


# --- undo by the forward call's key -------------------------------------------


def release_by_key(client: TestClient, order: str, forward: str, **extra: str) -> httpx.Response:
    body = {"orderId": order, "forwardKey": forward, **extra}
    return post(client, "/inventory/reservations/release", body, f"{forward}:undo")


def test_undo_by_key_after_a_reserve_releases_the_stock_exactly_once(client: TestClient) -> None:
    reservation = reserve(client, "o1", [("10", 3)], key="o1:reserve_inventory").json()["reservationId"]
    assert reserve(client, "o2", [("10", 4)]).status_code == 201

    undone = release_by_key(client, "o1", "o1:reserve_inventory", reservationId=reservation)
    replay = release_by_key(client, "o1", "o1:reserve_inventory", reservationId=reservation)
    other_key = post(
        client,
        "/inventory/reservations/release",
        {"orderId": "o1", "forwardKey": "o1:reserve_inventory"},
        "operator:release",
    )

    assert undone.status_code == 200
    assert undone.json() == {
        "undone": True,
        "forwardKey": "o1:reserve_inventory",
        "orderId": "o1",
        "reservationId": reservation,
        "alreadyUndone": False,
    }
    assert replay.status_code == 200
    assert replay.json() == undone.json()
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert other_key.status_code == 200
    assert other_key.json()["undone"] is True
    assert other_key.json()["alreadyUndone"] is True
    assert available(client, "10") == 6  # 10 - 3 - 4 + 3: released once, o2 keeps its 4
    summary = client.get("/orders/o1/facts").json()["summary"]
    assert (summary["activeReservations"], summary["undone"]) == (0, 1)
    report = audit(client)
    assert report["undo_effects_total"] == 1
    assert report["effects_total"] == 3
    assert report["keys"]["o1:reserve_inventory:undo"]["effects"] == 1
    assert report["keys"]["o1:reserve_inventory:undo"]["undo"] is True
    assert report["keys"]["operator:release"]["effects"] == 0


def test_undo_by_key_after_a_release_by_id_undoes_nothing_more(client: TestClient) -> None:
    reservation = reserve(client, "o1", [("10", 3)]).json()["reservationId"]
    assert post(client, f"/inventory/reservations/{reservation}/release", {}, "op:release").status_code == 200

    undone = release_by_key(client, "o1", "o1:reserve")

    assert undone.status_code == 200
    assert (undone.json()["undone"], undone.json()["alreadyUndone"]) == (True, True)
    assert undone.json()["reservationId"] == reservation
    assert available(client, "10") == 10
    assert client.get("/orders/o1/facts").json()["summary"]["undone"] == 0
    assert audit(client)["undo_effects_total"] == 1  # the release by id


def test_undo_before_the_forward_call_tombstones_the_key(client: TestClient) -> None:
    undone = release_by_key(client, "o1", "o1:reserve_inventory")
    late = reserve(client, "o1", [("10", 3)], key="o1:reserve_inventory")
    again = reserve(client, "o1", [("10", 3)], key="o1:reserve_inventory")

    assert undone.status_code == 200
    assert undone.json() == {
        "undone": False,
        "forwardKey": "o1:reserve_inventory",
        "orderId": "o1",
        "reason": "never_applied",
    }
    assert late.status_code == 409
    assert late.json()["error"] == "cancelled"
    assert late.json()["permanent"] is True
    assert late.json()["undoKey"] == "o1:reserve_inventory:undo"
    assert again.status_code == 409
    assert "Idempotent-Replayed" not in again.headers
    assert available(client, "10") == 10
    facts = client.get("/orders/o1/facts").json()
    assert facts["reservations"] == []
    assert facts["tombstones"] == [
        {
            "forwardKey": "o1:reserve_inventory",
            "orderId": "o1",
            "undoKey": "o1:reserve_inventory:undo",
            "reason": "never_applied",
        }
    ]
    assert facts["summary"]["undone"] == 0
    report = audit(client)
    entry = report["keys"]["o1:reserve_inventory"]
    assert (entry["calls"], entry["effects"], entry["refusedAfterUndo"], entry["status"]) == (2, 0, 2, 409)
    assert report["forward_after_undo"] == 2
    assert (report["effects_total"], report["undo_effects_total"]) == (0, 0)
    # Undoing again, under its key or another one, keeps the first tombstone.
    assert release_by_key(client, "o1", "o1:reserve_inventory").headers["Idempotent-Replayed"] == "true"
    other = post(
        client,
        "/inventory/reservations/release",
        {"orderId": "o1", "forwardKey": "o1:reserve_inventory"},
        "operator:release",
    )
    assert other.json()["reason"] == "never_applied"
    assert len(client.get("/orders/o1/facts").json()["tombstones"]) == 1


def test_a_forward_call_still_before_its_stored_entry_loses_to_the_undo() -> None:
    # The latency fault delays the forward call after it arrived but before its key is looked up.
    app = create_app(make_catalog(), FaultPlan(latency_rate=1.0, latency_s=0.3), auth=None)
    forward = {"orderId": "o1", "items": [{"sku": "10", "quantity": 4}]}
    undo = {"orderId": "o1", "forwardKey": "o1:reserve_inventory"}

    async def scenario() -> tuple[httpx.Response, httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://demo") as http:

            async def undo_soon() -> httpx.Response:
                await asyncio.sleep(0.05)
                headers = {"Idempotency-Key": "o1:reserve_inventory:undo"}
                return await http.post("/inventory/reservations/release", json=undo, headers=headers)

            headers = {"Idempotency-Key": "o1:reserve_inventory"}
            return await asyncio.gather(
                http.post("/inventory/reservations", json=forward, headers=headers), undo_soon()
            )

    late, undone = asyncio.run(scenario())

    assert undone.status_code == 200
    assert (undone.json()["undone"], undone.json()["reason"]) == (False, "never_applied")
    assert late.status_code == 409
    assert late.json()["error"] == "cancelled"
    with TestClient(app) as client:
        assert available(client, "10") == 10
        assert audit(client)["forward_after_undo"] == 1


def test_undo_while_a_hung_forward_call_is_in_flight_waits_for_it() -> None:
    app: FastAPI = create_app(make_catalog(), FaultPlan(hang_rate=1.0, hang_s=1.0), auth=None)
    server, thread = serve_in_thread(app, "127.0.0.1", 0)
    try:
        forward = {"orderId": "o1", "items": [{"sku": "20", "quantity": 2}]}
        undo = {"orderId": "o1", "forwardKey": "o1:reserve_inventory"}
        undo_headers = {"Idempotency-Key": "o1:reserve_inventory:undo"}
        with httpx.Client(base_url=server_url(server), timeout=0.2) as http:
            with pytest.raises(httpx.ReadTimeout):
                http.post(
                    "/inventory/reservations",
                    json=forward,
                    headers={"Idempotency-Key": "o1:reserve_inventory"},
                )
            busy = http.post("/inventory/reservations/release", json=undo, headers=undo_headers)
            assert busy.status_code == 409
            assert busy.json()["error"] == "request_in_progress"
            assert busy.json()["permanent"] is False
            assert busy.json()["forwardKey"] == "o1:reserve_inventory"
            assert http.get("/stock/20").json()["available"] == 5  # the hung call has not applied yet

            deadline = time.monotonic() + 5.0
            while http.get("/stock/20").json()["available"] != 3:
                assert time.monotonic() < deadline, "the hung request never applied its effect"
                time.sleep(0.05)
            undone = http.post("/inventory/reservations/release", json=undo, headers=undo_headers)

            assert undone.status_code == 200
            assert "Idempotent-Replayed" not in undone.headers  # the 409 was not stored
            assert undone.json()["undone"] is True
            assert undone.json()["alreadyUndone"] is False
            assert http.get("/stock/20").json()["available"] == 5
            facts = http.get("/orders/o1/facts").json()
            assert facts["tombstones"] == []
            assert (facts["summary"]["activeReservations"], facts["summary"]["undone"]) == (0, 1)
            assert undone.json()["reservationId"] == facts["reservations"][0]["reservationId"]
            report = http.get("/audit").json()
            assert (report["effects_total"], report["undo_effects_total"]) == (2, 1)
            assert report["keys"]["o1:reserve_inventory:undo"]["calls"] == 2
            assert report["forward_after_undo"] == 0
    finally:
        stop(server, thread)
    assert not thread.is_alive()


def test_refund_by_key_refunds_the_net_charge_once(client: TestClient) -> None:
    charged = charge(client, "o1", GOOD_CUSTOMER, "100.00").json()
    charge_id = charged["chargeId"]
    assert (
        post(client, f"/payments/charges/{charge_id}/refund", {"amount": "40.00"}, "op:r1").status_code == 200
    )
    # What the compensation sends: the forward key and the compensation entry's data.
    body = {"orderId": "o1", "forwardKey": "o1:charge", "chargeId": charge_id, "amount": "100.00"}
    body |= {"currency": "USD"}

    refunded = post(client, "/payments/refunds", body, "o1:charge:undo")
    replay = post(client, "/payments/refunds", body, "o1:charge:undo")
    again = post(client, "/payments/refunds", {"orderId": "o1", "forwardKey": "o1:charge"}, "op:refund")

    assert refunded.status_code == 200
    answer = refunded.json()
    assert answer["refundId"].startswith("re_")
    assert {k: v for k, v in answer.items() if k != "refundId"} == {
        "undone": True,
        "forwardKey": "o1:charge",
        "orderId": "o1",
        "chargeId": charge_id,
        "amount": "60.00",
        "feeKept": "0.00",
        "refundedTotal": "100.00",
        "alreadyUndone": False,
    }
    assert replay.json() == answer
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert again.status_code == 200
    assert again.json()["undone"] is True
    assert again.json()["alreadyUndone"] is True
    assert again.json()["amount"] == "0.00"
    assert again.json()["refundId"] == answer["refundId"]
    facts = client.get("/orders/o1/facts").json()
    assert facts["summary"]["netCharged"] == "0.00"
    assert facts["summary"]["undone"] == 1
    assert [r["amount"] for r in facts["refunds"]] == ["40.00", "60.00"]
    assert facts["refunds"][1]["idempotencyKey"] == "o1:charge:undo"
    assert audit(client)["undo_effects_total"] == 2


def test_refund_by_key_without_an_amount_refunds_it_all_and_checks_one_sent(client: TestClient) -> None:
    charge_id = charge(client, "o1", GOOD_CUSTOMER, "25.50").json()["chargeId"]
    base = {"orderId": "o1", "forwardKey": "o1:charge"}

    partial = post(client, "/payments/refunds", {**base, "amount": "10.00"}, "o1:charge:undo-1")
    wrong_charge = post(client, "/payments/refunds", {**base, "chargeId": "ch_other"}, "o1:charge:undo-2")
    full = post(client, "/payments/refunds", base, "o1:charge:undo")

    assert partial.status_code == 422
    assert partial.json()["error"] == "refund_amount_mismatch"
    assert partial.json()["permanent"] is True
    assert (partial.json()["charged"], partial.json()["refundable"]) == ("25.50", "25.50")
    assert wrong_charge.status_code == 422
    assert wrong_charge.json()["error"] == "effect_mismatch"
    assert wrong_charge.json()["expected"] == charge_id
    assert full.status_code == 200
    assert (full.json()["amount"], full.json()["refundedTotal"]) == ("25.50", "25.50")
    assert client.get("/orders/o1/facts").json()["summary"]["netCharged"] == "0.00"
    assert audit(client)["undo_effects_total"] == 1


def test_undo_of_a_declined_charge_is_refused_and_tombstones_the_key(client: TestClient) -> None:
    assert charge(client, "o1", BROKE_CUSTOMER, "10.00").status_code == 402

    undone = post(client, "/payments/refunds", {"orderId": "o1", "forwardKey": "o1:charge"}, "o1:charge:undo")
    retried = charge(client, "o1", BROKE_CUSTOMER, "10.00")

    assert undone.status_code == 200
    assert undone.json() == {"undone": False, "forwardKey": "o1:charge", "orderId": "o1", "reason": "refused"}
    assert retried.status_code == 409  # cancelled, no longer the stored 402
    assert retried.json()["error"] == "cancelled"
    facts = client.get("/orders/o1/facts").json()
    assert facts["charges"] == []
    assert facts["refunds"] == []
    assert facts["tombstones"][0]["reason"] == "refused"
    assert facts["summary"]["netCharged"] == "0.00"
    assert audit(client)["keys"]["o1:charge"]["refusedAfterUndo"] == 1


def test_cancel_by_key_cancels_the_shipment(client: TestClient) -> None:
    items = [{"sku": "10", "quantity": 1}]
    shipped = post(
        client, "/shipping/shipments", {"orderId": "o1", "carrier": "MAIL", "items": items}, "o1:ship"
    ).json()
    body = {"orderId": "o1", "forwardKey": "o1:ship", "shipmentId": shipped["shipmentId"], "carrier": "MAIL"}

    cancelled = post(client, "/shipping/shipments/cancel", body, "o1:ship:undo")
    by_id = post(client, f"/shipping/shipments/{shipped['shipmentId']}/cancel", {}, "op:cancel")

    assert cancelled.status_code == 200
    assert cancelled.json() == {
        "undone": True,
        "forwardKey": "o1:ship",
        "orderId": "o1",
        "shipmentId": shipped["shipmentId"],
        "alreadyUndone": False,
    }
    assert by_id.json()["alreadyCancelled"] is True
    summary = client.get("/orders/o1/facts").json()["summary"]
    assert (summary["activeShipments"], summary["undone"]) == (0, 1)
    report = audit(client)
    assert (report["effects_total"], report["undo_effects_total"]) == (2, 1)


def test_undo_by_key_refuses_keys_it_does_not_own(client: TestClient) -> None:
    reservation = reserve(client, "o1", [("10", 2)]).json()["reservationId"]
    assert charge(client, "o1", GOOD_CUSTOMER, "5.00").status_code == 201

    other_endpoint = release_by_key(client, "o1", "o1:charge")
    wrong_id = release_by_key(client, "o1", "o1:reserve", reservationId="res_other")
    other_order = post(
        client, "/inventory/reservations/release", {"orderId": "o2", "forwardKey": "o1:reserve"}, "o2:undo"
    )
    no_key = post(
        client, "/inventory/reservations/release", {"orderId": "o1", "forwardKey": "o1:reserve"}, None
    )

    assert other_endpoint.status_code == 422
    assert other_endpoint.json()["error"] == "forward_key_mismatch"
    assert other_endpoint.json()["endpoint"] == "payments.charge"
    assert wrong_id.status_code == 422
    assert wrong_id.json() == {
        "error": "effect_mismatch",
        "permanent": True,
        "forwardKey": "o1:reserve",
        "sent": "res_other",
        "expected": reservation,
    }
    assert other_order.status_code == 422
    assert other_order.json()["error"] == "invalid_request"
    assert no_key.status_code == 400
    assert available(client, "10") == 8
    facts = client.get("/orders/o1/facts").json()
    assert facts["tombstones"] == []
    assert facts["summary"]["netCharged"] == "5.00"
    assert audit(client)["undo_effects_total"] == 0


# --- the cancellation fee -------------------------------------------------------


class FakeClock:
    """A monotonic clock the test moves by hand (seconds)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def fee_client(clock: FakeClock, fee: str = "2.50", after_s: float = 60.0) -> TestClient:
    policy = RefundPolicy(fee=Decimal(fee), fee_after_s=after_s)
    return TestClient(create_app(make_catalog(), FaultPlan(), auth=None, clock=clock, refund_policy=policy))


def refund_by_key(client: TestClient, order: str, key: str = "", **extra: str) -> httpx.Response:
    body = {"orderId": order, "forwardKey": f"{order}:charge", **extra}
    return post(client, "/payments/refunds", body, key or f"{order}:charge:undo")


def summary_of(client: TestClient, order: str) -> dict[str, Any]:
    summary = client.get(f"/orders/{order}/facts").json()["summary"]
    assert isinstance(summary, dict)
    return summary


def charge_id_of(client: TestClient, order: str) -> str:
    charge_id = client.get(f"/orders/{order}/facts").json()["charges"][0]["chargeId"]
    assert isinstance(charge_id, str)
    return charge_id


def test_a_refund_within_the_window_is_in_full() -> None:
    clock = FakeClock()
    with fee_client(clock) as client:
        charge_id = charge(client, "o1", GOOD_CUSTOMER, "100.00").json()["chargeId"]
        assert charge(client, "o2", GOOD_CUSTOMER, "30.00").status_code == 201
        clock.now += 60.0  # exactly the window: still free

        by_key = refund_by_key(client, "o1", amount="100.00", chargeId=charge_id)
        by_id = post(
            client, f"/payments/charges/{charge_id_of(client, 'o2')}/refund", {"amount": "30"}, "o2:undo"
        )

        assert by_key.status_code == 200
        assert (by_key.json()["amount"], by_key.json()["feeKept"]) == ("100.00", "0.00")
        assert by_key.json()["refundedTotal"] == "100.00"
        assert by_id.status_code == 200
        assert (by_id.json()["amount"], by_id.json()["feeKept"]) == ("30.00", "0.00")
        summary = summary_of(client, "o1")
        assert (summary["netCharged"], summary["feeKept"]) == ("0.00", "0.00")
        assert audit(client)["fees_kept_total"] == "0.00"


def test_a_refund_after_the_window_keeps_the_fee() -> None:
    clock = FakeClock()
    with fee_client(clock) as client:
        charge_id = charge(client, "o1", GOOD_CUSTOMER, "100.00").json()["chargeId"]
        clock.now += 60.5

        # What the compensation sends: the charge amount from its log, a consistency check only.
        refunded = refund_by_key(client, "o1", amount="100.00", chargeId=charge_id)
        replay = refund_by_key(client, "o1", amount="100.00", chargeId=charge_id)

        assert refunded.status_code == 200
        answer = refunded.json()
        assert (answer["amount"], answer["feeKept"], answer["refundedTotal"]) == ("97.50", "2.50", "97.50")
        assert (answer["undone"], answer["alreadyUndone"]) == (True, False)
        assert replay.json() == answer
        facts = client.get("/orders/o1/facts").json()
        assert facts["summary"]["netCharged"] == "2.50"
        assert facts["summary"]["feeKept"] == "2.50"
        assert facts["summary"]["undone"] == 1
        assert facts["charges"][0] | {"chargeId": "", "idempotencyKey": ""} == {
            "chargeId": "",
            "amount": "100.00",
            "currency": "USD",
            "refunded": "97.50",
            "feeKept": "2.50",
            "idempotencyKey": "",
        }
        assert [(r["amount"], r["feeKept"]) for r in facts["refunds"]] == [("97.50", "2.50")]
        report = audit(client)
        assert report["fees_kept_total"] == "2.50"
        assert report["undo_effects_total"] == 1


def test_a_fee_larger_than_the_charge_keeps_the_whole_charge() -> None:
    clock = FakeClock()
    with fee_client(clock, fee="20.00", after_s=0.0) as client:
        assert charge(client, "o1", GOOD_CUSTOMER, "12.34").status_code == 201
        clock.now += 0.001

        refunded = refund_by_key(client, "o1", amount="12.34")
        again = refund_by_key(client, "o1", key="operator:refund")

        assert refunded.status_code == 200
        assert (refunded.json()["amount"], refunded.json()["feeKept"]) == ("0.00", "12.34")
        assert refunded.json()["alreadyUndone"] is False
        assert again.json()["alreadyUndone"] is True
        assert (again.json()["amount"], again.json()["feeKept"]) == ("0.00", "0.00")
        assert again.json()["refundId"] == refunded.json()["refundId"]
        summary = summary_of(client, "o1")
        assert (summary["netCharged"], summary["feeKept"]) == ("12.34", "12.34")
        assert audit(client)["fees_kept_total"] == "12.34"


def test_the_fee_is_kept_once_per_charge_across_refunds() -> None:
    clock = FakeClock()
    with fee_client(clock, fee="5.00", after_s=10.0) as client:
        charge_id = charge(client, "o1", GOOD_CUSTOMER, "100.00").json()["chargeId"]
        assert charge(client, "o2", GOOD_CUSTOMER, "100.00").status_code == 201
        clock.now += 11.0
        path = f"/payments/charges/{charge_id}/refund"

        first = post(client, path, {"amount": "40.00"}, "op:r1")
        too_much = post(client, path, {"amount": "60.01"}, "op:r2")
        second = post(client, path, {"amount": "55.00"}, "op:r3")
        # An amount sent by key must be the charge's or the rest after refunds and the fee kept.
        by_key = refund_by_key(client, "o1", amount="55.00")
        rest = refund_by_key(client, "o1", key="operator:refund", amount="5.00")

        assert (first.json()["amount"], first.json()["feeKept"]) == ("35.00", "5.00")
        assert too_much.status_code == 422
        assert too_much.json()["error"] == "refund_exceeds_charge"
        assert too_much.json()["refundable"] == "60.00"
        assert (second.json()["amount"], second.json()["feeKept"]) == ("55.00", "0.00")
        assert by_key.status_code == 422  # 55.00 is neither the charge nor the 5.00 left
        assert by_key.json()["refundable"] == "5.00"
        assert (rest.json()["amount"], rest.json()["feeKept"], rest.json()["alreadyUndone"]) == (
            "5.00",
            "0.00",
            False,
        )
        summary = summary_of(client, "o1")
        assert (summary["netCharged"], summary["feeKept"]) == ("5.00", "5.00")

        # A first partial refund smaller than the fee keeps all of it; the next keeps only the rest.
        o2 = f"/payments/charges/{charge_id_of(client, 'o2')}/refund"
        small = post(client, o2, {"amount": "3.00"}, "o2:r1")
        bigger = post(client, o2, {"amount": "50.00"}, "o2:r2")
        last = refund_by_key(client, "o2", amount="100.00")

        assert (small.json()["amount"], small.json()["feeKept"]) == ("0.00", "3.00")
        assert (bigger.json()["amount"], bigger.json()["feeKept"]) == ("48.00", "2.00")
        assert (last.json()["amount"], last.json()["feeKept"]) == ("47.00", "0.00")
        summary = summary_of(client, "o2")
        assert (summary["netCharged"], summary["feeKept"]) == ("5.00", "5.00")
        assert audit(client)["fees_kept_total"] == "10.00"


def test_the_refund_policy_can_be_read_and_replaced_at_runtime() -> None:
    clock = FakeClock()
    with TestClient(create_app(make_catalog(), FaultPlan(), auth=None, clock=clock)) as client:
        assert client.get("/refund-policy").json() == {"fee": "0.00", "fee_after_s": 0.0}
        assert charge(client, "o1", GOOD_CUSTOMER, "10.00").status_code == 201
        assert charge(client, "o2", GOOD_CUSTOMER, "10.00").status_code == 201
        clock.now += 3600.0
        free = refund_by_key(client, "o1")

        replaced = client.put("/refund-policy", json={"fee": "1.5", "fee_after_s": 30})
        bad_fee = client.put("/refund-policy", json={"fee": "-1"})
        bad_cents = client.put("/refund-policy", json={"fee": "0.001"})
        unknown = client.put("/refund-policy", json={"fee": "1.00", "percent": 5})
        with_fee = refund_by_key(client, "o2")

        assert (free.json()["amount"], free.json()["feeKept"]) == ("10.00", "0.00")
        assert replaced.status_code == 200
        assert replaced.json() == {"fee": "1.50", "fee_after_s": 30.0}
        for refused in (bad_fee, bad_cents, unknown):
            assert refused.status_code == 422
            assert refused.json()["error"] == "invalid_request"
        assert client.get("/refund-policy").json() == {"fee": "1.50", "fee_after_s": 30.0}
        assert (with_fee.json()["amount"], with_fee.json()["feeKept"]) == ("8.50", "1.50")
        assert client.put("/refund-policy", json={}).json() == {"fee": "0.00", "fee_after_s": 0.0}


def test_the_command_line_sets_the_refund_policy() -> None:
    options = parse_args(["--cancellation-fee", "2.50", "--fee-after-s", "60", "--port", "0"])
    default = parse_args([])

    assert options.refund_policy == RefundPolicy(fee=Decimal("2.50"), fee_after_s=60.0)
    assert options.port == 0
    assert default.refund_policy == RefundPolicy()
    assert default.faults == FaultPlan()
    assert parse_args(["--faults", '{"undo_permanent": true}']).faults.undo_permanent is True
    for bad in (["--cancellation-fee", "-1"], ["--cancellation-fee", "x"], ["--fee-after-s", "-5"]):
        with pytest.raises(SystemExit) as exited:
            parse_args(bad)
        assert exited.value.code == 2


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--port", "99999"], "--port must be 0 (a free port) to 65535, not 99999"),
        (["--port", "-1"], "--port must be 0 (a free port) to 65535, not -1"),
        (["--orders", "-5"], "--orders must be 0 (all) or more, not -5"),
        (["--stock-divisor", "0"], "--stock-divisor must be at least 1, not 0"),
        # The steering routes check no token: the services never listen beyond this machine.
        (
            ["--host", "0.0.0.0"],
            "the demo services serve on a loopback --host only (their steering routes check no token)",
        ),
        (
            ["--host", "::"],
            "the demo services serve on a loopback --host only (their steering routes check no token)",
        ),
    ],
)
def test_the_command_line_refuses_numbers_out_of_range(
    capsys: pytest.CaptureFixture[str], args: list[str], expected: str
) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_args(args)

    assert exited.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"python -m demo.services: error: {expected}"


def test_a_port_in_use_is_one_line_with_status_1_before_any_data_loads(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    loaded: list[object] = []
    monkeypatch.setattr(services, "ensure_dataset", lambda *args: loaded.append(args))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        status = services.main(["--port", str(port), "--orders", "5"])

    assert status == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        f"python -m demo.services: error: cannot listen on 127.0.0.1:{port}: Address already in use"
    ]
    assert loaded == []


def test_the_command_serves_on_the_socket_it_bound(capsys: pytest.CaptureFixture[str]) -> None:
    sock = services.listen_socket("127.0.0.1", 0)
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(make_catalog(), FaultPlan(), auth=None), log_level="warning", lifespan="off"
        )
    )
    thread = threading.Thread(target=asyncio.run, args=(services._serve_until_stopped(server, sock),))
    thread.start()
    try:
        for _ in range(500):
            if server.started:
                break
            time.sleep(0.01)
        assert server_url(server) == f"http://127.0.0.1:{port}"
        assert httpx.get(f"{server_url(server)}/audit", timeout=5).status_code == 200
    finally:
        server.should_exit = True
        thread.join(10)
    assert capsys.readouterr().out == f"demo services listening on http://127.0.0.1:{port}\n"


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_connections_to_the_commands_socket_send_without_waiting_for_acks(host: str) -> None:
    # asyncio turns Nagle's algorithm off only on sockets whose proto is IPPROTO_TCP, and a socket from
    # socket.create_server has proto 0. With Nagle on, uvicorn's second write of an answer (its body
    # after its headers) waits for the client's ACK of the first, which the client delays by up to
    # 40 ms: every such call to the demo services took 40 ms more.
    try:
        sock = services.listen_socket(host, 0)
    except OSError:
        pytest.skip(f"no {host} on this machine")
    with sock, socket.create_connection(sock.getsockname()[:2]):
        accepted, _ = sock.accept()
        with accepted:
            assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0


def test_a_caller_that_goes_away_before_its_body_arrives_gets_no_effect_and_no_server_error() -> None:
    # A killed host's agent disconnects in the middle of a call (during an injected latency, say): the
    # service must drop the call quietly, not fail it as a server error with a traceback.
    app = create_app(make_catalog(), FaultPlan(), auth=None)
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/inventory/reservations",
        "raw_path": b"/inventory/reservations",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"idempotency-key", b"o1:reserve"), (b"content-type", b"application/json")],
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8082),
    }
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))

    assert [m["status"] for m in sent if m["type"] == "http.response.start"] == [499]
    with TestClient(app) as client:
        assert available(client, "10") == 10
        assert audit(client)["keys"]["o1:reserve"]["effects"] == 0


# --- faults that hit only undos ---------------------------------------------------


def test_undo_only_fault_decisions() -> None:
    plan = FaultPlan(undo_transient_failures=2)
    refusing = FaultPlan(undo_permanent=True, undo_transient_failures=2, transient_rate=1.0)

    assert [plan.decide("k", call, undo=True) for call in (1, 2, 3, 4)] == [
        FaultKind.TRANSIENT,
        FaultKind.TRANSIENT,
        None,
        None,
    ]
    assert plan.decide("k", 1) is None
    assert refusing.decide("k", 5, undo=True) is FaultKind.UNDO_REFUSED
    assert refusing.decide("k", 1) is FaultKind.TRANSIENT  # forward calls keep their rates
    assert FaultPlan(undo_permanent=True).decide("k", 1) is None
    # After its N failures an undo key meets the random rates only when faults_on_undo says so.
    assert FaultPlan(undo_transient_failures=1, hang_rate=1.0).decide("k", 2, undo=True) is None
    on_undo = FaultPlan(undo_transient_failures=1, hang_rate=1.0, faults_on_undo=True)
    assert on_undo.decide("k", 2, undo=True) is FaultKind.HANG
    with pytest.raises(ValueError):
        FaultPlan(undo_transient_failures=-1)


def test_the_first_undo_calls_of_each_key_fail_transiently() -> None:
    with make_client(FaultPlan(undo_transient_failures=2)) as client:
        reserved = reserve(client, "o1", [("10", 3)], key="o1:reserve_inventory")
        assert reserved.status_code == 201  # forward calls are unaffected
        assert available(client, "10") == 7

        calls = [release_by_key(client, "o1", "o1:reserve_inventory") for _ in range(4)]

        for failed in calls[:2]:
            assert failed.status_code == 503
            assert failed.json() == {"error": "unavailable", "permanent": False}
        assert calls[2].status_code == 200
        assert (calls[2].json()["undone"], calls[2].json()["alreadyUndone"]) == (True, False)
        assert "Idempotent-Replayed" not in calls[2].headers
        assert calls[3].headers["Idempotent-Replayed"] == "true"
        assert available(client, "10") == 10
        entry = client.get("/audit/o1:reserve_inventory:undo").json()
        assert (entry["calls"], entry["effects"]) == (4, 1)
        assert entry["faults"] == [{"call": 1, "kind": "transient"}, {"call": 2, "kind": "transient"}]
        facts = client.get("/orders/o1/facts").json()
        assert facts["tombstones"] == []
        assert facts["summary"]["undone"] == 1
        # Every undo key, by id too, gets its own first failures.
        reservation = reserved.json()["reservationId"]
        by_id = [
            post(client, f"/inventory/reservations/{reservation}/release", {}, "op:release").status_code
            for _ in range(3)
        ]
        assert by_id == [503, 503, 200]
        report = audit(client)
        assert report["undo_effects_total"] == 1
        assert report["keys"]["o1:reserve_inventory"]["faults"] == []


def test_a_permanently_refused_undo_changes_nothing() -> None:
    with make_client(FaultPlan(undo_permanent=True)) as client:
        reservation = reserve(client, "o1", [("10", 3)], key="o1:reserve_inventory").json()["reservationId"]
        charged = charge(client, "o1", GOOD_CUSTOMER, "10.00")
        items = [{"sku": "10", "quantity": 3}]
        shipped = post(
            client, "/shipping/shipments", {"orderId": "o1", "carrier": "MAIL", "items": items}, "o1:ship"
        )
        assert (charged.status_code, shipped.status_code) == (201, 201)  # forward calls are unaffected

        refusals = [
            release_by_key(client, "o1", "o1:reserve_inventory"),
            release_by_key(client, "o1", "o1:reserve_inventory"),
            post(client, f"/inventory/reservations/{reservation}/release", {}, "op:release"),
            refund_by_key(client, "o1"),
            post(client, "/shipping/shipments/cancel", {"orderId": "o1", "forwardKey": "o1:ship"}, "o1:u"),
            release_by_key(client, "o9", "o9:reserve"),  # a key with no effect: no tombstone either
        ]

        for refused in refusals:
            assert refused.status_code == 422
            assert refused.json() == {"error": "undo_refused", "permanent": True}
            assert "Idempotent-Replayed" not in refused.headers
        assert available(client, "10") == 7
        summary = summary_of(client, "o1")
        assert (summary["activeReservations"], summary["netCharged"], summary["activeShipments"]) == (
            1,
            "10.00",
            1,
        )
        assert client.get("/orders/o9/facts").json()["tombstones"] == []
        assert reserve(client, "o9", [("10", 1)]).status_code == 201
        report = audit(client)
        assert report["undo_effects_total"] == 0
        assert report["keys"]["o1:reserve_inventory:undo"]["faults"][0]["kind"] == "undo_refused"

        # Nothing was stored: once undos are allowed again the same key runs.
        client.put("/faults", json={})
        retried = release_by_key(client, "o1", "o1:reserve_inventory")
        assert retried.status_code == 200
        assert "Idempotent-Replayed" not in retried.headers
        assert available(client, "10") == 9


def test_a_corrected_shipment_is_a_new_call_only_under_a_key_of_its_own(client: TestClient) -> None:
    """Why a resubmit with corrected input changes the step's idempotency key (operator_api.corrections):
    under the refused call's key the corrected body is refused as a key reused; under the correction's key
    it ships, and a repeat of it (a redelivered or retried request) is answered from what was stored."""
    items = [{"sku": 10, "quantity": 1}]
    refused = post(
        client, "/shipping/shipments", {"orderId": "o1", "carrier": "CAMEL", "items": items}, "o1:ship"
    )
    corrected = {"orderId": "o1", "carrier": "AIR", "items": items}

    reused = post(client, "/shipping/shipments", corrected, "o1:ship")
    shipped = post(client, "/shipping/shipments", corrected, "o1:ship:correction-1")
    repeated = post(client, "/shipping/shipments", corrected, "o1:ship:correction-1")

    assert (refused.status_code, refused.json()["error"]) == (422, "unknown_carrier")
    assert (reused.status_code, reused.json()["error"]) == (422, "idempotency_key_reuse")
    assert (shipped.status_code, shipped.json()["carrier"]) == (201, "AIR")
    assert repeated.status_code == 201 and repeated.headers["Idempotent-Replayed"] == "true"
    assert repeated.json()["shipmentId"] == shipped.json()["shipmentId"]
    facts = client.get("/orders/o1/facts").json()
    assert [s["carrier"] for s in facts["shipments"]] == ["AIR"]  # one shipment
