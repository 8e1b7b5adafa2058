"""Claim on submit on the local host: a new order starts without the starter's timer, and one whose
submission died between the create and the claim is started by the starter's sweep."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import devhost.host
from intake import submission
from orchestrators.starter import StarterReport, run_starter_pass
from orderflow.records import ProcessState
from tests.harness import running_system
from tests.host_deps import HostDeps

pytestmark = pytest.mark.integration

NEVER_S = 3600.0
"""A starter interval no test outlives: the starter sweeps once, when the host starts, and not again
unless woken."""


class SweepClaims:
    """Records what each starter pass of the host claimed (wrapping ``devhost.host.run_starter_pass``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.claimed: list[str] = []
        self._lock = threading.Lock()
        inner = run_starter_pass

        def spy(**kwargs: Any) -> StarterReport:
            report = inner(**kwargs)
            with self._lock:
                self.claimed.extend(report.claimed)
            return report

        monkeypatch.setattr(devhost.host, "run_starter_pass", spy)


def test_an_order_starts_at_its_submission_with_no_starter_tick(
    deps: HostDeps, monkeypatch: pytest.MonkeyPatch
) -> None:
    sweeps = SweepClaims(monkeypatch)
    with running_system(deps, STARTER_INTERVAL_S=NEVER_S) as system:
        ids = system.submit_all(["tpch-1"])
        record = system.wait_settled(ids, timeout_s=20)["tpch-1"]
    assert record.process_state is ProcessState.PROCESSED
    assert (record.attempt, record.failure_count) == (1, 0)
    assert sweeps.claimed == []  # the submission claimed it, not the starter


class KilledBetweenCreateAndClaim(Exception):
    """The handler's death right after the state record's create, before its claim: the record stays
    Pending and unlocked, and the message is not completed."""


def test_an_order_whose_submission_died_before_its_claim_is_started_by_the_sweep(
    deps: HostDeps, monkeypatch: pytest.MonkeyPatch
) -> None:
    sweeps = SweepClaims(monkeypatch)
    deaths: list[str] = []

    def die_first(created: Any, **_: Any) -> bool:
        deaths.append(created.item.order_id)
        raise KilledBetweenCreateAndClaim(created.item.order_id)

    monkeypatch.setattr(submission, "start_at_once", die_first)
    with running_system(deps, STARTER_INTERVAL_S=1.0) as system:
        ids = system.submit_all(["tpch-1"])
        record = system.wait_settled(ids, timeout_s=20)["tpch-1"]
    assert deaths == [system.key("tpch-1")]  # the redelivery is a duplicate: it claims nothing
    assert record.process_state is ProcessState.PROCESSED
    assert (record.attempt, record.failure_count) == (1, 0)
    assert sweeps.claimed == [system.key("tpch-1")]
