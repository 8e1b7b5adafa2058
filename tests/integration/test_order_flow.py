"""Orders end to end: submission, claim, the orchestrator's race, agents, listener, supervisor, replies.

Runs the real durabletask worker and in-memory backend, the real demo services over HTTP and the
devhost's loops. ``backend`` runs each test on the in-memory adapters and on the local emulators
(cosmosdb-server through azure-cosmos, Azurite through azure-storage-queue).
"""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any, NoReturn

import httpx
import pytest
from typer.testing import CliRunner

import devhost.handlers
import orchestrators.workflow.forward
from demo.faults import FaultPlan
from devhost.durabletask_backend import free_port
from devhost.local_issuer import local_object_id
from intake import submission
from orderflow.errors import WORKFLOW_ERROR
from orderflow.messages import AgentOutcome, AgentResponse, step_event_name
from orderflow.operator_auth import OPERATOR_ROLE, REVIEWER_ROLE
from orderflow.records import ProcessState, StepStatus, format_utc, parse_utc
from orderflow.replays import replay_message_id
from orderflow_client.cli import app as cli_app
from orderflow_client.operator_client import OperatorApiClient
from supervisor.poison import POISON_GUARD, REPEATED_FAILURE
from tests.harness import System, running_system
from tests.host_deps import HostDeps
from tests.operator_tokens import TrustedIssuer, local_issuer

pytestmark = pytest.mark.integration


def statuses(system: System) -> dict[str, list[str]]:
    seen: dict[str, list[str]] = {}
    for message in _drain(system):
        body = json.loads(message)
        seen.setdefault(body["orderId"], []).append(body["status"])
    return seen


def _drain(system: System) -> list[str]:
    queue = system.deps.queues.queue(system.client.reply_queue)
    bodies = []
    while batch := queue.receive(max_messages=32, lock_s=30):
        for message in batch:
            bodies.append(message.body)
            queue.complete(message)
    return bodies


def test_orders_settle_as_the_data_says(deps: HostDeps) -> None:
    with running_system(deps) as system:
        ids = system.submit_all()
        records = system.wait_settled(ids)
        audit = system.audit()
    assert records["tpch-1"].process_state is ProcessState.PROCESSED
    # Customer 2 has a negative balance: the payment is declined, a permanent error, and the
    # reservation made before it is released (compensated).
    declined = records["tpch-2"]
    assert declined.process_state is ProcessState.COMPENSATED
    assert declined.last_error is not None
    assert (declined.last_error.kind, declined.last_error.code, declined.last_error.step) == (
        "permanent",
        "card_declined",
        "charge_payment",
    )
    assert declined.steps["charge_payment"].status is StepStatus.FAILED
    assert declined.steps["reserve_inventory"].status is StepStatus.COMPENSATED
    assert [(e.step, e.status, e.undo_result) for e in declined.compensation_log] == [
        (
            "reserve_inventory",
            "Compensated",
            {"undone": "true", "reservationId": declined.compensation_log[0].data["reservationId"]},
        )
    ]
    processed = records["tpch-1"]
    assert [s.status for s in processed.steps.values()] == [StepStatus.COMPLETED] * 3
    assert [e.step for e in processed.compensation_log] == [
        "reserve_inventory",
        "charge_payment",
        "create_shipment",
    ]
    assert processed.compensation_log[-1].undo is None  # the shipment is a point of no return
    assert processed.steps["charge_payment"].result is not None
    assert processed.steps["charge_payment"].result["amount"] == "1000.50"
    assert (processed.attempt, processed.failure_count, processed.locked_by) == (
        1,
        0,
        f"{system.key('tpch-1')}:1",
    )
    assert audit["duplicate_effects"] == 0
    seen = statuses(system)
    assert seen["tpch-1"] == ["Received", "Processed"]
    assert seen["tpch-2"] == ["Received", "Compensated"]


def test_a_hang_past_the_deadline_is_recovered_by_the_supervisor(deps: HostDeps) -> None:
    # Every first call hangs for 3 s, past the 1.5 s step deadline; the hung call applies its effect late.
    faults = FaultPlan(hang_rate=1.0, hang_s=3.0, seed=3)
    with running_system(deps, faults=faults) as system:
        ids = system.submit_all(["tpch-1"])
        system.wait_until(lambda: system.record("tpch-1").failure_count >= 1, timeout_s=20)
        system.set_faults(FaultPlan())
        record = system.wait_settled(ids, timeout_s=30)["tpch-1"]
        audit = system.audit()
    assert record.process_state is ProcessState.PROCESSED
    assert record.attempt >= 2
    assert record.failure_count >= 1
    assert record.locked_by == f"{system.key('tpch-1')}:{record.attempt}"
    assert audit["duplicate_effects"] == 0
    reserve_key = audit["keys"][f"{system.key('tpch-1')}:reserve_inventory"]
    assert reserve_key["effects"] == 1
    assert reserve_key["calls"] >= 2


def test_effect_applied_response_lost_is_retried_with_the_same_key(deps: HostDeps) -> None:
    faults = FaultPlan(lost_response_rate=0.5, seed=11)
    with running_system(deps, faults=faults) as system:
        ids = system.submit_all(["tpch-1", "tpch-3", "tpch-32"])
        records = system.wait_settled(ids, timeout_s=30)
        audit = system.audit()
    assert {oid: r.process_state for oid, r in records.items()} == dict.fromkeys(ids, ProcessState.PROCESSED)
    lost = [k for k, v in audit["keys"].items() if any(f["kind"] == "lost_response" for f in v["faults"])]
    assert lost, "the seed must inject at least one lost response"
    assert all(audit["keys"][k]["effects"] == 1 for k in lost)
    assert audit["duplicate_effects"] == 0


def test_a_late_response_after_the_timer_fired_changes_nothing(deps: HostDeps) -> None:
    # No agents run: the request is never answered, the timer wins, the record keeps its expired deadline.
    roles = ("submission", "starter", "orchestrator", "listener")
    with running_system(deps, roles=roles) as system:
        system.submit_all(["tpch-1"])
        system.wait_until(
            lambda: system.record("tpch-1").steps["reserve_inventory"].status is StepStatus.RUNNING
        )
        record = system.record("tpch-1")
        assert record.complete_by is not None
        instance = f"{system.key('tpch-1')}:{record.attempt}"
        system.wait_until(lambda: not _running(system, instance), timeout_s=10)
        before = system.deps.states.get(system.key("tpch-1"))
        late = AgentResponse(
            request_id=f"{instance}:reserve_inventory",
            event_id=f"{instance}:reserve_inventory:response",
            event_name=step_event_name("reserve_inventory"),
            order_id=system.key("tpch-1"),
            instance_id=instance,
            step="reserve_inventory",
            outcome=AgentOutcome.SUCCEEDED,
            result={"reservationId": "late"},
            calls=1,
            completed_at=record.complete_by,
        )
        system.deps.queues.queue(system.host.settings.queues.response_queue()).send(
            late.to_json(), message_id=late.event_id
        )
        response_queue = system.deps.queues.queue(system.host.settings.queues.response_queue())
        system.wait_until(lambda: response_queue.approximate_count() == 0)
        after = system.deps.states.get(system.key("tpch-1"))
    assert after.etag == before.etag, (before.item.timeline[-3:], after.item.timeline[-3:])
    assert after.item.process_state is ProcessState.PROCESSING
    assert after.item.steps["reserve_inventory"].status is StepStatus.RUNNING
    assert format_utc(after.item.complete_by) == format_utc(record.complete_by)  # type: ignore[arg-type]


def _running(system: System, instance_id: str) -> bool:
    assert system.host.client is not None
    status = system.host.client.get_status(instance_id)
    return status is not None and status.running


def test_duplicate_submission_makes_one_order(deps: HostDeps) -> None:
    with running_system(deps, roles=("submission",)) as system:
        order = system.catalog.order("tpch-1").to_submission(system.client.reply_queue)
        system.client.submit(order)
        system.client.send_raw(json.dumps(order), message_id="tpch-1:submit")
        system.wait_until(
            lambda: system.deps.queues.queue(system.client.orders_queue).approximate_count() == 0
        )
        replies = [json.loads(b) for b in _drain(system)]
        record = system.record("tpch-1")
        dead = system.deps.queues.dead_letters(system.client.orders_queue)
    assert record.process_state is ProcessState.PENDING
    assert [r["status"] for r in replies] == ["Received", "Received"]
    assert dead == []


def test_conflicting_resubmission_is_dead_lettered_and_the_original_kept(deps: HostDeps) -> None:
    with running_system(deps, roles=("submission",)) as system:
        order: dict[str, Any] = system.catalog.order("tpch-1").to_submission(system.client.reply_queue)
        system.client.submit(order)
        system.wait_until(
            lambda: system.deps.queues.queue(system.client.orders_queue).approximate_count() == 0
        )
        original = system.deps.orders.get(system.key("tpch-1"))
        state_before = system.deps.states.get(system.key("tpch-1"))
        system.client.send_raw(json.dumps({**order, "amount": "1.00"}), message_id="tpch-1:submit-2")
        system.wait_until(lambda: len(system.deps.queues.dead_letters(system.client.orders_queue)) == 1)
        dead = system.deps.queues.dead_letters(system.client.orders_queue)
        after = system.deps.orders.get(system.key("tpch-1"))
        state_after = system.deps.states.get(system.key("tpch-1"))
    assert dead[0].reason == "ConflictingOrder"
    assert json.loads(dead[0].body)["amount"] == "1.00"
    assert after == original
    assert state_after.etag == state_before.etag


def test_calls_to_a_hard_down_dependency_never_exceed_the_retry_budget(deps: HostDeps) -> None:
    # Every call fails with a 503: attempts retry, the supervisor re-queues, the budget runs out.
    with running_system(
        deps, faults=FaultPlan(transient_rate=1.0, seed=2), RETRY_BUDGET=6, AGENT_MAX_CALLS_PER_STEP=2
    ) as system:
        ids = system.submit_all(["tpch-1"])
        record = system.wait_settled(ids, timeout_s=40)["tpch-1"]
        audit = system.audit()
        replies = statuses(system)
    forward = {
        k: v
        for k, v in audit["keys"].items()
        if k.startswith(f"{system.key('tpch-1')}:") and not k.endswith(":undo")
    }
    calls = sum(v["calls"] for v in forward.values())
    assert 0 < calls <= 6
    # Undo calls spend no budget (a spent budget is why the order compensates); the reservation the
    # hard-down service never made is tombstoned by its key.
    assert audit["keys"][f"{system.key('tpch-1')}:reserve_inventory:undo"]["status"] == 200
    # The agent stopped when its reservation ran out; the supervisor then gave up on the spent budget
    # and an attempt compensated (undos spend no budget: the reservation is released by its key).
    assert record.process_state is ProcessState.COMPENSATED
    assert record.last_error is not None
    assert (record.last_error.kind, record.last_error.code) == ("budget_exhausted", "retry_budget_exhausted")
    assert record.retry_budget.spent == 6
    assert record.attempt >= 3
    assert replies["tpch-1"][-1] == "Compensated"


def test_a_parallel_undo_stage_really_overlaps_and_undoes_every_effect(deps: HostDeps) -> None:
    # The shipment is refused (no such carrier) after the reservation and the charge: order-v2 undoes
    # both in one stage. Every undo call takes 1 s at the service, so sequential undos would arrive at
    # least 1 s apart; in parallel they arrive together.
    slow_undos = FaultPlan(latency_rate=1.0, latency_s=1.0, faults_on_undo=True, seed=3)
    # order-v2: its shipment has no fallback carrier, so the refusal compensates.
    with running_system(deps, faults=slow_undos, WORKFLOW_VERSION="order-v2") as system:
        order = next(o for o in system.catalog.orders if o.order_id == "tpch-1")
        system.client.submit(replace(order, carrier="CAMEL").to_submission(system.client.reply_queue))
        record = system.wait_settled(["tpch-1"], timeout_s=40)["tpch-1"]
        audit = system.audit()
        facts = httpx.get(f"{system.services_url}/orders/{system.key('tpch-1')}/facts", timeout=5).json()
    assert record.workflow_version == "order-v2"
    assert record.process_state is ProcessState.COMPENSATED
    assert record.last_error is not None and record.last_error.code == "unknown_carrier"
    assert {e.step: e.status for e in record.compensation_log} == {
        "reserve_inventory": "Compensated",
        "charge_payment": "Compensated",
    }
    arrivals = [
        parse_utc(audit["keys"][f"{system.key('tpch-1')}:{step}:undo"]["received"][0]["at"])
        for step in ("reserve_inventory", "charge_payment")
    ]
    assert abs((arrivals[0] - arrivals[1]).total_seconds()) < 1.0
    summary = facts["summary"]
    assert (summary["activeReservations"], summary["netCharged"], summary["activeShipments"]) == (
        0,
        "0.00",
        0,
    )


def test_an_undo_that_fails_for_a_while_is_resumed_until_it_succeeds(deps: HostDeps) -> None:
    # The first 5 release calls fail (503); each attempt may make 2: two attempts fail, the supervisor
    # resumes the compensation each time, and the third attempt's second call releases the stock.
    flaky = FaultPlan(undo_transient_failures=5)
    with running_system(deps, faults=flaky, AGENT_MAX_CALLS_PER_STEP=2) as system:
        system.submit_all(["tpch-2"])  # card declined after the reservation
        record = system.wait_settled(["tpch-2"], timeout_s=60)["tpch-2"]
        audit = system.audit()
        replies = statuses(system)
    assert record.process_state is ProcessState.COMPENSATED
    assert record.compensation_failures == 2
    release = audit["keys"][f"{system.key('tpch-2')}:reserve_inventory:undo"]
    assert (release["calls"], release["effects"]) == (6, 1)
    assert replies["tpch-2"][-1] == "Compensated"


def test_an_undo_that_always_fails_ends_compensation_failed_with_an_alert(
    deps: HostDeps, caplog: pytest.LogCaptureFixture
) -> None:
    with (
        caplog.at_level("ERROR", logger="orderflow.alerts"),
        running_system(deps, faults=FaultPlan(undo_permanent=True)) as system,
    ):
        system.submit_all(["tpch-2"])
        record = system.wait_settled(["tpch-2"], timeout_s=40)["tpch-2"]
        facts = httpx.get(f"{system.services_url}/orders/{system.key('tpch-2')}/facts", timeout=5).json()
        replies = statuses(system)
    assert record.process_state is ProcessState.COMPENSATION_FAILED
    assert record.compensation_error is not None and record.compensation_error.code == "undo_refused"
    assert record.last_error is not None and record.last_error.code == "card_declined"  # the cause, kept
    assert facts["summary"]["activeReservations"] == 1  # left for an operator, and said so
    alerts = [r.getMessage() for r in caplog.records if "compensation_failed" in r.getMessage()]
    assert any("tpch-2" in message and "undo_refused" in message for message in alerts)
    assert replies["tpch-2"][-1] == "CompensationFailed"


def test_a_cancel_before_the_point_of_no_return_undoes_the_order(deps: HostDeps) -> None:
    slow = FaultPlan(latency_rate=1.0, latency_s=0.5, seed=4)  # each call takes 0.5 s: time to cancel
    with running_system(deps, faults=slow, STEP_TIMEOUT_S=4) as system:
        system.submit_all(["tpch-1"])
        system.wait_until(lambda: system.record("tpch-1").steps["charge_payment"].attempts > 0)
        system.client.cancel("tpch-1", reason="changed my mind")
        record = system.wait_settled(["tpch-1"], timeout_s=30)["tpch-1"]
        facts = httpx.get(f"{system.services_url}/orders/{system.key('tpch-1')}/facts", timeout=5).json()
        replies = statuses(system)
    assert record.process_state is ProcessState.CANCELLED
    assert record.last_error is not None and record.last_error.code == "cancelled_by_client"
    assert record.steps["create_shipment"].attempts == 0  # never reached the point of no return
    summary = facts["summary"]
    assert (summary["activeReservations"], summary["netCharged"], summary["activeShipments"]) == (
        0,
        "0.00",
        0,
    )
    assert replies["tpch-1"][-1] == "Cancelled"


def test_a_cancel_after_the_point_of_no_return_is_refused_and_the_order_completes(
    deps: HostDeps,
) -> None:
    slow = FaultPlan(latency_rate=1.0, latency_s=0.5, seed=4)
    with running_system(deps, faults=slow, STEP_TIMEOUT_S=4) as system:
        system.submit_all(["tpch-1"])
        system.wait_until(lambda: system.record("tpch-1").steps["create_shipment"].attempts > 0)
        system.client.cancel("tpch-1")
        record = system.wait_settled(["tpch-1"], timeout_s=30)["tpch-1"]
        seen: list[str] = []

        def refused() -> bool:
            seen.extend(statuses(system).get("tpch-1", []))
            return "CancelRefused" in seen

        system.wait_until(refused)
    assert record.process_state is ProcessState.PROCESSED
    assert record.cancel_requested_at is None
    assert "Processed" in seen


def test_a_reviewer_approves_over_http_through_the_cli_and_the_order_completes(
    deps: HostDeps, tmp_path: Path
) -> None:
    # The devhost serves the operator API and the local issuer's JWKS on one loopback port; the CLI
    # calls it with a token from the issuer, as `python -m devhost.local_issuer login` writes one.
    issuer = local_issuer()
    port = free_port()
    trust = issuer.operator_settings(f"http://127.0.0.1:{port}{issuer.jwks_path}")
    with running_system(
        deps,
        api_port=port,
        local_issuer=issuer,
        operator_settings=trust,
        REVIEW_AMOUNT_ABOVE=1.0,
        REVIEW_TIMEOUT_S=60,
    ) as system:
        system.submit_all(["tpch-1"])
        system.wait_until(lambda: system.record("tpch-1").process_state is ProcessState.AWAITING_REVIEW)
        review = f"{system.api_url}/api/operator/orders/{system.key('tpch-1')}/review"
        anonymous = httpx.post(review, json={"decision": "approve"}, timeout=10)
        client_user = httpx.post(
            review,
            json={"decision": "approve"},
            headers={"Authorization": f"Bearer {issuer.mint(name='carl')}"},
            timeout=10,
        )
        token = tmp_path / "token"
        token.write_text(issuer.mint(name="ana", roles=[REVIEWER_ROLE]), encoding="ascii")
        cli = CliRunner().invoke(
            cli_app,
            [
                "review",
                system.key("tpch-1"),
                "--approve",
                "--api-url",
                system.api_url,
                "--token-file",
                str(token),
            ],
        )
        record = system.wait_settled(["tpch-1"], timeout_s=30)["tpch-1"]
        replies = statuses(system)
    assert (anonymous.status_code, client_user.status_code) == (401, 403)
    assert cli.exit_code == 0, cli.output
    assert record.process_state is ProcessState.PROCESSED
    assert record.review is not None
    ana = f"{issuer.tenant_id}/{local_object_id('ana')}"
    assert (record.review.decision, record.review.decided_by, record.review.decided_by_name) == (
        "approve",
        ana,
        "ana",
    )
    assert f"decided by {ana}" in " ".join(cli.output.split())
    assert replies["tpch-1"] == ["Received", "AwaitingReview", "Processed"]


@pytest.mark.parametrize(("default", "ends"), [("approve", "Processed"), ("reject", "Compensated")])
def test_a_review_that_times_out_takes_the_default(deps: HostDeps, default: str, ends: str) -> None:
    with running_system(deps, REVIEW_AMOUNT_ABOVE=1.0, REVIEW_TIMEOUT_S=1, REVIEW_DEFAULT=default) as system:
        system.submit_all(["tpch-1"])
        record = system.wait_settled(["tpch-1"], timeout_s=30)["tpch-1"]
        facts = httpx.get(f"{system.services_url}/orders/{system.key('tpch-1')}/facts", timeout=5).json()
    assert record.process_state.value == ends
    assert record.review is not None
    assert (record.review.decision, record.review.decided_by) == (default, "deadline")
    if default == "reject":
        assert record.last_error is not None and record.last_error.code == "review_rejected"
        assert (facts["summary"]["activeReservations"], facts["summary"]["netCharged"]) == (0, "0.00")


def test_a_shipment_the_carrier_refuses_goes_by_the_fallback_carrier(deps: HostDeps) -> None:
    with running_system(deps) as system:  # order-v3: the courier ships by mail when the carrier refuses
        order = next(o for o in system.catalog.orders if o.order_id == "tpch-1")
        system.client.submit(replace(order, carrier="CAMEL").to_submission(system.client.reply_queue))
        record = system.wait_settled(["tpch-1"], timeout_s=30)["tpch-1"]
        facts = httpx.get(f"{system.services_url}/orders/{system.key('tpch-1')}/facts", timeout=5).json()
        audit = system.audit()
    assert (record.workflow_version, record.process_state) == ("order-v3", ProcessState.PROCESSED)
    shipment = record.steps["create_shipment"]
    assert (shipment.fallback, shipment.idempotency_key) == (
        True,
        f"{system.key('tpch-1')}:create_shipment:fallback",
    )
    assert shipment.result is not None and shipment.result["carrier"] == "MAIL"
    assert [s["carrier"] for s in facts["shipments"]] == ["MAIL"]
    assert audit["keys"][f"{system.key('tpch-1')}:create_shipment"]["status"] == 422  # the carrier's refusal
    assert facts["summary"]["activeShipments"] == 1


def test_an_operator_retries_a_failed_compensation_once_the_cause_is_fixed(
    deps: HostDeps, trusted: TrustedIssuer
) -> None:
    with running_system(
        deps, faults=FaultPlan(undo_permanent=True), operator_settings=trusted.settings
    ) as system:
        system.submit_all(["tpch-2"])  # declined after the reservation; its release is refused
        assert system.wait_settled(["tpch-2"], timeout_s=30)["tpch-2"].process_state is (
            ProcessState.COMPENSATION_FAILED
        )
        system.set_faults(FaultPlan())  # the operator fixed the inventory service
        token = trusted.issuer.mint(name="ops", roles=[OPERATOR_ROLE])
        with OperatorApiClient(system.api_url, token=token) as api:
            answer = api.compensate(system.key("tpch-2"))
        assert (answer.status, answer.body["outcome"]) == (202, "CompensationRetried")
        system.wait_until(
            lambda: system.record("tpch-2").process_state is ProcessState.COMPENSATED, timeout_s=30
        )
        record = system.record("tpch-2")
        facts = httpx.get(f"{system.services_url}/orders/{system.key('tpch-2')}/facts", timeout=5).json()
    assert record.stop_requested_by == f"operator:{trusted.issuer.tenant_id}/{local_object_id('ops')}"
    assert record.last_error is not None and record.last_error.code == "card_declined"  # the cause, kept
    assert facts["summary"]["activeReservations"] == 0


def test_an_order_dead_lettered_by_a_bug_is_replayed_through_the_cli_once_fixed_and_processed(
    deps: HostDeps, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The intake has a bug (it raises) until `fixed`: the order is dead-lettered after one delivery.
    fixed = threading.Event()
    real = submission.handle_intake_message  # what the host calls, patched below

    def buggy(*args: Any, **kwargs: Any) -> Any:
        if not fixed.is_set():
            raise RuntimeError("a bug in the intake, fixed since")
        return real(*args, **kwargs)

    monkeypatch.setattr(devhost.handlers, "handle_intake_message", buggy)
    issuer = local_issuer()
    port = free_port()
    trust = issuer.operator_settings(f"http://127.0.0.1:{port}{issuer.jwks_path}")
    token = tmp_path / "token"
    token.write_text(issuer.mint(name="ops", roles=[OPERATOR_ROLE]), encoding="ascii")
    api = ["--api-url", f"http://127.0.0.1:{port}", "--token-file", str(token)]
    with running_system(
        deps, api_port=port, local_issuer=issuer, operator_settings=trust, MAX_DELIVERY_COUNT=1
    ) as system:
        inbound = system.client.orders_queue
        system.submit_all(["tpch-1"])
        assert deps.dead_letters is not None
        dead_letters = deps.dead_letters
        system.wait_until(lambda: len(dead_letters.dead_letter_page(inbound).items) == 1)
        [dead] = dead_letters.dead_letter_page(inbound).items
        listed = CliRunner().invoke(cli_app, ["deadletters", "list", inbound, *api])
        fixed.set()
        replayed = CliRunner().invoke(cli_app, ["deadletters", "replay", inbound, dead.dead_letter_id, *api])
        record = system.wait_settled(["tpch-1"], timeout_s=30)["tpch-1"]
        left = dead_letters.dead_letter_page(inbound).items
    assert dead.reason == "MaxDeliveryCountExceeded"
    assert listed.exit_code == 0 and dead.dead_letter_id in listed.output, listed.output
    assert replayed.exit_code == 0, replayed.output
    replay_id = replay_message_id(dead.message_id, queue=inbound, dead_letter_id=dead.dead_letter_id)
    assert replay_id in " ".join(replayed.output.split())
    assert record.process_state is ProcessState.PROCESSED
    assert left == []


def test_a_refused_shipment_resubmitted_with_a_corrected_carrier_ships_under_a_new_key(
    deps: HostDeps, trusted: TrustedIssuer
) -> None:
    with running_system(deps, operator_settings=trusted.settings, WORKFLOW_VERSION="order-v4") as system:
        order = next(o for o in system.catalog.orders if o.order_id == "tpch-1")
        system.client.submit(replace(order, carrier="CAMEL").to_submission(system.client.reply_queue))
        failed = system.wait_settled(["tpch-1"], timeout_s=30)["tpch-1"]
        key = system.key("tpch-1")
        token = trusted.issuer.mint(name="otto", roles=[OPERATOR_ROLE])
        with OperatorApiClient(system.api_url, token=token) as api:
            seen = api.get_order(key)
            answer = api.act(key, "resubmit", if_match=seen.etag, corrected={"carrier": " TRUCK "})
        assert (answer.status, answer.body["outcome"]) == (202, "NewAttempt"), answer.body
        system.wait_until(
            lambda: system.record("tpch-1").process_state is ProcessState.PROCESSED, timeout_s=30
        )
        record = system.record("tpch-1")
        facts = httpx.get(f"{system.services_url}/orders/{key}/facts", timeout=5).json()
        audit = system.audit()
        document = deps.orders.get(key)
        replies = statuses(system)
    # order-v4 stops a refused shipment for a correction: nothing shipped, the charge and stock kept.
    assert (failed.workflow_version, failed.process_state) == ("order-v4", ProcessState.ERROR)
    assert failed.last_error is not None and (failed.last_error.kind, failed.last_error.code) == (
        "permanent",
        "unknown_carrier",
    )
    assert failed.steps["create_shipment"].status is StepStatus.FAILED
    # The service got the corrected carrier (trimmed as the order's field is), under a key of its own.
    shipment = record.steps["create_shipment"]
    assert shipment.idempotency_key == f"{key}:create_shipment:correction-1"
    assert shipment.result is not None and shipment.result["carrier"] == "TRUCK"
    assert [s["carrier"] for s in facts["shipments"]] == ["TRUCK"]
    assert audit["keys"][f"{key}:create_shipment"]["status"] == 422  # the refusal, stored under the old key
    assert audit["keys"][f"{key}:create_shipment:correction-1"]["status"] == 201
    assert audit["keys"][f"{key}:create_shipment:correction-1"]["calls"] == 1
    assert facts["summary"]["activeShipments"] == 1
    assert facts["summary"]["netCharged"] == f"{order.amount:.2f}"  # charged once, never refunded
    # The record names the correction and who made it; the order document is as the client sent it.
    otto = f"{trusted.issuer.tenant_id}/{local_object_id('otto')}"
    [correction] = record.corrections
    assert (correction.number, correction.step, correction.input, correction.by, correction.by_name) == (
        1,
        "create_shipment",
        {"carrier": "TRUCK"},
        otto,
        "otto",
    )
    resubmitted = next(e for e in record.timeline if e.action == "resubmit")
    assert (resubmitted.by, resubmitted.corrected_fields) == (otto, ["carrier"])
    assert (resubmitted.from_state, resubmitted.to_state) == (ProcessState.ERROR, ProcessState.PENDING)
    assert document.carrier == "CAMEL"
    assert (record.process_state, record.attempt) == (ProcessState.PROCESSED, 2)
    assert replies["tpch-1"] == ["Received", "Failed", "Processed"]


def test_an_orchestration_failing_in_its_own_code_is_held_by_the_poison_guard_after_three_attempts(
    deps: HostDeps, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A bug of this workflow version: the orchestration raises when a step's answer is a failure. On the
    # real durabletask worker (its replays included), each attempt records workflow_error and fails.
    def bug(step: str, response: AgentResponse) -> NoReturn:
        raise RuntimeError(f"poison: {step} answered {response.error_code}")

    monkeypatch.setattr(orchestrators.workflow.forward, "step_error", bug)
    with running_system(
        deps, faults=FaultPlan(transient_rate=1.0, seed=2), POISON_FAILURES=3, SUPERVISOR_MAX_FAILURES=6
    ) as system:
        system.submit_all(["tpch-1"])
        system.wait_until(lambda: system.record("tpch-1").suspended_at is not None, timeout_s=40)
        record = system.record("tpch-1")
    assert (record.process_state, record.suspended_by, record.locked_by) == (
        ProcessState.PENDING,
        POISON_GUARD,
        None,
    )
    assert record.last_error is not None and record.last_error.code == REPEATED_FAILURE
    ended = [(e.error_step, e.error_code) for e in record.attempt_history if e.ended_at is not None]
    assert ended == [("reserve_inventory", WORKFLOW_ERROR)] * 3
    assert record.failure_count == 3 < 6  # held, not run to the supervisor's threshold
