"""The circuit breaker (orderflow.breaker): its state machine, two hosts sharing one over the in-memory
store, the calls it cuts at a dead service, and how step start holds an order while it is open."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from activities.sections import ActivitySections
from activities.steps import record_step_failure, start_step
from agents.agent import handle_request
from orderflow.attempts import claim
from orderflow.breaker import (
    DEPENDENCY_UNAVAILABLE,
    BreakerDoc,
    CircuitBreakers,
    Closed,
    HalfOpen,
    Open,
    breaker_view,
    opened,
    wait_until,
)
from orderflow.clock import FakeClock
from orderflow.contracts import RecordStepFailureInput, StartStepInput, StepError, StepResult
from orderflow.errors import ErrorKind, TransientError
from orderflow.messages import AgentRequest, AgentResponse, parse_message
from orderflow.queues.memory import InMemoryQueueFactory
from orderflow.records import ProcessState, StepStatus
from orderflow.results import AwaitingDependency, FailureRecorded, StepStarted
from orderflow.settings import Settings
from orderflow.stores.memory import InMemoryBreakerStore
from orderflow.workflows import CURRENT_WORKFLOW
from tests.host_deps import HostDeps
from tests.unit.fakes import memory_deps, submit_and_claim

pytestmark = pytest.mark.unit

START = datetime(2026, 1, 1, tzinfo=UTC)
REPLY_QUEUE = "agent-responses-local"
BREAKER = {
    "BREAKER_FAILURES_TO_OPEN": 5,
    "BREAKER_OPEN_S": 10.0,
    "BREAKER_OPEN_MAX_S": 25.0,
    "BREAKER_PROBE_LEASE_S": 30.0,
    "BREAKER_MAX_WAIT_S": 60.0,
    "BREAKER_CACHE_S": 0.0,
}


def host(store: InMemoryBreakerStore, clock: FakeClock, host_id: str = "h1") -> CircuitBreakers:
    return CircuitBreakers(
        store,
        clock,
        Settings.load({}, HOST_ID=host_id, **BREAKER).breakers,
        Settings.load({}, HOST_ID=host_id, **BREAKER).queues.HOST_ID,
    )


def fail(breakers: CircuitBreakers, times: int, holder: str = "o-1:1") -> None:
    for _ in range(times):
        breakers.failed("payment", holder=holder)


# --- the state machine ---------------------------------------------------------------------------


def test_a_document_is_closed_open_then_half_open_with_or_without_a_live_probe() -> None:
    settings = Settings.load({}, **BREAKER)
    doc = opened(None, "payment", START, settings.breakers, "h1")

    assert breaker_view(None, START) == Closed()
    assert breaker_view(doc, START + timedelta(seconds=9)) == Open(START + timedelta(seconds=10))
    assert breaker_view(doc, START + timedelta(seconds=10)) == HalfOpen(None, None)
    leased = doc.model_copy(update={"probe_by": "o-2:1", "probe_until": START + timedelta(seconds=40)})
    assert breaker_view(leased, START + timedelta(seconds=39)) == HalfOpen(
        "o-2:1", START + timedelta(seconds=40)
    )
    assert breaker_view(leased, START + timedelta(seconds=40)) == HalfOpen(None, None)  # the lease ended
    assert wait_until(HalfOpen("o-2:1", START), "o-2:1") is None
    assert wait_until(HalfOpen("o-2:1", START), "o-3:1") == START


def test_each_failed_probe_doubles_the_open_period_up_to_its_cap() -> None:
    settings = Settings.load({}, **BREAKER)
    doc: BreakerDoc | None = None
    periods = []
    for _ in range(4):
        doc = opened(doc, "payment", START, settings.breakers, "h1")
        assert doc.open_until is not None
        periods.append((doc.open_until - START).total_seconds())
    assert periods == [10.0, 20.0, 25.0, 25.0]


def test_the_failures_in_a_row_open_it_and_a_success_between_them_starts_the_count_again() -> None:
    clock = FakeClock(START)
    breakers = host(InMemoryBreakerStore(), clock)

    fail(breakers, 4)
    breakers.succeeded("payment")
    fail(breakers, 4)
    assert breakers.view("payment") == Closed()
    fail(breakers, 1)
    assert breakers.view("payment") == Open(START + timedelta(seconds=10))
    assert breakers.admit("payment", holder="o-9:1") == START + timedelta(seconds=10)


# --- two hosts, one breaker ---------------------------------------------------------------------


def test_a_breaker_one_host_opens_holds_the_other_and_one_probe_at_a_time_tests_it() -> None:
    clock = FakeClock(START)
    store = InMemoryBreakerStore()
    first, second = host(store, clock, "h1"), host(store, clock, "h2")

    fail(first, 5)
    assert second.admit("payment", holder="o-2:1") == START + timedelta(seconds=10)

    clock.advance(10)  # half-open: the first to ask takes the probe, the other waits for its lease
    assert second.admit("payment", holder="o-2:1") is None
    assert first.admit("payment", holder="o-3:1") == START + timedelta(seconds=40)
    assert second.admit("payment", holder="o-2:1") is None  # the holder may go on calling

    second.failed("payment", holder="o-2:1")  # the probe failed: open again, for twice as long
    assert first.view("payment") == Open(START + timedelta(seconds=30))

    clock.advance(20)
    assert first.admit("payment", holder="o-3:1") is None
    first.succeeded("payment")
    assert second.view("payment") == Closed()
    assert second.admit("payment", holder="o-4:1") is None


def test_a_breaker_whose_store_fails_lets_calls_through() -> None:
    class Down(InMemoryBreakerStore):
        def find(self, dependency: str) -> Any:
            raise TransientError("store down")

    breakers = host(Down(), FakeClock(START))
    fail(breakers, 10)
    assert breakers.admit("payment", holder="o-1:1") is None


# --- the calls cut at a dead service ------------------------------------------------------------


@dataclass
class DeadService:
    """A service that is down: every call fails transiently, and is counted."""

    name: str = "payment"
    calls: list[str] = field(default_factory=list)

    def call(
        self,
        operation: str,
        payload: Mapping[str, Any],
        *,
        order_id: str,
        idempotency_key: str,
        timeout_s: float,
        instance_id: str | None = None,
    ) -> dict[str, str]:
        self.calls.append(order_id)
        raise TransientError("payment unavailable (HTTP 503)")


def request(order: int, max_calls: int = 4) -> str:
    return AgentRequest(
        request_id=f"o-{order}:1:charge",
        order_id=f"o-{order}",
        instance_id=f"o-{order}:1",
        step="charge_payment",
        operation="charge",
        idempotency_key=f"o-{order}:charge_payment",
        deadline=START + timedelta(seconds=60),
        reply_to=REPLY_QUEUE,
        payload={"amount": "1.00"},
        max_calls=max_calls,
    ).to_json()


def calls_to_a_dead_service(orders: int, *, with_breaker: bool) -> tuple[int, list[AgentResponse]]:
    """Two agent hosts handle ``orders`` requests to a dead service, alternately; the calls it got."""
    clock = FakeClock(START)
    store = InMemoryBreakerStore()
    hosts = [host(store, clock, "h1"), host(store, clock, "h2")] if with_breaker else [None, None]
    service, queues = DeadService(), InMemoryQueueFactory()
    settings = Settings.load({}, AGENT_BACKOFF_INITIAL_S=0.01, AGENT_BACKOFF_MAX_S=0.01, **BREAKER)
    for order in range(orders):
        handle_request(
            request(order),
            service=service,
            queues=queues,
            clock=clock,
            agents=settings.agents,
            queue_names=settings.queues,
            sleep=lambda seconds: None,
            breakers=hosts[order % 2],
        )
    responses = [parse_message(AgentResponse, m.body) for m in queues.queue(REPLY_QUEUE).peek_all()]
    return len(service.calls), responses


def test_the_breaker_cuts_the_calls_to_a_dead_service_shared_by_two_hosts() -> None:
    without, _ = calls_to_a_dead_service(20, with_breaker=False)
    with_breaker, responses = calls_to_a_dead_service(20, with_breaker=True)

    assert without == 20 * 4  # every order spends its whole reservation
    # Each host counts its own failures in a row: 4 + 4, then the first host's fifth opens the
    # breaker for both after one call of its second order; no order calls after that.
    assert with_breaker == 4 + 4 + 1
    held = [r for r in responses if r.error_kind == ErrorKind.UNAVAILABLE.value]
    assert [r.calls for r in held] == [1] + [0] * 17
    assert {r.error_code for r in held} == {DEPENDENCY_UNAVAILABLE}


# --- step start holds the order ------------------------------------------------------------------


def breaker_deps(clock: FakeClock) -> HostDeps:
    deps = memory_deps(clock, **BREAKER)
    deps.breakers = CircuitBreakers(
        InMemoryBreakerStore(), clock, deps.settings.breakers, deps.settings.queues.HOST_ID
    )
    return deps


def start_charge(deps: HostDeps, instance_id: str = "a:o-1:1") -> Any:
    return start_step(
        StartStepInput(
            order_id="a:o-1",
            instance_id=instance_id,
            workflow_version=CURRENT_WORKFLOW.version,
            step="charge_payment",
            timeout_s=8,
            completed=StepResult(step="reserve_inventory", result={"reservationId": "r-1"}, calls=1),
            response_queue="r-q1",
        ),
        deps,
        ActivitySections.of(deps.settings),
    )


def test_a_step_whose_dependency_is_open_is_not_started_and_its_order_waits_unspent() -> None:
    clock = FakeClock(START)
    deps = breaker_deps(clock)
    claimed = submit_and_claim(deps, definition=CURRENT_WORKFLOW)
    assert deps.breakers is not None
    for _ in range(5):
        deps.breakers.failed("payment", holder="x")

    result = start_charge(deps)

    assert result == AwaitingDependency(dependency="payment", retry_at=START + timedelta(seconds=10))
    record = deps.states.get("a:o-1").item
    assert (record.process_state, record.locked_by, record.next_attempt_at) == (
        ProcessState.PENDING,
        None,
        START + timedelta(seconds=10),
    )
    assert record.failure_count == claimed.failure_count == 0
    assert record.steps["reserve_inventory"].status is StepStatus.COMPLETED
    assert record.steps["charge_payment"].status is StepStatus.NOT_STARTED
    assert record.retry_budget.spent == 1  # reserve's one call; nothing reserved for the charge
    assert deps.queues.queue("agent-payment").approximate_count() == 0


def test_a_claim_defers_an_order_whose_first_step_waits_and_a_half_open_breaker_starts_one() -> None:
    clock = FakeClock(START)
    deps = breaker_deps(clock)
    submit_and_claim(deps, definition=CURRENT_WORKFLOW)
    assert deps.breakers is not None
    for _ in range(5):
        deps.breakers.failed("payment", holder="x")
    start_charge(deps)

    clock.advance(10)  # half-open: the claim of attempt 2 takes the probe and starts the charge
    won = claim(
        deps.states,
        deps.states.get("a:o-1"),
        clock,
        deps.settings.starter,
        deps.settings.steps,
        host_id=deps.settings.queues.HOST_ID,
        breakers=deps.breakers,
    )
    assert won is not None and won.item.steps["charge_payment"].status is StepStatus.RUNNING
    assert won.item.retry_budget.spent == 1 + deps.settings.steps.AGENT_MAX_CALLS_PER_STEP

    # Its probe fails at the agent: the attempt gives the record back and the order waits again.
    deps.breakers.failed("payment", holder="a:o-1:2")
    recorded = record_step_failure(
        RecordStepFailureInput(
            order_id="a:o-1",
            instance_id="a:o-1:2",
            error=StepError(step="charge_payment", kind="unavailable", message="open", calls=1),
            at=clock.now(),
        ),
        deps,
        ActivitySections.of(deps.settings),
    )
    record = deps.states.get("a:o-1").item
    assert isinstance(recorded, FailureRecorded)
    assert (record.process_state, record.next_attempt_at) == (
        ProcessState.PENDING,
        START + timedelta(seconds=30),
    )
    assert record.retry_budget.spent == 2 and record.failure_count == 0  # the probe's one call only

    clock.advance(20)
    other = deps.states.get("a:o-1")
    deps.breakers.admit("payment", holder="b:o-9:1")  # another order holds the probe
    assert (
        claim(
            deps.states,
            other,
            clock,
            deps.settings.starter,
            deps.settings.steps,
            host_id=deps.settings.queues.HOST_ID,
            breakers=deps.breakers,
        )
        is None
    )
    assert deps.states.get("a:o-1").item.next_attempt_at == clock.now() + timedelta(seconds=30)
    assert deps.states.get("a:o-1").item.attempt == 2  # deferred, not claimed


def test_an_order_that_waited_past_the_maximum_is_compensated_instead() -> None:
    clock = FakeClock(START)
    deps = breaker_deps(clock)
    submit_and_claim(deps, definition=CURRENT_WORKFLOW)
    assert deps.breakers is not None
    for _ in range(5):
        deps.breakers.failed("payment", holder="x")
    start_charge(deps)

    for probe in range(10):  # each time the breaker lets a probe through, another order's probe fails
        view = deps.breakers.view("payment")
        assert isinstance(view, Open)
        clock.advance((view.retry_at - clock.now()).total_seconds())
        assert deps.breakers.admit("payment", holder=f"b:o-{probe}:1") is None
        found = deps.states.get("a:o-1")
        assert (
            claim(
                deps.states,
                found,
                clock,
                deps.settings.starter,
                deps.settings.steps,
                host_id=deps.settings.queues.HOST_ID,
                breakers=deps.breakers,
            )
            is None
        )
        deps.breakers.failed("payment", holder=f"b:o-{probe}:1")
        if deps.states.get("a:o-1").item.process_state is not ProcessState.PENDING:
            break

    record = deps.states.get("a:o-1").item
    assert record.process_state is ProcessState.COMPENSATING and record.locked_by is None
    assert record.last_error is not None
    assert (record.last_error.kind, record.last_error.code) == ("unavailable", DEPENDENCY_UNAVAILABLE)
    assert record.failure_count == 0


def test_without_breakers_the_step_starts_as_before() -> None:
    clock = FakeClock(START)
    deps = memory_deps(clock, **BREAKER)
    submit_and_claim(deps, definition=CURRENT_WORKFLOW)

    assert isinstance(start_charge(deps), StepStarted)
    assert deps.queues.queue("agent-payment").approximate_count() == 1
