"""The chaos run's settings (its report, its margins and waits) and the checks of its arguments."""

from __future__ import annotations

import math
from collections.abc import Collection

from demo.chaos.outages import OUTAGE_KINDS
from demo.config import check_run_args
from devhost.emulators import REPO_ROOT

ALL_OUTAGES: tuple[str, ...] = tuple(kind.value for kind in OUTAGE_KINDS)
"""Every kind of outage, by its report key: the state store's, the queues', a dependency's."""

REPORT_PATH = REPO_ROOT / "chaos-report.json"

PAUSE_MARGIN_S = 5.0
"""Seconds a paused leader stays stopped beyond its lease period: time for the lease to expire on the
service and for a stand-by's next supervisor tick to take it."""

INTRUDER_SETTLE_S = 60.0
"""Seconds the run waits, once the catalog's orders settled, for the intruder's last messages to be
dead-lettered and its own orders to settle."""

INTRUDER_TARGET_POOL = 48
"""The intruder samples its victims among the first this many catalog orders (submitted first)."""

REPLAY_SETTLE_S = 30.0
"""Seconds the run waits, once the operator replayed the intruder's ``correlation_id`` dead letters, for
the replays to be dead-lettered again."""

HOLDER_RETRY_S = 1.0
"""Seconds before looking again for a leader to pause when none could be found (between holders)."""

PAUSE_MIN_PROCESSES = 3
"""Processes a leader pause needs: two run the supervisor (one takes the lease from the paused one),
one the agents (:func:`demo.fleet.devhost_specs`)."""


def check_chaos_args(
    *,
    orders: int,
    processes: int,
    kill_every_s: float,
    duplicate_share: float,
    late_share: float,
    pause_every_s: float,
    clients: int,
    timeout_s: float | None,
    outage_every_s: float = 0.0,
    long_share: float = 0.0,
    skew: bool = False,
    outage_kinds: Collection[str] = ALL_OUTAGES,
    claim_kill_share: float = 0.0,
) -> None:
    """Refuse, before anything starts, arguments a chaos run cannot honour: those of
    :func:`demo.config.check_run_args`, and chaos that cannot happen with the others.

    Raises:
        ValueError: one line naming the option, the make variable that sets it, and what to pass.
    """
    check_run_args(orders=orders, processes=processes, kill_every_s=kill_every_s, timeout_s=timeout_s)
    for option, variable, share in (
        ("--duplicate-share", "DUPLICATE_SHARE", duplicate_share),
        ("--late-share", "LATE_SHARE", late_share),
        ("--long-share", "LONG_SHARE", long_share),
        ("--claim-kill-share", "CLAIM_KILL_SHARE", claim_kill_share),
    ):
        if not 0 <= share <= 1:  # NaN fails too
            raise ValueError(f"{option} ({variable}) must be a share between 0 and 1, not {share:g}")
    if not (math.isfinite(pause_every_s) and pause_every_s >= 0):
        raise ValueError(
            f"--pause-every (PAUSE_EVERY) must be seconds between leader pauses, or 0 for none; "
            f"not {pause_every_s:g}"
        )
    if pause_every_s > 0 and processes < PAUSE_MIN_PROCESSES:
        raise ValueError(
            f"leader pauses (--pause-every / PAUSE_EVERY) need at least {PAUSE_MIN_PROCESSES} --processes "
            f"(PROCESSES), so that another process running the supervisor can take the lease over; with "
            f"{processes}, pass --pause-every 0 (PAUSE_EVERY=0)"
        )
    if clients < 1:
        raise ValueError(f"--clients (CLIENTS) must be at least 1, not {clients}")
    if not (math.isfinite(outage_every_s) and outage_every_s >= 0):
        raise ValueError(
            f"--outage-every (OUTAGE_EVERY) must be seconds between outages, or 0 for none; "
            f"not {outage_every_s:g}"
        )
    del skew  # any value can happen: one process always runs the supervisor
    unknown = sorted(set(outage_kinds) - set(ALL_OUTAGES))
    if unknown or not outage_kinds:
        raise ValueError(f"outage kinds must be some of {', '.join(ALL_OUTAGES)}; not {', '.join(unknown)}")


def chaos_budget_s(orders: int, timeout_s: float | None, *, outages: bool = False) -> float:
    """Seconds a chaos run waits for its orders to settle: ``timeout_s``, or a bound scaled to ``orders``.

    Chaos settles far fewer orders a second than the demo (about 1.4 for 300 orders measured on 2 cores,
    against 8): most orders are recovered at least once, and a killed leader's lease holds the
    supervisor off for up to a lease period. Outages (``outages``) stop everything for a part of the run:
    the bound is half as long again. It only stops a run that is stuck.
    """
    if timeout_s is not None:
        return timeout_s
    return max(240.0, 90.0 + orders * 1.2) * (1.5 if outages else 1.0)
