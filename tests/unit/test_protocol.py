"""The concurrency protocol on the in-memory store: claim, fencing, recovery (docs/design.md §3)."""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint

from intake.submission import handle_intake_message
from orchestrators.starter import StarterReport, run_starter_pass
from orderflow import telemetry
from orderflow.attempts import FirstRequests, claim, first_requests_for
from orderflow.clock import FakeClock
from orderflow.contracts import FinishOrderInput, Outcome, StartStepInput, StepResult
from orderflow.dependencies import RecordCache
from orderflow.errors import ConflictingOrder, TransientError
from orderflow.protocol.conditional import update
from orderflow.queues.memory import InMemoryQueueFactory
from orderflow.records import OrderDocument, ProcessState, StateRecord, StepStatus, format_utc
from orderflow.replies import resend_pending_replies
from orderflow.settings import Settings
from orderflow.step_requests import agent_deadline, request_payload
from orderflow.stores.base import StateQuery, Versioned
from orderflow.stores.memory import InMemoryOrderStore, InMemoryStateStore
from orderflow.timeline import Actor
from orderflow.workflows import CURRENT_WORKFLOW, ORDER_V1, ORDER_V2
from supervisor.recovery import Recovery, backoff_s, recover
from supervisor.sweep import run_sweep
from tests.activity_json import finish_order, start_step
from tests.host_deps import HostDeps
from tests.unit.fakes import TEST_CLIENT, RecordingClient, order_body, received, recover_once, sweep_once

pytestmark = pytest.mark.unit


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def settings() -> Settings:
    return Settings.load(
        {}, SUPERVISOR_MAX_FAILURES=3, SUPERVISOR_BACKOFF_INITIAL_S=2.0, CLAIM_TIMEOUT_S=30.0
    )


@pytest.fixture
def deps(clock: FakeClock, settings: Settings) -> HostDeps:
    return HostDeps(
        states=InMemoryStateStore(),
        orders=InMemoryOrderStore(),
        queues=InMemoryQueueFactory(),
        clock=clock,
        settings=settings,
    )


def submit(deps: HostDeps, order_id: str = "a:o-1") -> None:
    handle_intake_message(
        order_body(order_id),
        client=TEST_CLIENT,
        orders=deps.orders,
        states=deps.states,
        queues=deps.queues,
        clock=deps.clock,
        steps=deps.settings.steps,
        starter=deps.settings.starter,
        queue_names=deps.settings.queues,
        order_cache=deps.order_cache,
    )


def claimed(deps: HostDeps, order_id: str = "a:o-1") -> StateRecord:
    found = deps.states.get(order_id)
    won = claim(
        deps.states,
        found,
        deps.clock,
        deps.settings.starter,
        deps.settings.steps,
        host_id=deps.settings.queues.HOST_ID,
    )
    assert won is not None
    return won.item


def test_two_starters_with_the_same_read_claim_once(deps: HostDeps) -> None:
    submit(deps)
    read_by_a = deps.states.get("a:o-1")
    read_by_b = deps.states.get("a:o-1")
    first = claim(
        deps.states,
        read_by_a,
        deps.clock,
        deps.settings.starter,
        deps.settings.steps,
        host_id=deps.settings.queues.HOST_ID,
    )
    second = claim(
        deps.states,
        read_by_b,
        deps.clock,
        deps.settings.starter,
        deps.settings.steps,
        host_id=deps.settings.queues.HOST_ID,
    )
    assert first is not None and second is None
    stored = deps.states.get("a:o-1").item
    assert stored.locked_by == "a:o-1:1"
    assert stored.attempt == 1
    assert stored.process_state is ProcessState.PROCESSING
    # The claim started the first step: its deadline plus the orchestration's start-up allowance.
    assert stored.complete_by == deps.clock.now() + timedelta(seconds=8 + 5)
    step = stored.steps["reserve_inventory"]
    assert (step.status, step.attempts, step.last_instance) == (StepStatus.RUNNING, 1, "a:o-1:1")


def test_starter_pass_schedules_attempt_specific_instances(deps: HostDeps) -> None:
    submit(deps, "a:o-1")
    submit(deps, "a:o-2")
    client = RecordingClient()
    report = run_starter_pass(
        states=deps.states,
        client=client,
        clock=deps.clock,
        starter=deps.settings.starter,
        steps=deps.settings.steps,
        scans=deps.settings.scans,
        queue_names=deps.settings.queues,
        response_queue="agent-responses-h1",
        capacity=10,
    )
    assert sorted(report.claimed) == ["a:o-1", "a:o-2"]
    assert sorted(client.started) == ["a:o-1:1", "a:o-2:1"]
    payload = client.payloads["a:o-1:1"]
    assert payload["responseQueue"] == "agent-responses-h1"
    assert payload["workflowVersion"] == CURRENT_WORKFLOW.version
    assert payload["completedSteps"] == []


def test_starter_treats_an_existing_instance_as_started(deps: HostDeps) -> None:
    submit(deps)
    client = RecordingClient(existing={"a:o-1:1"})
    report = run_starter_pass(
        states=deps.states,
        client=client,
        clock=deps.clock,
        starter=deps.settings.starter,
        steps=deps.settings.steps,
        scans=deps.settings.scans,
        queue_names=deps.settings.queues,
        response_queue="r-q1",
        capacity=5,
    )
    assert report.claimed == ["a:o-1"]
    assert report.already_started == 1
    assert deps.states.get("a:o-1").item.locked_by == "a:o-1:1"


def test_starter_respects_next_attempt_at(deps: HostDeps, clock: FakeClock) -> None:
    submit(deps)
    record = claimed(deps)
    clock.advance(31)
    assert recover_once(deps, "a:o-1", clock) is (Recovery.REQUEUED)
    requeued = deps.states.get("a:o-1").item
    assert requeued.next_attempt_at == clock.now() + timedelta(seconds=2)
    client = RecordingClient()
    run_starter_pass(
        states=deps.states,
        client=client,
        clock=clock,
        starter=deps.settings.starter,
        steps=deps.settings.steps,
        scans=deps.settings.scans,
        queue_names=deps.settings.queues,
        response_queue="r-q1",
        capacity=5,
    )
    assert client.started == []
    clock.advance(2)
    run_starter_pass(
        states=deps.states,
        client=client,
        clock=clock,
        starter=deps.settings.starter,
        steps=deps.settings.steps,
        scans=deps.settings.scans,
        queue_names=deps.settings.queues,
        response_queue="r-q1",
        capacity=5,
    )
    assert client.started == [f"a:o-1:{record.attempt + 1}"]


def test_a_stale_attempt_changes_nothing_after_the_supervisor_requeued(
    deps: HostDeps, clock: FakeClock
) -> None:
    submit(deps)
    claimed(deps)
    clock.advance(31)
    sweep_once(deps, clock)
    before = deps.states.get("a:o-1")
    result = start_step(
        StartStepInput(
            order_id="a:o-1",
            instance_id="a:o-1:1",
            workflow_version=ORDER_V1.version,
            step="reserve_inventory",
            timeout_s=8,
            response_queue="r-q1",
        ).to_payload(),
        deps,
    )
    assert result["outcome"] == "fenced"
    after = deps.states.get("a:o-1")
    assert after.etag == before.etag
    assert after.item == before.item
    assert deps.queues.queue("agent-inventory").approximate_count() == 0


def test_fenced_write_rejects_a_non_owner_without_writing(deps: HostDeps) -> None:
    submit(deps)
    claimed(deps)
    before = deps.states.get("a:o-1")

    def mutate(record: StateRecord) -> StateRecord:
        record.process_state = ProcessState.PROCESSED
        return record

    outcome = update(
        deps.states,
        "a:o-1",
        mutate,
        clock=deps.clock,
        actor=Actor("orchestrator", "a:o-1:9"),
        owner="a:o-1:9",
        cache=RecordCache(),
    )
    assert outcome.fenced and not outcome.applied
    assert deps.states.get("a:o-1").etag == before.etag


def test_fenced_write_rereads_after_a_stale_cached_etag(deps: HostDeps) -> None:
    submit(deps)
    claimed(deps)
    cache = RecordCache()
    cache.put(deps.states.get("a:o-1"))
    # Another writer (same owner, e.g. an earlier run of the activity) moves the record on.
    current = deps.states.get("a:o-1")
    bumped = current.item.model_copy(deep=True)
    bumped.failure_count = 0
    deps.states.replace(bumped, etag=current.etag)

    def mutate(record: StateRecord) -> StateRecord:
        record.steps["reserve_inventory"].status = StepStatus.RUNNING
        return record

    outcome = update(
        deps.states,
        "a:o-1",
        mutate,
        clock=deps.clock,
        actor=Actor("orchestrator", "a:o-1:1"),
        owner="a:o-1:1",
        cache=cache,
    )
    assert outcome.applied
    assert deps.states.get("a:o-1").item.steps["reserve_inventory"].status is StepStatus.RUNNING


def test_start_step_rerun_is_idempotent(deps: HostDeps, clock: FakeClock) -> None:
    submit(deps)
    claimed(deps)
    payload = StartStepInput(
        order_id="a:o-1",
        instance_id="a:o-1:1",
        workflow_version=ORDER_V1.version,
        step="reserve_inventory",
        timeout_s=8,
        response_queue="r-q1",
    ).to_payload()
    started_at = clock.now()  # the claim started the first step
    etag = deps.states.get("a:o-1").etag
    clock.advance(1)  # the orchestration is scheduled
    first = start_step(payload, deps)
    clock.advance(3)  # the runtime re-runs the activity later (its result was lost)
    second = start_step(payload, deps)
    assert first["outcome"] == second["outcome"] == "started"
    stored = deps.states.get("a:o-1")
    assert stored.etag == etag  # neither run wrote: the claim's write started the step
    step = stored.item.steps["reserve_inventory"]
    assert (step.status, step.attempts, step.last_instance) == (StepStatus.RUNNING, 1, "a:o-1:1")
    # The deadline starts when the step is started, and every run returns that one for the timer.
    deadline = started_at + timedelta(seconds=8 + deps.settings.starter.START_LATENCY_S)
    assert stored.item.complete_by == deadline
    assert first["completeBy"] == second["completeBy"] == format_utc(deadline)
    requests = [m for m in received(deps.queues.queue("agent-inventory"))]
    assert [m.message_id for m in requests] == ["a:o-1:1:reserve_inventory", "a:o-1:1:reserve_inventory"]
    body = json.loads(requests[0].body)
    assert body["idempotencyKey"] == "a:o-1:reserve_inventory"
    assert body["replyTo"] == "r-q1"
    assert body["payload"]["items"] == [{"sku": "10", "quantity": 5}]


def test_completion_records_the_compensation_entry_once(deps: HostDeps, clock: FakeClock) -> None:
    submit(deps)
    claimed(deps)
    for step in ("reserve_inventory", "charge_payment"):
        previous = StepResult(step="reserve_inventory", result={"reservationId": "r-1"}, calls=2)
        start_step(
            StartStepInput(
                order_id="a:o-1",
                instance_id="a:o-1:1",
                workflow_version=ORDER_V1.version,
                step=step,
                timeout_s=8,
                completed=previous if step == "charge_payment" else None,
                response_queue="r-q1",
            ).to_payload(),
            deps,
        )
    record = deps.states.get("a:o-1").item
    assert record.steps["reserve_inventory"].status is StepStatus.COMPLETED
    assert [(e.step, e.undo, e.undo_key, e.data) for e in record.compensation_log] == [
        ("reserve_inventory", "release", "a:o-1:reserve_inventory:undo", {"reservationId": "r-1"})
    ]
    # Two calls made for the reservation; four reserved for the charge that is running now.
    assert record.retry_budget.spent == 2 + 4
    assert record.steps["charge_payment"].reserved_calls == 4
    assert record.steps["reserve_inventory"].reserved_calls == 0


def test_finish_processed_replies_once_per_message_id(deps: HostDeps, clock: FakeClock) -> None:
    submit(deps)
    claimed(deps)
    payload = FinishOrderInput(
        order_id="a:o-1", instance_id="a:o-1:1", workflow_version=ORDER_V1.version, outcome=Outcome.PROCESSED
    ).to_payload()
    assert finish_order(payload, deps)["outcome"] == "finished"
    assert finish_order(payload, deps)["outcome"] == "finished"  # re-run: already Processed and replied
    record = deps.states.get("a:o-1").item
    assert record.process_state is ProcessState.PROCESSED
    assert record.complete_by is None
    assert record.pending_reply is None
    replies = [json.loads(m.body) for m in received(deps.queues.queue("client-a"))]
    statuses = [(r["orderId"], r["status"]) for r in replies]
    # Replies name the client's own order id, not the key it is stored under.
    assert statuses == [("o-1", "Received"), ("o-1", "Processed")]


class CountingOrderGets(InMemoryOrderStore):
    """The in-memory order store, counting point reads."""

    def __init__(self) -> None:
        super().__init__()
        self.gets = 0

    def get(self, order_id: str) -> OrderDocument:
        self.gets += 1
        return super().get(order_id)


class CountingGets(InMemoryStateStore):
    """The in-memory store, counting point reads and replaces."""

    def __init__(self) -> None:
        super().__init__()
        self.gets = 0
        self.replaces = 0

    def get(self, order_id: str) -> Versioned[StateRecord]:
        self.gets += 1
        return super().get(order_id)

    def replace(self, record: StateRecord, *, etag: str) -> Versioned[StateRecord]:
        self.replaces += 1
        return super().replace(record, etag=etag)


def _claimed_here(
    clock: FakeClock, settings: Settings, *, starter_sends: bool
) -> tuple[HostDeps, CountingGets, CountingOrderGets]:
    """One process submits an order and claims it (its starter sending the first request, or not); the
    state store's point reads are counted from then on."""
    states = CountingGets()
    orders = CountingOrderGets()
    deps = HostDeps(
        states=states, orders=orders, queues=InMemoryQueueFactory(), clock=clock, settings=settings
    )
    submit(deps)
    run_starter_pass(
        states=states,
        client=RecordingClient(),
        clock=clock,
        starter=settings.starter,
        steps=settings.steps,
        scans=settings.scans,
        queue_names=settings.queues,
        response_queue="r-q1",
        capacity=10,
        on_claimed=deps.cache.put,
        first_requests=first_requests(deps) if starter_sends else None,
    )
    states.gets = 0
    return deps, states, orders


def _orchestration_runs(deps: HostDeps, *, first: int) -> None:
    """The orchestration's activities of an ORDER_V1 attempt, in this process: ``start_step`` of each
    step from the ``first``-th (every earlier one answered), then ``finish_order``."""
    previous = StepResult(step=ORDER_V1.steps[first - 1].name, result={}, calls=1) if first else None
    for step in ORDER_V1.steps[first:]:
        start_step(
            StartStepInput(
                order_id="a:o-1",
                instance_id="a:o-1:1",
                workflow_version=ORDER_V1.version,
                step=step.name,
                timeout_s=8,
                completed=previous,
                response_queue="r-q1",
            ).to_payload(),
            deps,
        )
        previous = StepResult(step=step.name, result={}, calls=1)
    finish = FinishOrderInput(
        order_id="a:o-1",
        instance_id="a:o-1:1",
        workflow_version=ORDER_V1.version,
        outcome=Outcome.PROCESSED,
        completed=previous,
    )
    assert finish_order(finish.to_payload(), deps)["outcome"] == "finished"


def test_a_claim_made_here_runs_to_its_reply_with_one_point_read(
    clock: FakeClock, settings: Settings
) -> None:
    deps, states, orders = _claimed_here(clock, settings, starter_sends=False)
    assert states.replaces == 1  # the claim, which started the first step
    _orchestration_runs(deps, first=0)

    # The first step's start found it started by the claim: a decision not to write is confirmed on a
    # read (the cached claim may be stale). Every write, the outbox clear included, used the ETag it
    # last wrote.
    assert states.gets == 1
    # The submission put the order document it created in the process's cache: no step read it.
    assert orders.gets == 0
    assert deps.order_cache.get(orders, "a:o-1") == orders.get("a:o-1")
    # The claim, the next two steps' starts, the outcome and the outbox clear.
    assert states.replaces == 5
    record = deps.states.get("a:o-1").item
    assert record.process_state is ProcessState.PROCESSED
    assert record.pending_reply is None
    statuses = [json.loads(m.body)["status"] for m in received(deps.queues.queue("client-a"))]
    assert statuses == ["Received", "Processed"]


def _starter_pass(
    deps: HostDeps,
    client: RecordingClient,
    *,
    first: FirstRequests | None = None,
    clock: FakeClock | None = None,
) -> StarterReport:
    """One starter pass over ``deps``' stores, answered on ``r-q1``, sending first requests through
    ``first`` (None: none)."""
    return run_starter_pass(
        states=deps.states,
        client=client,
        clock=clock or deps.clock,
        starter=deps.settings.starter,
        steps=deps.settings.steps,
        scans=deps.settings.scans,
        queue_names=deps.settings.queues,
        response_queue="r-q1",
        capacity=10,
        first_requests=first,
    )


def first_requests(deps: HostDeps, queues: Any = None) -> FirstRequests:
    """The starter's means to send the first request as the hosts build it from ``deps``, over ``queues``
    when given."""
    first = first_requests_for(deps, deps.settings.starter)
    assert first is not None
    return first if queues is None else dataclasses.replace(first, queues=queues)


class OrderedClient(RecordingClient):
    """A :class:`RecordingClient` that notes how many agent requests were already sent at each start."""

    def __init__(self, queues: InMemoryQueueFactory, queue: str) -> None:
        super().__init__()
        self.queue = queues.queue(queue)
        self.requests_at_start: list[int] = []

    def start(self, name: str, instance_id: str, payload: dict[str, Any]) -> bool:
        self.requests_at_start.append(len(received(self.queue)))
        return super().start(name, instance_id, payload)


def test_the_starter_sends_the_request_of_the_step_its_claim_started_once_the_instance_is_scheduled(
    deps: HostDeps, clock: FakeClock
) -> None:
    submit(deps)
    first = CURRENT_WORKFLOW.steps[0]
    agent_queue = deps.settings.queues.agent_queue(first.agent)
    assert isinstance(deps.queues, InMemoryQueueFactory)
    client = OrderedClient(deps.queues, agent_queue)

    report = _starter_pass(deps, client, first=first_requests(deps), clock=clock)

    assert report.claimed == ["a:o-1"]
    record = deps.states.get("a:o-1").item
    assert record.complete_by is not None
    step = record.steps[first.name]
    # The instance knows the step is started and when its timer fires; it was scheduled before any
    # request existed, so no answer can find it missing.
    assert client.payloads["a:o-1:1"]["firstStep"] == {
        "step": first.name,
        "completeBy": format_utc(record.complete_by),
    }
    assert client.requests_at_start == [0]
    [message] = received(deps.queues.queue(agent_queue))
    request = json.loads(message.body)
    assert message.message_id == request["requestId"] == f"a:o-1:1:{first.name}"
    assert (request["instanceId"], request["step"], request["replyTo"]) == ("a:o-1:1", first.name, "r-q1")
    assert (request["idempotencyKey"], request["maxCalls"]) == (step.idempotency_key, step.reserved_calls)
    assert request["deadline"] == format_utc(agent_deadline(record.complete_by, clock.now()))
    assert request["payload"] == request_payload(first, deps.orders.get("a:o-1"))


def test_without_the_means_to_send_it_the_starter_leaves_the_first_request_to_the_orchestration(
    deps: HostDeps,
) -> None:
    submit(deps)
    client = RecordingClient()
    _starter_pass(deps, client)
    assert client.payloads["a:o-1:1"]["firstStep"] is None
    assert (
        received(deps.queues.queue(deps.settings.queues.agent_queue(CURRENT_WORKFLOW.steps[0].agent))) == []
    )


def test_a_first_request_that_cannot_be_sent_leaves_the_attempt_to_its_timer_and_the_pass_goes_on(
    deps: HostDeps,
) -> None:
    submit(deps, "a:o-1")
    submit(deps, "a:o-2")
    assert isinstance(deps.queues, InMemoryQueueFactory)
    agent_queue = deps.settings.queues.agent_queue(CURRENT_WORKFLOW.steps[0].agent)
    client = RecordingClient()

    with telemetry.recording() as events:
        report = _starter_pass(
            deps, client, first=first_requests(deps, FailingSends(deps.queues, agent_queue))
        )

    # Both claimed and scheduled: each attempt waits for its timer at the claim's completeBy, and the
    # supervisor recovers it as after any lost request.
    assert sorted(report.claimed) == ["a:o-1", "a:o-2"]
    assert sorted(client.started) == ["a:o-1:1", "a:o-2:1"]
    assert events["step.request_not_sent"] == 2
    assert events["step.start"] == 0
    assert all(deps.states.get(o).item.process_state is ProcessState.PROCESSING for o in ("a:o-1", "a:o-2"))


class FlakySends:
    """A queue factory whose first ``failures`` sends fail transiently, then work."""

    def __init__(self, inner: InMemoryQueueFactory, failures: int) -> None:
        self.inner = inner
        self.failures = failures
        self.tries = 0

    def queue(self, name: str) -> Any:
        queue = self.inner.queue(name)
        outer = self

        class _Flaky:
            def __init__(self) -> None:
                self.name = queue.name

            def send(self, body: str, **kwargs: Any) -> None:
                outer.tries += 1
                if outer.tries <= outer.failures:
                    raise TransientError("queue busy")
                queue.send(body, **kwargs)

        return _Flaky()

    def dead_letters(self, name: str, *, max_messages: int = 32) -> Any:
        return self.inner.dead_letters(name, max_messages=max_messages)


@pytest.mark.parametrize(("failures", "sent"), [(2, 1), (3, 0)])
def test_the_starter_tries_a_first_request_three_times(deps: HostDeps, failures: int, sent: int) -> None:
    submit(deps)
    assert isinstance(deps.queues, InMemoryQueueFactory)
    flaky = FlakySends(deps.queues, failures)
    with telemetry.recording() as events:
        _starter_pass(deps, RecordingClient(), first=first_requests(deps, flaky))
    agent_queue = deps.settings.queues.agent_queue(CURRENT_WORKFLOW.steps[0].agent)
    assert (flaky.tries, len(received(deps.queues.queue(agent_queue)))) == (3, sent)
    assert (events["step.start"], events["step.request_not_sent"]) == (sent, 1 - sent)


def test_a_first_request_that_cannot_even_be_built_ends_neither_the_pass_nor_the_others(
    deps: HostDeps,
) -> None:
    submit(deps, "a:o-1")
    submit(deps, "a:o-2")
    client = RecordingClient()

    def order(order_id: str) -> OrderDocument:
        if order_id == "a:o-1":
            raise ValueError("a document the payload cannot be built from")
        return deps.order_cache.get(deps.orders, order_id)

    with telemetry.recording() as events:
        report = _starter_pass(deps, client, first=FirstRequests(deps.queues, order))

    assert sorted(report.claimed) == ["a:o-1", "a:o-2"]
    assert sorted(client.started) == ["a:o-1:1", "a:o-2:1"]
    [request] = received(deps.queues.queue(deps.settings.queues.agent_queue(CURRENT_WORKFLOW.steps[0].agent)))
    assert json.loads(request.body)["orderId"] == "a:o-2"
    assert (events["step.start"], events["step.request_not_sent"]) == (1, 1)


class SlowStart(RecordingClient):
    """A :class:`RecordingClient` on whose start the starter's process stalls for ``stall_s`` seconds."""

    def __init__(self, clock: FakeClock, stall_s: float) -> None:
        super().__init__()
        self.clock = clock
        self.stall_s = stall_s

    def start(self, name: str, instance_id: str, payload: dict[str, Any]) -> bool:
        self.clock.advance(self.stall_s)
        return super().start(name, instance_id, payload)


@pytest.mark.parametrize(("stall_s", "sent"), [(12.9, 1), (13.0, 0), (60.0, 0)])
def test_a_starter_that_stalled_until_the_claim_s_complete_by_sends_no_first_request(
    deps: HostDeps, clock: FakeClock, stall_s: float, sent: int
) -> None:
    # The claim's completeBy is 13 s out (an 8 s step and the 5 s start-up allowance). From then on the
    # supervisor may recover the order, so a request sent later could be a superseded attempt's.
    submit(deps)
    with telemetry.recording() as events:
        _starter_pass(deps, SlowStart(clock, stall_s), first=first_requests(deps), clock=clock)
    agent_queue = deps.settings.queues.agent_queue(CURRENT_WORKFLOW.steps[0].agent)
    assert len(received(deps.queues.queue(agent_queue))) == sent
    assert (events["step.start"], events["step.request_not_sent"]) == (sent, 1 - sent)


def test_a_step_the_claim_started_and_sent_runs_to_its_reply_with_no_point_read(
    clock: FakeClock, settings: Settings
) -> None:
    deps, states, orders = _claimed_here(clock, settings, starter_sends=True)
    # The orchestration waits for the first step's answer, then starts the others.
    _orchestration_runs(deps, first=1)

    assert (states.gets, orders.gets) == (0, 0)
    # The claim, the next two steps' starts, the outcome and the outbox clear.
    assert states.replaces == 5
    assert deps.states.get("a:o-1").item.process_state is ProcessState.PROCESSED


class FailingSends:
    """A queue factory whose sends to one queue fail, like a reply queue during an outage."""

    def __init__(self, inner: InMemoryQueueFactory, failing: str) -> None:
        self.inner = inner
        self.failing = failing
        self.down = True

    def queue(self, name: str) -> Any:
        queue = self.inner.queue(name)
        if name == self.failing and self.down:
            return _Down(queue)
        return queue

    def dead_letters(self, name: str, *, max_messages: int = 32) -> Any:
        return self.inner.dead_letters(name, max_messages=max_messages)


class _Down:
    def __init__(self, queue: Any) -> None:
        self.name = queue.name

    def send(self, body: str, **_: Any) -> None:
        raise TransientError("reply queue unavailable")


def test_a_reply_that_could_not_be_sent_stays_owed_until_the_relay_sends_it(
    deps: HostDeps, clock: FakeClock
) -> None:
    submit(deps)
    claimed(deps)
    inner = deps.queues
    assert isinstance(inner, InMemoryQueueFactory)
    flaky = FailingSends(inner, "client-a")
    failing = HostDeps(
        states=deps.states,
        orders=deps.orders,
        queues=flaky,
        clock=clock,
        settings=deps.settings,
        cache=deps.cache,
    )
    payload = FinishOrderInput(
        order_id="a:o-1", instance_id="a:o-1:1", workflow_version=ORDER_V1.version, outcome=Outcome.PROCESSED
    ).to_payload()
    with pytest.raises(TransientError):
        finish_order(payload, failing)  # written, then the send failed: the runtime would retry
    record = deps.states.get("a:o-1").item
    assert record.process_state is ProcessState.PROCESSED
    assert record.pending_reply is not None and record.pending_reply.status == "Processed"

    # Within the grace period the relay leaves it to the writer; after it, the relay sends it.
    early = resend_pending_replies(states=deps.states, queues=inner, clock=clock, grace_s=30)
    assert early.resent == []
    clock.advance(31)
    late = resend_pending_replies(states=deps.states, queues=inner, clock=clock, grace_s=30)
    assert late.resent == ["a:o-1"]
    assert deps.states.get("a:o-1").item.pending_reply is None
    replies = [json.loads(m.body)["status"] for m in received(inner.queue("client-a"))]
    assert replies == ["Received", "Processed"]
    again = resend_pending_replies(states=deps.states, queues=inner, clock=clock, grace_s=30)
    assert again.resent == []


def test_supervisor_leaves_unexpired_and_settled_records_alone(deps: HostDeps, clock: FakeClock) -> None:
    submit(deps, "a:o-1")
    submit(deps, "a:o-2")
    claimed(deps, "a:o-1")
    report = sweep_once(deps, clock)
    assert (report.scanned, report.requeued, report.gave_up) == (0, [], [])
    assert deps.states.get("a:o-2").item.process_state is ProcessState.PENDING


def test_supervisor_gives_up_forward_progress_at_the_threshold_for_compensation(
    deps: HostDeps, clock: FakeClock
) -> None:
    submit(deps)
    outcomes = []
    for _ in range(deps.settings.supervisor.SUPERVISOR_MAX_FAILURES):
        clock.advance(60)
        claimed(deps)
        clock.advance(31)
        outcomes.append(recover_once(deps, "a:o-1", clock))
    assert outcomes == [Recovery.REQUEUED, Recovery.REQUEUED, Recovery.GAVE_UP]
    record = deps.states.get("a:o-1").item
    # Compensating, unlocked and ready at once: a starter claims the attempt that undoes the steps.
    assert record.process_state is ProcessState.COMPENSATING
    assert (record.locked_by, record.next_attempt_at) == (None, clock.now())
    assert record.failure_count == 3
    assert record.last_error is not None
    assert (record.last_error.kind, record.last_error.code) == ("timeout", "too_many_failures")
    # The final reply comes from the compensation; none is sent yet.
    replies = [json.loads(m.body)["status"] for m in received(deps.queues.queue("client-a"))]
    assert replies == ["Received"]
    resumed = claimed(deps)
    assert (resumed.process_state, resumed.attempt) == (ProcessState.COMPENSATING, 4)


def test_two_supervisors_recover_a_record_once(deps: HostDeps, clock: FakeClock) -> None:
    submit(deps)
    claimed(deps)
    clock.advance(31)
    seen_by_a = deps.states.get("a:o-1")
    seen_by_b = deps.states.get("a:o-1")
    a = recover(
        deps.states,
        seen_by_a,
        queues=deps.queues,
        clock=clock,
        supervisor=deps.settings.supervisor,
        host_id=deps.settings.queues.HOST_ID,
    )
    b = recover(
        deps.states,
        seen_by_b,
        queues=deps.queues,
        clock=clock,
        supervisor=deps.settings.supervisor,
        host_id=deps.settings.queues.HOST_ID,
    )
    assert (a, b) == (Recovery.REQUEUED, Recovery.LOST_RACE)
    assert deps.states.get("a:o-1").item.failure_count == 1


def test_sweep_pages_through_every_expired_record(deps: HostDeps, clock: FakeClock) -> None:
    settings = deps.settings.replace(**{"SUPERVISOR_PAGE_SIZE": 3})
    for n in range(10):
        submit(deps, f"a:o-{n}")
        claimed(deps, f"a:o-{n}")
    clock.advance(31)
    report = run_sweep(
        states=deps.states,
        queues=deps.queues,
        clock=clock,
        supervisor=settings.supervisor,
        scans=settings.scans,
        host_id=settings.queues.HOST_ID,
    )
    assert sorted(report.requeued) == sorted(f"a:o-{n}" for n in range(10))
    assert report.pages >= 4
    left = deps.states.count(StateQuery(process_states=(ProcessState.PROCESSING,)))
    assert left == 0


def test_backoff_doubles_and_caps() -> None:
    s = Settings.load({}, SUPERVISOR_BACKOFF_INITIAL_S=1.0, SUPERVISOR_BACKOFF_MAX_S=5.0)
    assert [backoff_s(n, s.supervisor) for n in range(1, 6)] == [1.0, 2.0, 4.0, 5.0, 5.0]


def test_resubmitting_a_settled_order_returns_its_outcome(deps: HostDeps) -> None:
    submit(deps)
    claimed(deps)
    finish_order(
        FinishOrderInput(
            order_id="a:o-1",
            instance_id="a:o-1:1",
            workflow_version=ORDER_V1.version,
            outcome=Outcome.PROCESSED,
        ).to_payload(),
        deps,
    )
    received(deps.queues.queue("client-a"))
    submit(deps)  # the client lost the reply and asks again with the same order
    [again] = [json.loads(m.body) for m in received(deps.queues.queue("client-a"))]
    assert (again["orderId"], again["status"]) == ("o-1", "Processed")


def test_a_conflicting_resubmission_tells_the_sender_and_writes_nothing(deps: HostDeps) -> None:
    submit(deps)
    before = deps.states.get("a:o-1")
    with pytest.raises(ConflictingOrder):
        handle_intake_message(
            order_body("a:o-1", amount="1.00"),
            client=TEST_CLIENT,
            orders=deps.orders,
            states=deps.states,
            queues=deps.queues,
            clock=deps.clock,
            steps=deps.settings.steps,
            starter=deps.settings.starter,
            queue_names=deps.settings.queues,
            order_cache=deps.order_cache,
        )
    replies = [json.loads(m.body) for m in received(deps.queues.queue("client-a"))]
    assert [(r["status"], r.get("reason")) for r in replies] == [
        ("Received", None),
        ("Rejected", "ConflictingOrder"),
    ]
    assert deps.states.get("a:o-1").etag == before.etag
    assert str(deps.orders.get("a:o-1").amount) == "1000.50"
    # The refused document never reached the cache: the steps read the stored order.
    assert str(deps.order_cache.get(deps.orders, "a:o-1").amount) == "1000.50"


def test_the_same_amount_written_differently_is_the_same_order(deps: HostDeps) -> None:
    submit(deps)
    handle_intake_message(
        order_body("a:o-1", amount="1000.5"),
        client=TEST_CLIENT,
        orders=deps.orders,
        states=deps.states,
        queues=deps.queues,
        clock=deps.clock,
        steps=deps.settings.steps,
        starter=deps.settings.starter,
        queue_names=deps.settings.queues,
    )
    statuses = [json.loads(m.body)["status"] for m in received(deps.queues.queue("client-a"))]
    assert statuses == ["Received", "Received"]


def _start(
    deps: HostDeps,
    clock: FakeClock,
    instance_id: str,
    step: str = "reserve_inventory",
    *,
    completed: StepResult | None = None,
) -> dict[str, Any]:
    return start_step(
        StartStepInput(
            order_id="a:o-1",
            instance_id=instance_id,
            workflow_version=ORDER_V1.version,
            step=step,
            timeout_s=8,
            completed=completed,
            response_queue="r-q1",
        ).to_payload(),
        deps,
    )


def _metric_points(reader: InMemoryMetricReader, name: str) -> list[tuple[dict[str, Any], float]]:
    """The data points of the ``orderflow`` meter's metric ``name``: (attributes, value) pairs."""
    data = reader.get_metrics_data()
    return [
        (dict(point.attributes or {}), point.value)
        for resource in (data.resource_metrics if data else [])
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == name
        for point in metric.data.data_points
        if isinstance(point, NumberDataPoint)
    ]


def test_an_attempt_that_dies_keeps_its_reserved_calls_spent(deps: HostDeps, clock: FakeClock) -> None:
    settings = deps.settings.replace(**{"RETRY_BUDGET": 10, "AGENT_MAX_CALLS_PER_STEP": 4})
    deps.settings = settings
    submit(deps)
    for attempt in (1, 2):
        claimed(deps)
        started = _start(deps, clock, f"a:o-1:{attempt}")
        assert started["outcome"] == "started"
        request = json.loads(received(deps.queues.queue("agent-inventory"))[-1].body)
        assert request["maxCalls"] == 4  # the agent may make no more than its reservation
        clock.advance(31)
        run_sweep(
            states=deps.states,
            queues=deps.queues,
            clock=clock,
            supervisor=settings.supervisor,
            scans=settings.scans,
            host_id=settings.queues.HOST_ID,
        )  # the attempt died
        clock.advance(60)
    assert deps.states.get("a:o-1").item.retry_budget.spent == 8  # nobody reported: both reservations stay

    claimed(deps)
    third = _start(deps, clock, "a:o-1:3")
    request = json.loads(received(deps.queues.queue("agent-inventory"))[-1].body)
    assert third["outcome"] == "started" and request["maxCalls"] == 2  # what is left of the budget
    clock.advance(31)
    reader = InMemoryMetricReader()
    telemetry.use_meter_provider(MeterProvider(metric_readers=[reader]))
    try:
        run_sweep(
            states=deps.states,
            queues=deps.queues,
            clock=clock,
            supervisor=settings.supervisor,
            scans=settings.scans,
            host_id=settings.queues.HOST_ID,
        )
        gave_up = _metric_points(reader, telemetry.GAVE_UP)
    finally:
        telemetry.use_meter_provider(None)
    # The retry-budget alert counts this give-up by its reason (infra/modules/alerts.bicep).
    assert gave_up == [({"step": "reserve_inventory", "reason": "retry_budget_exhausted"}, 1)]
    record = deps.states.get("a:o-1").item
    assert record.retry_budget.remaining == 0
    # The supervisor stops retrying a spent budget: the next attempt compensates.
    assert record.process_state is ProcessState.COMPENSATING
    assert record.last_error is not None and record.last_error.code == "retry_budget_exhausted"


def test_a_spent_budget_starts_no_step(deps: HostDeps, clock: FakeClock) -> None:
    deps.settings = deps.settings.replace(**{"RETRY_BUDGET": 4, "AGENT_MAX_CALLS_PER_STEP": 4})
    submit(deps)
    claimed(deps)
    assert _start(deps, clock, "a:o-1:1")["outcome"] == "started"
    received(deps.queues.queue("agent-inventory"))
    # The reservation is used up by the first step; the next step gets nothing.
    result = start_step(
        StartStepInput(
            order_id="a:o-1",
            instance_id="a:o-1:1",
            workflow_version=ORDER_V1.version,
            step="charge_payment",
            timeout_s=8,
            completed=StepResult(step="reserve_inventory", result={"reservationId": "r"}, calls=4),
            response_queue="r-q1",
        ).to_payload(),
        deps,
    )
    assert result == {"outcome": "budget_exhausted"}
    record = deps.states.get("a:o-1").item
    assert record.steps["reserve_inventory"].status is StepStatus.COMPLETED  # its completion is kept
    assert record.steps["charge_payment"].status is StepStatus.NOT_STARTED
    assert received(deps.queues.queue("agent-payment")) == []


def test_the_step_deadline_starts_when_start_step_runs_not_when_it_was_scheduled(
    deps: HostDeps, clock: FakeClock
) -> None:
    # The orchestration asked for the step; the activity then waited 3 s in the runtime's work queue.
    # The agent still gets the whole step timeout, and the timer fires where completeBy says.
    submit(deps)
    claimed(deps)  # started reserve_inventory
    clock.advance(3)
    result = start_step(
        StartStepInput(
            order_id="a:o-1",
            instance_id="a:o-1:1",
            workflow_version=ORDER_V1.version,
            step="charge_payment",
            timeout_s=8,
            completed=StepResult(step="reserve_inventory", result={"reservationId": "r-1"}, calls=1),
            response_queue="r-q1",
        ).to_payload(),
        deps,
    )
    complete_by = clock.now() + timedelta(seconds=8)
    assert result["completeBy"] == format_utc(complete_by)
    assert deps.states.get("a:o-1").item.complete_by == complete_by
    (request,) = received(deps.queues.queue("agent-payment"))
    # The agent stops a margin earlier, so its answer can travel back before the timer fires.
    assert json.loads(request.body)["deadline"] == format_utc(complete_by - timedelta(seconds=1))


def _expire_and_requeue(deps: HostDeps, clock: FakeClock) -> None:
    """The attempt in flight dies: its deadline passes, the supervisor re-queues, the backoff passes."""
    settings = deps.settings
    clock.advance(
        settings.steps.STEP_TIMEOUT_S
        + settings.starter.START_LATENCY_S
        + settings.alerts.CLOCK_SKEW_TOLERANCE_S
        + 1
    )
    assert sweep_once(deps, clock).recovered
    clock.advance(60)


def test_a_claim_after_a_recovery_starts_the_next_step_still_to_run(deps: HostDeps, clock: FakeClock) -> None:
    submit(deps)
    claimed(deps)
    _start(deps, clock, "a:o-1:1", "charge_payment", completed=StepResult(step="reserve_inventory", calls=1))
    _expire_and_requeue(deps, clock)  # attempt 1 died in charge_payment

    record = claimed(deps)

    charge = record.steps["charge_payment"]
    assert (charge.status, charge.last_instance, charge.attempts) == (StepStatus.RUNNING, "a:o-1:2", 2)
    assert charge.reserved_calls == 4 and charge.started_at == clock.now()
    assert record.steps["reserve_inventory"].status is StepStatus.COMPLETED
    assert record.complete_by == clock.now() + timedelta(seconds=8 + 5)
    # Attempt 1's reservation of charge_payment stays spent: 1 (reserve) + 4 + 4.
    assert record.retry_budget.spent == 9


def _mark(deps: HostDeps, change: Any) -> None:
    found = deps.states.get("a:o-1")
    record = found.item.model_copy(deep=True)
    change(record)
    deps.states.replace(record, etag=found.etag)


@pytest.mark.parametrize(
    "why",
    ["cancel requested", "no calls left", "moved to its fallback provider", "may pause for review"],
)
def test_a_claim_leaves_a_step_that_needs_a_decision_to_the_orchestration(
    deps: HostDeps, clock: FakeClock, why: str
) -> None:
    if why == "may pause for review":
        deps.settings = deps.settings.replace(**{"REVIEW_AMOUNT_ABOVE": 1.0})
        handle_intake_message(
            order_body("a:o-1"),
            client=TEST_CLIENT,
            orders=deps.orders,
            states=deps.states,
            queues=deps.queues,
            clock=clock,
            steps=deps.settings.steps,
            starter=deps.settings.starter,
            queue_names=deps.settings.queues,
            definition=ORDER_V2,
        )
        # An earlier attempt completed reserve_inventory: the next step may pause for review.
        _mark(deps, lambda r: setattr(r.steps["reserve_inventory"], "status", StepStatus.COMPLETED))
    else:
        submit(deps)
        if why == "cancel requested":
            _mark(deps, lambda r: setattr(r, "cancel_requested_at", clock.now()))
        elif why == "no calls left":
            _mark(deps, lambda r: setattr(r.retry_budget, "spent", r.retry_budget.limit))
        else:
            _mark(deps, lambda r: setattr(r.steps["reserve_inventory"], "fallback", True))
    before = deps.states.get("a:o-1").item

    record = claimed(deps)

    assert record.process_state is ProcessState.PROCESSING
    assert record.complete_by == clock.now() + timedelta(seconds=deps.settings.starter.CLAIM_TIMEOUT_S)
    assert record.retry_budget.spent == before.retry_budget.spent
    assert all(step.last_instance != record.locked_by for step in record.steps.values())


def test_a_start_found_already_made_on_a_cached_copy_is_confirmed_on_a_read(
    deps: HostDeps, clock: FakeClock
) -> None:
    # The claim's version is in this host's cache; the orchestration's first activity runs only after
    # the supervisor has re-queued the order. The stale start must not send its request.
    submit(deps)
    settings = deps.settings
    won = claim(
        deps.states, deps.states.get("a:o-1"), clock, settings.starter, settings.steps, host_id="local"
    )
    deps.cache.put(won)  # type: ignore[arg-type]
    _expire_and_requeue(deps, clock)

    result = _start(deps, clock, "a:o-1:1")

    assert result["outcome"] == "fenced"
    assert received(deps.queues.queue("agent-inventory")) == []
    assert deps.states.get("a:o-1").item.process_state is ProcessState.PENDING


def test_attempt_history_records_each_tenure_and_they_never_overlap(deps: HostDeps, clock: FakeClock) -> None:
    # Attempt 1 is claimed and dies; the supervisor recovers it; attempt 2 is claimed and finishes.
    submit(deps)
    first_claim = clock.now()
    claimed(deps)
    clock.advance(31)  # the claim's completeBy passes
    sweep_once(deps, clock)
    recovered_at = clock.now()
    clock.advance(10)  # past the re-queue backoff
    second_claim = clock.now()
    claimed(deps)
    clock.advance(1)
    finish_order(
        FinishOrderInput(
            order_id="a:o-1",
            instance_id="a:o-1:2",
            workflow_version=ORDER_V1.version,
            outcome=Outcome.PROCESSED,
        ).to_payload(),
        deps,
    )

    history = deps.states.get("a:o-1").item.attempt_history
    assert [(e.attempt, e.instance_id, e.claimed_by, e.outcome) for e in history] == [
        (1, "a:o-1:1", deps.settings.queues.HOST_ID, "recovered"),
        (2, "a:o-1:2", deps.settings.queues.HOST_ID, "Processed"),
    ]
    assert (history[0].claimed_at, history[0].ended_at) == (first_claim, recovered_at)
    assert (history[1].claimed_at, history[1].ended_at) == (second_claim, clock.now())
    # The supervisor keeps the deadline it acted on (the claim's completeBy: the first step's deadline);
    # a finished tenure has none.
    first_deadline = deps.settings.steps.STEP_TIMEOUT_S + deps.settings.starter.START_LATENCY_S
    assert history[0].expired_complete_by == first_claim + timedelta(seconds=first_deadline)
    assert history[1].expired_complete_by is None


def test_attempt_history_is_bounded(deps: HostDeps, clock: FakeClock) -> None:
    submit(deps)
    record = deps.states.get("a:o-1").item
    for attempt in range(1, 40):
        record.attempt = attempt
        record.locked_by = f"a:o-1:{attempt}"
        record.begin_attempt("h", clock.now())
        record.end_attempt(clock.now(), "recovered")
    assert [e.attempt for e in record.attempt_history] == list(range(24, 40))


def test_a_fallback_start_switches_provider_key_and_reservation(deps: HostDeps, clock: FakeClock) -> None:
    from orderflow.workflows import ORDER_V3  # noqa: PLC0415 (only this test runs order-v3)

    submit(deps)
    claimed(deps)

    def start_ship(*, fallback: bool) -> dict[str, Any]:
        return start_step(
            StartStepInput(
                order_id="a:o-1",
                instance_id="a:o-1:1",
                workflow_version=ORDER_V3.version,
                step="create_shipment",
                timeout_s=8,
                response_queue="r-q1",
                fallback=fallback,
            ).to_payload(),
            deps,
        )

    start_ship(fallback=False)
    spent_by_primary = deps.states.get("a:o-1").item.retry_budget.spent
    # The carrier refused; the orchestration tries the courier.
    assert start_ship(fallback=True)["outcome"] == "started"

    record = deps.states.get("a:o-1").item
    step = record.steps["create_shipment"]
    assert (step.fallback, step.idempotency_key, step.attempts) == (True, "a:o-1:create_shipment:fallback", 2)
    assert record.retry_budget.spent == spent_by_primary + deps.settings.steps.AGENT_MAX_CALLS_PER_STEP
    [request] = received(deps.queues.queue("agent-courier"))
    body = json.loads(request.body)
    assert (request.message_id, body["step"], body["idempotencyKey"]) == (
        "a:o-1:1:create_shipment:fallback",
        "create_shipment:fallback",
        "a:o-1:create_shipment:fallback",
    )
    assert body["payload"]["carrier"] == "MAIL"
    etag = deps.states.get("a:o-1").etag
    assert start_ship(fallback=True)["outcome"] == "started"  # a re-run writes nothing
    assert deps.states.get("a:o-1").etag == etag


def test_a_new_attempt_sends_a_step_left_on_its_fallback_to_the_fallback_provider(
    deps: HostDeps, clock: FakeClock
) -> None:
    # The carrier refused the shipment and attempt 1 moved it to the courier (its key ends in
    # ":fallback"); the attempt then timed out. Attempt 2 starts the shipment as every attempt does, on
    # the primary, but the record keeps it on the courier's key. Its request went to the carrier under
    # the courier's key with the carrier's payload: a new shipment the carrier never saw the key of, and
    # one no compensation would undo (the undo goes to the provider the record names).
    from orderflow.workflows import ORDER_V3  # noqa: PLC0415 (only these tests run order-v3)

    submit(deps)
    claimed(deps)

    def start(instance: str, step: str, done: str | None = None, *, fallback: bool = False) -> dict[str, Any]:
        completed = StepResult(step=done, result={"ref": done}, calls=1) if done else None
        return start_step(
            StartStepInput(
                order_id="a:o-1",
                instance_id=instance,
                workflow_version=ORDER_V3.version,
                step=step,
                timeout_s=8,
                completed=completed,
                response_queue="r-q1",
                fallback=fallback,
            ).to_payload(),
            deps,
        )

    start("a:o-1:1", "charge_payment", "reserve_inventory")
    start("a:o-1:1", "create_shipment", "charge_payment")
    assert start("a:o-1:1", "create_shipment", fallback=True)["outcome"] == "started"
    received(deps.queues.queue("agent-shipping"))  # attempt 1's requests: the carrier's, the courier's
    received(deps.queues.queue("agent-courier"))
    clock.advance(60)
    assert recover_once(deps, "a:o-1") is Recovery.REQUEUED
    clock.advance(60)
    second = claimed(deps)
    assert (second.locked_by, second.steps["create_shipment"].fallback) == ("a:o-1:2", True)

    started = start("a:o-1:2", "create_shipment")

    assert started["outcome"] == "started"
    assert started["fallback"] is True  # the orchestration waits for the courier's answer
    assert received(deps.queues.queue("agent-shipping")) == []
    [request] = received(deps.queues.queue("agent-courier"))
    body = json.loads(request.body)
    assert (body["step"], body["idempotencyKey"], body["payload"]["carrier"]) == (
        "create_shipment:fallback",
        "a:o-1:create_shipment:fallback",
        "MAIL",
    )
