"""``resubmit`` with corrected input (operator_api.corrections), through the operator API over the in-memory
stores with real bearer tokens, and the activities that run the corrected step: an order-v4 order whose
shipment the carrier refused is ``Error``; a correction of its carrier is recorded in the resubmit's one
write, and the next attempt sends the corrected carrier under a key of its own. Every refusal leaves the
record's ETag as it was."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from typing import Any

import pytest

from devhost.local_issuer import local_object_id
from intake.submission import handle_intake_message
from operator_api.answers import OperatorResponse
from operator_api.handler import handle_operator_request
from operator_api.routing import OperatorApiSections
from orchestrators.starter import run_starter_pass
from orderflow.clock import FakeClock
from orderflow.contracts import (
    BeginCompensationInput,
    FinishOrderInput,
    Outcome,
    StartStepInput,
    StartUndoInput,
    StepError,
    StepResult,
)
from orderflow.effects import PAST_POINT_OF_NO_RETURN
from orderflow.messages import CancelOrder
from orderflow.operator_auth import TokenValidator
from orderflow.records import REDACTED, LastError, ProcessState, StateRecord, StepStatus
from orderflow.stores.base import Versioned
from orderflow.timeline import Actor, note
from orderflow.workflows import (
    ORDER_V1,
    ORDER_V4,
    WORKFLOWS,
    StepDefinition,
    WorkflowDefinition,
    workflow_for,
)
from tests.activity_json import begin_compensation, finish_order, start_step, start_undo
from tests.host_deps import HostDeps
from tests.operator_tokens import TrustedIssuer, local_issuer
from tests.unit.fakes import TEST_CLIENT, RecordingClient, memory_deps, received, submit_and_claim
from tests.unit.test_operator_actions import BothRead

pytestmark = pytest.mark.unit

KEY = "a:o-1"
ORDER = f"/api/operator/orders/{KEY}"
RESERVE, CHARGE, SHIP = "reserve_inventory", "charge_payment", "create_shipment"
SHIPPING = "agent-shipping"


@pytest.fixture
def deps() -> HostDeps:
    return memory_deps(FakeClock(), CLAIM_TIMEOUT_S=30.0, RETRY_BUDGET=12)


def call(
    deps: HostDeps,
    validator: TokenValidator | None,
    path: str,
    headers: dict[str, str],
    body: Any = None,
) -> OperatorResponse:
    raw = b"" if body is None else json.dumps(body).encode()
    return handle_operator_request(
        "POST",
        path,
        headers,
        raw,
        deps=deps,
        sections=OperatorApiSections.of(deps.settings),
        validator=validator,
    )


def code(response: OperatorResponse) -> str:
    return str(response.body["error"]["code"])


def start(
    deps: HostDeps, step: str, instance: str, completed: StepResult | None = None, *, key: str = KEY
) -> dict[str, Any]:
    data = StartStepInput(
        order_id=key,
        instance_id=instance,
        workflow_version=ORDER_V4.version,
        step=step,
        timeout_s=8,
        completed=completed,
        response_queue="r-q1",
    )
    return start_step(data.to_payload(), deps)


def shipment_refused(deps: HostDeps, key: str = KEY) -> Versioned[StateRecord]:
    """``key`` on order-v4, as its attempt left it: reserved, charged, the shipment refused by the carrier
    (``unknown_carrier``): ``Error``. The agent requests sent are drained."""
    submit_and_claim(deps, definition=ORDER_V4, order_id=key, carrier="CAMEL")
    start(deps, RESERVE, f"{key}:1", key=key)
    start(
        deps, CHARGE, f"{key}:1", StepResult(step=RESERVE, result={"reservationId": "r-1"}, calls=1), key=key
    )
    start(deps, SHIP, f"{key}:1", StepResult(step=CHARGE, result={"chargeId": "c-1"}, calls=1), key=key)
    refusal = StepError(step=SHIP, kind="permanent", code="unknown_carrier", message="no CAMEL", calls=1)
    finish = FinishOrderInput(
        order_id=key,
        instance_id=f"{key}:1",
        workflow_version=ORDER_V4.version,
        outcome=Outcome.ERROR,
        error=refusal,
    )
    assert finish_order(finish.to_payload(), deps)["outcome"] == "finished"
    for queue in ("agent-inventory", "agent-payment", SHIPPING, "client-a"):
        received(deps.queues.queue(queue))
    found = deps.states.get(key)
    assert found.item.process_state is ProcessState.ERROR
    assert found.item.steps[SHIP].status is StepStatus.FAILED
    return found


def resubmit(
    deps: HostDeps, trusted: TrustedIssuer, etag: str, body: Any, name: str = "otto"
) -> OperatorResponse:
    headers = {**trusted.operator(name), "If-Match": etag}
    return call(deps, trusted.validator, f"{ORDER}/resubmit", headers, body)


def claim_next(deps: HostDeps) -> RecordingClient:
    client = RecordingClient()
    run_starter_pass(
        states=deps.states,
        client=client,
        clock=deps.clock,
        starter=deps.settings.starter,
        steps=deps.settings.steps,
        scans=deps.settings.scans,
        queue_names=deps.settings.queues,
        response_queue="r",
        capacity=5,
    )
    return client


def ship_request(deps: HostDeps) -> dict[str, Any]:
    [request] = received(deps.queues.queue(SHIPPING))
    body: dict[str, Any] = json.loads(request.body)
    return body


def test_a_corrected_resubmit_runs_the_refused_step_on_the_corrected_value_under_a_new_key(
    deps: HostDeps, trusted: TrustedIssuer
) -> None:
    seen = shipment_refused(deps)
    start(deps, SHIP, f"{KEY}:1")  # what the failed call carried, for comparison: nothing (fenced)
    assert received(deps.queues.queue(SHIPPING)) == []

    answer = resubmit(deps, trusted, seen.etag, {"input": {"carrier": "  AIR "}})

    assert (answer.status, answer.body["outcome"]) == (202, "NewAttempt"), answer.body
    record = deps.states.get(KEY).item
    otto = f"{local_issuer().tenant_id}/{local_object_id('otto')}"
    [correction] = record.corrections
    assert (correction.number, correction.step, correction.input) == (1, SHIP, {"carrier": "AIR"})
    assert (correction.by, correction.by_name, correction.at) == (otto, "otto", deps.clock.now())
    assert correction.idempotency_key == record.steps[SHIP].idempotency_key == f"{KEY}:{SHIP}:correction-1"
    assert answer.body["order"]["corrections"][0]["input"] == {"carrier": "AIR"}
    entry = record.timeline[-1]
    assert (entry.action, entry.by, entry.by_name, entry.corrected_fields) == (
        "resubmit",
        otto,
        "otto",
        ["carrier"],
    )
    assert "AIR" not in entry.model_dump_json()  # the timeline names fields, never values
    assert deps.orders.get(KEY).carrier == "CAMEL"  # the order document is as the client sent it

    claim_next(deps)
    assert start(deps, SHIP, f"{KEY}:2")["outcome"] == "started"
    request = ship_request(deps)
    assert request["idempotencyKey"] == f"{KEY}:{SHIP}:correction-1"
    assert request["payload"] == {"carrier": "AIR", "items": [{"sku": "10", "quantity": 5}]}

    # A later attempt of the corrected step (its first timed out, say) calls under the same key: the
    # service answers it from what it stored, so a redelivered or retried corrected call is deduplicated.
    found = deps.states.get(KEY)
    lost = found.item.model_copy(deep=True)
    lost.process_state, lost.locked_by, lost.next_attempt_at = ProcessState.PENDING, None, deps.clock.now()
    deps.states.replace(lost, etag=found.etag)
    claim_next(deps)
    assert start(deps, SHIP, f"{KEY}:3")["outcome"] == "started"
    again = ship_request(deps)
    assert (again["idempotencyKey"], again["payload"]) == (request["idempotencyKey"], request["payload"])

    done = FinishOrderInput(
        order_id=KEY,
        instance_id=f"{KEY}:3",
        workflow_version=ORDER_V4.version,
        outcome=Outcome.PROCESSED,
        completed=StepResult(step=SHIP, result={"shipmentId": "s-1", "carrier": "AIR"}, calls=1),
    )
    finish_order(done.to_payload(), deps)
    finished = deps.states.get(KEY).item
    assert finished.process_state is ProcessState.PROCESSED
    # What the shipment did is what the corrected call did: the log's entry holds its answer.
    [shipped] = [e for e in finished.compensation_log if e.step == SHIP]
    assert shipped.data == {"shipmentId": "s-1", "carrier": "AIR"}


def test_a_second_correction_is_laid_over_the_first_under_the_next_number(
    deps: HostDeps, trusted: TrustedIssuer
) -> None:
    seen = shipment_refused(deps)
    assert resubmit(deps, trusted, seen.etag, {"input": {"carrier": "BOAT"}}).status == 202
    claim_next(deps)
    start(deps, SHIP, f"{KEY}:2")
    assert ship_request(deps)["payload"]["carrier"] == "BOAT"
    refusal = StepError(step=SHIP, kind="permanent", code="unknown_carrier", message="no BOAT", calls=1)
    finish = FinishOrderInput(
        order_id=KEY,
        instance_id=f"{KEY}:2",
        workflow_version="order-v4",
        outcome=Outcome.ERROR,
        error=refusal,
    )
    finish_order(finish.to_payload(), deps)

    answer = resubmit(deps, trusted, deps.states.get(KEY).etag, {"input": {"carrier": "RAIL"}})

    assert answer.status == 202, answer.body
    record = deps.states.get(KEY).item
    assert [(c.number, c.input["carrier"]) for c in record.corrections] == [(1, "BOAT"), (2, "RAIL")]
    assert record.corrected_input(SHIP) == {"carrier": "RAIL"}
    claim_next(deps)
    start(deps, SHIP, f"{KEY}:3")
    request = ship_request(deps)
    assert (request["idempotencyKey"], request["payload"]["carrier"]) == (
        f"{KEY}:{SHIP}:correction-2",
        "RAIL",
    )


@pytest.mark.parametrize(
    ("body", "status", "refusal", "says"),
    [
        ({"input": {"items": [{"sku": "11", "quantity": 1}]}}, 409, "InputNotCorrectable", "items"),
        ({"input": {"carrier": "AIR", "amount": "1.00"}}, 409, "InputNotCorrectable", "amount"),
        ({"input": {"customerId": "2"}}, 409, "InputNotCorrectable", "takes: carrier"),
        ({"input": {"carrier": "   "}}, 422, "InvalidInput", "carrier"),
        ({"input": {"carrier": "X" * 33}}, 422, "InvalidInput", "carrier"),
        ({"input": {"carrier": "AIR\u200b"}}, 422, "InvalidInput", "carrier"),
        ({"input": {"carrier": 7}}, 422, "InvalidInput", "carrier"),
        ({"input": {}}, 400, "InvalidField", "input"),
        ({"input": ["carrier"]}, 400, "InvalidField", "input"),
        ({"input": None}, 400, "InvalidField", "input"),  # not an object: never a plain resubmit
        ({"input": "carrier=AIR"}, 400, "InvalidField", "input"),
        ({"input": {"carrier": "AIR"}, "why": "x"}, 400, "UnexpectedField", "why"),
    ],
)
def test_a_correction_the_step_does_not_take_or_an_invalid_value_is_refused_and_writes_nothing(
    deps: HostDeps, trusted: TrustedIssuer, body: Any, status: int, refusal: str, says: str
) -> None:
    seen = shipment_refused(deps)

    answer = resubmit(deps, trusted, seen.etag, body)

    assert (answer.status, code(answer)) == (status, refusal), answer.body
    assert says in answer.body["error"]["message"]
    assert deps.states.get(KEY).etag == seen.etag
    assert deps.states.get(KEY).item.corrections == []


def test_a_step_that_declares_no_correctable_field_refuses_corrections(
    deps: HostDeps, trusted: TrustedIssuer
) -> None:
    # order-v1, whose steps declare no correctable input, its record put in Error here by hand.
    submit_and_claim(deps, definition=ORDER_V1, order_id=KEY)
    found = deps.states.get(KEY)
    record = found.item.model_copy(deep=True)
    record.process_state, record.locked_by = ProcessState.ERROR, None
    record.steps[RESERVE].status = StepStatus.COMPLETED
    record.steps[CHARGE].status = StepStatus.FAILED
    record.last_error = LastError(kind="permanent", message="declined", step=CHARGE, at=deps.clock.now())
    note(found.item, record, Actor("orchestrator", f"{KEY}:1"))
    seen = deps.states.replace(record, etag=found.etag)

    answer = resubmit(deps, trusted, seen.etag, {"input": {"currency": "EUR"}})

    assert (answer.status, code(answer)) == (409, "InputNotCorrectable")
    assert f"{CHARGE} takes no correction of currency (it takes: none)" in answer.body["error"]["message"]
    assert deps.states.get(KEY).etag == seen.etag


def test_a_step_that_may_have_taken_effect_is_not_corrected(deps: HostDeps, trusted: TrustedIssuer) -> None:
    """Past a point of no return the shipment's outcome is unknown: a new key could ship it twice."""
    seen = shipment_refused(deps)
    record = seen.item.model_copy(deep=True)
    assert record.last_error is not None
    record.last_error = LastError(
        kind="permanent", code=PAST_POINT_OF_NO_RETURN, step=SHIP, message="may have", at=deps.clock.now()
    )
    seen = deps.states.replace(record, etag=seen.etag)

    answer = resubmit(deps, trusted, seen.etag, {"input": {"carrier": "AIR"}})
    plain = resubmit(deps, trusted, seen.etag, None)

    assert (answer.status, code(answer)) == (409, "InputNotCorrectable")
    assert "may have taken effect" in answer.body["error"]["message"]
    assert plain.status == 202  # without input the service answers from the step's own key
    assert deps.states.get(KEY).item.corrections == []


def test_a_corrected_resubmit_against_a_stale_version_is_412(deps: HostDeps, trusted: TrustedIssuer) -> None:
    seen = shipment_refused(deps)
    moved = seen.item.model_copy(deep=True)
    moved.updated_at = deps.clock.now() + timedelta(seconds=1)
    current = deps.states.replace(moved, etag=seen.etag)

    answer = resubmit(deps, trusted, seen.etag, {"input": {"carrier": "AIR"}})

    assert (answer.status, code(answer)) == (412, "PreconditionFailed")
    assert answer.headers["ETag"].strip('"') == current.etag.strip('"')
    assert deps.states.get(KEY).etag == current.etag
    assert deps.states.get(KEY).item.corrections == []


def test_two_concurrent_corrected_resubmits_make_one_correction_and_one_new_attempt(
    trusted: TrustedIssuer,
) -> None:
    states = BothRead()
    base = memory_deps(FakeClock(), RETRY_BUDGET=12)
    deps = HostDeps(states, base.orders, base.queues, base.clock, settings=base.settings)
    seen = shipment_refused(deps)
    states.armed = True
    answers: list[OperatorResponse] = []

    def act(name: str, carrier: str) -> None:
        answers.append(resubmit(deps, trusted, seen.etag, {"input": {"carrier": carrier}}, name))

    threads = [threading.Thread(target=act, args=args) for args in (("otto", "AIR"), ("olga", "RAIL"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)

    assert sorted(a.status for a in answers) == [202, 412]
    record = deps.states.get(KEY).item
    [correction] = record.corrections
    winner = next(a for a in answers if a.status == 202)
    assert winner.body["order"]["corrections"][0]["input"] == correction.input
    assert [e.action for e in record.timeline].count("resubmit") == 1
    client = RecordingClient()
    for _ in range(2):
        run_starter_pass(
            states=states,
            client=client,
            clock=deps.clock,
            starter=deps.settings.starter,
            steps=deps.settings.steps,
            scans=deps.settings.scans,
            queue_names=deps.settings.queues,
            response_queue="r",
            capacity=5,
        )
    assert deps.states.get(KEY).item.attempt == 2
    assert len(client.started) == 1


def test_an_order_stopped_for_a_correction_may_be_compensated_instead(
    deps: HostDeps, trusted: TrustedIssuer
) -> None:
    seen = shipment_refused(deps)

    answer = call(
        deps, trusted.validator, f"{ORDER}/compensate", {**trusted.operator(), "If-Match": seen.etag}, {}
    )

    assert (answer.status, answer.body["outcome"]) == (202, "CompensationScheduled"), answer.body
    record = deps.states.get(KEY).item
    assert (record.process_state, record.locked_by) == (ProcessState.COMPENSATING, None)
    assert record.last_error is not None and record.last_error.code == "unknown_carrier"  # the cause


def test_retention_purges_the_values_of_corrections_and_keeps_who_and_when(
    deps: HostDeps, trusted: TrustedIssuer
) -> None:
    seen = shipment_refused(deps)
    resubmit(deps, trusted, seen.etag, {"input": {"carrier": "AIR"}})
    record = deps.states.get(KEY).item

    record.purge_data(deps.clock.now())

    [correction] = record.corrections
    assert correction.input == {"carrier": REDACTED}
    assert (correction.number, correction.step, correction.by_name) == (1, SHIP, "otto")
    assert correction.idempotency_key == f"{KEY}:{SHIP}:correction-1"


def test_a_cancel_while_a_correctable_step_ran_compensates_instead_of_waiting_for_a_correction(
    deps: HostDeps, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reversible step that takes corrections (none of the demo's: its shipment is irreversible, and a
    cancel while it runs is refused): the client's cancel wins over waiting for an operator."""
    reserve = StepDefinition(
        RESERVE, agent="inventory", operation="reserve", undo="release", correctable=("items",)
    )
    monkeypatch.setitem(
        WORKFLOWS, "test-v", WorkflowDefinition(version="test-v", steps=(reserve, ORDER_V4.steps[2]))
    )
    submit_and_claim(deps, definition=workflow_for("test-v"), order_id=KEY)
    data = StartStepInput(
        order_id=KEY,
        instance_id=f"{KEY}:1",
        workflow_version="test-v",
        step=RESERVE,
        timeout_s=8,
        response_queue="r-q1",
    )
    start_step(data.to_payload(), deps)
    cancel = CancelOrder(schema_version=1, type="CancelOrder", order_id="o-1").to_json()
    handle_intake_message(
        cancel,
        client=TEST_CLIENT,
        orders=deps.orders,
        states=deps.states,
        queues=deps.queues,
        clock=deps.clock,
        steps=deps.settings.steps,
        starter=deps.settings.starter,
        queue_names=deps.settings.queues,
    )
    etag = deps.states.get(KEY).etag
    refusal = StepError(step=RESERVE, kind="permanent", code="out_of_stock", message="none", calls=1)
    finish = FinishOrderInput(
        order_id=KEY, instance_id=f"{KEY}:1", workflow_version="test-v", outcome=Outcome.ERROR, error=refusal
    )

    stopped = finish_order(finish.to_payload(), deps)

    assert stopped == {"outcome": "stopped", "cause": "cancelled_by_client"}
    assert deps.states.get(KEY).etag == etag  # nothing written: the attempt compensates instead
    # The orchestration compensates with the refusal as its cause: the refused step applied nothing.
    begun = begin_compensation(
        BeginCompensationInput(
            order_id=KEY, instance_id=f"{KEY}:1", workflow_version="test-v", error=refusal, timeout_s=8
        ).to_payload(),
        deps,
    )
    assert begun["outcome"] == "compensation_begun"
    record = deps.states.get(KEY).item
    assert (record.process_state, record.steps[RESERVE].status) == (
        ProcessState.COMPENSATING,
        StepStatus.FAILED,
    )


def test_a_corrected_step_that_moves_to_its_fallback_calls_it_under_a_key_of_the_correction(
    deps: HostDeps, trusted: TrustedIssuer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step with a fallback provider that takes corrections (none of the demo's): the fallback already
    refused the first input, so the corrected input goes to it under a key of its own too."""
    ship = StepDefinition(
        SHIP,
        agent="shipping",
        operation="ship",
        irreversible=True,
        fallback_agent="courier",
        fallback_payload=(("carrier", "MAIL"),),
        correctable=("items",),
    )
    definition = WorkflowDefinition(version="test-v", steps=(ORDER_V4.steps[0], ship))
    monkeypatch.setitem(WORKFLOWS, "test-v", definition)
    submit_and_claim(deps, definition=definition, order_id=KEY)

    def run(step: str, instance: str, *, fallback: bool, completed: StepResult | None = None) -> None:
        data = StartStepInput(
            order_id=KEY,
            instance_id=instance,
            workflow_version="test-v",
            step=step,
            timeout_s=8,
            completed=completed,
            response_queue="r-q1",
            fallback=fallback,
        )
        assert start_step(data.to_payload(), deps)["outcome"] == "started"

    def sent(agent: str) -> dict[str, Any]:
        [request] = received(deps.queues.queue(f"agent-{agent}"))
        body: dict[str, Any] = json.loads(request.body)
        return body

    run(RESERVE, f"{KEY}:1", fallback=False)
    received(deps.queues.queue("agent-inventory"))
    reserved = StepResult(step=RESERVE, result={"reservationId": "r-1"}, calls=1)
    run(SHIP, f"{KEY}:1", fallback=False, completed=reserved)
    assert sent("shipping")["idempotencyKey"] == f"{KEY}:{SHIP}"
    run(SHIP, f"{KEY}:1", fallback=True)
    first_fallback = sent("courier")
    assert first_fallback["idempotencyKey"] == f"{KEY}:{SHIP}:fallback"
    refusal = StepError(step=SHIP, kind="permanent", code="oversized", message="too many", calls=1)
    finish = FinishOrderInput(
        order_id=KEY, instance_id=f"{KEY}:1", workflow_version="test-v", outcome=Outcome.ERROR, error=refusal
    )
    finish_order(finish.to_payload(), deps)
    corrected = {"items": [{"sku": "10", "quantity": 2}]}
    answer = resubmit(deps, trusted, deps.states.get(KEY).etag, {"input": corrected})
    assert answer.status == 202, answer.body
    assert deps.states.get(KEY).item.steps[SHIP].fallback is False  # back to its own provider first

    claim_next(deps)
    run(SHIP, f"{KEY}:2", fallback=False)
    primary = sent("shipping")
    run(SHIP, f"{KEY}:2", fallback=True)
    fallback = sent("courier")

    assert (primary["idempotencyKey"], primary["payload"]) == (
        f"{KEY}:{SHIP}:correction-1",
        {"carrier": "TRUCK", **corrected},
    )
    assert (fallback["idempotencyKey"], fallback["payload"]) == (
        f"{KEY}:{SHIP}:correction-1:fallback",
        {"carrier": "MAIL", **corrected},
    )
    assert fallback["payload"] != first_fallback["payload"]  # under the old key: a key reused


def test_the_undo_of_a_corrected_step_names_what_the_corrected_call_did(
    deps: HostDeps, trusted: TrustedIssuer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reversible step that takes corrections (none of the demo's): its compensation entry holds the
    corrected call's answer, and its undo names the corrected call's key, so the service undoes what was
    really done (the refused call did nothing)."""
    reserve = StepDefinition(
        RESERVE, agent="inventory", operation="reserve", undo="release", correctable=("items",)
    )
    monkeypatch.setitem(
        WORKFLOWS, "test-v", WorkflowDefinition(version="test-v", steps=(reserve, ORDER_V4.steps[2]))
    )
    submit_and_claim(deps, definition=workflow_for("test-v"), order_id=KEY)

    def reserve_in(instance: str) -> dict[str, Any]:
        data = StartStepInput(
            order_id=KEY,
            instance_id=instance,
            workflow_version="test-v",
            step=RESERVE,
            timeout_s=8,
            response_queue="r-q1",
        )
        assert start_step(data.to_payload(), deps)["outcome"] == "started"
        [request] = received(deps.queues.queue("agent-inventory"))
        body: dict[str, Any] = json.loads(request.body)
        return body

    reserve_in(f"{KEY}:1")
    refusal = StepError(
        step=RESERVE, kind="permanent", code="out_of_stock", message="5 asked, 2 left", calls=1
    )
    finish = FinishOrderInput(
        order_id=KEY, instance_id=f"{KEY}:1", workflow_version="test-v", outcome=Outcome.ERROR, error=refusal
    )
    finish_order(finish.to_payload(), deps)
    corrected = [{"sku": "10", "quantity": 2}]
    assert resubmit(deps, trusted, deps.states.get(KEY).etag, {"input": {"items": corrected}}).status == 202
    claim_next(deps)
    forward = reserve_in(f"{KEY}:2")
    assert (forward["idempotencyKey"], forward["payload"]) == (
        f"{KEY}:{RESERVE}:correction-1",
        {"items": corrected},
    )

    # The reservation succeeded; then the order is stopped before its shipment and compensated.
    reserved = StepResult(step=RESERVE, result={"reservationId": "r-2"}, calls=1)
    stop = StepError(
        step=SHIP, kind="cancelled", code="operator_decision", message="an operator stopped the order"
    )
    begun = begin_compensation(
        BeginCompensationInput(
            order_id=KEY,
            instance_id=f"{KEY}:2",
            workflow_version="test-v",
            error=stop,
            completed=reserved,
            timeout_s=8,
        ).to_payload(),
        deps,
    )
    assert begun["outcome"] == "compensation_begun"
    undo = StartUndoInput(
        order_id=KEY,
        instance_id=f"{KEY}:2",
        workflow_version="test-v",
        step=RESERVE,
        timeout_s=8,
        response_queue="r-q1",
    )
    assert start_undo(undo.to_payload(), deps)["outcome"] == "undo_started"

    [request] = received(deps.queues.queue("agent-inventory"))
    release = json.loads(request.body)
    assert (release["operation"], release["idempotencyKey"]) == ("release", f"{KEY}:{RESERVE}:undo")
    assert release["payload"] == {"forwardKey": f"{KEY}:{RESERVE}:correction-1", "reservationId": "r-2"}


def test_a_reviewer_or_a_token_without_a_role_cannot_correct_an_order(
    deps: HostDeps, trusted: TrustedIssuer
) -> None:
    seen = shipment_refused(deps)
    body = {"input": {"carrier": "AIR"}}

    as_reviewer = call(
        deps, trusted.validator, f"{ORDER}/resubmit", {**trusted.reviewer(), "If-Match": seen.etag}, body
    )
    without_role = call(
        deps, trusted.validator, f"{ORDER}/resubmit", {**trusted.bearer("eve"), "If-Match": seen.etag}, body
    )

    assert (as_reviewer.status, code(as_reviewer)) == (403, "Forbidden")
    assert (without_role.status, code(without_role)) == (403, "Forbidden")
    assert deps.states.get(KEY).etag == seen.etag
    assert deps.states.get(KEY).item.corrections == []
