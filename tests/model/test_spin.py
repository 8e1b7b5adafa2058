"""The protocol's model, checked exhaustively by spin at the default bound (docs/model.md): no
assertion fails and no run ends with an order outside a terminal state, every order reaches a terminal
state under weak fairness, and each protocol rule taken away gives a counterexample.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.model.spin_run import run_pan

pytestmark = pytest.mark.model


def _report(capsys: pytest.CaptureFixture[str], name: str, states: int, seconds: float) -> None:
    with capsys.disabled():
        print(f"\nspin {name}: {states} states stored, {seconds:.1f} s")


def test_the_protocol_holds_in_every_interleaving(
    spin: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_pan(spin, tmp_path)

    _report(capsys, "safety", result.states, result.seconds)
    assert result.errors == 0, result.output
    assert not result.trail
    # The search is exhaustive over a non-trivial space, not a model that stops at once.
    assert result.states > 100_000, result.output


def test_every_order_reaches_a_terminal_state_under_weak_fairness(
    spin: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_pan(spin, tmp_path, liveness=True)

    _report(capsys, "liveness", result.states, result.seconds)
    assert "acceptance   cycles \t+ (fairness enabled)" in result.output
    assert result.errors == 0, result.output
    assert result.states > 100_000, result.output


MUTATIONS = {
    # An attempt that lost the record (superseded after its completeBy) still writes.
    "MUT_NO_FENCE": "assertion violated ((lk[o]==a)&&(att[o]==a))",
    # Two starters read the same Pending record and both claim attempt 1.
    "MUT_BLIND_CLAIM": "assertion violated ((a<31)&&((claimed[o]&(1<<a))==0))",
    # Live attempts are recovered under their feet until the order is given up.
    "MUT_EARLY_RECOVERY": "assertion violated",
    # A compensation whose attempt crashed is left Compensating for ever.
    "MUT_NO_RESUME": "assertion violated (((ps[o]==3)||(ps[o]==6))||(ps[o]==8))",
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_a_protocol_rule_taken_away_gives_a_counterexample(spin: str, tmp_path: Path, mutation: str) -> None:
    result = run_pan(spin, tmp_path, defines=(f"-D{mutation}",))

    assert result.errors == 1, result.output
    assert result.trail
    assert MUTATIONS[mutation] in result.output
