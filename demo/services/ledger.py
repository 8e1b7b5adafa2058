"""The state the three demo services share: the fault plan, the clock, each key's stored outcome,
tombstone and audit, and each order's facts; and the undo by a forward call's idempotency key, which
each service's undo-by-key endpoint runs with its own undo."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from demo.faults import FaultPlan
from demo.services.common import KeyAudit, OrderFacts, Outcome, Stored, Tombstone, UndoByKeyIn, error

logger = logging.getLogger("demo.services")


@dataclass
class Ledger:
    """Everything the services know beyond their own effects. Mutated under the app's lock only."""

    faults: FaultPlan
    clock: Callable[[], float]
    orders: dict[str, OrderFacts] = field(default_factory=dict)
    stored: dict[str, Stored] = field(default_factory=dict)
    tombstones: dict[str, Tombstone] = field(default_factory=dict)
    audit: dict[str, KeyAudit] = field(default_factory=dict)
    holds_acquired: int = 0
    holds_expired: int = 0
    holds_committed: int = 0
    commits_refused: int = 0
    commits_on_expired: int = 0  # commits that arrived after their hold expired (refused)

    def arrived_after(self, key: str, expires_after: float) -> bool:
        """Whether the call under ``key`` arrived (its stored start, on :attr:`clock`) at or after
        ``expires_after``: a call that arrived in time and was slow to run (a hang) did not."""
        stored = self.stored.get(key)
        return stored is None or stored.started_at >= expires_after

    def facts(self, order_id: str) -> OrderFacts:
        """The facts of ``order_id``, made empty on first use."""
        return self.orders.setdefault(order_id, OrderFacts())

    def undo_by_key(
        self,
        body: UndoByKeyIn,
        key: str,
        *,
        forward_endpoint: str,
        id_field: str,
        undo: Callable[[str], Outcome],
    ) -> Outcome:
        """Undo whatever the forward call keyed ``body.forward_key`` did, or tombstone that key.

        Args:
            body: The undo request.
            key: The undo call's own idempotency key.
            forward_endpoint: The only endpoint whose keys this undo addresses (``inventory.reserve`` ...).
            id_field: The effect id in the forward call's stored 2xx body (``reservationId`` ...).
            undo: Undoes the effect with that id; its outcome is the answer.

        Returns:
            ``undo``'s outcome (200 ``{"undone": true, ...}``) when the forward call applied an effect;
            200 ``{"undone": false, "forwardKey", "orderId", "reason"}`` with a tombstone written when it
            never arrived (``never_applied``) or was refused (``refused``); 409 ``request_in_progress``
            (``permanent: false``, not stored) while it is in flight; 422 ``forward_key_mismatch`` when
            the key belongs to another endpoint, 422 ``effect_mismatch`` when the body names another
            effect id than the key's (both permanent, nothing undone).
        """
        forward_key = body.forward_key
        stored = self.stored.get(forward_key)
        if stored is not None and stored.endpoint != forward_endpoint:
            mismatch = error(
                "forward_key_mismatch",
                permanent=True,
                forwardKey=forward_key,
                endpoint=stored.endpoint,
                expected=forward_endpoint,
            )
            return Outcome(422, mismatch)
        if stored is not None and stored.outcome is None:
            # The effect may still be applied: undoing now would race it. Not stored: a retry decides again.
            age = round(self.clock() - stored.started_at, 3)
            busy = error("request_in_progress", permanent=False, forwardKey=forward_key, inFlightForS=age)
            return Outcome(409, busy, store=False)
        if stored is not None and stored.outcome is not None and 200 <= stored.outcome.status < 300:
            return self._undo_effect(body, str(stored.outcome.body[id_field]), undo)
        return self._tombstone(body, key, "never_applied" if stored is None else "refused")

    def _undo_effect(self, body: UndoByKeyIn, effect_id: str, undo: Callable[[str], Outcome]) -> Outcome:
        """Undo the effect ``effect_id`` the forward call made, unless the body names another."""
        claimed = body.effect_id()
        if claimed is not None and claimed != effect_id:
            mismatch = error(
                "effect_mismatch",
                permanent=True,
                forwardKey=body.forward_key,
                sent=claimed,
                expected=effect_id,
            )
            return Outcome(422, mismatch)
        outcome = undo(effect_id)
        if outcome.effects:
            self.facts(str(outcome.body.get("orderId", body.order_id))).undone += 1
        return outcome

    def _tombstone(self, body: UndoByKeyIn, key: str, reason: str) -> Outcome:
        """Tombstone the forward key (once: a later undo finds the first tombstone's reason)."""
        forward_key = body.forward_key
        tombstone = self.tombstones.get(forward_key)
        if tombstone is None:
            tombstone = Tombstone(forward_key, body.order_id, key, reason)
            self.tombstones[forward_key] = tombstone
            self.facts(body.order_id).tombstones.append(forward_key)
            logger.info("forward key %s tombstoned by %s (%s)", forward_key, key, reason)
        return Outcome(
            200,
            {
                "undone": False,
                "forwardKey": forward_key,
                "orderId": body.order_id,
                "reason": tombstone.reason,
            },
        )


def undone(body: UndoByKeyIn, outcome: Outcome, id_field: str, effect_id: str, already: str) -> Outcome:
    """The by-key answer of an undo by id (release, cancel): its effect id and whether it was undone
    before; a refusal passes through."""
    if outcome.status != 200:
        return outcome
    answer = {
        "undone": True,
        "forwardKey": body.forward_key,
        "orderId": outcome.body["orderId"],
        id_field: effect_id,
        "alreadyUndone": outcome.body[already],
    }
    return Outcome(200, answer, effects=outcome.effects)
