"""Workflow definitions: the order workflow as versioned data.

A definition lists the steps in order; each step names the agent that performs it, the operation, the
step's timeout (its ``completeBy`` budget), the undo operation and whether it is a point of no return.
One generator (:mod:`orchestrators.workflow`) runs any definition. A state record keeps the
``workflowVersion`` it started with, and is resumed with that version even after a newer one is
deployed, so definitions are never edited in place: a change is a new version.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from orderflow.errors import OrderflowError


@dataclass(frozen=True)
class StepDefinition:
    """One step of a workflow.

    Attributes:
        name: Step name, unique in the workflow (``reserve_inventory``); part of idempotency keys.
        agent: The agent that performs it (``inventory``); its request queue is ``agent-<agent>``.
        operation: The agent operation (``reserve``).
        timeout_s: Seconds the step may take (its ``completeBy`` is the start time plus this), or None
            for the deployment's ``STEP_TIMEOUT_S``, which the starter passes in the orchestration input.
        undo: The agent operation that undoes it (``release``), or None.
        irreversible: A point of no return: once done, the order can only be completed.
    """

    name: str
    agent: str
    operation: str
    timeout_s: float | None = None
    undo: str | None = None
    irreversible: bool = False


@dataclass(frozen=True)
class WorkflowDefinition:
    """A versioned, ordered list of steps."""

    version: str
    steps: tuple[StepDefinition, ...]

    def step(self, name: str) -> StepDefinition:
        """The step called ``name``.

        Raises:
            KeyError: no such step in this version.
        """
        for step in self.steps:
            if step.name == name:
                return step
        raise KeyError(f"workflow {self.version} has no step {name!r}")

    @property
    def step_names(self) -> tuple[str, ...]:
        """Step names in execution order."""
        return tuple(step.name for step in self.steps)


class UnknownWorkflowVersion(OrderflowError):
    """A record names a workflow version this deployment does not have."""


ORDER_V1 = WorkflowDefinition(
    version="order-v1",
    steps=(
        StepDefinition("reserve_inventory", agent="inventory", operation="reserve", undo="release"),
        StepDefinition("charge_payment", agent="payment", operation="charge", undo="refund"),
        StepDefinition(
            "create_shipment",
            agent="shipping",
            operation="ship",
            undo="cancel",
            irreversible=True,
        ),
    ),
)
"""The demo order workflow: reserve inventory, charge payment, create the shipment."""

WORKFLOWS: Mapping[str, WorkflowDefinition] = {ORDER_V1.version: ORDER_V1}
"""Every deployed workflow version; old versions stay while records use them."""

CURRENT_WORKFLOW = ORDER_V1
"""The version new orders start with."""


def agent_names() -> list[str]:
    """Every agent some deployed workflow version uses, sorted."""
    return sorted({step.agent for definition in WORKFLOWS.values() for step in definition.steps})


def workflow_for(version: str) -> WorkflowDefinition:
    """The definition of ``version``.

    Raises:
        UnknownWorkflowVersion: this deployment does not have it.
    """
    try:
        return WORKFLOWS[version]
    except KeyError:
        raise UnknownWorkflowVersion(f"workflow version {version!r} is not deployed") from None
