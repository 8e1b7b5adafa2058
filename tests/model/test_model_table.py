"""The model's states and transitions are the code's: ``model/orderflow.pml`` holds exactly the Promela
fragment ``scripts/model_table.py`` makes from ``orderflow.protocol.state_machine``'s tables."""

from __future__ import annotations

import importlib.util
from types import ModuleType

import pytest

from orderflow.protocol.state_machine import PROCESS_TRANSITIONS, STEP_TRANSITIONS
from orderflow.records import ProcessState, StepStatus
from tests.model.spin_run import MODEL, REPO

pytestmark = pytest.mark.unit


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("model_table", REPO / "scripts" / "model_table.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_model_holds_the_code_s_transition_table() -> None:
    table = _generator()

    committed = table.committed_table(MODEL.read_text(encoding="utf-8"))

    assert committed == table.promela_table(), "run: python scripts/model_table.py --write"


def test_the_fragment_names_every_state_and_allowed_transition() -> None:
    fragment = _generator().promela_table()

    for number, state in enumerate(ProcessState):
        assert f"#define P_{state.name} {number}\n" in fragment
    assert (
        "#define TERMINAL(p) ((p) == P_PROCESSED || (p) == P_COMPENSATED || (p) == P_CANCELLED)" in fragment
    )
    assert "((c) == P_COMPENSATION_FAILED && ((t) == P_COMPENSATING)))" in fragment
    assert "((c) == S_COMPLETED && ((t) == S_COMPENSATING)) || \\" in fragment


def test_a_changed_table_changes_the_fragment() -> None:
    table = _generator()
    fewer = dict(PROCESS_TRANSITIONS)
    fewer[ProcessState.ERROR] = frozenset({ProcessState.PENDING})  # an operator can no longer compensate
    steps = dict(STEP_TRANSITIONS)
    steps[StepStatus.COMPLETED] = frozenset()

    assert table.promela_table(fewer, STEP_TRANSITIONS) != table.promela_table()
    assert table.promela_table(PROCESS_TRANSITIONS, steps) != table.promela_table()
    assert "((c) == P_ERROR && ((t) == P_PENDING)) || \\" in table.promela_table(fewer, STEP_TRANSITIONS)


def test_a_model_without_the_fragment_has_none() -> None:
    assert _generator().committed_table("/* no table here */") == ""
