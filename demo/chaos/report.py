"""How a chaos run ended: its counts of the chaos that happened, the invariants, the chaos asked for but
not exercised (with hints), the report and the verdict.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

from rich.markup import escape

from demo.chaos.claim_kills import ClaimKiller
from demo.chaos.config import ALL_OUTAGES
from demo.chaos.delivery import (
    DeliveryFault,
    read_fault_logs,
)
from demo.chaos.faults import (
    SkewedHost,
)
from demo.chaos.leader import LeaderPauser
from demo.chaos.outages import OUTAGE_KINDS, OutageKind, OutageScheduler
from demo.config import console
from demo.fleet import Killer
from demo.intruder.intruder import Intruder
from demo.outcome import (
    INVARIANTS,
    print_summary,
)
from orderflow.records import StateRecord

CHAOS_INVARIANTS = (*INVARIANTS, "misrouted_replies", "cross_client_effects")
"""Report entries that must be 0; the run exits 1 otherwise and names them."""


def count_misrouted_replies(received: Mapping[str, Mapping[str, int]], owners: Mapping[str, str]) -> int:
    """Replies that reached a client that did not submit their order, or that are for an unknown order.

    Args:
        received: Per client reply queue, the replies it received per order id (duplicates not counted:
            :attr:`orderflow_client.client.ReplyLog.received`).
        owners: The reply queue of the client that submitted each order, by order id.
    """
    return sum(
        count
        for queue, per_order in received.items()
        for order_id, count in per_order.items()
        if owners.get(order_id) != queue
    )


def recovery_times_s(records: Iterable[StateRecord]) -> list[float]:
    """Seconds from each expired ``completeBy`` the supervisor acted on to the claim of the next attempt.

    Read from ``attemptHistory``: a tenure the supervisor ended keeps the deadline it found expired
    (``expiredCompleteBy``), and the next attempt its ``claimedAt``. A recovery whose next attempt was
    never claimed, or whose entries were written before deadlines were kept, contributes nothing.
    """
    times: list[float] = []
    for record in records:
        history = sorted(record.attempt_history, key=lambda entry: entry.attempt)
        for ended, following in pairwise(history):
            expired = ended.expired_complete_by
            if expired is not None and following.attempt == ended.attempt + 1:
                times.append((following.claimed_at - expired).total_seconds())
    return times


def max_recovery_s(records: Iterable[StateRecord]) -> float:
    """The longest of :func:`recovery_times_s`, seconds, rounded to 0.01 (0.0 when nothing was recovered)."""
    return round(max(recovery_times_s(records), default=0.0), 2)


def failed_invariants(report: Mapping[str, Any]) -> list[str]:
    """The :data:`CHAOS_INVARIANTS` that are not 0 in ``report`` (a missing one counts as failed), then
    the report's ``unexercised`` chaos features: a run whose chaos never happened proves nothing."""
    failed = [key for key in CHAOS_INVARIANTS if report.get(key, 1) != 0]
    return failed + [f"no {feature}" for feature in report.get("unexercised", [])]


WORKFLOW_BEHAVIOURS = ("reviewed", "holds_acquired", "holds_expired", "holds_reacquired", "holds_committed")
"""Report keys of what the chaos run's workflow (``order-v6``) must show: large payments reviewed, and
holds acquired, expired (they are kept :data:`demo.chaos.faults.CHAOS_HOLD_S`), re-acquired and
committed."""


def unexercised(
    counts: Mapping[str, Any],
    *,
    kill_every_s: float,
    duplicate_share: float,
    late_share: float,
    pause_every_s: float,
    outage_every_s: float = 0.0,
    long_share: float = 0.0,
    skew: bool = False,
    outage_kinds: Collection[str] = ALL_OUTAGES,
    claim_kill_share: float = 0.0,
    behaviours: Collection[str] = (),
) -> list[str]:
    """The report keys of the chaos features a run asked for that never happened (orders included), then
    of the ``behaviours`` (:data:`WORKFLOW_BEHAVIOURS`) that are 0; ``intruder`` when an intruder ran
    (``counts`` has ``intruder_attacks``) and attacked nothing.

    Args:
        counts: The run's ``orders``, ``kills``, ``duplicates_delivered``, ``late_responses``,
            ``leader_pauses``, ``store_outages``, ``queue_outages``, ``dependency_windows``,
            ``skewed_hosts``, ``long_handlers``, ``claim_kills`` and, with an intruder,
            ``intruder_attacks`` (``{kind: attempts}``).
        kill_every_s, duplicate_share, late_share, pause_every_s, outage_every_s, long_share, skew,
            outage_kinds, claim_kill_share: What the run asked for (an outage every ``outage_every_s``,
            of each of ``outage_kinds`` in turn).
    """

    def outages(kind: str) -> bool:
        return outage_every_s > 0 and kind in outage_kinds

    asked = {
        "orders": True,  # a run of no orders proves nothing
        "kills": kill_every_s > 0,
        "duplicates_delivered": duplicate_share > 0,
        "late_responses": late_share > 0,
        "leader_pauses": pause_every_s > 0,
        "store_outages": outages(OutageKind.STORE),
        "queue_outages": outages(OutageKind.QUEUE),
        "dependency_windows": outages(OutageKind.DEPENDENCY),
        "skewed_hosts": skew,
        "long_handlers": long_share > 0,
        "claim_kills": claim_kill_share > 0,
    }
    asked.update(dict.fromkeys(behaviours, True))
    missing = [key for key, wanted in asked.items() if wanted and not counts.get(key)]
    attacks = counts.get("intruder_attacks")
    return [*missing, "intruder"] if attacks is not None and not sum(attacks.values()) else missing


def unexercised_hints(
    features: Iterable[str],
    *,
    kill_every_s: float,
    duplicate_share: float,
    late_share: float,
    pause_every_s: float,
    outage_every_s: float = 0.0,
    long_share: float = 0.0,
    skew: bool = False,
    outage_kinds: Collection[str] = (),
    claim_kill_share: float = 0.0,
) -> list[str]:
    """For each chaos feature a run asked for and that never happened (:func:`unexercised`), one line
    saying which argument to change: the run is usually too short for it.

    Args:
        features: The report's ``unexercised`` keys.
        kill_every_s, duplicate_share, late_share, pause_every_s, outage_every_s, long_share, skew,
            claim_kill_share: What the run asked for.
    """
    del skew, outage_kinds  # a skewed host is started with the fleet: it always happens
    more_orders = "pass more --orders (ORDERS)"
    hints = {
        "orders": "no order was submitted: pass --orders (ORDERS) of 1 or more",
        "kills": f"no SIGKILL happened: the run ended within the first --kill-every (KILL_EVERY) of "
        f"{kill_every_s:g} s; {more_orders}, a shorter KILL_EVERY, or KILL_EVERY=0 to run without kills",
        "duplicates_delivered": f"no message was delivered twice at --duplicate-share (DUPLICATE_SHARE) "
        f"{duplicate_share:g}; {more_orders}, a larger share, or DUPLICATE_SHARE=0 to run without duplicates",
        "late_responses": f"no agent response was delivered late at --late-share (LATE_SHARE) "
        f"{late_share:g}; {more_orders}, a larger share, or LATE_SHARE=0 to run without late responses",
        "leader_pauses": f"no supervisor leader was paused: the run ended before the first pause, due "
        f"--pause-every (PAUSE_EVERY) {pause_every_s:g} s after the first order (or no leader was found); "
        f"{more_orders}, a shorter PAUSE_EVERY, or PAUSE_EVERY=0 to run without leader pauses",
        "intruder": f"the intruder attacked nothing: too few victim orders were recorded while it ran; "
        f"{more_orders}, or --no-intruder to run without it",
        **{
            key: f"no {what} ran to its end: the run ended before its turn (one outage every "
            f"--outage-every (OUTAGE_EVERY) {outage_every_s:g} s, the store's, the queues' and a "
            f"dependency's in turn); {more_orders}, a shorter OUTAGE_EVERY, or OUTAGE_EVERY=0 to run without "
            f"outages"
            for key, what in (
                ("store_outages", "state-store outage"),
                ("queue_outages", "queue outage"),
                ("dependency_windows", "dependency window"),
            )
        },
        "skewed_hosts": "no devhost process ran with a skewed clock; pass --no-skew to run without one",
        "reviewed": f"no order paused for a review: none was above REVIEW_AMOUNT_ABOVE; {more_orders}",
        **{
            key: f"no hold was {what}: pass more --orders (ORDERS), or check that WORKFLOW_VERSION is "
            f"order-v6 and that holds are kept shorter than a recovery (demo.chaos.faults.CHAOS_HOLD_S)"
            for key, what in (
                ("holds_acquired", "acquired"),
                ("holds_expired", "expired"),
                ("holds_reacquired", "re-acquired"),
                ("holds_committed", "committed"),
            )
        },
        "long_handlers": f"no handler outlasted its lock at --long-share (LONG_SHARE) {long_share:g}; "
        f"{more_orders}, a larger share, or LONG_SHARE=0 to run without long handlers",
        "claim_kills": f"no process was killed between a create and its claim at --claim-kill-share "
        f"(CLAIM_KILL_SHARE) {claim_kill_share:g}; {more_orders}, a larger share, or CLAIM_KILL_SHARE=0 to "
        f"run without them",
    }
    return [hints.get(feature, f"no {feature}") for feature in features]


def chaos_counts(
    run_dir: Path,
    killer: Killer | None,
    pauser: LeaderPauser | None,
    outages: OutageScheduler | None = None,
    skewed: SkewedHost | None = None,
    *,
    claim_killer: ClaimKiller | None = None,
) -> dict[str, int]:
    """The chaos so far: kills, duplicated and late deliveries and long handlers (from the fault logs),
    leader pauses, the outages run to their end by kind, the hosts with a skewed clock, and the kills
    between a create and its claim."""
    faults = read_fault_logs(run_dir / "delivery-faults")
    pauses = pauser.pauses if pauser is not None else []
    windows = outages.counts() if outages is not None else {kind.value: 0 for kind in OUTAGE_KINDS}
    return {
        "kills": len(killer.kills) if killer is not None else 0,
        "duplicates_delivered": faults[DeliveryFault.DUPLICATE.value],
        "late_responses": faults[DeliveryFault.LATE.value],
        "leader_pauses": len(pauses),
        "leader_takeovers": sum(1 for p in pauses if p.get("taken_over_by")),
        **windows,
        "skewed_hosts": int(skewed is not None),
        "long_handlers": faults[DeliveryFault.LONG_HANDLER.value],
        "claim_kills": len(claim_killer.kills) if claim_killer is not None else 0,
    }


@dataclass(frozen=True)
class Chaos:
    """The chaos makers of a run (None: not asked for): the killer, the leader pauser, the intruder, the
    outage scheduler, the host with a skewed clock, and the killer between a create and its claim."""

    killer: Killer | None
    pauser: LeaderPauser | None
    attacker: Intruder | None
    outages: OutageScheduler | None
    skewed: SkewedHost | None
    claim_killer: ClaimKiller | None = None

    def counts(self, run_dir: Path) -> dict[str, int]:
        """:func:`chaos_counts` of these."""
        return chaos_counts(
            run_dir, self.killer, self.pauser, self.outages, self.skewed, claim_killer=self.claim_killer
        )

    def threads(self) -> list[Killer | LeaderPauser | Intruder | OutageScheduler | ClaimKiller]:
        """Those that run on a thread (started and stopped with the orders' submission)."""
        makers = (self.killer, self.pauser, self.attacker, self.outages, self.claim_killer)
        return [c for c in makers if c is not None]


def write_events(run_dir: Path, chaos: Chaos) -> None:
    """What the chaos did, when: for reading the processes' logs side by side."""
    events = {
        "kills": chaos.killer.kills if chaos.killer is not None else [],
        "claimKills": chaos.claim_killer.kills if chaos.claim_killer is not None else [],
        "leaderPauses": chaos.pauser.pauses if chaos.pauser is not None else [],
        "outages": chaos.outages.windows if chaos.outages is not None else [],
        "skewedHost": vars(chaos.skewed) if chaos.skewed is not None else None,
    }
    (run_dir / "chaos-events.json").write_text(json.dumps(events, indent=2) + "\n", encoding="utf-8")


def print_verdict(
    report: dict[str, Any],
    mismatched: list[tuple[str, str]],
    report_path: Path,
    asked: Mapping[str, Any],
) -> None:
    """The summary table, then which invariants failed (with hints for chaos that never happened)."""
    print_summary(report, mismatched, title="orderflow chaos", invariants=CHAOS_INVARIANTS)
    failed = failed_invariants(report)
    if failed:
        console.print(f"[bold red]invariants failed:[/bold red] {', '.join(failed)}")
        for hint in unexercised_hints(report["unexercised"], **asked):
            console.print(f"[red]{escape(hint)}[/red]", highlight=False, soft_wrap=True)
    else:
        console.print("[bold green]every invariant held[/bold green]")
    console.print(f"report written to {report_path}")
