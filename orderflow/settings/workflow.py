"""The sections of the order flow itself: the starter's claims, the steps' deadlines and budgets, the
agents and the remote services they are bound to, and the circuit breakers over those services."""

from __future__ import annotations

from pydantic import Field, field_validator

from orderflow.settings.base import Section
from orderflow.settings.hosts import UnsafeAzureSetting


class Starter(Section):
    """Starter: when and how many Pending orders are claimed, and what a claim gives the new
    orchestration. Read by the submission's claim (intake.submission), the starter's sweep
    (orchestrators.starter) and its hosts' timers."""

    CLAIM_ON_SUBMIT: bool = Field(
        True,
        description="The submission claims the order it has just recorded and starts its attempt at once, "
        "with the starter's conditional write (default true): an order waits for no timer. The starter "
        "stays the sweeper of what that did not start (a process that died between the create and the "
        "claim, backoff, dependency deferrals, resubmits). Off: every order waits for the starter.",
    )
    STARTER_SCHEDULE: str = Field(
        "*/30 * * * * *",
        description="NCRONTAB schedule of the starter's timer trigger on Azure (every 30 s): the sweeper of "
        "the Pending orders the submission did not start (with CLAIM_ON_SUBMIT off, every order waits up to "
        "this long to be claimed).",
    )
    STARTER_BATCH: int = Field(
        32,
        ge=1,
        description="Most records one starter sweep claims; bounds the work per tick and the backlog "
        "held by one process.",
    )
    CLAIM_TIMEOUT_S: float = Field(
        30.0,
        gt=0,
        description="completeBy set by a claim that starts no step (a compensation to resume, or a first "
        "step that needs a decision first): time the new orchestration has to make its first write before "
        "the supervisor may recover the order.",
    )
    START_LATENCY_S: float = Field(
        5.0,
        ge=0,
        description="Seconds added to the completeBy of the step a claim starts (the attempt's first step, "
        "started in the claim's own write): the time the new orchestration may take to be scheduled and "
        "send its request, so a slow start does not eat the step's own time.",
    )
    STARTER_SENDS_FIRST_REQUEST: bool = Field(
        True,
        description="The starter sends the agent request of the step a claim started, once the instance is "
        "scheduled, and the orchestration only waits for its answer (default true; docs/design.md §3.2): one "
        "activity, one orchestration episode and one point read per order fewer. Set it false before "
        "rolling a deployment back to a version that predates it, whose orchestrations refuse an input "
        "naming that step (firstStep); instances then start their first step themselves.",
    )


class Steps(Section):
    """Steps: which workflow new orders run, how long one step may take, when an order waits for a
    person's review, and how many remote calls an order may spend. Read by the workflow and its
    activities, the starter's claim and the supervisor's recovery."""

    STEP_TIMEOUT_S: float = Field(
        8.0,
        gt=0,
        description="Default completeBy of one remote step (seconds). The durable timer of the race "
        "fires then; the agent starts no call after it.",
    )
    WORKFLOW_VERSION: str = Field(
        "",
        description="Workflow definition new orders start with (e.g. 'order-v2'); empty (default) for "
        "orderflow.workflows.CURRENT_WORKFLOW (order-v3), not the newest version registered. Records in "
        "flight keep the version they started with.",
    )
    REVIEW_AMOUNT_ABOVE: float = Field(
        0.0,
        ge=0,
        description="Orders whose amount is above this pause for a person's review (AwaitingReview) "
        "before a step that asks for it (order-v2: the charge). 0 (default) disables review.",
    )
    REVIEW_TIMEOUT_S: float = Field(
        86_400.0,
        gt=0,
        description="Seconds a review may take (default one day); at the deadline REVIEW_DEFAULT applies.",
    )
    REVIEW_DEFAULT: str = Field(
        "reject",
        pattern="^(approve|reject)$",
        description="Decision taken when a review's deadline passes: 'reject' (default: no payment is "
        "taken without a person's approval; the order is compensated) or 'approve'.",
    )
    AGENT_MAX_CALLS_PER_STEP: int = Field(
        4,
        ge=1,
        description="Calls one attempt of a step may make: reserved from the order's retry budget when the "
        "step starts (in the same write), the unused ones returned when its outcome is recorded. An attempt "
        "that dies keeps its whole reservation spent, so the budget is never exceeded, only used up sooner.",
    )
    RETRY_BUDGET: int = Field(
        24, ge=1, description="End-to-end limit of remote calls per order across all attempts and steps."
    )
    HOLD_SKEW_MARGIN_S: float = Field(
        2.0,
        ge=0,
        description="Seconds kept in hand for clock skew between the hosts and a remote service holding a "
        "resource (order-v6's holds): a step that commits a hold starts only while every hold's expiresAt "
        "is more than this plus the step's deadline ahead; otherwise the hold is re-acquired once, or the "
        "order is compensated.",
    )


class Agents(Section):
    """Agents: the remote service each agent is bound to (``SERVICE_BINDINGS``) and how an agent calls it
    (timeout, retries). Read by the agents and the hosts that start them."""

    SERVICE_BINDINGS: str = Field(
        "{}",
        description="JSON object: for each agent (inventory, payment, shipping, courier), the remote service "
        'it calls: baseUrl, auth ({"mode": "entra", "scope": ...} or {"mode": "none", '
        '"reason": ...}), timeoutS, connectTimeoutS, and per operation the request (method, path template, '
        "result fields); see docs/extending.md, 'Service bindings'. Empty (default): none, and a host "
        "running agents refuses to start until every step's operation has a mapping.",
    )
    AGENT_CALL_TIMEOUT_S: float = Field(
        5.0,
        gt=0,
        description="HTTP timeout of one remote call, further capped by the time left to the deadline.",
    )
    AGENT_BACKOFF_INITIAL_S: float = Field(
        0.2, ge=0, description="First retry delay of an agent (exponential)."
    )
    AGENT_BACKOFF_MAX_S: float = Field(2.0, ge=0, description="Largest retry delay of an agent.")

    @field_validator("SERVICE_BINDINGS")
    @classmethod
    def _bindings_parse(cls, value: str) -> str:
        from orderflow.bindings import ServiceBindings  # noqa: PLC0415 (it imports this package)

        ServiceBindings.parse(value)  # ValueError, one line naming what is wrong
        return value

    def binding_refusals(self, *, azure: bool) -> list[str]:
        """Why ``SERVICE_BINDINGS`` cannot serve the deployed workflows, one line each, each starting with
        the service's name (:func:`orderflow.bindings.binding_refusals`); a value that does not parse is
        refused at load already."""
        from orderflow.bindings import ServiceBindings, binding_refusals  # noqa: PLC0415 (it imports this package)
        from orderflow.workflows import WORKFLOWS  # noqa: PLC0415

        return list(
            binding_refusals(ServiceBindings.parse(self.SERVICE_BINDINGS), WORKFLOWS.values(), azure=azure)
        )


class Breakers(Section):
    """Breakers: the circuit breaker per remote dependency, shared by every host. Read by the starter,
    the agents and the step activities (orderflow.breaker)."""

    BREAKER_ENABLED: bool = Field(
        True,
        description="A circuit breaker per remote dependency (each agent's service), shared by every host "
        "through a document per dependency in the breakers container (default true; docs/operations.md). "
        "While it is open, steps on that dependency are not started and agents make no call to it: the "
        "order waits, its retry budget unspent, and one probe at a time tests the dependency. Off: every "
        "order retries a dead dependency on its own budget.",
    )
    BREAKER_FAILURES_TO_OPEN: int = Field(
        10,
        ge=1,
        description="Transient failures in a row, with no success between them, that one host sees from "
        "a dependency before it opens the dependency's breaker for every host (default 10: random faults "
        "at a rate of 30% make ten in a row about once in 170,000 calls).",
    )
    BREAKER_OPEN_S: float = Field(
        15.0,
        gt=0,
        description="Seconds a breaker stays open once it opens, before one probe may test the dependency "
        "(default 15). Each failed probe re-opens it for twice as long as the time before, up to "
        "BREAKER_OPEN_MAX_S.",
    )
    BREAKER_OPEN_MAX_S: float = Field(
        240.0,
        gt=0,
        description="Longest a breaker stays open between probes, seconds (default 240).",
    )
    BREAKER_PROBE_LEASE_S: float = Field(
        30.0,
        gt=0,
        description="Seconds the one probe of a half-open breaker holds it (default 30, about a claim's "
        "completeBy): the step started as the probe must reach its agent and call within it. No other "
        "order calls the dependency meanwhile; a probe that dies frees it when the lease ends.",
    )
    BREAKER_MAX_WAIT_S: float = Field(
        900.0,
        gt=0,
        description="Longest an order waits for an open breaker, seconds from its first wait (default "
        "900). Past it the order stops waiting: it is compensated with lastError unavailable / "
        "dependency_unavailable and an alert, as the supervisor does with an order that keeps failing.",
    )
    BREAKER_CACHE_S: float = Field(
        1.0,
        ge=0,
        description="Seconds a host reuses a breaker document it read before reading it again (default "
        "1): one read per dependency per host per period, not one per call. A breaker another host "
        "opens is seen within this time.",
    )


def check_bindings(agents: Agents, *, azure: bool) -> None:
    """Refuse, at the start of a host that runs agents, bindings that cannot serve the workflows.

    Raises:
        UnsafeAzureSetting: the first refusal, one line (``SERVICE_BINDINGS <service>: <why>``).
    """
    for refusal in agents.binding_refusals(azure=azure):
        raise UnsafeAzureSetting("SERVICE_BINDINGS", refusal)
