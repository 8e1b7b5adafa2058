"""The write every activity makes: :func:`orderflow.protocol.conditional.update` fenced on the attempt's
instance id, with the host's store, record cache and clock (docs/protocol.md)."""

from __future__ import annotations

from orderflow.dependencies import Dependencies
from orderflow.protocol.conditional import Decide, Outcome, update
from orderflow.timeline import Actor


def fenced(deps: Dependencies, order_id: str, instance_id: str, decide: Decide) -> Outcome:
    """Apply ``decide`` to the record of ``order_id`` if attempt ``instance_id`` still owns it.

    Returns:
        The outcome: applied, or fenced with a reason (nothing written).

    Raises:
        ConcurrencyConflict: still losing races after the write's tries (the activity is retried).
        IllegalTransition: the decision makes a change the state machine forbids.
        NotFound: the record does not exist.
    """
    return update(
        deps.states,
        order_id,
        decide,
        clock=deps.clock,
        actor=Actor("orchestrator", instance_id),
        owner=instance_id,
        cache=deps.cache,
    )
