"""The processState and step-status transition tables."""

from __future__ import annotations

import pytest

from orderflow.errors import IllegalTransition
from orderflow.protocol.state_machine import (
    PROCESS_TRANSITIONS,
    SETTLED_STATES,
    TERMINAL_STATES,
    can_transition,
    check_step_transition,
    check_transition,
)
from orderflow.records import ProcessState, StepStatus

pytestmark = pytest.mark.unit

P = ProcessState


def test_every_state_has_an_entry() -> None:
    assert set(PROCESS_TRANSITIONS) == set(ProcessState)


def test_terminal_states_are_exactly_the_final_ones() -> None:
    assert {P.PROCESSED, P.COMPENSATED, P.CANCELLED} == TERMINAL_STATES
    assert TERMINAL_STATES | {P.ERROR, P.COMPENSATION_FAILED} == SETTLED_STATES


@pytest.mark.parametrize("state", sorted(TERMINAL_STATES))
@pytest.mark.parametrize("target", list(ProcessState))
def test_nothing_leaves_a_terminal_state(state: ProcessState, target: ProcessState) -> None:
    with pytest.raises(IllegalTransition):
        check_transition(state, target)


@pytest.mark.parametrize(
    ("current", "target"),
    [
        (P.PENDING, P.PROCESSING),  # claim
        (P.PROCESSING, P.PROCESSING),  # step update
        (P.PROCESSING, P.PENDING),  # supervisor re-queue
        (P.PROCESSING, P.ERROR),  # supervisor gives up / permanent error
        (P.PROCESSING, P.PROCESSED),
        (P.ERROR, P.PENDING),  # operator resubmits
    ],
)
def test_protocol_transitions_are_allowed(current: ProcessState, target: ProcessState) -> None:
    check_transition(current, target)
    assert can_transition(current, target)


@pytest.mark.parametrize(
    ("current", "target"),
    [(P.PENDING, P.PROCESSED), (P.PENDING, P.COMPENSATED), (P.ERROR, P.PROCESSED)],
)
def test_shortcuts_are_rejected(current: ProcessState, target: ProcessState) -> None:
    assert not can_transition(current, target)
    with pytest.raises(IllegalTransition, match=f"{current.value} -> {target.value}"):
        check_transition(current, target)


def test_steps_never_go_back_from_completed_to_running() -> None:
    with pytest.raises(IllegalTransition, match="reserve: Completed -> Running"):
        check_step_transition("reserve", StepStatus.COMPLETED, StepStatus.RUNNING)
    check_step_transition("reserve", StepStatus.RUNNING, StepStatus.RUNNING)
    check_step_transition("reserve", StepStatus.FAILED, StepStatus.RUNNING)
