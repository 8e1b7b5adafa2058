"""The submission's fast path: claim the order just recorded and start its attempt at once.

The record the submission created is claimed by the starter's own conditional write on the create's ETag
(:func:`orderflow.attempts.claim_and_start`), and the attempt's orchestration is scheduled through the
host's orchestration client, so no order waits for the starter's timer (``CLAIM_ON_SUBMIT``). Only the call
that created the record claims it: a redelivered or duplicated submission finds the record and claims
nothing, and where the starter's sweep got there first the ETag decides and this path does nothing.

What did not start here is started the way it was before the fast path: a process that died between the
create and the claim (or a claim that failed) leaves the record ``Pending``, unlocked, for the starter's
sweep; a start that failed after the claim leaves it ``Processing`` until the claim's ``completeBy``, when
the supervisor recovers it, exactly as after a starter that died between its claim and its start.
"""

from __future__ import annotations

import logging

from orderflow import telemetry
from orderflow.attempts import AttemptStarts, ClaimOutcome, claim_and_start
from orderflow.clock import Clock
from orderflow.records import StateRecord
from orderflow.settings import Queues, Starter, Steps
from orderflow.stores.base import StateStore, Versioned

logger = logging.getLogger(__name__)


def start_at_once(
    created: Versioned[StateRecord],
    *,
    states: StateStore,
    clock: Clock,
    steps: Steps,
    starter: Starter,
    queue_names: Queues,
    starts: AttemptStarts,
) -> bool:
    """Claim the record this submission has just created and start its attempt: the fast path.

    The claim is conditional on the ETag of the create, so a starter's sweep that claimed the record
    first wins and this call does nothing (and the other way round). Nothing raised here reaches the
    message: the order is on record either way. A claim that failed leaves it ``Pending`` for the
    starter's sweep; a start that failed after the claim leaves it ``Processing`` until its ``completeBy``,
    when the supervisor recovers it, as after a starter that died between its claim and its start.

    Returns:
        True when this call claimed the record (its attempt started, or found already started).
    """
    order_id = created.item.order_id
    try:
        outcome = claim_and_start(
            created,
            states=states,
            clock=clock,
            starter=starter,
            steps=steps,
            queue_names=queue_names,
            starts=starts,
        )
    except Exception as exc:  # the order is recorded: the sweeper or the supervisor takes it from here
        logger.warning("order %s: its claim on submit did not start it", order_id, exc_info=True)
        telemetry.event("claim.on_submit_failed", order_id=order_id, error=type(exc).__name__)
        return False
    return outcome is not ClaimOutcome.NOT_CLAIMED
