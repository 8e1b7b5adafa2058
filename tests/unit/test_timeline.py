"""The timeline (orderflow.timeline): one entry per write of a state record, in the write itself, and the
window's overflow moved to the history container by the store."""

from __future__ import annotations

from datetime import timedelta
from itertools import pairwise
from typing import Any

import pytest

from bench.counting.stores import CountingStateStore
from orderflow.clock import FakeClock
from orderflow.contracts import FinishOrderInput, Outcome, StartStepInput, StepResult
from orderflow.errors import ConcurrencyConflict
from orderflow.records import ProcessState, StateRecord, StepStatus
from orderflow.timeline import TIMELINE_KEEP, TIMELINE_WINDOW, Actor, merged, note
from orderflow.workflows import ORDER_V1
from supervisor.recovery import Recovery, recover
from tests.activity_json import finish_order, start_step
from tests.host_deps import HostDeps
from tests.unit.fakes import memory_deps, submit_and_claim

pytestmark = pytest.mark.unit

P, S = ProcessState, StepStatus

KEY = "a:o-1"
RESERVE, CHARGE, SHIP = "reserve_inventory", "charge_payment", "create_shipment"


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


def done(step: str) -> StepResult:
    return StepResult(step=step, result={"id": step}, calls=1)


def summary(record: StateRecord) -> list[tuple[Any, ...]]:
    return [
        (
            e.seq,
            e.role,
            e.action,
            e.from_state,
            e.to_state,
            [(c.step, c.from_status, c.to_status) for c in e.steps],
            e.outcome,
        )
        for e in record.timeline
    ]


def test_an_order_that_runs_through_records_every_write_with_who_made_it() -> None:
    deps = memory_deps(FakeClock())
    deps.states = counted = CountingStateStore(deps.states)
    submit_and_claim(deps, definition=ORDER_V1, order_id=KEY)
    writes_before = counted.counts.total("replace")
    start(deps, RESERVE)  # the claim started it: nothing written
    start(deps, CHARGE, completed=done(RESERVE))
    start(deps, SHIP, completed=done(CHARGE))
    finish = FinishOrderInput(
        order_id=KEY,
        instance_id=f"{KEY}:1",
        workflow_version=ORDER_V1.version,
        outcome=Outcome.PROCESSED,
        completed=done(SHIP),
    )
    finish_order(finish.to_payload(), deps)
    record = deps.states.get(KEY).item

    assert summary(record) == [
        (1, "intake", "submit", None, P.PENDING, [], None),
        (2, "starter", "claim", P.PENDING, P.PROCESSING, [(RESERVE, S.NOT_STARTED, S.RUNNING)], None),
        (
            3,
            "orchestrator",
            None,
            P.PROCESSING,
            P.PROCESSING,
            [(RESERVE, S.RUNNING, S.COMPLETED), (CHARGE, S.NOT_STARTED, S.RUNNING)],
            None,
        ),
        (
            4,
            "orchestrator",
            None,
            P.PROCESSING,
            P.PROCESSING,
            [(CHARGE, S.RUNNING, S.COMPLETED), (SHIP, S.NOT_STARTED, S.RUNNING)],
            None,
        ),
        (5, "orchestrator", None, P.PROCESSING, P.PROCESSED, [(SHIP, S.RUNNING, S.COMPLETED)], "Processed"),
        (6, "replies", "reply", P.PROCESSED, P.PROCESSED, [], "Processed"),
    ]
    assert record.timeline[1].by == f"{KEY}:1" and record.timeline[2].by == f"{KEY}:1"
    assert record.timeline[0].by == "a"
    assert [e.attempt for e in record.timeline] == [0, 1, 1, 1, 1, 1]
    assert record.timeline_seq == 6
    # The timeline rode on the writes the order makes anyway: two starts, the finish, the reply's clear.
    assert counted.counts.total("replace") - writes_before == 4
    assert deps.states.history(KEY, max_item_count=10).items == []


def test_the_supervisor_entry_names_the_host_the_expired_attempt_and_the_error_code() -> None:
    clock = FakeClock()
    deps = memory_deps(clock, HOST_ID="sup-1")
    submit_and_claim(deps, definition=ORDER_V1, order_id=KEY)
    clock.advance(3600)

    found = deps.states.get(KEY)
    assert recover(
        deps.states,
        found,
        queues=deps.queues,
        clock=clock,
        supervisor=deps.settings.supervisor,
        host_id=deps.settings.queues.HOST_ID,
    ) is (Recovery.REQUEUED)
    entry = deps.states.get(KEY).item.timeline[-1]

    assert (entry.role, entry.by, entry.action) == ("supervisor", "sup-1", "recover")
    assert (entry.from_state, entry.to_state, entry.outcome) == (
        ProcessState.PROCESSING,
        ProcessState.PENDING,
        "recovered",
    )
    assert (entry.attempt, entry.error_code) == (1, "complete_by_expired")
    assert entry.at == clock.now()


def test_a_write_that_changes_nothing_a_person_would_follow_adds_no_entry() -> None:
    deps = memory_deps(FakeClock())
    record = submit_and_claim(deps, definition=ORDER_V1, order_id=KEY)
    after = record.model_copy(deep=True)
    after.complete_by = record.updated_at + timedelta(seconds=5)

    assert note(record, after, Actor("orchestrator", f"{KEY}:1")) is None
    assert after.timeline == record.timeline and after.timeline_seq == record.timeline_seq


def grown(record: StateRecord, entries: int) -> StateRecord:
    """``record`` with ``entries`` more named writes in its timeline."""
    for n in range(entries):
        before = record.model_copy(deep=True)
        record.updated_at = record.updated_at + timedelta(seconds=1)
        note(before, record, Actor("operator", f"t/{n}"), action="inspect")
    return record


def test_past_the_window_the_oldest_entries_move_to_history_in_one_write() -> None:
    deps = memory_deps(FakeClock())
    submit_and_claim(deps, definition=ORDER_V1, order_id=KEY)
    states = deps.states
    found = states.get(KEY)
    filled = grown(found.item.model_copy(deep=True), TIMELINE_WINDOW - len(found.item.timeline))
    found = states.replace(filled, etag=found.etag)
    assert len(found.item.timeline) == TIMELINE_WINDOW
    assert states.history(KEY, max_item_count=10).items == []

    written = states.replace(grown(found.item.model_copy(deep=True), 1), etag=found.etag)

    moved = TIMELINE_WINDOW + 1 - TIMELINE_KEEP
    assert [e.seq for e in written.item.timeline] == list(range(moved + 1, TIMELINE_WINDOW + 2))
    page = states.history(KEY, max_item_count=10)
    (chunk,) = page.items
    assert (chunk.first_seq, chunk.last_seq, page.continuation) == (1, moved, None)
    assert chunk.entries == found.item.timeline[:moved]
    assert [e.seq for e in merged(page.items, written.item)] == list(range(1, TIMELINE_WINDOW + 2))


def test_a_writer_that_moved_entries_and_lost_its_race_leaves_each_entry_once() -> None:
    deps = memory_deps(FakeClock())
    submit_and_claim(deps, definition=ORDER_V1, order_id=KEY)
    states = deps.states
    found = states.get(KEY)
    full = states.replace(grown(found.item.model_copy(deep=True), TIMELINE_WINDOW - 2), etag=found.etag)
    winner = states.replace(grown(full.item.model_copy(deep=True), 1), etag=full.etag)

    with pytest.raises(ConcurrencyConflict):
        states.replace(grown(full.item.model_copy(deep=True), 1), etag=full.etag)

    (chunk,) = states.history(KEY, max_item_count=10).items  # the loser's chunk is the winner's
    assert states.get(KEY).etag == winner.etag
    seqs = [e.seq for e in merged([chunk], states.get(KEY).item)]
    assert seqs == sorted(set(seqs)) == list(range(1, TIMELINE_WINDOW + 2))


def test_history_pages_in_order_with_a_token_bound_to_the_order() -> None:
    deps = memory_deps(FakeClock())
    states = deps.states
    submit_and_claim(deps, definition=ORDER_V1, order_id=KEY)
    for _ in range(3):  # three overflows, three chunks
        found = states.get(KEY)
        need = TIMELINE_WINDOW + 1 - len(found.item.timeline)
        states.replace(grown(found.item.model_copy(deep=True), need), etag=found.etag)

    first = states.history(KEY, max_item_count=2)
    second = states.history(KEY, max_item_count=2, continuation=first.continuation)

    chunks = [*first.items, *second.items]
    assert second.continuation is None and len(chunks) == 3
    assert [c.first_seq for c in chunks] == sorted(c.first_seq for c in chunks)
    assert all(a.last_seq + 1 == b.first_seq for a, b in pairwise(chunks))
    assert states.history("a:other", max_item_count=2).items == []
