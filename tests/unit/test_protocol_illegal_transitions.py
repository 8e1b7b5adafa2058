"""The state machine is checked on every state write, whoever makes it (docs/protocol.md).

Each role guards its own write (the claim takes only ``Pending`` or ``Compensating`` records, the
supervisor sweeps only live attempts, an operator action is refused outside its states), and the
conditional write checks the change against the state machine behind that guard. These tests break each
guard in turn, so that a finished order reaches the write, and expect :class:`IllegalTransition` from
``update`` with nothing written: the claim, the supervisor's recovery, its give-up, and an operator's
resubmit.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from intake.submission import handle_intake_message
from operator_api import resubmit
from orderflow import attempts
from orderflow.clock import FakeClock
from orderflow.errors import IllegalTransition
from orderflow.operator_auth import Principal
from orderflow.protocol.conditional import update
from orderflow.queues.memory import InMemoryQueueFactory
from orderflow.records import ProcessState, StateRecord
from orderflow.settings import Settings
from orderflow.stores.base import Versioned
from orderflow.stores.memory import InMemoryOrderStore, InMemoryStateStore
from orderflow.timeline import Actor
from supervisor import recovery
from tests.host_deps import HostDeps
from tests.unit.fakes import TEST_CLIENT, order_body

pytestmark = pytest.mark.unit

KEY = "a:o-1"


@pytest.fixture
def deps() -> HostDeps:
    return HostDeps(
        states=InMemoryStateStore(),
        orders=InMemoryOrderStore(),
        queues=InMemoryQueueFactory(),
        clock=FakeClock(),
        settings=Settings.load({}, SUPERVISOR_MAX_FAILURES=3, CLAIM_TIMEOUT_S=30.0),
    )


def finished(
    deps: HostDeps, state: ProcessState, *, locked: bool = False, failures: int = 0
) -> Versioned[StateRecord]:
    """The order ``KEY`` stored in ``state``; ``locked``: still naming its last attempt, with a
    ``completeBy`` that passed (what a guard that let it through would see as an expired attempt)."""
    handle_intake_message(
        order_body(KEY),
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

    def finish(record: StateRecord) -> StateRecord:
        record.process_state = state
        if locked:
            record.attempt = 1
            record.locked_by = f"{KEY}:1"
            record.complete_by = deps.clock.now() - timedelta(seconds=60)
        record.failure_count = failures
        return record

    # A test writes the record directly: the stored state is the premise, not a transition under test.
    current = deps.states.get(KEY)
    deps.states.replace(finish(current.item.copied()), etag=current.etag)
    return deps.states.get(KEY)


def test_update_refuses_any_write_to_a_finished_record(deps: HostDeps) -> None:
    before = finished(deps, ProcessState.COMPENSATED)

    with pytest.raises(IllegalTransition, match="Compensated -> Compensated"):
        update(deps.states, KEY, lambda record: record, clock=deps.clock, actor=Actor("test"))

    assert deps.states.get(KEY) == before


def test_a_claim_of_a_processed_order_is_an_illegal_transition(
    deps: HostDeps, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = finished(deps, ProcessState.PROCESSED)
    monkeypatch.setattr(attempts, "CLAIMABLE_STATES", (*attempts.CLAIMABLE_STATES, ProcessState.PROCESSED))

    with pytest.raises(IllegalTransition, match="Processed -> Processed"):
        attempts.claim(
            deps.states,
            before,
            deps.clock,
            deps.settings.starter,
            deps.settings.steps,
            host_id=deps.settings.queues.HOST_ID,
        )

    assert deps.states.get(KEY) == before


def test_a_recovery_of_a_processed_order_is_an_illegal_transition(
    deps: HostDeps, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = finished(deps, ProcessState.PROCESSED, locked=True)
    monkeypatch.setattr(recovery, "SWEPT_STATES", (*recovery.SWEPT_STATES, ProcessState.PROCESSED))

    with pytest.raises(IllegalTransition, match="Processed -> Pending"):
        recovery.recover(
            deps.states,
            before,
            queues=deps.queues,
            clock=deps.clock,
            supervisor=deps.settings.supervisor,
            host_id=deps.settings.queues.HOST_ID,
        )

    assert deps.states.get(KEY) == before


def test_a_give_up_of_a_processed_order_is_an_illegal_transition(
    deps: HostDeps, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = finished(
        deps, ProcessState.PROCESSED, locked=True, failures=deps.settings.supervisor.SUPERVISOR_MAX_FAILURES
    )
    monkeypatch.setattr(recovery, "SWEPT_STATES", (*recovery.SWEPT_STATES, ProcessState.PROCESSED))

    with pytest.raises(IllegalTransition, match="Processed -> Compensating"):
        recovery.recover(
            deps.states,
            before,
            queues=deps.queues,
            clock=deps.clock,
            supervisor=deps.settings.supervisor,
            host_id=deps.settings.queues.HOST_ID,
        )

    assert deps.states.get(KEY) == before


def test_a_resubmit_of_a_compensated_order_is_an_illegal_transition(
    deps: HostDeps, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = finished(deps, ProcessState.COMPENSATED)
    monkeypatch.setattr(resubmit, "action_refusal", lambda *args, **kwargs: None)
    operator = Principal(object_id="oid-otto", tenant_id="t", subject="s", roles=frozenset())

    with pytest.raises(IllegalTransition, match="Compensated -> Pending"):
        resubmit.resubmit_order(
            KEY,
            operator,
            if_match=before.etag,
            states=deps.states,
            queues=deps.queues,
            clock=deps.clock,
            grace_s=30.0,
            retry_budget=10,
        )

    assert deps.states.get(KEY) == before


def test_a_housekeeping_write_may_touch_a_finished_record_but_never_move_it(deps: HostDeps) -> None:
    finished(deps, ProcessState.PROCESSED)

    def clear_reply(record: StateRecord) -> StateRecord:
        record.pending_reply = None
        return record

    done = update(deps.states, KEY, clear_reply, clock=deps.clock, actor=Actor("replies"), housekeeping=True)
    assert done.written is not None and done.record.process_state is ProcessState.PROCESSED
    before = deps.states.get(KEY)

    def reopen(record: StateRecord) -> StateRecord:
        record.locked_by = f"{KEY}:2"
        return record

    with pytest.raises(IllegalTransition, match="may not move the record"):
        update(deps.states, KEY, reopen, clock=deps.clock, actor=Actor("replies"), housekeeping=True)
    assert deps.states.get(KEY) == before
