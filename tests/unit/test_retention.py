"""Retention of payment and customer data (supervisor.retention) over the in-memory stores.

What a purge keeps is what the protocol needs after an order's end: these tests run the roles that can
still meet a purged order (a resubmission, a cancel, a late activity, the reply relay, the supervisor)
against one. The stored JSON of both stores is scanned in ``tests/integration/test_retention_stores.py``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from intake.cancellation import CancelOutcome, handle_cancel
from intake.submission import handle_intake_message
from orderflow.clock import FakeClock
from orderflow.contracts import FinishOrderInput, Outcome, StartStepInput, StepResult
from orderflow.errors import TransientError
from orderflow.queues.base import DeadLetterQueues
from orderflow.queues.memory import InMemoryQueueFactory
from orderflow.records import (
    DATA_PURGE_VERSION,
    REDACTED,
    CompensationEntry,
    LastError,
    PendingReply,
    ProcessState,
    RetryBudget,
    StateRecord,
    StepState,
    StepStatus,
)
from orderflow.replies import resend_pending_replies
from orderflow.stores.base import Redaction, Versioned
from orderflow.stores.memory import InMemoryStateStore
from orderflow.workflows import ORDER_V2, agent_names
from supervisor.retention import (
    DEAD_LETTER_PEEK,
    PurgeReport,
    dead_letter_sources,
    purge_expired_dead_letters,
    purge_expired_logs,
    purge_finished_histories,
    run_retention_pass,
)
from supervisor.sweep import run_sweep
from tests.activity_json import finish_order, start_step
from tests.host_deps import HostDeps
from tests.unit.fakes import TEST_CLIENT, memory_deps, order_body, received, submit_and_claim

pytestmark = pytest.mark.unit

DAY = timedelta(days=1)
RETENTION_S = 30 * DAY.total_seconds()


def record(order_id: str, state: ProcessState, clock: FakeClock, **fields: Any) -> StateRecord:
    return StateRecord(
        id=order_id,
        order_id=order_id,
        client_id="a",
        process_state=state,
        reply_to="replies",
        retry_budget=RetryBudget(limit=10),
        workflow_version="order-v1",
        steps={
            "charge_payment": StepState(
                status=StepStatus.COMPLETED,
                idempotency_key=f"{order_id}:charge_payment",
                result={"chargeId": "ch-1", "amount": "10.00", "currency": "USD"},
            )
        },
        compensation_log=[
            CompensationEntry(
                step="charge_payment",
                action="charge",
                undo="refund",
                undo_key=f"{order_id}:charge_payment:undo",
                data={"chargeId": "ch-1", "amount": "10.00", "currency": "USD"},
                recorded_at=clock.now(),
                status="Compensated",
                undo_result={"undone": "true", "refundId": "re-1"},
            )
        ],
        created_at=clock.now(),
        updated_at=clock.now(),
        **fields,
    )


def purge(deps: HostDeps) -> PurgeReport:
    return purge_expired_logs(
        states=deps.states,
        orders=deps.orders,
        clock=deps.clock,
        supervisor=deps.settings.supervisor,
        scans=deps.settings.scans,
    )


def test_finished_orders_lose_their_data_after_the_retention_period() -> None:
    clock = FakeClock()
    deps = memory_deps(clock, COMPENSATION_LOG_RETENTION_S=RETENTION_S)
    for order_id, state in [
        ("processed", ProcessState.PROCESSED),
        ("compensated", ProcessState.COMPENSATED),
        ("cancelled", ProcessState.CANCELLED),
        ("failed", ProcessState.COMPENSATION_FAILED),  # the operator still needs it
        ("error", ProcessState.ERROR),
    ]:
        deps.states.create(record(order_id, state, clock))
    clock.advance((29 * DAY).total_seconds())
    assert purge(deps).purged == 0

    clock.advance((2 * DAY).total_seconds())
    report = purge(deps)

    assert report == PurgeReport(purged=3, lost_races=0)
    for order_id in ("processed", "compensated", "cancelled"):
        purged = deps.states.get(order_id).item
        [entry] = purged.compensation_log
        assert (entry.data, entry.undo_result) == ({}, None)
        assert (entry.step, entry.undo_key, entry.status) == (
            "charge_payment",
            f"{order_id}:charge_payment:undo",
            "Compensated",
        )
        step = purged.steps["charge_payment"]
        assert (step.result, step.status, step.idempotency_key) == (
            None,
            StepStatus.COMPLETED,
            f"{order_id}:charge_payment",
        )
        assert (purged.data_purged_at, purged.data_purge_version) == (clock.now(), DATA_PURGE_VERSION)
    for order_id in ("failed", "error"):
        kept = deps.states.get(order_id).item
        assert kept.compensation_log[0].data["chargeId"] == "ch-1"
        assert kept.steps["charge_payment"].result == {
            "chargeId": "ch-1",
            "amount": "10.00",
            "currency": "USD",
        }
    etags = {order_id: deps.states.get(order_id).etag for order_id in ("processed", "compensated")}
    assert purge(deps).purged == 0  # once only
    assert {order_id: deps.states.get(order_id).etag for order_id in etags} == etags


def test_error_texts_are_redacted_and_their_kind_and_code_kept() -> None:
    clock = FakeClock()
    deps = memory_deps(clock, COMPENSATION_LOG_RETENTION_S=RETENTION_S)
    quoted = "refund of ch-1 (10.00) refused"
    deps.states.create(
        record(
            "a:o-1",
            ProcessState.COMPENSATED,
            clock,
            last_error=LastError(
                kind="permanent", code="declined", message=quoted, step="charge_payment", at=clock.now()
            ),
            compensation_error=LastError(
                kind="transient", code="refund_failed", message=quoted, at=clock.now()
            ),
            pending_reply=PendingReply(status="Compensated", reason="declined", detail=quoted),
        )
    )
    clock.advance(RETENTION_S + 1)

    assert purge(deps).purged == 1

    purged = deps.states.get("a:o-1").item
    assert purged.last_error is not None and purged.compensation_error is not None
    assert purged.last_error.model_dump() == {
        "kind": "permanent",
        "message": REDACTED,
        "step": "charge_payment",
        "code": "declined",
        "at": clock.now() - timedelta(seconds=RETENTION_S + 1),
    }
    assert (purged.compensation_error.kind, purged.compensation_error.code) == ("transient", "refund_failed")
    assert purged.compensation_error.message == REDACTED
    assert purged.pending_reply == PendingReply(status="Compensated", reason="declined", detail=REDACTED)


def test_a_zero_retention_never_purges() -> None:
    clock = FakeClock()
    deps = memory_deps(clock, COMPENSATION_LOG_RETENTION_S=0)
    deps.states.create(record("a:o-1", ProcessState.PROCESSED, clock))
    clock.advance((3650 * DAY).total_seconds())

    assert purge(deps).purged == 0
    assert deps.states.get("a:o-1").item.compensation_log[0].data


def test_a_record_a_narrower_purge_marked_gets_the_wider_purge() -> None:
    clock = FakeClock()
    deps = memory_deps(clock, COMPENSATION_LOG_RETENTION_S=RETENTION_S)
    narrow = record("a:o-1", ProcessState.PROCESSED, clock, data_purged_at=clock.now(), data_purge_version=1)
    narrow.compensation_log[0].data, narrow.compensation_log[0].undo_result = {}, None
    deps.states.create(narrow)  # as the log-only purge left it: the step's result still holds the charge
    clock.advance(RETENTION_S + 1)

    assert purge(deps).purged == 1

    purged = deps.states.get("a:o-1").item
    assert purged.steps["charge_payment"].result is None
    assert purged.data_purge_version == DATA_PURGE_VERSION
    assert purged.data_purged_at == clock.now()


def test_an_error_order_keeps_its_data_until_resolved_and_the_period_starts_then() -> None:
    clock = FakeClock()
    deps = memory_deps(clock, COMPENSATION_LOG_RETENTION_S=RETENTION_S)
    deps.states.create(record("a:o-1", ProcessState.ERROR, clock))
    clock.advance((90 * DAY).total_seconds())
    assert purge(deps).purged == 0

    # An operator resolves it: it is compensated now (the write moves updatedAt).
    found = deps.states.get("a:o-1")
    resolved = found.item.model_copy(
        update={"process_state": ProcessState.COMPENSATED, "updated_at": clock.now()}
    )
    deps.states.replace(resolved, etag=found.etag)
    clock.advance((29 * DAY).total_seconds())
    assert purge(deps).purged == 0
    clock.advance((2 * DAY).total_seconds())
    assert purge(deps).purged == 1


# --- the order document -----------------------------------------------------------------------


def test_the_order_document_is_redacted_before_the_record_is_marked() -> None:
    clock = FakeClock()
    deps = memory_deps(clock, COMPENSATION_LOG_RETENTION_S=RETENTION_S)
    processed_order(deps, "a:o-1")
    clock.advance(RETENTION_S + 1)

    states = deps.states
    assert isinstance(states, InMemoryStateStore)
    orders = deps.orders

    def replace_record(record: StateRecord, *, etag: str) -> Versioned[StateRecord]:
        # The crash this order survives: the record's write is the second one.
        assert orders.get(record.order_id).redacted_at == clock.now()
        return InMemoryStateStore.replace(states, record, etag=etag)

    states.replace = replace_record  # type: ignore[method-assign]
    assert purge(deps).purged == 1
    # Whose order it was stays: a later submission under its id by another client is still refused.
    assert orders.get("a:o-1").client_id == deps.states.get("a:o-1").item.client_id == "a"


def test_a_crash_between_the_two_writes_is_redone_by_the_next_pass() -> None:
    clock = FakeClock()
    deps = memory_deps(clock, COMPENSATION_LOG_RETENTION_S=RETENTION_S)
    processed_order(deps, "a:o-1")
    clock.advance(RETENTION_S + 1)
    redacted_at = clock.now()
    states = deps.states
    assert isinstance(states, InMemoryStateStore)

    def unavailable(record: StateRecord, *, etag: str) -> Versioned[StateRecord]:
        raise TransientError("state store unavailable")

    states.replace = unavailable  # type: ignore[method-assign]
    with pytest.raises(TransientError):
        purge(deps)
    assert deps.orders.get("a:o-1").redacted_at == redacted_at
    assert deps.states.get("a:o-1").item.data_purge_version == 0
    del states.replace  # the store is back

    clock.advance(60)
    assert purge(deps).purged == 1
    assert deps.states.get("a:o-1").item.data_purge_version == DATA_PURGE_VERSION
    assert deps.orders.get("a:o-1").redacted_at == redacted_at  # redacted once
    assert deps.orders.redact("a:o-1", at=clock.now()) is Redaction.ALREADY_REDACTED


def test_a_purge_that_loses_the_race_is_left_for_the_next_pass() -> None:
    clock = FakeClock()
    deps = memory_deps(clock, COMPENSATION_LOG_RETENTION_S=RETENTION_S)
    deps.states.create(record("a:o-1", ProcessState.PROCESSED, clock))
    clock.advance(RETENTION_S + 1)
    states = deps.states
    assert isinstance(states, InMemoryStateStore)
    raced = False

    def another_writer_first(record: StateRecord, *, etag: str) -> Versioned[StateRecord]:
        nonlocal raced
        if not raced:
            raced = True
            current = InMemoryStateStore.get(states, record.order_id)
            InMemoryStateStore.replace(states, current.item, etag=current.etag)  # moves the ETag
        return InMemoryStateStore.replace(states, record, etag=etag)

    states.replace = another_writer_first  # type: ignore[method-assign]

    assert purge(deps) == PurgeReport(purged=0, lost_races=1)
    assert deps.states.get("a:o-1").item.steps["charge_payment"].result is not None
    assert purge(deps) == PurgeReport(purged=1, lost_races=0)
    assert deps.states.get("a:o-1").item.steps["charge_payment"].result is None


def test_a_record_without_its_order_document_is_still_purged(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    deps = memory_deps(clock, COMPENSATION_LOG_RETENTION_S=RETENTION_S)
    deps.states.create(record("a:o-1", ProcessState.PROCESSED, clock))
    clock.advance(RETENTION_S + 1)

    with caplog.at_level(logging.WARNING, logger="supervisor.retention"):
        assert purge(deps).purged == 1
    assert "a:o-1" in caplog.text


# --- the protocol after a purge ---------------------------------------------------------------


def processed_order(deps: HostDeps, order_id: str) -> None:
    """Run ``order_id`` on ORDER_V2 (whose charge waits for review above REVIEW_AMOUNT_ABOVE) to
    ``Processed`` through the activities, each step answering a result with ids and amounts."""
    submit_and_claim(deps, definition=ORDER_V2, order_id=order_id, amount="50.00")
    instance = f"{order_id}:1"
    previous: StepResult | None = None
    for step in ORDER_V2.steps:
        started = start_step(
            StartStepInput(
                order_id=order_id,
                instance_id=instance,
                workflow_version=ORDER_V2.version,
                step=step.name,
                timeout_s=8,
                completed=previous,
                response_queue="r-q1",
            ).to_payload(),
            deps,
        )
        assert started["outcome"] == "started", started
        previous = StepResult(
            step=step.name, result={"effectId": f"fx-{step.name}", "amount": "50.00"}, calls=1
        )
    finished = finish_order(
        FinishOrderInput(
            order_id=order_id,
            instance_id=instance,
            workflow_version=ORDER_V2.version,
            outcome=Outcome.PROCESSED,
            completed=previous,
        ).to_payload(),
        deps,
    )
    assert finished["outcome"] == "finished"
    for queue in ["client-a", *(deps.settings.queues.agent_queue(step.agent) for step in ORDER_V2.steps)]:
        received(deps.queues.queue(queue))


@pytest.fixture
def purged() -> HostDeps:
    """Dependencies holding order ``o-1``, Processed more than the retention period ago and purged."""
    clock = FakeClock()
    deps = memory_deps(clock, COMPENSATION_LOG_RETENTION_S=RETENTION_S, REVIEW_AMOUNT_ABOVE=100)
    processed_order(deps, "a:o-1")
    clock.advance(RETENTION_S + 1)
    assert purge(deps).purged == 1
    return deps


def snapshot(deps: HostDeps) -> tuple[str, str]:
    """The state record's ETag and the order document's stored JSON."""
    return deps.states.get("a:o-1").etag, deps.orders.get("a:o-1").model_dump_json()


def test_a_late_start_of_a_reviewable_step_on_a_purged_order_is_fenced(purged: HostDeps) -> None:
    before = snapshot(purged)
    # A fresh process: the document is read from the store, redacted (amount 0), before the fenced write.
    late = HostDeps(
        states=purged.states,
        orders=purged.orders,
        queues=purged.queues,
        clock=purged.clock,
        settings=purged.settings,
    )

    result = start_step(
        StartStepInput(
            order_id="a:o-1",
            instance_id="a:o-1:1",
            workflow_version=ORDER_V2.version,
            step="charge_payment",
            timeout_s=8,
            response_queue="r-q1",
        ).to_payload(),
        late,
    )

    assert result["outcome"] == "fenced"
    assert snapshot(purged) == before
    assert received(purged.queues.queue(purged.settings.queues.agent_queue("payment"))) == []


def test_a_late_rerun_of_the_finish_on_a_purged_order_writes_and_sends_nothing(purged: HostDeps) -> None:
    before = snapshot(purged)

    result = finish_order(
        FinishOrderInput(
            order_id="a:o-1",
            instance_id="a:o-1:1",
            workflow_version=ORDER_V2.version,
            outcome=Outcome.PROCESSED,
        ).to_payload(),
        purged,
    )

    assert result["outcome"] == "finished"
    assert snapshot(purged) == before
    assert received(purged.queues.queue("client-a")) == []


def test_a_cancel_of_a_purged_order_is_refused(purged: HostDeps) -> None:
    before = snapshot(purged)

    result = handle_cancel(
        json.dumps({"schemaVersion": 1, "type": "CancelOrder", "orderId": "o-1"}),
        client=TEST_CLIENT,
        states=purged.states,
        queues=purged.queues,
        clock=purged.clock,
    )

    assert result.outcome is CancelOutcome.REFUSED
    assert snapshot(purged) == before
    [reply] = [json.loads(m.body) for m in received(purged.queues.queue("client-a"))]
    assert (reply["status"], reply["reason"]) == ("CancelRefused", "order is Processed")


def test_a_duplicate_submission_of_a_purged_order_gets_its_outcome_and_writes_nothing(
    purged: HostDeps,
) -> None:
    before = snapshot(purged)

    result = handle_intake_message(
        order_body("a:o-1", amount="50.00"),
        client=TEST_CLIENT,
        orders=purged.orders,
        states=purged.states,
        queues=purged.queues,
        clock=purged.clock,
        steps=purged.settings.steps,
        starter=purged.settings.starter,
        queue_names=purged.settings.queues,
        definition=ORDER_V2,
    )

    assert result.outcome.value == "duplicate"
    assert snapshot(purged) == before
    [reply] = [json.loads(m.body) for m in received(purged.queues.queue("client-a"))]
    assert reply["status"] == "Processed"


def test_the_supervisor_leaves_a_purged_order_alone(purged: HostDeps) -> None:
    before = snapshot(purged)
    clock = purged.clock
    assert isinstance(clock, FakeClock)
    clock.advance(DAY.total_seconds())

    run_sweep(
        states=purged.states,
        queues=purged.queues,
        clock=purged.clock,
        supervisor=purged.settings.supervisor,
        scans=purged.settings.scans,
        host_id=purged.settings.queues.HOST_ID,
    )

    assert snapshot(purged) == before


def test_the_relay_still_sends_a_reply_owed_by_a_purged_order() -> None:
    clock = FakeClock()
    deps = memory_deps(clock, COMPENSATION_LOG_RETENTION_S=RETENTION_S)
    owed = PendingReply(status="Compensated", reason="declined", detail="charge ch-1 declined")
    deps.states.create(record("a:o-1", ProcessState.COMPENSATED, clock, pending_reply=owed))
    clock.advance(RETENTION_S + 1)
    assert purge(deps).purged == 1

    relayed = resend_pending_replies(states=deps.states, queues=deps.queues, clock=clock, grace_s=30)

    assert relayed.resent == ["a:o-1"]
    [reply] = [json.loads(m.body) for m in received(deps.queues.queue("replies"))]
    assert (reply["status"], reply["reason"], reply["detail"]) == ("Compensated", "declined", REDACTED)
    assert deps.states.get("a:o-1").item.pending_reply is None


# --- dead letters and orchestration history -----------------------------------------------------------


def wall_clock_deps(**settings: Any) -> HostDeps:
    """In-memory dependencies whose queues stamp dead letters on the fake clock (which starts at the
    wall time, where the in-memory queues' times start)."""
    clock = FakeClock(datetime.now(UTC))
    queues = InMemoryQueueFactory(clock=lambda: clock.now().timestamp())
    return replace(memory_deps(clock, **settings), queues=queues, dead_letters=queues)


def dead_letter(deps: HostDeps, queue_name: str, message_id: str) -> None:
    queue = deps.queues.queue(queue_name)
    queue.send(f'{{"note": "{message_id}"}}', message_id=message_id)
    [message] = queue.receive(max_messages=1)
    queue.dead_letter(message, reason="InvalidJson", description="test")


class CountingDeadLetters:
    """The in-memory dead-letter queues, counting removals (a removal receives, so it disturbs)."""

    def __init__(self, inner: DeadLetterQueues) -> None:
        self.inner = inner
        self.removals = 0

    def dead_letter_page(self, name: str, *, max_messages: int = 32, continuation: str | None = None) -> Any:
        return self.inner.dead_letter_page(name, max_messages=max_messages, continuation=continuation)

    def remove_dead_letters(
        self, name: str, select: Any, *, before: Any = None, most: int | None = None
    ) -> Any:
        self.removals += 1
        return self.inner.remove_dead_letters(name, select, before=before, most=most)


def purge_dead_letters(deps: HostDeps, counting: CountingDeadLetters, names: list[str]) -> int:
    return purge_expired_dead_letters(
        queues=deps.queues,
        dead_letters=counting,
        names=names,
        clock=deps.clock,
        supervisor=deps.settings.supervisor,
    )


def test_dead_letters_are_deleted_once_their_retention_is_over_and_not_before() -> None:
    deps = wall_clock_deps()
    assert deps.dead_letters is not None
    counting = CountingDeadLetters(deps.dead_letters)
    queue = deps.settings.queues.AGENT_RESPONSES_QUEUE
    dead_letter(deps, queue, "m-1")
    assert isinstance(deps.clock, FakeClock)

    deps.clock.advance(deps.settings.supervisor.DEAD_LETTER_RETENTION_S - 60)
    assert purge_dead_letters(deps, counting, [queue]) == 0
    assert counting.removals == 0  # only peeked: a pass with nothing to delete disturbs no operator
    dead_letter(deps, queue, "m-2")

    deps.clock.advance(120)
    assert purge_dead_letters(deps, counting, [queue]) == 1
    assert [d.message_id for d in deps.queues.dead_letters(queue)] == ["m-2"]


def test_more_dead_letters_than_one_peek_shows_are_all_deleted_in_one_pass() -> None:
    deps = wall_clock_deps()
    assert deps.dead_letters is not None
    queue = deps.settings.queues.AGENT_RESPONSES_QUEUE
    for n in range(DEAD_LETTER_PEEK + 8):
        dead_letter(deps, queue, f"m-{n}")
    assert isinstance(deps.clock, FakeClock)
    deps.clock.advance(deps.settings.supervisor.DEAD_LETTER_RETENTION_S + 60)

    assert purge_dead_letters(deps, CountingDeadLetters(deps.dead_letters), [queue]) == DEAD_LETTER_PEEK + 8
    assert deps.queues.dead_letters(queue) == []


def test_a_zero_dead_letter_retention_never_deletes() -> None:
    deps = wall_clock_deps(COMPENSATION_LOG_RETENTION_S=0, DEAD_LETTER_RETENTION_S=0)
    assert deps.dead_letters is not None
    queue = deps.settings.queues.AGENT_RESPONSES_QUEUE
    dead_letter(deps, queue, "m-1")
    assert isinstance(deps.clock, FakeClock)
    deps.clock.advance(10 * 365 * DAY.total_seconds())

    assert purge_dead_letters(deps, CountingDeadLetters(deps.dead_letters), [queue]) == 0
    assert len(deps.queues.dead_letters(queue)) == 1


def test_the_dead_letter_sources_are_the_queues_orderflow_consumes() -> None:
    deps = wall_clock_deps(HOST_ID="h1")
    names = dead_letter_sources(deps.settings.clients, deps.settings.queues)

    assert names[0] == TEST_CLIENT.inbound_queue
    assert {deps.settings.queues.agent_queue(agent) for agent in agent_names()} <= set(names)
    assert names[-2:] == [
        deps.settings.queues.AGENT_RESPONSES_QUEUE,
        f"{deps.settings.queues.AGENT_RESPONSES_QUEUE}-h1",
    ]
    assert TEST_CLIENT.reply_queue not in names  # the client consumes its replies


class RecordingHistories:
    """An :class:`~orderflow.orchestration.OrchestrationHistories` that records each purge's cutoff."""

    def __init__(self, fail: bool = False) -> None:
        self.cutoffs: list[datetime] = []
        self.fail = fail

    def purge_ended_before(self, created_before: datetime) -> int:
        if self.fail:
            raise TransientError("the backend is down")
        self.cutoffs.append(created_before)
        return 2


def test_the_history_purge_asks_for_instances_created_before_the_retention_period() -> None:
    deps = wall_clock_deps()
    histories = RecordingHistories()

    deleted = purge_finished_histories(
        histories=histories, clock=deps.clock, supervisor=deps.settings.supervisor
    )

    assert deleted == 2
    assert histories.cutoffs == [
        deps.clock.now() - timedelta(seconds=deps.settings.supervisor.COMPENSATION_LOG_RETENTION_S)
    ]


def test_a_zero_retention_purges_no_history() -> None:
    deps = wall_clock_deps(COMPENSATION_LOG_RETENTION_S=0, DEAD_LETTER_RETENTION_S=0)
    histories = RecordingHistories()

    assert (
        purge_finished_histories(histories=histories, clock=deps.clock, supervisor=deps.settings.supervisor)
        == 0
    )
    assert histories.cutoffs == []


def test_a_part_of_the_pass_that_fails_leaves_the_others_to_run(monkeypatch: pytest.MonkeyPatch) -> None:
    deps = wall_clock_deps()
    assert deps.dead_letters is not None

    def unavailable(*args: Any, **kwargs: Any) -> Any:
        raise TransientError("the queue service is down")

    monkeypatch.setattr(deps.dead_letters, "remove_dead_letters", unavailable)
    monkeypatch.setattr(deps.queues, "dead_letters", unavailable)
    histories = RecordingHistories()

    report = run_retention_pass(
        deps,
        supervisor=deps.settings.supervisor,
        scans=deps.settings.scans,
        dead_letter_queues=dead_letter_sources(deps.settings.clients, deps.settings.queues),
        histories=histories,
    )

    assert report.records == PurgeReport()
    assert report.dead_letters is None
    assert report.histories == 2

    report = run_retention_pass(
        deps,
        supervisor=deps.settings.supervisor,
        scans=deps.settings.scans,
        stores=False,
        histories=RecordingHistories(fail=True),
    )
    assert (report.records, report.dead_letters, report.histories) == (None, None, None)


def test_a_store_outage_does_not_keep_expired_dead_letters(monkeypatch: pytest.MonkeyPatch) -> None:
    deps = wall_clock_deps()
    queue = deps.settings.queues.AGENT_RESPONSES_QUEUE
    dead_letter(deps, queue, "m-1")
    assert isinstance(deps.clock, FakeClock)
    deps.clock.advance(deps.settings.supervisor.DEAD_LETTER_RETENTION_S + 60)

    def unavailable(*args: Any, **kwargs: Any) -> Any:
        raise TransientError("the state store is down")

    monkeypatch.setattr(deps.states, "query", unavailable)

    report = run_retention_pass(
        deps, supervisor=deps.settings.supervisor, scans=deps.settings.scans, dead_letter_queues=[queue]
    )

    assert (report.records, report.dead_letters) == (None, 1)
