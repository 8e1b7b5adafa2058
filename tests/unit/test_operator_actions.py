"""The operator API's list, timeline, resubmit, suspend and resume routes (operator_api), over the
in-memory stores with real bearer tokens. Every refusal is checked to leave the record's ETag as it was;
every action to name the verified principal in the order's timeline."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from typing import Any

import pytest

from devhost.local_issuer import local_object_id
from operator_api.answers import OperatorResponse
from operator_api.handler import handle_operator_request
from operator_api.routing import OperatorApiSections
from orchestrators.starter import run_starter_pass
from orderflow.clock import FakeClock
from orderflow.contracts import StartStepInput, StepResult
from orderflow.operator_auth import TokenValidator
from orderflow.records import LastError, ProcessState, StateRecord, StepStatus
from orderflow.stores.base import Versioned
from orderflow.stores.memory import InMemoryStateStore
from orderflow.timeline import TIMELINE_WINDOW, Actor, note
from orderflow.workflows import ORDER_V1
from supervisor.recovery import Recovery
from tests.activity_json import start_step
from tests.host_deps import HostDeps
from tests.operator_tokens import TrustedIssuer, local_issuer
from tests.unit.fakes import RecordingClient, memory_deps, recover_once, submit_and_claim

pytestmark = pytest.mark.unit

KEY = "a:o-1"
ORDER = f"/api/operator/orders/{KEY}"
RESERVE, CHARGE = "reserve_inventory", "charge_payment"


@pytest.fixture
def deps() -> HostDeps:
    return memory_deps(FakeClock(), CLAIM_TIMEOUT_S=30.0, RETRY_BUDGET=12)


def call(
    deps: HostDeps,
    validator: TokenValidator | None,
    method: str,
    path: str,
    headers: dict[str, str] | None = None,
    body: Any = None,
) -> OperatorResponse:
    raw = b"" if body is None else json.dumps(body).encode()
    return handle_operator_request(
        method,
        path,
        headers or {},
        raw,
        deps=deps,
        sections=OperatorApiSections.of(deps.settings),
        validator=validator,
    )


def audit_id(name: str) -> str:
    return f"{local_issuer().tenant_id}/{local_object_id(name)}"


def code(response: OperatorResponse) -> str:
    return str(response.body["error"]["code"])


def failed(deps: HostDeps, key: str = KEY) -> Versioned[StateRecord]:
    """``key`` (order-v1) as its attempt left it after the charge failed for good: ``Error``, unlocked,
    the reservation completed, the charge failed and the budget spent."""
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
    record.updated_at = deps.clock.now()
    note(found.item, record, Actor("orchestrator", f"{key}:1"))
    return deps.states.replace(record, etag=found.etag)


# --- resubmit ---------------------------------------------------------------------------------------


def test_a_resubmitted_error_order_gets_one_new_attempt_from_the_failed_step(
    deps: HostDeps, trusted: TrustedIssuer
) -> None:
    seen = failed(deps)

    response = call(
        deps,
        trusted.validator,
        "POST",
        f"{ORDER}/resubmit",
        {**trusted.operator(), "If-Match": f'"{seen.etag.strip(chr(34))}"'},
    )

    assert (response.status, response.body["outcome"]) == (202, "NewAttempt")
    record = deps.states.get(KEY).item
    assert (record.process_state, record.locked_by, record.failure_count) == (ProcessState.PENDING, None, 0)
    assert record.retry_budget.remaining == 12
    entry = record.timeline[-1]
    assert (entry.role, entry.action, entry.by, entry.by_name) == (
        "operator",
        "resubmit",
        audit_id("otto"),
        "otto",
    )
    assert (entry.from_state, entry.to_state) == (ProcessState.ERROR, ProcessState.PENDING)
    # The starter claims attempt 2, which does not restart the completed reservation.
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
    claimed = deps.states.get(KEY).item
    assert (claimed.attempt, claimed.process_state) == (2, ProcessState.PROCESSING)
    assert claimed.steps[RESERVE].status is StepStatus.COMPLETED


def test_a_resubmit_without_if_match_is_428_and_against_a_stale_version_412(
    deps: HostDeps, trusted: TrustedIssuer
) -> None:
    seen = failed(deps)
    found = deps.states.get(KEY)
    moved = found.item.model_copy(deep=True)
    moved.updated_at = deps.clock.now() + timedelta(seconds=1)
    current = deps.states.replace(moved, etag=found.etag)  # someone wrote since the operator looked

    missing = call(deps, trusted.validator, "POST", f"{ORDER}/resubmit", trusted.operator())
    stale = call(
        deps, trusted.validator, "POST", f"{ORDER}/resubmit", {**trusted.operator(), "If-Match": seen.etag}
    )

    assert (missing.status, code(missing)) == (428, "PreconditionRequired")
    assert (stale.status, code(stale)) == (412, "PreconditionFailed")
    assert stale.headers["ETag"].strip('"') == current.etag.strip('"')
    assert deps.states.get(KEY).etag == current.etag
    assert deps.states.get(KEY).item.process_state is ProcessState.ERROR


@pytest.mark.parametrize("action", ["resubmit", "suspend", "compensate"])
@pytest.mark.parametrize(
    "if_match",
    [
        'W/"{etag}"',  # weak: RFC 9110's If-Match compares strongly, so a weak tag never matches
        "*",  # names no version: the API acts only on one the caller saw
        '"{etag}", "other"',  # a list: the API takes one entity tag
    ],
)
def test_an_if_match_that_is_not_the_strong_tag_of_the_version_is_412_and_writes_nothing(
    deps: HostDeps, trusted: TrustedIssuer, action: str, if_match: str
) -> None:
    seen = failed(deps)
    header = if_match.format(etag=seen.etag.strip('"'))

    answer = call(
        deps, trusted.validator, "POST", f"{ORDER}/{action}", {**trusted.operator(), "If-Match": header}
    )

    assert (answer.status, code(answer)) == (412, "PreconditionFailed"), answer.body
    assert answer.headers["ETag"].strip('"') == seen.etag.strip('"')
    assert deps.states.get(KEY).etag == seen.etag


class BothRead(InMemoryStateStore):
    """A store whose first two reads of an order wait for each other: two callers decide on one version."""

    def __init__(self) -> None:
        super().__init__()
        self.barrier = threading.Barrier(2, timeout=5)
        self.armed = False
        self.reads = 0

    def get(self, order_id: str) -> Versioned[StateRecord]:
        found = super().get(order_id)
        if self.armed and self.reads < 2:
            self.reads += 1
            self.barrier.wait()
        return found


def test_two_concurrent_resubmits_of_one_order_make_exactly_one_new_attempt(trusted: TrustedIssuer) -> None:
    states = BothRead()
    base = memory_deps(FakeClock(), RETRY_BUDGET=12)
    deps = HostDeps(states, base.orders, base.queues, base.clock, settings=base.settings)
    seen = failed(deps)
    states.armed = True
    headers = {**trusted.operator(), "If-Match": seen.etag}
    answers: list[OperatorResponse] = []

    def resubmit(name: str) -> None:
        answers.append(
            call(deps, trusted.validator, "POST", f"{ORDER}/resubmit", {**headers, **trusted.operator(name)})
        )

    threads = [threading.Thread(target=resubmit, args=(name,)) for name in ("otto", "olga")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)

    assert sorted(a.status for a in answers) == [202, 412]
    record = deps.states.get(KEY).item
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


def test_a_resubmit_of_a_running_order_is_409_and_writes_nothing(
    deps: HostDeps, trusted: TrustedIssuer
) -> None:
    submit_and_claim(deps, definition=ORDER_V1, order_id=KEY)
    found = deps.states.get(KEY)

    response = call(
        deps, trusted.validator, "POST", f"{ORDER}/resubmit", {**trusted.operator(), "If-Match": found.etag}
    )
    reviewer = call(
        deps, trusted.validator, "POST", f"{ORDER}/resubmit", {**trusted.reviewer(), "If-Match": found.etag}
    )

    assert (response.status, code(response)) == (409, "NotResubmittable")
    assert reviewer.status == 403
    assert deps.states.get(KEY).etag == found.etag


def test_a_resubmit_of_a_failed_compensation_retries_it(deps: HostDeps, trusted: TrustedIssuer) -> None:
    submit_and_claim(deps, definition=ORDER_V1, order_id=KEY)
    found = deps.states.get(KEY)
    record = found.item.model_copy(deep=True)
    record.process_state = ProcessState.COMPENSATION_FAILED
    record.locked_by = None
    record.compensation_failures = 3
    seen = deps.states.replace(record, etag=found.etag)

    response = call(
        deps, trusted.validator, "POST", f"{ORDER}/resubmit", {**trusted.operator(), "If-Match": seen.etag}
    )

    assert (response.status, response.body["outcome"]) == (202, "CompensationRetried")
    after = deps.states.get(KEY).item
    assert (after.process_state, after.compensation_failures) == (ProcessState.COMPENSATING, 0)
    assert after.stop_requested_by == f"operator:{audit_id('otto')}"


# --- suspend / resume -----------------------------------------------------------------------------


def start(deps: HostDeps, step: str, **changes: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "order_id": KEY,
        "instance_id": f"{KEY}:1",
        "workflow_version": ORDER_V1.version,
        "step": step,
        "timeout_s": 8,
        "response_queue": "agent-responses-h1",
        **changes,
    }
    return start_step(StartStepInput(**fields).to_payload(), deps)


def test_a_suspended_order_starts_no_step_and_is_neither_claimed_nor_recovered(
    deps: HostDeps, trusted: TrustedIssuer
) -> None:
    submit_and_claim(deps, definition=ORDER_V1, order_id=KEY)
    suspended = call(deps, trusted.validator, "POST", f"{ORDER}/suspend", trusted.operator())
    assert (suspended.status, suspended.body["outcome"]) == (200, "Suspended")

    # The running attempt's next start hands the record back, with the reservation's completion recorded.
    result = start(deps, CHARGE, completed=StepResult(step=RESERVE, result={"id": "r"}, calls=1))
    record = deps.states.get(KEY).item
    assert result["outcome"] == "fenced"
    assert (record.process_state, record.locked_by) == (ProcessState.PENDING, None)
    assert record.steps[RESERVE].status is StepStatus.COMPLETED
    assert record.steps[CHARGE].status is StepStatus.NOT_STARTED
    assert record.attempt_history[-1].outcome == "suspended"
    assert record.suspended_by == audit_id("otto")

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
    assert client.started == []
    again = call(deps, trusted.validator, "POST", f"{ORDER}/suspend", trusted.operator())
    assert (again.status, code(again)) == (409, "AlreadySuspended")

    resumed = call(deps, trusted.validator, "POST", f"{ORDER}/resume", trusted.operator())
    assert (resumed.status, resumed.body["outcome"]) == (200, "Resumed")
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
    assert client.started == [f"{KEY}:2"]
    timeline = deps.states.get(KEY).item.timeline
    assert [(e.role, e.action, e.outcome) for e in timeline[-4:]] == [
        ("operator", "suspend", None),
        ("orchestrator", None, "suspended"),  # the attempt handing the record back
        ("operator", "resume", None),
        ("starter", "claim", None),
    ]


def test_the_supervisor_leaves_a_suspended_order_whose_attempt_died_until_it_is_resumed(
    deps: HostDeps, trusted: TrustedIssuer
) -> None:
    submit_and_claim(deps, definition=ORDER_V1, order_id=KEY)
    call(deps, trusted.validator, "POST", f"{ORDER}/suspend", trusted.operator())
    assert isinstance(deps.clock, FakeClock)
    deps.clock.advance(3600)

    held = recover_once(deps, KEY)
    call(deps, trusted.validator, "POST", f"{ORDER}/resume", trusted.operator())
    after = recover_once(deps, KEY)

    assert (held, after) == (Recovery.SKIPPED, Recovery.REQUEUED)


def test_suspending_a_finished_order_and_resuming_a_running_one_are_409(
    deps: HostDeps, trusted: TrustedIssuer
) -> None:
    failed(deps)
    etag = deps.states.get(KEY).etag

    suspend = call(deps, trusted.validator, "POST", f"{ORDER}/suspend", trusted.operator())
    resume = call(deps, trusted.validator, "POST", f"{ORDER}/resume", trusted.operator())
    stale = call(
        deps, trusted.validator, "POST", f"{ORDER}/resume", {**trusted.operator(), "If-Match": '"old"'}
    )

    assert [(r.status, code(r)) for r in (suspend, resume, stale)] == [
        (409, "NotSuspendable"),
        (409, "NotSuspended"),
        (412, "PreconditionFailed"),
    ]
    assert deps.states.get(KEY).etag == etag


# --- list and timeline --------------------------------------------------------------------------


def test_the_list_filters_and_pages(deps: HostDeps, trusted: TrustedIssuer) -> None:
    for n in range(3):
        failed(deps, f"a:e-{n}")
    submit_and_claim(deps, definition=ORDER_V1, order_id="a:p-1")
    assert isinstance(deps.clock, FakeClock)
    deps.clock.advance(600)
    submit_and_claim(deps, definition=ORDER_V1, order_id="a:p-2")

    def listed(query: str) -> OperatorResponse:
        return call(deps, trusted.validator, "GET", f"/api/operator/orders?{query}", trusted.reviewer())

    first = listed("state=Error&limit=2")
    second = listed(f"state=Error&limit=2&continuation={first.body['continuation']}")
    stuck = listed("stuckFor=300")
    since = listed("failedSince=2000-01-01T00:00:00Z&client=a")
    by_version = listed("workflowVersion=order-v2")

    keys = [o["orderId"] for o in first.body["orders"] + second.body["orders"]]
    assert keys == ["a:e-0", "a:e-1", "a:e-2"] and second.body["continuation"] is None
    assert first.body["orders"][0]["lastErrorCode"] == "declined"
    # Each summary names the version listed, as the order's own route gives it: an action's If-Match.
    shown = call(deps, trusted.validator, "GET", "/api/operator/orders/a:e-0", trusted.reviewer())
    assert first.body["orders"][0]["etag"] == shown.headers["ETag"]
    assert first.body["orders"][0]["etag"] != first.body["orders"][1]["etag"]
    assert [o["orderId"] for o in stuck.body["orders"]] == ["a:p-1"]
    assert [o["orderId"] for o in since.body["orders"]] == ["a:e-0", "a:e-1", "a:e-2"]
    assert by_version.body["orders"] == []
    bad = [
        listed(q)
        for q in (
            "state=Nope",
            "limit=0",
            "stuckFor=1&failedSince=2000-01-01T00:00:00Z",
            "colour=red",
            "continuation=garbage",
        )
    ]
    assert [(r.status, code(r)) for r in bad] == [
        (400, "InvalidValue"),
        (400, "InvalidValue"),
        (400, "InvalidValue"),
        (400, "UnexpectedField"),
        (400, "InvalidContinuation"),
    ]


def test_the_view_and_the_timeline_route_show_every_entry_once(
    deps: HostDeps, trusted: TrustedIssuer
) -> None:
    submit_and_claim(deps, definition=ORDER_V1, order_id=KEY)
    for n in range(TIMELINE_WINDOW + 5):  # past the window: some entries move to history
        found = deps.states.get(KEY)
        record = found.item.model_copy(deep=True)
        record.updated_at = record.updated_at + timedelta(seconds=1)
        note(found.item, record, Actor("operator", f"t/{n}"), action="inspect")
        deps.states.replace(record, etag=found.etag)

    view = call(deps, trusted.validator, "GET", ORDER, trusted.reviewer())
    pages, token = [], None
    while True:
        suffix = f"&continuation={token}" if token else ""
        page = call(deps, trusted.validator, "GET", f"{ORDER}/timeline?limit=1{suffix}", trusted.reviewer())
        pages.append(page.body)
        token = page.body["continuation"]
        if token is None:
            break

    seqs = [entry["seq"] for body in pages for entry in body["entries"]]
    record = deps.states.get(KEY).item
    assert seqs == list(range(1, record.timeline_seq + 1))
    assert [e["seq"] for e in view.body["timeline"]] == [e.seq for e in record.timeline]
    assert view.body["timeline"][0]["role"] in {"intake", "operator", "starter"}
