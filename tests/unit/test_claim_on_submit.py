"""The submission's fast path (intake.claim_on_submit): the order just recorded is claimed by the starter's
conditional write and its attempt started at once; duplicates, a starter that claims first and a start
that fails after the claim each leave exactly one attempt, or one the supervisor recovers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from devhost.handlers import submission_handler
from devhost.loops import Wakeups
from intake.submission import IntakeOutcome, IntakeResult
from orchestrators.starter import StarterReport, run_starter_pass
from orderflow import telemetry
from orderflow.attempts import AttemptStarts, first_requests_for
from orderflow.clock import FakeClock
from orderflow.errors import InvalidMessage, TransientError
from orderflow.queues.base import ReceivedMessage
from orderflow.records import ProcessState, StateRecord, StepStatus
from orderflow.stores.base import StateStore, Versioned
from orderflow.workflows import CURRENT_WORKFLOW
from supervisor.recovery import Recovery
from tests.host_deps import HostDeps
from tests.unit.fakes import (
    TEST_CLIENT,
    RecordingClient,
    memory_deps,
    order_body,
    received,
    recover_once,
    take_in,
)

pytestmark = pytest.mark.unit

KEY = "a:o-1"
RESPONSES = "agent-responses-h1"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def deps(clock: FakeClock) -> HostDeps:
    return memory_deps(clock, HOST_ID="h1", CLAIM_TIMEOUT_S=30, SUPERVISOR_BACKOFF_INITIAL_S=2)


def starts(deps: HostDeps, client: Any) -> AttemptStarts:
    """What a host hands the submission: its client, its response queue, the first request's means."""
    return AttemptStarts(
        client=client,
        response_queue=RESPONSES,
        on_claimed=None,
        first_requests=first_requests_for(deps, deps.settings.starter),
    )


def submit(deps: HostDeps, client: Any, **changes: Any) -> IntakeResult:
    message = ReceivedMessage(body=order_body(KEY, **changes), message_id="m-1", delivery_count=1)
    result: IntakeResult = take_in(deps, message, claim_on_submit=starts(deps, client))
    return result


def sweep(deps: HostDeps, client: RecordingClient, room: Room | None = None) -> StarterReport:
    return run_starter_pass(
        states=deps.states,
        client=client,
        clock=deps.clock,
        starter=deps.settings.starter,
        steps=deps.settings.steps,
        scans=deps.settings.scans,
        queue_names=deps.settings.queues,
        response_queue=RESPONSES,
        capacity=8,
        first_requests=first_requests_for(deps, deps.settings.starter),
        room=room,
    )


class Room:
    """A process's room shared with its submissions: ``free`` places, each take and give-back counted,
    and the takes whose claim has not yet said whether it started anything (``on_the_way``)."""

    def __init__(self, free: int) -> None:
        self.free = free
        self.given_back = 0
        self.on_the_way = 0

    def take(self) -> bool:
        if self.free == 0:
            return False
        self.free -= 1
        self.on_the_way += 1
        return True

    def give_back(self) -> None:
        self.free += 1
        self.given_back += 1
        self.on_the_way -= 1

    def started(self) -> None:
        self.on_the_way -= 1


def record_unclaimed(deps: HostDeps, key: str) -> None:
    """``key`` recorded ``Pending`` and never claimed (its process died before its claim)."""
    take_in(deps, ReceivedMessage(body=order_body(key), message_id=f"m-{key}", delivery_count=1))


def first_agent_queue(deps: HostDeps) -> str:
    return deps.settings.queues.agent_queue(CURRENT_WORKFLOW.steps[0].agent)


def test_a_new_order_is_claimed_and_started_by_its_submission(deps: HostDeps) -> None:
    client = RecordingClient()

    result = submit(deps, client)

    assert (result.outcome, result.started) == (IntakeOutcome.ACCEPTED, True)
    record = deps.states.get(KEY).item
    assert (record.process_state, record.locked_by, record.attempt) == (ProcessState.PROCESSING, "a:o-1:1", 1)
    first = CURRENT_WORKFLOW.steps[0].name
    assert record.steps[first].status is StepStatus.RUNNING
    assert client.started == ["a:o-1:1"]
    assert client.payloads["a:o-1:1"]["responseQueue"] == RESPONSES
    assert client.payloads["a:o-1:1"]["firstStep"]["step"] == first
    # The first step's request is on its agent's queue, answered on this host's response queue.
    [request] = received(deps.queues.queue(first_agent_queue(deps)))
    assert json.loads(request.body)["instanceId"] == "a:o-1:1"
    # The client heard of its order.
    [reply] = received(deps.queues.queue("client-a"))
    assert json.loads(reply.body)["status"] == "Received"
    # Nothing is left for the sweeper.
    assert sweep(deps, client).claimed == []


def test_a_duplicate_submission_claims_and_starts_nothing(deps: HostDeps) -> None:
    client = RecordingClient()
    submit(deps, client)
    before = deps.states.get(KEY)

    again = submit(deps, client)

    assert (again.outcome, again.started) == (IntakeOutcome.DUPLICATE, False)
    assert client.started == ["a:o-1:1"]
    assert deps.states.get(KEY) == before


def test_a_redelivery_after_a_death_between_create_and_claim_leaves_the_order_to_the_sweeper(
    deps: HostDeps,
) -> None:
    message = ReceivedMessage(body=order_body(KEY), message_id="m-1", delivery_count=1)
    take_in(deps, message)  # recorded, never claimed: the process died before its claim
    client = RecordingClient()

    again = submit(deps, client)

    assert (again.outcome, again.started) == (IntakeOutcome.DUPLICATE, False)
    assert deps.states.get(KEY).item.process_state is ProcessState.PENDING
    assert client.started == []
    assert sweep(deps, client).claimed == [KEY]
    assert client.started == ["a:o-1:1"]


def on_states(deps: HostDeps, states: Any) -> HostDeps:
    """``deps`` with its state store replaced by ``states`` (a wrapper that races something in)."""
    return HostDeps(
        states=states, orders=deps.orders, queues=deps.queues, clock=deps.clock, settings=deps.settings
    )


class StarterFirst:
    """A state store on which the starter's sweep runs right after each create, before the submission's
    own claim: the starter wins the race."""

    def __init__(self, inner: StateStore, sweep_now: Any) -> None:
        self.inner = inner
        self.sweep_now = sweep_now

    def create(self, record: StateRecord) -> Versioned[StateRecord]:
        created = self.inner.create(record)
        self.sweep_now()
        return created

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_when_the_starter_claims_first_the_submission_does_nothing(deps: HostDeps) -> None:
    client = RecordingClient()
    reports: list[StarterReport] = []
    raced = on_states(deps, StarterFirst(deps.states, lambda: reports.append(sweep(deps, client))))

    with telemetry.recording() as events:
        result = submit(raced, client)

    assert [r.claimed for r in reports] == [[KEY]]
    assert (result.outcome, result.started) == (IntakeOutcome.ACCEPTED, False)
    assert client.started == ["a:o-1:1"]  # once, by the starter
    assert events["claim"] == 1
    record = deps.states.get(KEY).item
    assert (record.locked_by, record.attempt) == ("a:o-1:1", 1)
    assert len(received(deps.queues.queue(first_agent_queue(deps)))) == 1


class FailingStart(RecordingClient):
    """An orchestration client whose start fails, as a durable client's call may after the claim."""

    def start(self, name: str, instance_id: str, payload: dict[str, Any]) -> bool:
        raise TransientError("the task hub is unavailable")


def test_a_start_that_fails_after_the_claim_is_recovered_by_the_supervisor(
    deps: HostDeps, clock: FakeClock
) -> None:
    with telemetry.recording() as events:
        result = submit(deps, FailingStart())

    # The message is done with: the order is on record and claimed.
    assert (result.outcome, result.started) == (IntakeOutcome.ACCEPTED, False)
    assert events["claim.on_submit_failed"] == 1
    claimed = deps.states.get(KEY).item
    assert (claimed.process_state, claimed.locked_by) == (ProcessState.PROCESSING, "a:o-1:1")
    assert claimed.complete_by is not None
    # Before its completeBy the attempt is nobody's to recover, or to claim again.
    assert recover_once(deps, KEY) is Recovery.SKIPPED
    # After it, the supervisor re-queues the order, as after a starter that died between claim and start.
    clock.advance((claimed.complete_by - clock.now()).total_seconds() + 1)
    assert recover_once(deps, KEY) is Recovery.REQUEUED
    requeued = deps.states.get(KEY).item
    assert (requeued.process_state, requeued.locked_by, requeued.failure_count) == (
        ProcessState.PENDING,
        None,
        1,
    )
    clock.advance(3)  # past the backoff
    client = RecordingClient()
    assert sweep(deps, client).claimed == [KEY]
    assert client.started == ["a:o-1:2"]


def test_with_claim_on_submit_off_the_order_waits_for_the_starter(clock: FakeClock) -> None:
    deps = memory_deps(clock, HOST_ID="h1", CLAIM_ON_SUBMIT="false")
    client = RecordingClient()

    result = submit(deps, client)

    assert (result.outcome, result.started) == (IntakeOutcome.ACCEPTED, False)
    assert deps.states.get(KEY).item.process_state is ProcessState.PENDING
    assert client.started == []
    assert sweep(deps, client).claimed == [KEY]


def test_a_sweep_takes_each_record_s_room_as_it_claims_and_stops_when_the_process_is_full(
    deps: HostDeps,
) -> None:
    record_unclaimed(deps, KEY)
    record_unclaimed(deps, "a:o-2")
    client, room = RecordingClient(), Room(free=1)

    report = sweep(deps, client, room)

    assert (len(report.claimed), report.examined, room.free, room.on_the_way) == (1, 1, 0, 0)
    assert len(client.started) == 1
    # The other order waits Pending for room, not claimed past the limit.
    assert sorted(deps.states.get(key).item.process_state for key in (KEY, "a:o-2")) == sorted(
        [ProcessState.PENDING, ProcessState.PROCESSING]
    )


class ClaimedAfterTheQuery:
    """A state store whose query returns its page, then lets another claimant (``claim_now``) claim
    the records on it before the sweep that asked gets to them."""

    def __init__(self, inner: StateStore, claim_now: Any) -> None:
        self.inner = inner
        self.claim_now = claim_now

    def query(self, *args: Any, **kwargs: Any) -> Any:
        page = self.inner.query(*args, **kwargs)
        self.claim_now()
        return page

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_sweep_gives_back_the_room_of_a_claim_it_lost(deps: HostDeps) -> None:
    record_unclaimed(deps, KEY)
    client, room = RecordingClient(), Room(free=4)
    other: list[StarterReport] = []
    raced = on_states(deps, ClaimedAfterTheQuery(deps.states, lambda: other.append(sweep(deps, client))))

    report = sweep(raced, client, room)

    assert [r.claimed for r in other] == [[KEY]]
    assert (report.claimed, report.lost_races) == ([], 1)
    assert (room.free, room.given_back, room.on_the_way) == (4, 1, 0)
    assert client.started == ["a:o-1:1"]  # once, by the claimant that won


def test_a_sweep_whose_start_fails_still_says_its_claim_may_have_started(deps: HostDeps) -> None:
    # A take left on its way would hold its room for as long as the process runs.
    record_unclaimed(deps, KEY)
    room = Room(free=4)

    with pytest.raises(TransientError):
        sweep(deps, FailingStart(), room)

    assert (room.free, room.given_back, room.on_the_way) == (3, 0, 0)  # counted until the next read


def test_the_submission_handler_ends_its_room_once_its_message_is_handled(deps: HostDeps) -> None:
    client, ended = RecordingClient(), []

    @contextmanager
    def claim_on_submit() -> Iterator[AttemptStarts | None]:
        try:
            yield starts(deps, client)
        finally:
            ended.append(True)

    handle = submission_handler(
        deps,
        TEST_CLIENT,
        deps.settings,
        admission=None,
        order_cache=None,
        wakeups=Wakeups(),
        claim_on_submit=claim_on_submit,
    )
    handle(ReceivedMessage(body=order_body(KEY), message_id="m-1", delivery_count=1))
    assert (client.started, ended) == (["a:o-1:1"], [True])
    with pytest.raises(InvalidMessage):
        handle(ReceivedMessage(body="not an order", message_id="m-2", delivery_count=1))
    assert ended == [True, True]
