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


FEATURES = ("CANCEL", "SUSPEND", "RESUBMIT", "REVIEW", "BUDGET", "REPLIES")
"""The requests from outside the owner, the retry budget and the replies: one search each, without
failures (``F=0``) to stay within make test's minute; make model-check searches each with a failure."""


@pytest.mark.parametrize("feature", FEATURES)
def test_each_request_keeps_the_protocol(
    spin: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], feature: str
) -> None:
    result = run_pan(spin, tmp_path, defines=(f"-D{feature}", "-DF=0"))

    _report(capsys, f"safety {feature} F=0", result.states, result.seconds)
    assert result.errors == 0, result.output
    assert not result.trail
    assert result.states > 2_000, result.output


@pytest.mark.parametrize("feature", FEATURES)
def test_each_order_ends_and_is_replied_to_under_each_request(
    spin: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], feature: str
) -> None:
    result = run_pan(spin, tmp_path, defines=(f"-D{feature}", "-DF=0"), liveness=True, optimize=False)

    _report(capsys, f"liveness {feature} F=0", result.states, result.seconds)
    assert "acceptance   cycles \t+ (fairness enabled)" in result.output
    assert result.errors == 0, result.output
    assert result.states > 1_000, result.output


MUTATIONS = {
    # An attempt that lost the record (superseded after its completeBy) still writes.
    "MUT_NO_FENCE": "assertion violated ((lk[o]==a)&&(att[o]==a))",
    # Two starters read the same Pending record and both claim attempt 1.
    "MUT_BLIND_CLAIM": "assertion violated ((a<31)&&((claimed[o]&(1<<a))==0))",
    # Live attempts are recovered under their feet until the order is given up.
    "MUT_EARLY_RECOVERY": "assertion violated",
    # A compensation whose attempt crashed is left Compensating for ever.
    "MUT_NO_RESUME": "assertion violated (((ps[o]==3)||(ps[o]==6))||(ps[o]==8))",
    # A cancel of an order re-queued after it ran a step cancels it outright: the step's effect stays.
    "MUT_CANCEL_DROPS_UNDO": "assertion violated (((ps[o]!=6)&&(ps[o]!=8))||(fx[((o*1)+s)]!=1))",
    # An operator resubmits a live order: a new attempt restarts the step under the old one's request,
    # whose effect then lands on a record that no longer shows the step Running.
    "MUT_RESUBMIT_ANY": "assertion violated (st[((o*1)+s)]==1)",
    # The starter claims a suspended order.
    "MUT_SUSPEND_IGNORED": "assertion violated  !(sus[o])",
    # A reviewed step starts without its review's approval; its effect is applied.
    "MUT_REVIEW_IGNORED": "assertion violated ( !((s==0))||(rv[o]==2))",
    # Steps start and orders are retried whatever the budget: the agent calls past the limit.
    "MUT_BUDGET_IGNORED": "assertion violated (calls[o]<=lim[o])",
    # The reply is sent after the settling write: a worker stopping in between loses it.
    "MUT_REPLY_AFTER": "assertion violated ((owed[o]==0)&&",
}
NEEDS = {
    "MUT_CANCEL_DROPS_UNDO": "CANCEL",
    "MUT_RESUBMIT_ANY": "RESUBMIT",
    "MUT_SUSPEND_IGNORED": "SUSPEND",
    "MUT_REVIEW_IGNORED": "REVIEW",
    "MUT_BUDGET_IGNORED": "BUDGET",
    "MUT_REPLY_AFTER": "REPLIES",
}
"""The feature a mutation of a request's rule needs."""


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
def test_a_protocol_rule_taken_away_gives_a_counterexample(spin: str, tmp_path: Path, mutation: str) -> None:
    feature = (f"-D{NEEDS[mutation]}",) if mutation in NEEDS else ()
    result = run_pan(spin, tmp_path, defines=(f"-D{mutation}", *feature))

    assert result.errors == 1, result.output
    assert result.trail
    assert MUTATIONS[mutation] in result.output
