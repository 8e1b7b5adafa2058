"""Holds end to end on the local host (in memory and on the emulators): order-v6's steps with holds short
enough to lapse while the demo payment service is slowed down on purpose.

The stock is held first; the authorisation is delayed past the stock hold's expiry, so when the capture
is about to start the stock hold has expired at the inventory service. The order re-acquires it under a
new key and completes; or, when the service refuses the re-acquisition, the order is compensated and
nothing is left held at either service.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import httpx
import pytest

from demo.faults import FaultPlan
from orderflow.records import ProcessState, StepStatus
from orderflow.workflows import (
    ORDER_V6,
    HoldDefinition,
    WorkflowDefinition,
    register_workflow,
    withdraw_workflow,
)
from tests.harness import System, running_system
from tests.host_deps import HostDeps

pytestmark = pytest.mark.integration

STEP_TIMEOUT_S = 3.0
MARGIN_S = 1.0
HOLD_S = 9
"""Longer than a step's deadline and the margin (a fresh hold is committed at once), shorter than the
delay below (the stock hold expires while the authorisation waits)."""
DELAY_S = HOLD_S + 1.0

SHORT_HOLDS = WorkflowDefinition(
    version="order-v6-short-holds",
    steps=(
        replace(ORDER_V6.steps[0], hold=HoldDefinition(HOLD_S, commit="commit")),
        # The authorisation's own deadline outlasts the injected delay.
        replace(ORDER_V6.steps[1], hold=HoldDefinition(HOLD_S, commit="capture"), timeout_s=DELAY_S + 4),
        *ORDER_V6.steps[2:],
    ),
    undo_plan=ORDER_V6.undo_plan,
)
"""order-v6 with holds of a few seconds."""


@pytest.fixture
def short_holds() -> Iterator[WorkflowDefinition]:
    register_workflow(SHORT_HOLDS)
    try:
        yield SHORT_HOLDS
    finally:
        withdraw_workflow(SHORT_HOLDS.version)


def slow_authorisation(*, refuse: tuple[str, ...] = ()) -> FaultPlan:
    """Every authorisation waits :data:`DELAY_S`; forward calls whose keys contain ``refuse`` are refused."""
    return FaultPlan(delay_s={"payments.authorize": DELAY_S}, refuse_keys_containing=refuse)


def facts(system: System, order_id: str) -> dict[str, Any]:
    """The demo services' facts of the client's order ``order_id``."""
    answer: dict[str, Any] = httpx.get(
        f"{system.services_url}/orders/{system.key(order_id)}/facts", timeout=5
    ).json()
    return answer


SETTINGS: dict[str, Any] = {
    "WORKFLOW_VERSION": SHORT_HOLDS.version,
    "STEP_TIMEOUT_S": STEP_TIMEOUT_S,
    "HOLD_SKEW_MARGIN_S": MARGIN_S,
    "AGENT_CALL_TIMEOUT_S": DELAY_S + 2,
}


def test_a_hold_that_expires_during_a_delay_is_reacquired_and_the_order_completes(
    deps: HostDeps, short_holds: WorkflowDefinition
) -> None:
    with running_system(deps, faults=slow_authorisation(), **SETTINGS) as system:
        system.submit_all(["tpch-1"])
        record = system.wait_settled(["tpch-1"], timeout_s=60)["tpch-1"]
        key = system.key("tpch-1")
        seen = facts(system, "tpch-1")
        audit = system.audit()
    assert record.process_state is ProcessState.PROCESSED, record.last_error
    assert [s.status for s in record.steps.values()] == [StepStatus.COMPLETED] * 5
    stock, money = record.holds["reserve_inventory"], record.holds["authorize_payment"]
    # The stock was held again under a new key, and both holds were committed while live.
    assert (stock.reacquired, stock.idempotency_key) == (1, f"{key}:reserve_inventory:reacquire-1")
    assert (money.reacquired, money.idempotency_key) == (0, f"{key}:authorize_payment")
    for hold in (stock, money):
        assert hold.committed_at is not None and hold.committed_at < hold.expires_at
        assert hold.reacquiring_by is None
    assert [(r["idempotencyKey"], r["expired"], r["committed"]) for r in seen["reservations"]] == [
        (f"{key}:reserve_inventory", True, False),
        (f"{key}:reserve_inventory:reacquire-1", False, True),
    ]
    assert (seen["summary"]["activeReservations"], seen["summary"]["activeAuthorizations"]) == (1, 0)
    assert audit["holds"] == {
        "acquired": 3,
        "expired": 1,
        "committed": 2,
        "commitsRefused": 0,
        "commitsOnExpired": 0,
        "live": 0,
    }
    assert audit["duplicate_effects"] == 0


def test_a_refused_reacquisition_compensates_the_order_with_nothing_left_held(
    deps: HostDeps, short_holds: WorkflowDefinition
) -> None:
    plan = slow_authorisation(refuse=(":reacquire-",))
    with running_system(deps, faults=plan, **SETTINGS) as system:
        system.submit_all(["tpch-1"])
        record = system.wait_settled(["tpch-1"], timeout_s=60)["tpch-1"]
        seen = facts(system, "tpch-1")
        audit = system.audit()
    assert record.process_state is ProcessState.COMPENSATED
    assert record.last_error is not None
    assert (record.last_error.kind, record.last_error.code, record.last_error.step) == (
        "permanent",
        "refused",
        "reserve_inventory",
    )
    # Nothing was captured or committed; the authorisation was voided, the stock hold expired.
    assert {
        s: record.steps[s].status for s in ("capture_payment", "commit_inventory", "create_shipment")
    } == {
        "capture_payment": StepStatus.NOT_STARTED,
        "commit_inventory": StepStatus.NOT_STARTED,
        "create_shipment": StepStatus.NOT_STARTED,
    }
    assert {e.step: e.status for e in record.compensation_log} == {
        "reserve_inventory": "Compensated",
        "authorize_payment": "Compensated",
    }
    summary = seen["summary"]
    assert (summary["activeReservations"], summary["activeAuthorizations"], summary["netCharged"]) == (
        0,
        0,
        "0.00",
    )
    assert audit["holds"] == {
        "acquired": 2,
        "expired": 1,
        "committed": 0,
        "commitsRefused": 0,
        "commitsOnExpired": 0,
        "live": 0,
    }
