"""Admission control at submission: ceilings, what a refusal writes and sends, cached counts, failures.

Stores and queues are the in-memory adapters; time is a :class:`FakeClock` that also drives admission
control's monotonic clock, so a refresh period passes when a test advances it, never by sleeping.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from bench.counting import OperationCounts
from bench.counting.stores import CountingOrderStore, CountingStateStore
from devhost.settings import load_settings
from intake.admission import (
    ADMITTED,
    IN_FLIGHT_QUERY,
    AdmissionControl,
    AdmissionReason,
    retry_after_s,
)
from intake.submission import IntakeOutcome, IntakeResult, handle_intake_message, order_document
from orderflow import telemetry
from orderflow.clock import FakeClock, SystemClock
from orderflow.errors import ConflictingOrder, InvalidMessage, NotFound, TransientError
from orderflow.messages import OrderStatus, StatusReply, SubmitOrder, parse_message, reply_message_id
from orderflow.queues.memory import InMemoryQueueFactory
from orderflow.records import ProcessState
from orderflow.settings import Settings
from orderflow.stores.base import StateQuery
from orderflow.stores.memory import InMemoryOrderStore, InMemoryStateStore
from tests.dev_host import dev_host
from tests.host_deps import HostDeps
from tests.unit.fakes import client_for, order_body, received

pytestmark = pytest.mark.unit

REFRESH_S = 5.0
REPLY_QUEUE = "client-a"


class FlakyStateStore(InMemoryStateStore):
    """An in-memory state store whose :meth:`count` can be made to fail or to block."""

    def __init__(self) -> None:
        super().__init__()
        self.count_error: Exception | None = None
        self.count_gate: threading.Event | None = None
        self.count_calls = 0

    def count(self, query: StateQuery) -> int:
        self.count_calls += 1
        if self.count_gate is not None:
            assert self.count_gate.wait(5.0)
        if self.count_error is not None:
            raise self.count_error
        return super().count(query)


@dataclass
class System:
    """Stores, queues and a clock, with helpers to submit with or without admission control."""

    states: FlakyStateStore = field(default_factory=FlakyStateStore)
    orders: InMemoryOrderStore = field(default_factory=InMemoryOrderStore)
    queues: InMemoryQueueFactory = field(default_factory=InMemoryQueueFactory)
    clock: FakeClock = field(default_factory=FakeClock)
    settings: Settings = field(default_factory=lambda: Settings.load({}))
    state_ops: OperationCounts = field(default_factory=OperationCounts)
    order_ops: OperationCounts = field(default_factory=OperationCounts)
    """What the roles asked of each store, counted by the benchmark's wrappers around the ports."""

    @property
    def counted_states(self) -> CountingStateStore:
        return CountingStateStore(self.states, counts=self.state_ops)

    @property
    def counted_orders(self) -> CountingOrderStore:
        return CountingOrderStore(self.orders, counts=self.order_ops)

    def state_queries(self) -> int:
        """Query pages and counts asked of the state store."""
        return self.state_ops.total("query_page") + self.state_ops.total("count")

    def monotonic(self) -> float:
        return self.clock.now().timestamp()

    def admission(self, *, max_in_flight: int = 3, max_backlog: int = 0, **kwargs: Any) -> AdmissionControl:
        return AdmissionControl(
            states=self.counted_states,
            backlog=self.queues.queue(client_for(REPLY_QUEUE).inbound_queue),
            max_in_flight=max_in_flight,
            max_backlog=max_backlog,
            refresh_s=kwargs.pop("refresh_s", REFRESH_S),
            monotonic=self.monotonic,
            **kwargs,
        )

    def submit(
        self, order_id: str, admission: AdmissionControl | None = None, *, body: str | None = None
    ) -> IntakeResult:
        return handle_intake_message(
            order_body(order_id, reply_to=REPLY_QUEUE) if body is None else body,
            client=client_for(REPLY_QUEUE),
            orders=self.counted_orders,
            states=self.counted_states,
            queues=self.queues,
            clock=self.clock,
            steps=self.settings.steps,
            starter=self.settings.starter,
            queue_names=self.settings.queues,
            admission=admission,
        )

    def fill(self, count: int, prefix: str = "old") -> None:
        """``count`` orders in flight (Pending), submitted without admission control; replies drained."""
        for n in range(count):
            self.submit(f"{prefix}-{n}")
        self.replies()

    def in_flight(self) -> int:
        return self.counted_states.count(IN_FLIGHT_QUERY)

    def replies(self) -> list[tuple[str, StatusReply]]:
        return [
            (message.message_id, parse_message(StatusReply, message.body))
            for message in received(self.queues.queue(REPLY_QUEUE))
        ]


@pytest.fixture
def system() -> System:
    return System()


# --- ceilings ---------------------------------------------------------------------------------------


def test_under_the_ceiling_orders_are_admitted(system: System) -> None:
    admission = system.admission(max_in_flight=3)
    results = [system.submit(f"o-{n}", admission) for n in range(3)]
    assert {r.outcome for r in results} == {IntakeOutcome.ACCEPTED}
    assert system.in_flight() == 3
    assert [reply.status for _, reply in system.replies()] == [OrderStatus.RECEIVED] * 3


def test_at_the_in_flight_ceiling_a_new_order_is_rejected_and_nothing_is_written(system: System) -> None:
    system.fill(3)
    admission = system.admission(max_in_flight=3)
    state_creates, order_creates = system.state_ops.total("create"), system.order_ops.total("create")
    with telemetry.recording() as counted:
        result = system.submit("new", admission)

    assert result == IntakeResult("a:new", IntakeOutcome.REJECTED, "InFlightCeiling")
    assert (system.state_ops.total("create"), system.order_ops.total("create")) == (
        state_creates,
        order_creates,
    )
    with pytest.raises(NotFound):
        system.orders.get("a:new")
    with pytest.raises(NotFound):
        system.states.get("a:new")
    [(message_id, reply)] = system.replies()
    assert message_id == reply_message_id("new", OrderStatus.REJECTED)
    assert reply.order_id == "new"
    assert reply.status is OrderStatus.REJECTED
    assert reply.reason == "InFlightCeiling"
    assert reply.detail == "3 orders in flight (Pending + Processing); the ceiling is 3"
    assert reply.retry_after_s == retry_after_s("a:new", REFRESH_S)
    assert REFRESH_S <= reply.retry_after_s < 2 * REFRESH_S
    assert counted["order.rejected"] == 1


def test_a_new_order_pays_no_extra_read_when_admitted(system: System) -> None:
    admission = system.admission(max_in_flight=3)
    system.submit("a:o-1", admission)
    # Two creates, as without admission control; no point read of either store.
    assert (system.order_ops.total("create"), system.order_ops.total("read")) == (1, 0)
    assert (system.state_ops.total("create"), system.state_ops.total("read")) == (1, 0)


def test_a_rejected_order_pays_one_point_read_and_writes_nothing(system: System) -> None:
    system.fill(1)
    admission = system.admission(max_in_flight=1)
    reads, creates = system.order_ops.total("read"), system.order_ops.total("create")
    assert system.submit("new", admission).outcome is IntakeOutcome.REJECTED
    assert system.order_ops.total("read") == reads + 1
    assert system.order_ops.total("create") == creates


def test_redelivery_of_an_accepted_order_is_acknowledged_when_full(system: System) -> None:
    admission = system.admission(max_in_flight=1)
    assert system.submit("a:o-1", admission).outcome is IntakeOutcome.ACCEPTED
    assert system.submit("a:o-2", admission).outcome is IntakeOutcome.REJECTED  # full now

    again = system.submit("a:o-1", admission)

    assert again.outcome is IntakeOutcome.DUPLICATE
    replies = system.replies()
    assert [(mid, reply.status) for mid, reply in replies] == [
        ("o-1:Received", OrderStatus.RECEIVED),
        ("o-2:Rejected", OrderStatus.REJECTED),
        ("o-1:Received", OrderStatus.RECEIVED),
    ]
    assert system.in_flight() == 1


def test_an_order_half_written_before_a_crash_is_finished_when_full(system: System) -> None:
    # The order document was written, then the process died before the state record was.
    order = parse_message(SubmitOrder, order_body("a:o-1", reply_to=REPLY_QUEUE))
    system.orders.create(order_document(order, system.clock, client_for(REPLY_QUEUE)))
    system.fill(1)
    admission = system.admission(max_in_flight=1)

    result = system.submit("a:o-1", admission)

    assert result.outcome is IntakeOutcome.DUPLICATE
    assert system.states.get("a:o-1").item.process_state is ProcessState.PENDING
    assert [reply.status for _, reply in system.replies()] == [OrderStatus.RECEIVED]


def test_a_conflicting_resubmission_when_full_is_still_a_conflict(system: System) -> None:
    admission = system.admission(max_in_flight=1)
    system.submit("a:o-1", admission)
    system.replies()
    with pytest.raises(ConflictingOrder):
        system.submit("a:o-1", admission, body=order_body("a:o-1", reply_to=REPLY_QUEUE, amount="1.00"))
    [(message_id, reply)] = system.replies()  # the sender learns why, as for any conflict
    assert (message_id, reply.status.value, reply.reason) == ("o-1:Rejected", "Rejected", "ConflictingOrder")


def test_invalid_input_when_full_is_still_invalid(system: System) -> None:
    system.fill(1)
    admission = system.admission(max_in_flight=1)
    with pytest.raises(InvalidMessage) as raised:
        system.submit("bad", admission, body=order_body("bad", reply_to=REPLY_QUEUE, currency="XXX"))
    assert raised.value.reason == "InvalidField"
    assert system.replies() == []


def test_backlog_ceiling_rejects_while_the_submission_queue_is_long(system: System) -> None:
    orders_queue = system.queues.queue(client_for(REPLY_QUEUE).inbound_queue)
    for n in range(6):
        orders_queue.send(order_body(f"q-{n}"), message_id=f"q-{n}:submit")
    admission = system.admission(max_in_flight=100, max_backlog=5)

    result = system.submit("new", admission)

    assert result.outcome is IntakeOutcome.REJECTED
    [(_, reply)] = system.replies()
    assert reply.reason == "BacklogCeiling"
    assert reply.detail == "about 6 orders wait in the inbound queue; the ceiling is 5"
    assert reply.retry_after_s == retry_after_s("a:new", REFRESH_S)
    with pytest.raises(NotFound):
        system.orders.get("a:new")

    # At the ceiling (the message being handled is part of the backlog) orders are admitted again.
    [message] = orders_queue.receive(max_messages=1)
    orders_queue.complete(message)
    system.clock.advance(REFRESH_S)
    assert system.submit("new", admission).outcome is IntakeOutcome.ACCEPTED


def test_a_ceiling_of_zero_disables_its_check(system: System) -> None:
    system.fill(5)
    orders_queue = system.queues.queue(client_for(REPLY_QUEUE).inbound_queue)
    for n in range(5):
        orders_queue.send(order_body(f"q-{n}"), message_id=f"q-{n}:submit")
    pages = system.state_queries()
    admission = system.admission(max_in_flight=0, max_backlog=0)
    assert all(admission.admit(f"n-{n}") == ADMITTED for n in range(20))
    assert system.state_queries() == pages  # no count was even read


# --- cached counts ------------------------------------------------------------------------------------


def test_counts_are_read_once_per_refresh_period_not_per_message(system: System) -> None:
    admission = system.admission(max_in_flight=1000)
    pages = system.state_queries()
    for n in range(20):
        system.submit(f"a-{n}", admission)
    assert system.state_queries() == pages + 1
    system.clock.advance(REFRESH_S - 0.1)
    system.submit("b-0", admission)
    assert system.state_queries() == pages + 1
    system.clock.advance(0.1)
    for n in range(1, 20):
        system.submit(f"b-{n}", admission)
    assert system.state_queries() == pages + 2


def test_a_burst_within_one_period_stops_at_the_ceiling(system: System) -> None:
    system.fill(4)
    admission = system.admission(max_in_flight=10)
    outcomes = [system.submit(f"burst-{n}", admission).outcome for n in range(30)]
    # The cached count (4) plus the orders admitted locally since: exactly 6 more fit.
    assert outcomes.count(IntakeOutcome.ACCEPTED) == 6
    assert outcomes.count(IntakeOutcome.REJECTED) == 24
    assert system.in_flight() == 10
    assert system.state_queries() == 1 + 1  # one refresh, plus this test's own count


def test_processes_overshoot_by_at_most_what_the_others_admit_in_one_period(system: System) -> None:
    # Two processes share the store; each admits against its own snapshot (the documented bound).
    first, second = system.admission(max_in_flight=10), system.admission(max_in_flight=10)
    admitted_first = sum(first.admit(f"a-{n}").admitted for n in range(15))
    for n in range(10):
        system.submit(f"a-{n}")  # the first process writes what it admitted
    admitted_second = sum(second.admit(f"b-{n}").admitted for n in range(15))
    assert (admitted_first, admitted_second) == (10, 0)  # the second read its count after the writes

    third = system.admission(max_in_flight=30)
    fourth = system.admission(max_in_flight=30)
    assert third.admit("warm").admitted and fourth.admit("warm").admitted  # both read 10 now
    admitted = sum(third.admit(f"c-{n}").admitted for n in range(40))
    admitted += sum(fourth.admit(f"d-{n}").admitted for n in range(40))
    # Each filled the room it saw (19 after its warm-up): 10 + 2 × 20 = 50 in flight, 20 over the
    # ceiling of 30, which is exactly what the other process admitted within the period.
    assert admitted == 2 * 19


def test_orders_leaving_flight_make_room_at_the_next_refresh(system: System) -> None:
    system.fill(2)
    admission = system.admission(max_in_flight=2)
    assert system.submit("new", admission).outcome is IntakeOutcome.REJECTED
    found = system.states.get("a:old-0")
    system.states.replace(
        found.item.model_copy(update={"process_state": ProcessState.CANCELLED}), etag=found.etag
    )
    assert system.submit("new", admission).outcome is IntakeOutcome.REJECTED  # not seen yet
    system.clock.advance(REFRESH_S)
    assert system.submit("new", admission).outcome is IntakeOutcome.ACCEPTED


def test_retry_after_is_one_to_two_periods_and_stable_per_order() -> None:
    values = {retry_after_s(f"o-{n}", REFRESH_S) for n in range(200)}
    assert all(REFRESH_S <= value < 2 * REFRESH_S for value in values)
    assert len(values) > 20  # spread out, not one instant for every rejected client
    assert retry_after_s("a:o-7", REFRESH_S) == retry_after_s("a:o-7", REFRESH_S)
    assert 1.0 <= retry_after_s("a:o-7", 0.0) < 2.0  # never "retry now"


# --- counts that cannot be read -----------------------------------------------------------------------


def test_an_unreadable_in_flight_count_fails_closed(system: System) -> None:
    system.states.count_error = TransientError("cosmos unavailable")
    admission = system.admission(max_in_flight=100)

    result = system.submit("new", admission)

    assert result == IntakeResult("a:new", IntakeOutcome.REJECTED, "InFlightCountUnavailable")
    [(_, reply)] = system.replies()
    assert reply.reason == "InFlightCountUnavailable"
    assert reply.retry_after_s == retry_after_s("a:new", REFRESH_S)
    with pytest.raises(NotFound):
        system.orders.get("a:new")
    # A failing store is asked once per refresh period, not once per message.
    for n in range(5):
        system.submit(f"more-{n}", admission)
    assert system.states.count_calls == 1
    system.states.count_error = None
    system.clock.advance(REFRESH_S)
    assert system.submit("new", admission).outcome is IntakeOutcome.ACCEPTED
    assert system.states.count_calls == 2


def test_a_failed_refresh_keeps_the_last_good_count_for_a_while(system: System) -> None:
    system.fill(1)
    admission = system.admission(max_in_flight=3)
    assert admission.admit("a").admitted  # read 1, plus 1 local
    system.states.count_error = TransientError("throttled")
    system.clock.advance(REFRESH_S)
    assert admission.admit("b").admitted  # refresh failed: 1 + 2 local, still known
    assert admission.admit("c").reason is AdmissionReason.IN_FLIGHT_CEILING  # and still enforced
    system.clock.advance(2 * REFRESH_S)  # three periods after the last good read
    assert admission.admit("d").reason is AdmissionReason.IN_FLIGHT_CEILING
    system.clock.advance(0.1)
    assert admission.admit("e").reason is AdmissionReason.IN_FLIGHT_COUNT_UNAVAILABLE
    assert system.states.count_calls == 3  # first read + refreshes at 5 s and 15 s


def test_an_unreadable_backlog_fails_open(system: System) -> None:
    system.fill(2)

    class BrokenQueue:
        name = "orders"

        def approximate_count(self) -> int:
            raise TransientError("queue properties unavailable")

    admission = AdmissionControl(
        states=system.states,
        backlog=BrokenQueue(),
        max_in_flight=3,
        max_backlog=5,
        refresh_s=REFRESH_S,
        monotonic=system.monotonic,
    )
    assert admission.admit("a") == ADMITTED
    assert admission.admit("b").reason is AdmissionReason.IN_FLIGHT_CEILING  # in-flight still holds


def test_an_unexpected_error_propagates_without_wedging_the_refresh(system: System) -> None:
    system.states.count_error = RuntimeError("bug")
    admission = system.admission(max_in_flight=3)
    with pytest.raises(RuntimeError):
        admission.admit("a")
    system.states.count_error = None
    system.clock.advance(REFRESH_S)
    assert admission.admit("a") == ADMITTED


# --- threads --------------------------------------------------------------------------------------------


def run_threads(count: int, target: Callable[[int], None]) -> None:
    barrier = threading.Barrier(count)
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            barrier.wait()
            target(index)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert not errors, errors


def test_many_threads_admitting_at_once_never_pass_the_ceiling(system: System) -> None:
    admission = system.admission(max_in_flight=50)
    outcomes: list[IntakeOutcome] = []

    def submit_many(index: int) -> None:
        for n in range(15):
            outcomes.append(system.submit(f"t{index}-{n}", admission).outcome)

    run_threads(16, submit_many)
    assert outcomes.count(IntakeOutcome.ACCEPTED) == 50
    assert system.in_flight() == 50


def test_refreshing_while_threads_admit_stays_within_the_documented_slack(system: System) -> None:
    # A refresh on every message: an order admitted but not yet written when a count is read is
    # missed by it, at most one per concurrent handler.
    threads = 8
    admission = system.admission(max_in_flight=40, refresh_s=0.0)

    def submit_many(index: int) -> None:
        for n in range(20):
            system.submit(f"t{index}-{n}", admission)
            system.clock.advance(0.001)

    run_threads(threads, submit_many)
    assert 40 <= system.in_flight() <= 40 + threads


def test_threads_wait_for_the_first_read_instead_of_all_querying(system: System) -> None:
    gate = threading.Event()
    system.states.count_gate = gate
    admission = system.admission(max_in_flight=5)
    decisions: list[bool] = []

    def admit(index: int) -> None:
        if index == 0:
            threading.Timer(0.05, gate.set).start()
        decisions.append(admission.admit(f"o-{index}").admitted)

    run_threads(8, admit)
    assert system.states.count_calls == 1
    assert sorted(decisions) == [False] * 3 + [True] * 5


# --- wiring -----------------------------------------------------------------------------------------------


def test_settings_configure_admission_control() -> None:
    settings = Settings.load({}, MAX_IN_FLIGHT_ORDERS=7, MAX_SUBMISSION_BACKLOG=0, ADMISSION_REFRESH_S=2.5)
    queues = InMemoryQueueFactory()
    admission = AdmissionControl.from_clients(settings.clients, states=InMemoryStateStore(), queues=queues)
    assert (admission.max_in_flight, admission.max_backlog, admission.refresh_s) == (7, 0, 2.5)
    assert repr(admission) == "AdmissionControl(max_in_flight=7, max_backlog=0, refresh_s=2.5)"
    assert repr(queues) == "InMemoryQueueFactory(queues=0)"  # backlog check off: no queue client
    defaults = Settings.load({})
    assert (defaults.clients.MAX_IN_FLIGHT_ORDERS, defaults.clients.MAX_SUBMISSION_BACKLOG) == (10_000, 5_000)
    assert defaults.clients.ADMISSION_REFRESH_S == 5.0
    with pytest.raises(ValueError):
        Settings.load({}, MAX_IN_FLIGHT_ORDERS=-1)


def test_the_devhost_submission_role_rejects_above_the_ceiling() -> None:
    client = client_for(REPLY_QUEUE)
    settings, local = load_settings(
        {},
        MAX_IN_FLIGHT_ORDERS=2,
        POLL_INTERVAL_S=0.01,
        HOST_ID="h1",
        CLIENTS=json.dumps([{"id": client.client_id, "replyQueue": REPLY_QUEUE}]),
    )
    deps = HostDeps(
        states=InMemoryStateStore(),
        orders=InMemoryOrderStore(),
        queues=InMemoryQueueFactory(),
        clock=SystemClock(),
        settings=settings,
        local=local,
    )
    host = dev_host(deps, roles=("submission",))
    host.start()
    try:
        assert host.admission is not None
        orders_queue = deps.queues.queue(client.inbound_queue)
        for n in range(4):
            orders_queue.send(order_body(f"d-{n}", reply_to=REPLY_QUEUE), message_id=f"d-{n}:submit")
        statuses: list[OrderStatus] = []
        for _ in range(500):
            statuses += [
                parse_message(StatusReply, m.body).status for m in received(deps.queues.queue(REPLY_QUEUE))
            ]
            if len(statuses) == 4:
                break
            time.sleep(0.01)
    finally:
        host.stop()
    assert sorted(statuses) == sorted([OrderStatus.RECEIVED] * 2 + [OrderStatus.REJECTED] * 2)
    assert deps.states.count(IN_FLIGHT_QUERY) == 2
    assert orders_queue.approximate_count() == 0  # rejected messages were completed
