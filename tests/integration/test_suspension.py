"""A suspended order takes no step while suspended, with the whole system running (starter, orchestrator,
agents, listener and the supervisor), and finishes after it is resumed."""

from __future__ import annotations

import time

import pytest

from demo.faults import FaultPlan
from operator_api.suspension import set_suspension
from orderflow.operator_auth import OPERATOR_ROLE, Principal
from orderflow.records import ProcessState, StateRecord, StepStatus
from tests.harness import System, running_system
from tests.host_deps import HostDeps

pytestmark = pytest.mark.integration

OTTO = Principal(object_id="oid-otto", tenant_id="tid", subject="sub", roles=frozenset({OPERATOR_ROLE}))
HELD_S = 4.0
"""How long the test holds the order: many supervisor sweeps (0.2 s) and past CLAIM_TIMEOUT_S (3 s)."""


def change(system: System, key: str, *, suspend: bool) -> StateRecord:
    """Otto suspends (or resumes) the order ``key``, unconditionally; the record written."""
    outcome = set_suspension(
        key,
        OTTO,
        suspend=suspend,
        if_match=None,
        states=system.deps.states,
        queues=system.deps.queues,
        clock=system.deps.clock,
    )
    assert outcome.refusal is None
    return outcome.record


def test_a_suspended_order_takes_no_step_with_the_supervisor_running_and_finishes_after_resume(
    deps: HostDeps,
) -> None:
    # Every remote call takes 0.5 s, so the first step is still running when the suspension lands.
    with running_system(deps, faults=FaultPlan(latency_rate=1.0, latency_s=0.5)) as system:
        (order_id,) = system.submit_all(["tpch-1"])
        key = system.key(order_id)
        system.wait_until(lambda: system.record(order_id).process_state is ProcessState.PROCESSING)

        change(system, key, suspend=True)
        # The running attempt finishes its step, then hands the record back instead of starting another.
        system.wait_until(lambda: system.record(order_id).locked_by is None, timeout_s=10)
        held = system.deps.states.get(key)
        deadline = time.monotonic() + HELD_S
        while time.monotonic() < deadline:
            now = system.deps.states.get(key)
            assert now.etag == held.etag, "a suspended order was written"
            time.sleep(0.1)
        record = held.item
        assert (record.process_state, record.attempt) == (ProcessState.PENDING, 1)
        # No step after the held one started (the claim may have started the first before the
        # suspension landed: the next attempt runs it again under its idempotency key).
        assert [s.status for s in record.steps.values()][1:] == [StepStatus.NOT_STARTED] * 2

        change(system, key, suspend=False)
        (settled,) = system.wait_settled([order_id], timeout_s=30).values()

    assert settled.process_state is ProcessState.PROCESSED
    assert settled.attempt == 2  # one new attempt after the resume, from the step after the held one
    actions = [(e.role, e.action, e.outcome) for e in settled.timeline]
    suspend_at = actions.index(("operator", "suspend", None))
    assert ("orchestrator", None, "suspended") in actions[suspend_at:]
    assert actions.index(("operator", "resume", None)) < actions.index(("starter", "claim", None), suspend_at)
    assert settled.timeline[suspend_at].by == "tid/oid-otto"


def test_suspending_and_resuming_an_order_awaiting_review_leaves_its_attempt_waiting(
    deps: HostDeps,
) -> None:
    # Its owner waits for the review, healthy: a suspend or resume asks nothing of it, so its completeBy
    # stays at the review deadline and the supervisor does not recover a live attempt after the grace.
    with running_system(deps, REVIEW_AMOUNT_ABOVE=1.0, REVIEW_TIMEOUT_S=60) as system:
        (order_id,) = system.submit_all(["tpch-1"])
        key = system.key(order_id)
        # The AwaitingReview write owes the client an AwaitingReview reply; wait for the write that clears
        # it too, or that write would land after the resume.
        system.wait_until(
            lambda: (
                (record := system.record(order_id)).process_state is ProcessState.AWAITING_REVIEW
                and record.pending_reply is None
            )
        )
        waiting = system.record(order_id)
        for suspend in (True, False):
            assert change(system, key, suspend=suspend).complete_by == waiting.complete_by
        resumed = system.deps.states.get(key)
        deadline = time.monotonic() + HELD_S
        while time.monotonic() < deadline:
            assert system.deps.states.get(key).etag == resumed.etag, "an order awaiting review was written"
            time.sleep(0.1)

    record = resumed.item
    assert (record.process_state, record.attempt, record.locked_by) == (
        ProcessState.AWAITING_REVIEW,
        1,
        waiting.locked_by,
    )
    assert [(e.role, e.action) for e in record.timeline][-2:] == [
        ("operator", "suspend"),
        ("operator", "resume"),
    ]
