"""Runs of the hypothesis protocol machine (``tests/unit/test_protocol_machine.py``) checked against the
model: every record change the machine observed, seen as the model sees a record (who made it; the
record's processState, whether a live attempt holds it, suspended, cancel requested, before and after),
is one the model makes in its exhaustive searches (``MOVES``), or a change of something the model
leaves out (docs/model.md), named here by what the record says.

This is a check step by step: each change is one the model makes from that abstract record, not a
whole run the model accepts in order.
"""

from __future__ import annotations

import importlib.util
import os
from collections import Counter
from itertools import pairwise
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from operator_api.review import review_order
from orderflow.clock import FakeClock
from orderflow.effects import PAST_POINT_OF_NO_RETURN
from orderflow.protocol.state_machine import SETTLED_STATES
from orderflow.records import ProcessState, ReviewDecision, StateRecord
from supervisor.recovery import Recovery
from tests.model.spin_run import REPO
from tests.unit.fakes import memory_deps, pause_for_review, recover_once, start_v2_step, suspend
from tests.unit.test_protocol_machine import OPERATOR, REVIEWER, Actor, ProtocolMachine, Seen

pytestmark = pytest.mark.model

CHEAP = (("-DCANCEL", "-DSUSPEND", "-DF=0"),)
"""A search make test runs to see that ``model/moves.txt`` still holds the model's changes (make
model-check compares the whole set)."""

MODEL_ACTORS = {
    Actor.STARTER: 0,
    Actor.OWNER: 1,
    Actor.SUPERVISOR: 2,
    Actor.CLIENT: 3,
    Actor.OPERATOR: 4,
    Actor.REVIEWER: 5,
}
"""The machine's actors that write a record, as the model numbers them (``A_*``)."""

RUNS: list[dict[str, list[Seen]]] = []


MOVES_FILE = REPO / "model" / "moves.txt"


class RecordingMachine(ProtocolMachine):
    """The protocol machine, keeping every version of every record it observed, and who made it."""

    def teardown(self) -> None:
        RUNS.append(dict(self._observed()))
        super().teardown()


def model_moves() -> set[tuple[int, int, int]]:
    """(actor, before, after) of every record change the model makes (``model/moves.txt``)."""
    moves: set[tuple[int, int, int]] = _moves_script().read(MOVES_FILE.read_text(encoding="utf-8"))
    return moves


def _moves_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("model_moves", REPO / "scripts" / "model_moves.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def project(record: StateRecord) -> int:
    """The record as the model's ``PROJ`` numbers it."""
    state = list(ProcessState).index(record.process_state)
    live = record.locked_by is not None and record.process_state not in SETTLED_STATES
    # The model's cancel is the client's: an operator's stop (stopRequestedBy operator) is not modelled.
    cancelled = record.cancel_requested_at is not None and (record.stop_requested_by or "client") == "client"
    return state * 8 + live * 4 + (record.suspended_at is not None) * 2 + cancelled


def beyond_the_bound(step: tuple[int, int]) -> bool:
    """A change of a suspended and cancelled order: the model makes those only in searches with both
    features and a failure, which ``scripts/model_moves.py`` leaves out."""
    return any(projected & 2 for projected in step) and any(projected & 1 for projected in step)


def describe(projected: int) -> str:
    """A projected record for people: ``Processing locked suspended``."""
    state, flags = divmod(projected, 8)
    names = [name for bit, name in ((4, "locked"), (2, "suspended"), (1, "cancel-requested")) if flags & bit]
    return " ".join([list(ProcessState)[state].value, *names])


def outside_the_model(before: StateRecord, after: StateRecord, by: Actor) -> str | None:
    """What the model leaves out that explains this change, or None."""
    error = after.last_error
    if (
        error is not None
        and error.code == PAST_POINT_OF_NO_RETURN
        and after.process_state is ProcessState.ERROR
    ):
        return "an irreversible step passed"
    if by is Actor.OWNER and after.process_state is ProcessState.COMPENSATION_FAILED:
        return "an undo refused for good"
    if after.dependency_wait_since is not None and by is Actor.OWNER:
        return "a dependency's breaker holds the order"
    if by is Actor.SUPERVISOR and after.suspended_at is not None and after.suspended_by != OPERATOR.audit_id:
        return "the poison guard holds the order"
    if (after.stop_requested_by or "client") != "client":
        return "an operator stopped the order"
    if by is Actor.OPERATOR and before.process_state is not after.process_state and after.corrections:
        return "an operator resubmits corrected input"
    if by is Actor.OWNER and _handed_back_decided(before, after):
        return "a start run again hands back a suspended order whose review is decided"
    return None


def _handed_back_decided(before: StateRecord, after: StateRecord) -> bool:
    """The start that paused a step for review, run again once a reviewer decided and an operator
    suspended the order, handed it back (``decide_step_start``'s rule 0): the model's attempt records the
    decision before it starts again, and hands the order back from ``Processing``."""
    return (
        before.process_state is ProcessState.AWAITING_REVIEW
        and after.process_state is ProcessState.PENDING
        and after.suspended_at is not None
        and before.review is not None
        and before.review.decision is not None
    )


RANDOM_RUNS = os.environ.get("MACHINE_RUNS_RANDOM") == "1"
"""make model-check's search: fresh random runs, ten times as many. make test's runs are the same on every
run (derandomized), so that a change the model lacks fails the change that brings it, not a later run
that happened to draw it; the random search is where such gaps are found (two were, each a change the
model makes from another abstract record or outside it, named above)."""

MACHINE_SETTINGS = settings(
    max_examples=300 if RANDOM_RUNS else 30,
    derandomize=not RANDOM_RUNS,
    stateful_step_count=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def test_the_model_s_changes_are_in_its_committed_set(spin: str) -> None:
    script = _moves_script()
    for defines in CHEAP:
        made = script.moves_of(defines, spin=spin)

        assert made, defines
        assert made <= model_moves(), f"{sorted(made - model_moves())}: python scripts/model_moves.py --write"


def test_the_protocol_machine_s_changes_are_the_model_s(capsys: pytest.CaptureFixture[str]) -> None:
    moves = model_moves()
    RUNS.clear()
    run_state_machine_as_test(RecordingMachine, settings=MACHINE_SETTINGS)

    tally: Counter[str] = Counter()
    strangers: list[Any] = []
    for run in RUNS:
        for order_id, seen in run.items():
            for before, after in pairwise(seen):
                step = (project(before.record), project(after.record))
                if step[0] == step[1]:
                    tally["the same to the model"] += 1
                    continue
                reason = outside_the_model(before.record, after.record, after.by)
                if reason is not None:
                    tally[reason] += 1
                elif (MODEL_ACTORS.get(after.by, -1), *step) in moves:
                    tally["made by the model"] += 1
                elif beyond_the_bound(step):
                    tally["suspended and cancelled: beyond the searches' bound"] += 1
                else:
                    strangers.append(f"{order_id} by {after.by}: {describe(step[0])} -> {describe(step[1])}")

    with capsys.disabled():
        print(f"\nmachine runs: {len(RUNS)}, changes: {dict(tally)}")
    assert not strangers, "\n".join(sorted(set(strangers)))
    assert tally["made by the model"] >= 50


def test_the_supervisor_giving_up_an_order_awaiting_review_is_a_change_the_model_makes() -> None:
    # A machine run made this change when the model's set lacked it: with SUP_MAX 2 the model reaches it
    # only with two failures, so the set holds a search with the supervisor giving up at its first.
    clock = FakeClock()
    deps = memory_deps(clock, REVIEW_AMOUNT_ABOVE=500.0, SUPERVISOR_MAX_FAILURES=1)
    before = pause_for_review(deps)
    assert before.complete_by is not None  # the review's deadline
    clock.advance((before.complete_by - clock.now()).total_seconds() + 60)

    assert recover_once(deps, "a:o-1") is Recovery.GAVE_UP
    after = deps.states.get("a:o-1").item
    assert (after.process_state, after.locked_by) == (ProcessState.COMPENSATING, None)
    assert (MODEL_ACTORS[Actor.SUPERVISOR], project(before), project(after)) in model_moves()


def test_a_start_run_again_after_a_decision_hands_back_a_suspended_order_outside_the_model() -> None:
    # A machine run made this change, which no search of the model makes: the model's attempt records
    # the decision (Processing) and is handed back at its next start. The code's re-run of the start
    # that paused the step finds the decision and the suspend at once (tests/unit/test_step_start.py).
    clock = FakeClock()
    deps = memory_deps(clock, REVIEW_AMOUNT_ABOVE=500.0)
    pause_for_review(deps)
    outcome = review_order(
        "a:o-1",
        ReviewDecision.APPROVE,
        REVIEWER,
        states=deps.states,
        queues=deps.queues,
        clock=clock,
        grace_s=deps.settings.starter.CLAIM_TIMEOUT_S,
        clients=deps.settings.clients.clients(),
    )
    assert outcome is not None
    suspend(deps, OPERATOR)
    before = deps.states.get("a:o-1").item

    start_v2_step(deps, "charge_payment")

    after = deps.states.get("a:o-1").item
    assert (after.process_state, after.locked_by) == (ProcessState.PENDING, None)
    assert (MODEL_ACTORS[Actor.OWNER], project(before), project(after)) not in model_moves()
    assert outside_the_model(before, after, Actor.OWNER) == (
        "a start run again hands back a suspended order whose review is decided"
    )
