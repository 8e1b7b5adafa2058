"""Workflow definitions validate themselves when declared (a bad one is a deploy error, not a runtime one)."""

from __future__ import annotations

import pytest

from orderflow.workflows import (
    ORDER_V1,
    ORDER_V2,
    ORDER_V3,
    ORDER_V4,
    ORDER_V6,
    WORKFLOWS,
    InvalidWorkflowDefinition,
    StepDefinition,
    UnknownWorkflowVersion,
    WorkflowDefinition,
    agent_names,
    new_order_workflow,
    register_workflow,
    withdraw_workflow,
    workflow_for,
)

pytestmark = pytest.mark.unit

RESERVE = StepDefinition("reserve", agent="inventory", operation="reserve", undo="release")
CHARGE = StepDefinition("charge", agent="payment", operation="charge", undo="refund")
SHIP = StepDefinition("ship", agent="shipping", operation="ship", irreversible=True)


def test_the_deployed_versions_and_their_undo_stages() -> None:
    assert sorted(WORKFLOWS) == ["order-v1", "order-v2", "order-v3", "order-v4", "order-v6"]
    assert ORDER_V1.undo_stages() == (("charge_payment",), ("reserve_inventory",))
    assert ORDER_V2.undo_stages() == ORDER_V3.undo_stages() == (("charge_payment", "reserve_inventory"),)
    assert ORDER_V4.undo_stages() == ORDER_V3.undo_stages()
    # order-v6's commits are undone by releasing the reservation and voiding the authorisation.
    assert ORDER_V6.undo_stages() == (("authorize_payment", "reserve_inventory"),)
    # Only order-v4's shipment takes a correction (its carrier), and it has no fallback carrier.
    correctable = {
        (d.version, s.name): s.correctable for d in WORKFLOWS.values() for s in d.steps if s.correctable
    }
    assert correctable == {("order-v4", "create_shipment"): ("carrier",)}
    assert ORDER_V4.step("create_shipment").fallback_agent is None
    assert agent_names() == ["courier", "inventory", "payment", "shipping"]
    assert new_order_workflow("") is ORDER_V3
    assert new_order_workflow("order-v1") is ORDER_V1


@pytest.mark.parametrize(
    ("steps", "plan", "complaint"),
    [
        ((RESERVE, StepDefinition("bad:name", agent="a", operation="o")), None, "step name"),
        ((RESERVE, RESERVE), None, "repeat"),
        ((RESERVE, SHIP, CHARGE), None, "point of no return"),
        ((RESERVE, CHARGE, SHIP), (("reserve",),), "exactly once"),
        ((RESERVE, CHARGE, SHIP), (("reserve", "charge", "ship"),), "exactly once"),
        ((RESERVE, CHARGE, SHIP), (("reserve",), ("reserve", "charge")), "exactly once"),
        ((RESERVE, CHARGE, SHIP), ((), ("reserve", "charge")), "non-empty"),
        (
            (RESERVE, StepDefinition("c", agent="p", operation="o", correctable=("customerId",))),
            None,
            "correct",
        ),
        ((RESERVE, StepDefinition("c", agent="p", operation="o", correctable=("replyTo",))), None, "correct"),
        ((RESERVE, StepDefinition("c", agent="p", operation="o", correctable=("amount",))), None, "correct"),
    ],
)
def test_a_contradictory_definition_is_refused(
    steps: tuple[StepDefinition, ...], plan: tuple[tuple[str, ...], ...] | None, complaint: str
) -> None:
    with pytest.raises(InvalidWorkflowDefinition, match=complaint):
        WorkflowDefinition(version="x", steps=steps, undo_plan=plan)


def test_a_step_that_cannot_be_refused_may_follow_the_point_of_no_return() -> None:
    notify = StepDefinition("notify", agent="mail", operation="send", may_refuse=False)
    definition = WorkflowDefinition(version="x", steps=(RESERVE, CHARGE, SHIP, notify))
    assert definition.undo_stages() == (("charge",), ("reserve",))


def test_a_version_defined_elsewhere_is_registered_once_and_withdrawn() -> None:
    versions, agents = sorted(WORKFLOWS), agent_names()
    mail = StepDefinition("notify", agent="mail", operation="send", undo="unsend")
    extra = WorkflowDefinition(version="order-x", steps=(RESERVE, mail, SHIP))
    register_workflow(extra)
    try:
        assert (workflow_for("order-x"), new_order_workflow("order-x")) == (extra, extra)
        assert agent_names() == sorted([*agents, "mail"])
        with pytest.raises(InvalidWorkflowDefinition, match="already deployed"):
            register_workflow(WorkflowDefinition(version="order-x", steps=(RESERVE,)))
        with pytest.raises(InvalidWorkflowDefinition, match="already deployed"):
            register_workflow(WorkflowDefinition(version="order-v1", steps=(RESERVE,)))
        assert workflow_for("order-x") is extra
    finally:
        withdraw_workflow("order-x")
    with pytest.raises(UnknownWorkflowVersion):
        workflow_for("order-x")
    with pytest.raises(UnknownWorkflowVersion):
        withdraw_workflow("order-x")
    with pytest.raises(InvalidWorkflowDefinition, match="stays deployed"):
        withdraw_workflow("order-v1")
    assert (sorted(WORKFLOWS), agent_names()) == (versions, agents)
