"""Workflow definitions: the order workflow as versioned data.

A definition lists the steps in order; each step names the agent that performs it, the operation, the
step's timeout (its ``completeBy`` budget), the undo operation and whether it is a point of no return. A
step may acquire a short-term hold with an expiry (:class:`HoldDefinition`), made permanent by a later
step that commits it (docs/design.md §10).
One generator (:mod:`orchestrators.workflow`) runs any definition. A state record keeps the
``workflowVersion`` it started with, and is resumed with that version even after a newer one is
deployed, so definitions are never edited in place: a change is a new version.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import cast

from orderflow.errors import OrderflowError


@dataclass(frozen=True)
class HoldDefinition:
    """A short-term hold a step acquires on a resource: stock reserved, a payment authorised.

    The service keeps the hold ``lifetime_s`` seconds on its own clock and answers with the hold's
    ``expiresAt`` (UTC); at expiry it undoes the hold itself. The step named by ``commit`` on the same
    agent makes it permanent, and starts only while every hold is live (:mod:`orderflow.protocol.holds`).

    Attributes:
        lifetime_s: Whole seconds the service keeps the hold (sent as ``holdS``, a JSON integer).
        commit: The operation that makes the hold permanent (``commit``, ``capture``).
    """

    lifetime_s: int
    commit: str


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
        review: Before this step, an order above ``REVIEW_AMOUNT_ABOVE`` pauses in ``AwaitingReview``
            for a person's decision (approve: go on; reject: compensate).
        fallback_agent: An alternative provider tried once when the step fails permanently, before any
            compensation (its own idempotency key ``{orderId}:{step}:fallback``), or None.
        fallback_payload: Request fields the fallback provider gets instead of the order's (its own
            carrier, say), as ``(name, value)`` pairs.
        may_refuse: The provider can refuse the step for business reasons (out of stock, card declined).
            No such step may follow an irreversible one: past a point of no return the order can only be
            completed, so everything that can refuse must have passed before it.
        correctable: Fields of the submitted order (their wire names, ``carrier``) an operator may correct
            for this step (``orderflow resubmit --input``; docs/operator-api.md). A step that declares
            some and is refused (with no fallback left) stops the order in ``Error``, for an operator to
            correct and resubmit or to compensate, instead of compensating at once. Empty: corrections
            are refused.
        hold: The step acquires a short-term hold with an expiry (:class:`HoldDefinition`), or None.
        commits: The earlier step whose hold this step makes permanent (its operation is that hold's
            ``commit``, on the same agent), or None. Such a step, and every irreversible step of a
            workflow with holds, starts only while every hold is live.
    """

    name: str
    agent: str
    operation: str
    timeout_s: float | None = None
    undo: str | None = None
    irreversible: bool = False
    review: bool = False
    fallback_agent: str | None = None
    fallback_payload: tuple[tuple[str, str], ...] = ()
    may_refuse: bool = True
    correctable: tuple[str, ...] = ()
    hold: HoldDefinition | None = None
    commits: str | None = None


STEP_NAME = re.compile(r"^[a-z][a-z0-9_]{0,47}$")
"""Step names: they are parts of idempotency keys, request ids and custom statuses (``:`` and ``,``
separate those), so lowercase letters, digits and ``_`` only."""


CORRECTABLE_FIELDS = frozenset({"carrier", "items", "customerName"})
"""The order fields a step may declare correctable (:attr:`StepDefinition.correctable`). Never the order's
identity (``orderId``, ``customerId``: whose order it is, and who pays), its reply queue (the client
registry's), nor its ``amount`` and ``currency``: what the customer agreed to pay, and what the review
before a step decides on (it reads the order document)."""


class InvalidWorkflowDefinition(ValueError):
    """A workflow definition contradicts itself (raised when the module is imported: a deploy error)."""


@dataclass(frozen=True)
class WorkflowDefinition:
    """A versioned, ordered list of steps, and how to undo them.

    Attributes:
        version: The definition's version (``order-v1``); records keep the version they started with.
        steps: The steps, in execution order.
        undo_plan: Stages of compensation, run in order; the steps of one stage are undone in parallel
            (their undos are independent, e.g. releasing stock and refunding a charge). Every reversible
            step appears exactly once. None: one step per stage, in reverse execution order.

    Raises:
        InvalidWorkflowDefinition: a step name is malformed or repeated, a step that may be refused
            follows an irreversible one, or the undo plan names an unknown or irreversible step, names
            one twice, or misses a reversible one.
    """

    version: str
    steps: tuple[StepDefinition, ...]
    undo_plan: tuple[tuple[str, ...], ...] | None = None

    def __post_init__(self) -> None:
        names = [step.name for step in self.steps]
        for name in names:
            if not STEP_NAME.match(name):
                raise InvalidWorkflowDefinition(
                    f"{self.version}: step name {name!r} is not {STEP_NAME.pattern}"
                )
        if len(set(names)) != len(names):
            raise InvalidWorkflowDefinition(f"{self.version}: step names repeat: {names}")
        for step in self.steps:
            unknown = sorted(set(step.correctable) - CORRECTABLE_FIELDS)
            if unknown:
                raise InvalidWorkflowDefinition(
                    f"{self.version}: {step.name} declares {unknown} correctable; "
                    f"only {sorted(CORRECTABLE_FIELDS)} may be"
                )
        first_irreversible = next((i for i, step in enumerate(self.steps) if step.irreversible), None)
        if first_irreversible is not None:
            after = [s.name for s in self.steps[first_irreversible + 1 :] if s.may_refuse]
            if after:
                raise InvalidWorkflowDefinition(
                    f"{self.version}: {after} may be refused after the point of no return "
                    f"{self.steps[first_irreversible].name}; refusable steps must come before it"
                )
        self._check_holds()
        if self.undo_plan is not None:
            planned = [name for stage in self.undo_plan for name in stage]
            reversible = {step.name for step in self.steps if step.undo is not None and not step.irreversible}
            if len(set(planned)) != len(planned) or set(planned) != reversible or not all(self.undo_plan):
                raise InvalidWorkflowDefinition(
                    f"{self.version}: undo plan {self.undo_plan} must name each reversible step "
                    f"{sorted(reversible)} exactly once, in non-empty stages"
                )

    def _check_holds(self) -> None:
        """Holds are acquired before anything commits: each hold's step comes before every step the
        hold rule guards, and a committing step names an earlier hold of its own agent and operation.

        Raises:
            InvalidWorkflowDefinition: a hold with no lifetime, a step committing an unknown hold or
                with another agent or operation, or a hold acquired after a guarded step.
        """
        holds = {step.name: step for step in self.steps if step.hold is not None}
        guarded = [i for i, step in enumerate(self.steps) if self.guarded_by_holds(step)]
        for index, step in enumerate(self.steps):
            if step.hold is not None and (step.hold.lifetime_s <= 0 or (guarded and index > guarded[0])):
                raise InvalidWorkflowDefinition(
                    f"{self.version}: {step.name}'s hold must have a lifetime and come before every "
                    "step that commits"
                )
            if step.commits is None:
                continue
            held = holds.get(step.commits)
            hold = None if held is None else held.hold
            if held is None or hold is None or (held.agent, hold.commit) != (step.agent, step.operation):
                raise InvalidWorkflowDefinition(
                    f"{self.version}: {step.name} commits {step.commits!r}, which is no earlier hold "
                    f"of {step.agent} made permanent by {step.operation!r}"
                )

    def guarded_by_holds(self, step: StepDefinition) -> bool:
        """Whether ``step`` starts only while every hold is live: it commits a hold, or it is irreversible
        in a workflow that acquires holds."""
        has_holds = any(s.hold is not None for s in self.steps)
        return step.commits is not None or (step.irreversible and has_holds)

    @property
    def hold_steps(self) -> tuple[str, ...]:
        """The steps that acquire a hold, in execution order."""
        return tuple(step.name for step in self.steps if step.hold is not None)

    def undo_stages(self) -> tuple[tuple[str, ...], ...]:
        """The compensation stages: the declared plan, or each reversible step alone in reverse order."""
        if self.undo_plan is not None:
            return self.undo_plan
        return tuple(
            (step.name,) for step in reversed(self.steps) if step.undo is not None and not step.irreversible
        )

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
"""The demo order workflow: reserve inventory, charge payment, create the shipment (irreversible, last:
it is reached only after the steps that can be refused for business reasons have passed). Compensation
undoes one step at a time, in reverse."""

ORDER_V2 = WorkflowDefinition(
    version="order-v2",
    steps=(
        ORDER_V1.steps[0],
        StepDefinition("charge_payment", agent="payment", operation="charge", undo="refund", review=True),
        ORDER_V1.steps[2],
    ),
    undo_plan=(("charge_payment", "reserve_inventory"),),
)
"""The demo order workflow, version 2: the same steps; large payments wait for a person's review
(``REVIEW_AMOUNT_ABOVE``), and the refund and the stock release, being independent, are undone in
parallel."""

ORDER_V3 = WorkflowDefinition(
    version="order-v3",
    steps=(
        ORDER_V2.steps[0],
        ORDER_V2.steps[1],
        StepDefinition(
            "create_shipment",
            agent="shipping",
            operation="ship",
            undo="cancel",
            irreversible=True,
            fallback_agent="courier",
            fallback_payload=(("carrier", "MAIL"),),
        ),
    ),
    undo_plan=ORDER_V2.undo_plan,
)
"""The demo order workflow, version 3: version 2, and a shipment the order's carrier refuses goes by a
second carrier (the ``courier`` agent, by mail) before the order is compensated."""

ORDER_V4 = WorkflowDefinition(
    version="order-v4",
    steps=(
        ORDER_V3.steps[0],
        ORDER_V3.steps[1],
        replace(ORDER_V1.steps[2], correctable=("carrier",)),  # no fallback carrier, as in v1
    ),
    undo_plan=ORDER_V3.undo_plan,
)
"""The demo order workflow, version 4: version 3, but a shipment the carrier refuses is not sent by mail:
the order stops in ``Error`` (nothing shipped, the charge and the reservation kept) for an operator to
name another carrier (``resubmit --input``) or to compensate it. The carrier is the one field worth
correcting: it is a choice among a few carriers that a client can get wrong, and the shipment is the only
step that reads it. The items are what the customer ordered (the reservation and the shipment both read
them): changing them is a new order, so the demo's steps do not declare them."""

HOLD_LIFETIME_S = 120
"""Seconds the demo services keep order-v6's holds: long enough for the steps between the first hold and
the last commit (each at most ``STEP_TIMEOUT_S``), short enough that a stuck order frees its stock."""

ORDER_V6 = WorkflowDefinition(
    version="order-v6",
    steps=(
        StepDefinition(
            "reserve_inventory",
            agent="inventory",
            operation="reserve",
            undo="release",
            hold=HoldDefinition(HOLD_LIFETIME_S, commit="commit"),
        ),
        StepDefinition(
            "authorize_payment",
            agent="payment",
            operation="authorize",
            undo="void",
            hold=HoldDefinition(HOLD_LIFETIME_S, commit="capture"),
        ),
        StepDefinition("capture_payment", agent="payment", operation="capture", commits="authorize_payment"),
        StepDefinition(
            "commit_inventory", agent="inventory", operation="commit", commits="reserve_inventory"
        ),
        ORDER_V1.steps[2],
    ),
    undo_plan=(("authorize_payment", "reserve_inventory"),),
)
"""The demo order workflow, version 6: holds before irreversible work. The stock is reserved and the
payment authorised as holds that expire; the capture and the stock's commit make them permanent, and
start only while every hold is live (a lapsing hold is re-acquired once, or the order is compensated);
the shipment comes last. The commits have no undo of their own: releasing the reservation and voiding the
authorisation undo them too (a void of a captured authorisation refunds it)."""

WORKFLOWS: Mapping[str, WorkflowDefinition] = {
    ORDER_V1.version: ORDER_V1,
    ORDER_V2.version: ORDER_V2,
    ORDER_V3.version: ORDER_V3,
    ORDER_V4.version: ORDER_V4,
    ORDER_V6.version: ORDER_V6,
}
"""Every deployed workflow version; old versions stay while records use them. A version defined in
another module joins it through :func:`register_workflow`."""

_BUILT_IN = frozenset(WORKFLOWS)
"""This module's own versions, which :func:`withdraw_workflow` leaves in place."""

CURRENT_WORKFLOW = ORDER_V3
"""The version new orders start with, unless ``WORKFLOW_VERSION`` names another (``order-v4`` stops a
refused shipment for an operator's correction instead of sending it by mail)."""


def register_workflow(definition: WorkflowDefinition) -> None:
    """Deploy ``definition`` beside the versions of this module: for a version defined elsewhere (an
    extension package of your own, a test; docs/extending.md). Register at import, before a host
    starts: a host reads :data:`WORKFLOWS` when it starts (its agents and their queues, the start-up
    check of ``SERVICE_BINDINGS``) and on every record it handles.

    Raises:
        InvalidWorkflowDefinition: a version of that name is already deployed (a version is never
            replaced: records in flight keep the definition they started with).
    """
    if definition.version in WORKFLOWS:
        raise InvalidWorkflowDefinition(f"{definition.version}: already deployed; a change is a new version")
    _registry()[definition.version] = definition


def withdraw_workflow(version: str) -> None:
    """Remove a version :func:`register_workflow` deployed, once no record uses it (a record naming a
    version that is gone fails with :class:`UnknownWorkflowVersion`).

    Raises:
        InvalidWorkflowDefinition: ``version`` is one of this module's own, which stay.
        UnknownWorkflowVersion: ``version`` is not deployed.
    """
    if version in _BUILT_IN:
        raise InvalidWorkflowDefinition(f"{version}: a version of orderflow.workflows stays deployed")
    if _registry().pop(version, None) is None:
        raise UnknownWorkflowVersion(f"workflow version {version!r} is not deployed")


def _registry() -> dict[str, WorkflowDefinition]:
    """:data:`WORKFLOWS` as what it is, a dict: read-only to its readers, changed only by the two above."""
    return cast("dict[str, WorkflowDefinition]", WORKFLOWS)


def agent_names() -> list[str]:
    """Every agent some deployed workflow version uses (fallback providers included), sorted."""
    agents = {step.agent for definition in WORKFLOWS.values() for step in definition.steps}
    fallbacks = {s.fallback_agent for d in WORKFLOWS.values() for s in d.steps if s.fallback_agent}
    return sorted(agents | fallbacks)


def new_order_workflow(version: str | None) -> WorkflowDefinition:
    """The definition new orders start with: ``version`` (the ``WORKFLOW_VERSION`` setting), or the
    latest when it is empty.

    Raises:
        UnknownWorkflowVersion: ``version`` is not deployed.
    """
    return workflow_for(version) if version else CURRENT_WORKFLOW


def workflow_for(version: str) -> WorkflowDefinition:
    """The definition of ``version``.

    Raises:
        UnknownWorkflowVersion: this deployment does not have it.
    """
    try:
        return WORKFLOWS[version]
    except KeyError:
        raise UnknownWorkflowVersion(f"workflow version {version!r} is not deployed") from None
