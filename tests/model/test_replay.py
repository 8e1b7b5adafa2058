"""The model's runs replayed against the code (docs/model.md, "Kept equal to the code"): every record
change of a random run of the model is one the code's own functions make, from the same record to the
same record; and the counterexample of a rule taken away from the model is refused by the code.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.model.replay import Bounds, Disagreement, parse, replay
from tests.model.spin_run import follow_trail, run_pan, simulate

pytestmark = pytest.mark.model

SEEDS = range(1, 13)
"""Random runs per feature set: each a few dozen record changes."""

RUNS = {
    "base": (),
    "cancel": ("-DCANCEL",),
    "suspend": ("-DSUSPEND",),
    "resubmit": ("-DRESUBMIT",),
    "review": ("-DREVIEW",),
    "budget": ("-DBUDGET",),
    "all": ("-DCANCEL", "-DSUSPEND", "-DRESUBMIT", "-DREVIEW", "-DBUDGET", "-DREPLIES"),
}


def bounds(defines: tuple[str, ...]) -> Bounds:
    """The code's settings that match the model's default bound under ``defines``."""
    return Bounds(
        review="-DREVIEW" in defines,
        budgeted="-DBUDGET" in defines,
        comp_max=1 if "-DRESUBMIT" in defines else 2,  # COMP_MAX is F with an operator, F + 1 without
    )


@pytest.mark.parametrize("run", sorted(RUNS))
def test_random_runs_of_the_model_are_runs_of_the_code(
    spin: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], run: str
) -> None:
    defines = RUNS[run]
    played, kinds = 0, set()
    for seed in SEEDS:
        changes = parse(simulate(spin, tmp_path, defines=defines, seed=seed))
        played += replay(changes, bounds(defines))
        kinds |= {change.kind for change in changes}

    with capsys.disabled():
        print(f"\nreplay {run}: {played} record changes of {len(SEEDS)} runs, kinds {sorted(kinds)}")
    assert played >= len(SEEDS)
    assert "claim" in kinds


TRAILS = {
    # The code's cancel of an order that ran a step compensates it; the mutated model cancels it outright.
    "MUT_CANCEL_DROPS_UNDO": ("-DCANCEL", "the code's record is (<ProcessState.COMPENSATING"),
    # The operator API refuses to resubmit an order that is not in Error.
    "MUT_RESUBMIT_ANY": ("-DRESUBMIT", "the operator API refuses it: NotResubmittable"),
}


@pytest.mark.parametrize("mutation", sorted(TRAILS))
def test_the_counterexample_of_a_rule_taken_away_is_refused_by_the_code(
    spin: str, tmp_path: Path, mutation: str
) -> None:
    feature, refusal = TRAILS[mutation]
    defines = (f"-D{mutation}", feature)
    assert run_pan(spin, tmp_path, defines=defines).trail
    changes = parse(follow_trail(spin, tmp_path, defines=defines))
    assert changes, "the trail changes no record"

    with pytest.raises(Disagreement) as refused:
        replay(changes, bounds(defines))

    assert refusal in str(refused.value)
