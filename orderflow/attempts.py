"""Claim an order's next attempt and start it: the one claim the submission's fast path and the starter's
sweep share.

The claim (docs/design.md §3.2) is one conditional write that sets ``processState=Processing``,
``lockedBy={orderId}:{attempt+1}``, ``attempt+=1`` and a ``completeBy``, *before* the orchestration is
scheduled; two claimants reading the same record race on its ETag and exactly one wins, the other does
nothing. The same write starts the attempt's first step (Running, its calls reserved, ``completeBy`` its
deadline), and once the instance is scheduled the claimant sends that step's agent request itself: the
orchestration begins by waiting for the answer, with no ``start_step`` activity (one activity, one
orchestration episode and one point read per order fewer). A request that could not be sent leaves the
attempt to its timer, and the supervisor recovers it as after any lost request.
Scheduling an instance id that already exists is success, never a reason to start again: Durable
Functions 1.x ``start_new`` would silently replace it (docs/design.md §7). A process that dies between the
claim and the start, or a start that fails, leaves a ``Processing`` record whose ``completeBy`` expires:
the supervisor recovers it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from orderflow import telemetry, tracing
from orderflow.breaker import CircuitBreakers
from orderflow.clock import Clock, latest
from orderflow.contracts import ORDER_WORKFLOW, OrchestrationInput, StartedStep
from orderflow.dependencies import Dependencies
from orderflow.errors import ConcurrencyConflict, TransientError
from orderflow.orchestration import OrchestrationClient
from orderflow.protocol.conditional import Note, update
from orderflow.protocol.step_start import step_dependency
from orderflow.protocol.transitions import forward
from orderflow.queues.base import QueueFactory
from orderflow.records import OrderDocument, ProcessState, StateRecord, StepStatus, instance_id_for
from orderflow.settings import Queues, Starter, Steps
from orderflow.step_requests import send_step_request
from orderflow.stores.base import StateStore, Versioned
from orderflow.timeline import Actor
from orderflow.workflows import StepDefinition, UnknownWorkflowVersion, workflow_for

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class FirstRequests:
    """What a claimant needs to send the agent request of the step a claim started.

    Attributes:
        queues: Where the agents' request queues are.
        order: The order document of an order id (the host's order cache over the order store).
    """

    queues: QueueFactory
    order: Callable[[str], OrderDocument]


def first_requests_for(deps: Dependencies, starter: Starter) -> FirstRequests | None:
    """The hosts' :class:`FirstRequests`: ``deps``' queues and order cache over its order store; None when
    ``starter.STARTER_SENDS_FIRST_REQUEST`` is off."""
    if not starter.STARTER_SENDS_FIRST_REQUEST:
        return None
    return FirstRequests(deps.queues, lambda order_id: deps.order_cache.get(deps.orders, order_id))


FIRST_REQUEST_RETRY = Retrying(
    retry=retry_if_exception_type(TransientError),
    stop=stop_after_attempt(3),
    wait=wait_exponential(multiplier=0.1, max=0.4),
    reraise=True,
)
"""The claimant's tries of a first request: short, since the pass waits for them (an outage that outlasts
them leaves the attempt to its timer)."""

CLAIMABLE_STATES = (ProcessState.PENDING, ProcessState.COMPENSATING)
"""States a claim takes when unlocked and ready: ``Pending`` (run the steps) and ``Compensating``
(resume the undo: the supervisor unlocked it after its attempt expired, or gave up forward progress)."""


def claim(
    states: StateStore,
    found: Versioned[StateRecord],
    clock: Clock,
    starter: Starter,
    steps: Steps,
    *,
    host_id: str,
    breakers: CircuitBreakers | None = None,
) -> Versioned[StateRecord] | None:
    """Claim one ``Pending`` (or unlocked ``Compensating``) record with a conditional write.

    A ``Pending`` record's first step still to run is started in the same write
    (:func:`~orderflow.protocol.transitions.forward.start_first_step`). When that step's dependency is held
    by its open circuit breaker, the record is not claimed: one conditional write defers it to when the
    breaker lets a probe through (:func:`defer_for_dependency`).

    Args:
        states: The state store.
        found: The record as read, with its ETag.
        clock: Time source.
        starter: ``CLAIM_TIMEOUT_S`` and the first step's ``START_LATENCY_S``.
        steps: The first step's ``STEP_TIMEOUT_S``, ``AGENT_MAX_CALLS_PER_STEP`` and
            ``REVIEW_AMOUNT_ABOVE``.
        host_id: The claimant's host, the attempt's owner in the timeline.
        breakers: The dependencies' circuit breakers; None: none consulted.

    Returns:
        The claimed record with its new ETag, or None when it is no longer claimable, another
        claimant won the race, or it was deferred.
    """
    record = found.item
    now = clock.now()
    if (
        record.process_state not in CLAIMABLE_STATES
        or record.locked_by is not None
        or record.suspended_at is not None
        or (record.next_attempt_at is not None and record.next_attempt_at > now)
    ):
        return None
    if breakers is not None and defer_for_dependency(states, found, breakers, now):
        return None
    traceparent = tracing.current_traceparent()

    def take(current: StateRecord) -> StateRecord:
        claimed = forward.claim(current, now=now, claim_timeout_s=starter.CLAIM_TIMEOUT_S)
        # The attempt's activities run under this (the claim's) span: see orderflow.tracing.
        claimed.begin_attempt(host_id, now, traceparent=traceparent)
        if claimed.process_state is ProcessState.PROCESSING:
            # The first-step seam: the protocol is correct without it (start_step starts what it did not).
            forward.start_first_step(claimed, now, steps, starter)
        return claimed

    actor = Actor("starter", instance_id_for(record.order_id, record.attempt + 1))
    try:
        done = update(
            states,
            record.order_id,
            take,
            clock=clock,
            actor=Note(actor, action="claim"),
            found=found,
            attempts=1,
            at=now,
        )
    except ConcurrencyConflict:
        return None
    return done.written


def defer_for_dependency(
    states: StateStore,
    found: Versioned[StateRecord],
    breakers: CircuitBreakers,
    now: datetime,
) -> bool:
    """Defer a ``Pending`` record whose first step to run waits for its dependency's open breaker.

    The attempt the claim would start asks the breaker (:meth:`CircuitBreakers.admit`, which hands a
    half-open breaker's probe to one claim only). Held: one conditional write keeps the record
    ``Pending`` with ``nextAttemptAt`` at the breaker's retry time, or gives it up past
    ``BREAKER_MAX_WAIT_S`` (:func:`orderflow.protocol.transitions.forward.hold_for_dependency`);
    nothing is claimed or reserved and ``failureCount`` is unchanged.

    Returns:
        True when the record is held (deferred, given up, or moved by another writer meanwhile): do not
        claim it now.
    """
    record = found.item
    step_def = _first_step_to_run(record)
    if step_def is None or record.process_state is not ProcessState.PENDING or record.cancel_requested_at:
        return False
    dependency = step_dependency(step_def, fallback=record.steps[step_def.name].fallback)
    retry_at = breakers.admit(dependency, holder=instance_id_for(record.order_id, record.attempt + 1))
    if retry_at is None:
        return False
    gave_up = False

    def hold(current: StateRecord) -> StateRecord:
        nonlocal gave_up
        gave_up = forward.hold_for_dependency(
            current,
            step=step_def.name,
            dependency=dependency,
            retry_at=retry_at,
            now=now,
            breakers=breakers.section,
        )
        return current

    try:
        update(
            states,
            record.order_id,
            hold,
            clock=None,
            actor=Actor("starter", breakers.host_id),
            found=found,
            attempts=1,
            at=now,
        )
    except ConcurrencyConflict:
        return True
    fields = {"order_id": record.order_id, "step": step_def.name, "dependency": dependency}
    if gave_up:
        telemetry.alert("dependency_wait_exhausted", **fields)
    else:
        telemetry.event("claim.deferred", **fields, retry_at=retry_at.isoformat())
    return True


def _first_step_to_run(record: StateRecord) -> StepDefinition | None:
    """The definition of the record's first step not completed, or None (all done, or an unknown
    workflow version: the orchestration meets it and fails)."""
    try:
        definition = workflow_for(record.workflow_version)
    except UnknownWorkflowVersion:
        return None
    done = set(record.completed_steps())
    step_def = next((s for s in definition.steps if s.name not in done), None)
    return step_def if step_def is not None and step_def.name in record.steps else None


def started_by_claim(record: StateRecord) -> StartedStep | None:
    """The step the claim of ``record`` started (the first-step seam,
    :func:`~orderflow.protocol.transitions.forward.start_first_step`) and its ``completeBy``: the first step
    not completed, Running for the claimed attempt on its primary provider; None when the claim started
    none."""
    step_def = _first_step_to_run(record)
    if step_def is None or record.process_state is not ProcessState.PROCESSING or record.complete_by is None:
        return None
    step = record.steps[step_def.name]
    if step.status is not StepStatus.RUNNING or step.last_instance != record.locked_by or step.fallback:
        return None
    return StartedStep(step=step_def.name, complete_by=record.complete_by)


def start_attempt(
    client: OrchestrationClient,
    record: StateRecord,
    *,
    response_queue: str,
    step_timeout_s: float,
    first_step: StartedStep | None = None,
) -> bool:
    """Start the orchestration of a claimed record; an existing instance counts as started.

    Args:
        first_step: The step the claim started whose request the claimant sends
            (:attr:`OrchestrationInput.first_step`); None: the orchestration starts its first step.

    Returns:
        True if a new instance was started, False if it already existed.
    """
    assert record.locked_by is not None
    payload = OrchestrationInput(
        order_id=record.order_id,
        attempt=record.attempt,
        workflow_version=record.workflow_version,
        completed_steps=tuple(record.completed_steps()),
        response_queue=response_queue,
        max_calls=record.retry_budget.remaining,
        step_timeout_s=step_timeout_s,
        compensate=record.process_state is ProcessState.COMPENSATING,
        first_step=first_step,
    ).to_payload()
    return client.start(ORDER_WORKFLOW, record.locked_by, payload)


class ClaimOutcome(StrEnum):
    """What :func:`claim_and_start` did with one record."""

    NOT_CLAIMED = "not_claimed"
    """Not claimable now, deferred for its dependency, or another claimant won the ETag race."""
    STARTED = "started"
    """Claimed, and its attempt's instance scheduled."""
    ALREADY_STARTED = "already_started"
    """Claimed, and the attempt's instance already existed (counted as started)."""


@dataclass(frozen=True)
class AttemptStarts:
    """What starting a claimed attempt needs beyond the record and the settings: a host's wiring.

    Attributes:
        client: The orchestration client that schedules the attempt's instance.
        response_queue: The response queue agents answer on for instances started here.
        on_claimed: Called with each claimed record and its ETag (the host's record cache), so the new
            orchestration's first write needs no point read; None: nothing is called.
        breakers: The dependencies' circuit breakers: a record whose first step waits for an open one is
            deferred, not claimed (:func:`claim`); None: none consulted.
        first_requests: Where to send the request of the step a claim started; None: each orchestration
            sends its first request through its ``start_step`` activity.
    """

    client: OrchestrationClient
    response_queue: str
    on_claimed: Callable[[Versioned[StateRecord]], None] | None = None
    breakers: CircuitBreakers | None = None
    first_requests: FirstRequests | None = None


def claim_and_start(
    found: Versioned[StateRecord],
    *,
    states: StateStore,
    clock: Clock,
    starter: Starter,
    steps: Steps,
    queue_names: Queues,
    starts: AttemptStarts,
) -> ClaimOutcome:
    """Claim one record and start its attempt, under a claim span in the order's trace (a child of its
    submission span), then send the request of the step the claim started.

    Args:
        found: The record as read (or as created), with its ETag: the claim is conditional on it.
        states / clock: Dependencies.
        starter / steps: What a claim reads (:func:`claim`).
        queue_names: ``HOST_ID`` (the attempt's owner) and the agents' request queues.
        starts: The host's client, response queue and hooks.

    Returns:
        What happened (:class:`ClaimOutcome`).

    Raises:
        TransientError: the store failed before the claim was written (nothing claimed), or the client
            failed to schedule the instance after it was (the supervisor recovers the claimed record at
            its ``completeBy``).
    """
    record = found.item
    instance_id = instance_id_for(record.order_id, record.attempt + 1)
    # A child of the submission (one trace per order), linked to the attempt it follows, if any.
    previous = record.attempt_history[-1].traceparent if record.attempt_history else None
    with tracing.span(
        tracing.CLAIM,
        parent=record.traceparent,
        links=(previous,),
        attributes=tracing.order_attributes(record.order_id, instance_id),
    ) as span:
        won = claim(
            states, found, clock, starter, steps, host_id=queue_names.HOST_ID, breakers=starts.breakers
        )
        if won is None:
            tracing.mark_outcome(span, ClaimOutcome.NOT_CLAIMED.value)
            return ClaimOutcome.NOT_CLAIMED
        if starts.on_claimed is not None:
            starts.on_claimed(won)
        claimed = won.item
        telemetry.event(
            "claim", order_id=claimed.order_id, instance_id=claimed.locked_by, attempt=claimed.attempt
        )
        first = started_by_claim(claimed) if starts.first_requests is not None else None
        started = start_attempt(
            starts.client,
            claimed,
            response_queue=starts.response_queue,
            step_timeout_s=steps.STEP_TIMEOUT_S,
            first_step=first,
        )
        outcome = ClaimOutcome.STARTED if started else ClaimOutcome.ALREADY_STARTED
        tracing.mark_outcome(span, outcome.value)
        if first is not None:
            assert starts.first_requests is not None
            # After the start: an answer can then only find the instance scheduled. An instance that
            # already existed gets the request again, under the same message id (a duplicate).
            send_first_request(
                starts.first_requests,
                claimed,
                first,
                clock=clock,
                queue_names=queue_names,
                response_queue=starts.response_queue,
            )
        return outcome


def send_first_request(
    first_requests: FirstRequests,
    record: StateRecord,
    started: StartedStep,
    *,
    clock: Clock,
    queue_names: Queues,
    response_queue: str,
) -> None:
    """Send the request of ``started``, the step the claim of ``record`` started, trying a transient
    failure twice more; one that cannot be sent leaves the attempt to its durable timer (the supervisor
    then recovers it), never the claimant to an exception.

    Not sent once the store's time may have reached the claim's ``completeBy`` (a claimant paused between
    its claim and the send; :func:`orderflow.clock.latest`): the supervisor recovers a record only once the
    store's time has certainly passed it (:func:`orderflow.clock.earliest`), so a request sent before is
    never one of a superseded attempt (and the agent drops a request past its deadline).
    """
    instance_id = record.locked_by
    assert instance_id is not None

    def send() -> bool:
        order = first_requests.order(record.order_id)
        now = clock.now()
        if latest(clock) >= started.complete_by:
            return False
        send_step_request(
            first_requests.queues,
            queue_names,
            record=record,
            step_def=workflow_for(record.workflow_version).step(started.step),
            order=order,
            instance_id=instance_id,
            response_queue=response_queue,
            now=now,
        )
        return True

    try:
        sent = FIRST_REQUEST_RETRY(send)
    except Exception as exc:  # one order's request must not end the pass for the others
        logger.exception("order %s: its first request failed", record.order_id)
        _not_sent(record, started, f"{type(exc).__name__}: {exc}")
        return
    if not sent:
        _not_sent(record, started, "the claim's completeBy has passed")
        return
    telemetry.event(
        "step.start",
        order_id=record.order_id,
        instance_id=instance_id,
        step=started.step,
        complete_by=started.complete_by.isoformat(),
    )


def _not_sent(record: StateRecord, started: StartedStep, reason: str) -> None:
    logger.warning(
        "order %s: the first request was not sent (%s); its timer decides", record.order_id, reason
    )
    telemetry.event(
        "step.request_not_sent",
        order_id=record.order_id,
        instance_id=record.locked_by,
        step=started.step,
        reason=reason[:200],
    )
