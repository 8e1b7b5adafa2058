"""``make chaos``: the demo's orders under every fault a distributed deployment meets at once.

The run is the demo's (:mod:`devhost.demo`: Azurite, cosmosdb-server, the demo services with their
faults, ``--processes`` devhost processes, real TPC-H orders), with, all at the same time:

- **SIGKILL and restart**: a random devhost process every ``--kill-every`` seconds (:class:`Killer`);
- **duplicate delivery**: a ``--duplicate-share`` of every message sent (submissions, agent requests,
  agent responses, client replies) delivered twice under the same message id
  (:mod:`devhost.delivery_faults`; the driver duplicates its clients' submissions itself);
- **late responses**: a ``--late-share`` of agent responses delivered after their step's deadline, so the
  durable timer wins, the supervisor recovers the order, and the late answer must be dropped; the demo
  services' own "hang past the deadline" fault stays on too;
- **a paused supervisor leader**: every ``--pause-every`` seconds the process holding the supervisor lease
  is SIGSTOPped for longer than the lease, then SIGCONTed: another process takes the lead meanwhile, and
  the paused one wakes up believing it still leads (:class:`LeaderPauser`). Conditional writes must keep
  that harmless;
- **several clients**: ``--clients`` clients, each with its own private reply queue, so a reply that
  reaches the wrong client is seen (``misrouted_replies``);
- **an intruder**: one more registered client on its own credentials (:mod:`devhost.intruder`) that
  reuses the others' order ids, cancels their orders, names their reply queues, sends operator actions,
  uses its SAS on their queues, sends hostile text and correlation ids naming their orders, and floods
  conflicting resends; afterwards the run, as an operator, replays its dead letters through the operator
  API. Whatever it achieves on their orders, or on what an operator sees of them, is a
  ``cross_client_effect``.

It writes ``chaos-report.json`` (the demo report's keys plus the chaos counts and ``max_recovery_s``) and
exits 1, naming them, if any invariant in :data:`CHAOS_INVARIANTS` is not 0.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Annotated, Any, Protocol

import typer
from rich.markup import escape

from demo.faults import FaultPlan
from devhost.__main__ import CLOCK_OFFSET_ENV
from devhost.chaos_faults import (
    CHAOS_SETTINGS,
    SERVICES,
    SkewedHost,
    count_alerts,
    dependency_outage,
    draw_skewed_host,
    emulator_outage,
    long_handler_faults,
)
from devhost.cli import run_driver
from devhost.delivery_faults import (
    CHAOS_ENV,
    DeliveryFault,
    DeliveryFaults,
    FaultLog,
    FaultyQueueFactory,
    read_fault_logs,
)
from devhost.demo import (
    DEMO_FAULTS,
    INVARIANTS,
    STORE_TIME_SLACK_S,
    DemoSystem,
    DevhostSpec,
    Killer,
    Settling,
    all_records,
    build_report,
    catalog_records,
    check_run_args,
    console,
    demo_system,
    devhost_specs,
    new_run_dir,
    print_summary,
    quiet_sdk_logs,
    submit_and_settle,
    write_report,
)
from devhost.emulators import REPO_ROOT
from devhost.intruder import (
    INTRUDER_CLIENT,
    Attack,
    AttackKind,
    CrossClientEffects,
    Intruder,
    IntruderPlan,
    OperatorFindings,
    attack_counts,
    count_cross_client_effects,
    flood_alerts,
    settled_own_orders,
)
from devhost.intruder_operator import OperatorSession, operator_token, replayed_victims, victim_etags
from devhost.outages import OUTAGE_KINDS, OutageKind, OutageScheduler
from operator_api.alerts import MAX_LIMIT
from operator_api.deadletters import every_dead_letter
from orderflow.queues.storage import StorageQueueFactory
from orderflow.records import StateRecord
from orderflow.settings import Settings
from orderflow.workflows import new_order_workflow
from orderflow_client.client import OrderflowClient
from orderflow_client.operator_client import OperatorApiClient
from supervisor.lease import current_holder

logger = logging.getLogger(__name__)

ALL_OUTAGES: tuple[str, ...] = tuple(kind.value for kind in OUTAGE_KINDS)
"""Every kind of outage, by its report key: the state store's, the queues', a dependency's."""

REPORT_PATH = REPO_ROOT / "chaos-report.json"

CHAOS_INVARIANTS = (*INVARIANTS, "misrouted_replies", "cross_client_effects")
"""Report entries that must be 0; the run exits 1 otherwise and names them."""

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
one the agents and the submission (:func:`devhost.demo.devhost_specs`)."""


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
) -> None:
    """Refuse, before anything starts, arguments a chaos run cannot honour: those of
    :func:`devhost.demo.check_run_args`, and chaos that cannot happen with the others.

    Raises:
        ValueError: one line naming the option, the make variable that sets it, and what to pass.
    """
    check_run_args(orders=orders, processes=processes, kill_every_s=kill_every_s, timeout_s=timeout_s)
    for option, variable, share in (
        ("--duplicate-share", "DUPLICATE_SHARE", duplicate_share),
        ("--late-share", "LATE_SHARE", late_share),
        ("--long-share", "LONG_SHARE", long_share),
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


def failed_invariants(report: Mapping[str, Any]) -> list[str]:
    """The :data:`CHAOS_INVARIANTS` that are not 0 in ``report`` (a missing one counts as failed), then
    the report's ``unexercised`` chaos features: a run whose chaos never happened proves nothing."""
    failed = [key for key in CHAOS_INVARIANTS if report.get(key, 1) != 0]
    return failed + [f"no {feature}" for feature in report.get("unexercised", [])]


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
) -> list[str]:
    """The report keys of the chaos features a run asked for that never happened (orders included);
    ``intruder`` when an intruder ran (``counts`` has ``intruder_attacks``) and attacked nothing.

    Args:
        counts: The run's ``orders``, ``kills``, ``duplicates_delivered``, ``late_responses``,
            ``leader_pauses``, ``store_outages``, ``queue_outages``, ``dependency_windows``,
            ``skewed_hosts``, ``long_handlers`` and, with an intruder, ``intruder_attacks``
            (``{kind: attempts}``).
        kill_every_s, duplicate_share, late_share, pause_every_s, outage_every_s, long_share, skew,
            outage_kinds: What the run asked for (an outage every ``outage_every_s``, of each of
            ``outage_kinds`` in turn).
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
    }
    missing = [key for key, wanted in asked.items() if wanted and not counts.get(key)]
    attacks = counts.get("intruder_attacks")
    return [*missing, "intruder"] if attacks is not None and not sum(attacks.values()) else missing


LeaseHolder = Callable[[], Mapping[str, str] | None]
"""Reads who holds the supervisor lease: the holder's metadata (``host``, ``pid``), or None."""


class PausableFleet(Protocol):
    """What :class:`LeaderPauser` needs of the devhost processes (:class:`devhost.demo.Fleet`)."""

    @property
    def specs(self) -> Mapping[str, DevhostSpec]:
        """The processes' specs by fleet name."""
        ...

    def pause(self, name: str, pid: int) -> bool:
        """SIGSTOP process ``name`` if its current pid is ``pid``; False otherwise."""
        ...

    def resume(self, name: str) -> None:
        """SIGCONT process ``name`` if it is paused."""
        ...


class LeaderPauser:
    """Every ``every_s`` seconds, SIGSTOPs the devhost process holding the supervisor lease for ``pause_s``
    seconds (longer than the lease), then SIGCONTs it; until stopped.

    The holder is the one the lease blob names (:func:`supervisor.lease.current_holder`): its host id and
    process id, which must be a devhost process of the fleet still running. When there is none (between
    holders, or the holder was just killed), it looks again ``retry_s`` seconds later. Pauses are
    ``every_s`` apart, start to start, and never overlap.

    Attributes:
        pauses: One entry per pause: the fleet name and pid of the paused process, when it was paused
            (epoch seconds), and the first other process seen holding the lease during the pause
            (``taken_over_by``: its fleet name; None when none was seen).
    """

    def __init__(
        self,
        fleet: PausableFleet,
        holder: LeaseHolder,
        *,
        every_s: float,
        pause_s: float,
        first_after_s: float | None = None,
        retry_s: float = HOLDER_RETRY_S,
    ) -> None:
        self._fleet = fleet
        self._first_after_s = every_s if first_after_s is None else first_after_s
        self._retry_s = retry_s
        self._holder = holder
        self._every_s = every_s
        self.pause_s = pause_s
        self._stop = threading.Event()
        self.pauses: list[dict[str, Any]] = []
        self._thread = threading.Thread(target=self._run, name="chaos-pauser", daemon=True)

    def start(self) -> None:
        """Start pausing, the first pause ``first_after_s`` (default ``every_s``) seconds from now."""
        self._thread.start()

    def stop(self) -> None:
        """Stop pausing; a process paused now is resumed first."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.pause_s + 30)

    def _read_holder(self) -> tuple[str, int] | None:
        """The fleet name and pid of the lease holder, or None."""
        try:
            holder = self._holder()
        except Exception as exc:  # the pauser thread must outlive any failure to read the lease
            logger.warning("could not read the supervisor lease holder: %s", exc)
            return None
        if not holder or not holder.get("pid", "").isdigit():
            return None
        names = [name for name, spec in self._fleet.specs.items() if spec.host_id == holder.get("host")]
        return (names[0], int(holder["pid"])) if names else None

    def _run(self) -> None:
        next_pause = time.monotonic() + self._first_after_s
        while not self._stop.wait(max(0.0, next_pause - time.monotonic())):
            found = self._read_holder()
            if found is None or not self._fleet.pause(*found):
                next_pause = time.monotonic() + self._retry_s
                continue
            paused_at = time.monotonic()
            self._pause(*found)
            next_pause = max(paused_at + self._every_s, time.monotonic() + self._retry_s)

    def _pause(self, name: str, pid: int) -> None:
        """Keep ``name`` paused for :attr:`pause_s`, watching for another process to take the lease."""
        entry: dict[str, Any] = {"process": name, "pid": pid, "at": time.time(), "taken_over_by": None}
        ends = time.monotonic() + self.pause_s
        try:
            # A stop request cuts the pause short.
            while not self._stop.wait(min(self._retry_s, max(0.0, ends - time.monotonic()))):
                holder = self._read_holder()
                if entry["taken_over_by"] is None and holder is not None and holder[0] != name:
                    entry["taken_over_by"] = holder[0]
                if time.monotonic() >= ends:
                    break
        finally:
            self._fleet.resume(name)
        self.pauses.append(entry)


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
) -> list[str]:
    """For each chaos feature a run asked for and that never happened (:func:`unexercised`), one line
    saying which argument to change: the run is usually too short for it.

    Args:
        features: The report's ``unexercised`` keys.
        kill_every_s, duplicate_share, late_share, pause_every_s, outage_every_s, long_share, skew: What
            the run asked for.
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
        "long_handlers": f"no handler outlasted its lock at --long-share (LONG_SHARE) {long_share:g}; "
        f"{more_orders}, a larger share, or LONG_SHARE=0 to run without long handlers",
    }
    return [hints.get(feature, f"no {feature}") for feature in features]


def lease_holder_reader(settings: Settings) -> LeaseHolder:
    """Reads the holder of ``settings``' supervisor lease blob."""

    def read() -> Mapping[str, str] | None:
        return current_holder(settings.STORAGE_CONNECTION_STRING, settings.SUPERVISOR_LEASE_BLOB)

    return read


def chaos_counts(
    run_dir: Path,
    killer: Killer | None,
    pauser: LeaderPauser | None,
    outages: OutageScheduler | None = None,
    skewed: SkewedHost | None = None,
) -> dict[str, int]:
    """The chaos so far: kills, duplicated and late deliveries and long handlers (from the fault logs),
    leader pauses, the outages run to their end by kind, and the hosts with a skewed clock."""
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
    }


@dataclass(frozen=True)
class Chaos:
    """The chaos makers of a run (None: not asked for): the killer, the leader pauser, the intruder, the
    outage scheduler, and the host with a skewed clock."""

    killer: Killer | None
    pauser: LeaderPauser | None
    attacker: Intruder | None
    outages: OutageScheduler | None
    skewed: SkewedHost | None

    def counts(self, run_dir: Path) -> dict[str, int]:
        """:func:`chaos_counts` of these."""
        return chaos_counts(run_dir, self.killer, self.pauser, self.outages, self.skewed)

    def threads(self) -> list[Killer | LeaderPauser | Intruder | OutageScheduler]:
        """Those that run on a thread (started and stopped with the orders' submission)."""
        return [c for c in (self.killer, self.pauser, self.attacker, self.outages) if c is not None]


def run_chaos(
    *,
    orders: int,
    processes: int = 3,
    kill_every_s: float = 5.0,
    duplicate_share: float = 0.05,
    late_share: float = 0.03,
    pause_every_s: float = 30.0,
    pause_s: float | None = None,
    first_pause_after_s: float | None = None,
    outage_every_s: float = 30.0,
    outage_kinds: Sequence[str] = ALL_OUTAGES,
    long_share: float = 0.03,
    skew: bool = True,
    clients: int = 3,
    intruder: bool = True,
    seed: int = 20261129,
    timeout_s: float | None = None,
    faults: FaultPlan = DEMO_FAULTS,
    report_path: Path = REPORT_PATH,
) -> dict[str, Any]:
    """Run the chaos run; returns the report (also written to ``report_path``).

    Args:
        orders: TPC-H orders to submit (the first ``orders`` by order key).
        processes: devhost processes (see :func:`devhost.demo.devhost_specs`); pausing the leader needs
            two running the supervisor, so at least 3.
        kill_every_s: SIGKILL a random devhost process every this many seconds and restart it (0: never).
        duplicate_share: Share of sent messages delivered twice, in [0, 1].
        late_share: Share of agent responses delivered after their step's deadline, in [0, 1].
        pause_every_s: SIGSTOP the supervisor leader every this many seconds (0: never).
        pause_s: How long a pause lasts, seconds (None: the lease period plus :data:`PAUSE_MARGIN_S`).
        first_pause_after_s: Seconds from the first submission to the first pause (None: ``pause_every_s``).
        outage_every_s: One outage every this many seconds, the state store's, the queues' and a
            dependency's in turn (:mod:`devhost.outages`; 0: none).
        outage_kinds: The kinds of outage taken in turn (:data:`ALL_OUTAGES`: every kind).
        long_share: Share of the demo services' calls that answer after longer than a queue lock
            (:func:`devhost.chaos_faults.long_handler_faults`; 0: none).
        skew: Run one scheduler process with its clock tens of seconds off
            (:func:`devhost.chaos_faults.draw_skewed_host`).
        clients: Clients submitting the orders in turn, each with its own reply queue.
        intruder: Register one more client, :data:`devhost.intruder.INTRUDER_CLIENT`, that attacks theirs.
        seed: Seed of the kills and of the delivery faults' draws.
        timeout_s: Stop waiting for orders to settle after this many seconds (None: scaled to ``orders``).
        faults: Faults the demo services inject.
        report_path: Where the JSON report is written.

    Raises:
        ValueError: an argument :func:`check_chaos_args` refuses (nothing was started).
        RuntimeError: a child process did not start.
    """
    # The chaos asked for, as the checks, the report and the hints name it.
    asked: dict[str, Any] = {
        "kill_every_s": kill_every_s,
        "duplicate_share": duplicate_share,
        "late_share": late_share,
        "pause_every_s": pause_every_s,
        "outage_every_s": outage_every_s,
        "long_share": long_share,
        "skew": skew,
        "outage_kinds": tuple(outage_kinds),
    }
    check_chaos_args(orders=orders, processes=processes, clients=clients, timeout_s=timeout_s, **asked)
    run_dir = new_run_dir()
    log_dir = run_dir / "delivery-faults"
    plan = DeliveryFaults(
        duplicate_share=duplicate_share,
        late_share=late_share,
        long_handlers=long_share > 0,
        seed=seed,
        log_dir=str(log_dir),
    )
    skewed = _skewed_host(seed, processes) if skew else None
    faults = long_handler_faults(faults, long_share)
    _print_plan(run_dir, orders=orders, processes=processes, clients=clients, skewed=skewed, **asked)
    with ExitStack() as stack, quiet_sdk_logs():
        system = stack.enter_context(
            demo_system(
                orders=orders,
                processes=processes,
                faults=faults,
                run_dir=run_dir,
                extra_env={CHAOS_ENV: plan.model_dump_json(), **CHAOS_SETTINGS},
                client_ids=[f"chaos-{n}" for n in range(1, clients + 1)]
                + ([INTRUDER_CLIENT] if intruder else []),
                process_env={skewed.process: {CLOCK_OFFSET_ENV: str(skewed.offset_s)}} if skewed else None,
            )
        )
        killer, pauser = _chaos_makers(
            stack,
            system,
            kill_every_s=kill_every_s,
            seed=seed,
            pause_every_s=pause_every_s,
            pause_s=pause_s,
            first_pause_after_s=first_pause_after_s,
        )
        outages = _chaos_outages(stack, system, faults, seed=seed, every_s=outage_every_s, kinds=outage_kinds)
        chaos_clients = _chaos_clients(system, plan, log_dir, clients)
        attacker = _chaos_intruder(system, clients, seed=seed) if intruder else None
        if attacker is not None:
            stack.callback(attacker.stop)
        chaos = Chaos(killer, pauser, attacker, outages, skewed)
        budget_s = chaos_budget_s(orders, timeout_s, outages=outage_every_s > 0)
        settling = _settle_under_chaos(system, chaos_clients, chaos, budget_s=budget_s)
        report, mismatched = _chaos_report(
            system, chaos_clients, settling, chaos, processes=processes, clients=clients, asked=asked
        )
        _write_events(run_dir, chaos)

    write_report(report, report_path)
    _print_verdict(report, mismatched, report_path, asked)
    return report


def _print_plan(
    run_dir: Path,
    *,
    orders: int,
    processes: int,
    clients: int,
    skewed: SkewedHost | None,
    kill_every_s: float,
    duplicate_share: float,
    late_share: float,
    pause_every_s: float,
    outage_every_s: float,
    long_share: float,
    skew: bool,
    outage_kinds: Collection[str],
) -> None:
    """The run's announcement: what it submits and which faults it injects."""
    del skew  # ``skewed`` says it
    kills = f"kill every {kill_every_s:g} s" if kill_every_s > 0 else "no kills"
    pauses = f"pause the leader every {pause_every_s:g} s" if pause_every_s > 0 else "no leader pauses"
    outages = "no outages"
    if outage_every_s > 0:
        outages = f"an outage every {outage_every_s:g} s ({', '.join(outage_kinds)})"
    clock = f"{skewed.process}'s clock {skewed.offset_s:+g} s" if skewed is not None else "no skewed clock"
    console.print(
        f"[bold]orderflow chaos[/bold]: {orders} TPC-H orders, {processes} devhost processes, {clients} "
        f"clients; {kills}, duplicate {duplicate_share:.0%}, late {late_share:.0%}, {pauses}, {outages}, "
        f"long calls {long_share:.0%}, {clock}; logs in {run_dir}"
    )


def _skewed_host(seed: int, processes: int) -> SkewedHost:
    """The run's skewed host, among the processes that run the supervisor (:func:`draw_skewed_host`)."""
    supervisors = [
        spec.name for spec in devhost_specs(processes) if spec.roles == "all" or "supervisor" in spec.roles
    ]
    return draw_skewed_host(seed, supervisors)


def _chaos_outages(
    stack: ExitStack,
    system: DemoSystem,
    faults: FaultPlan,
    *,
    seed: int,
    every_s: float,
    kinds: Collection[str],
) -> OutageScheduler | None:
    """The outage scheduler the run asks for (None: ``every_s`` is 0), not started yet; ``stack`` stops
    it (ending an outage under way) before it stops the emulators."""
    if every_s <= 0 or system.emulators is None:
        return None
    makers = {
        OutageKind.STORE: emulator_outage(system.emulators.cosmos),
        OutageKind.QUEUE: emulator_outage(system.emulators.azurite),
        OutageKind.DEPENDENCY: dependency_outage(system.services_url, faults),
    }
    outages = OutageScheduler(
        {kind: maker for kind, maker in makers.items() if kind in kinds},
        seed=seed,
        every_s=every_s,
        step_timeout_s=Settings.load(env=system.env).STEP_TIMEOUT_S,
        services=SERVICES,
    )
    stack.callback(outages.stop)
    return outages


def _chaos_makers(
    stack: ExitStack,
    system: DemoSystem,
    *,
    kill_every_s: float,
    seed: int,
    pause_every_s: float,
    pause_s: float | None,
    first_pause_after_s: float | None,
) -> tuple[Killer | None, LeaderPauser | None]:
    """The killer and the leader pauser the run asks for (None: not asked), not started yet; ``stack``
    stops them before it stops the fleet."""
    settings = Settings.load(env=system.env)
    killer = Killer(system.fleet, kill_every_s, seed=seed) if kill_every_s > 0 else None
    if killer is not None:
        stack.callback(killer.stop)
    pauser = None
    if pause_every_s > 0:
        pauser = LeaderPauser(
            system.fleet,
            lease_holder_reader(settings),
            every_s=pause_every_s,
            pause_s=pause_s if pause_s is not None else settings.SUPERVISOR_LEASE_S + PAUSE_MARGIN_S,
            first_after_s=first_pause_after_s,
        )
        stack.callback(pauser.stop)  # before the fleet stops: a stopped process ignores SIGTERM
    return killer, pauser


def _chaos_clients(
    system: DemoSystem, plan: DeliveryFaults, log_dir: Path, clients: int
) -> list[OrderflowClient]:
    """The ``clients`` registered clients, each on its own credentials (a SAS for each of its two queues),
    on queues that duplicate their sends."""
    # The clients' submissions are duplicated here, as the devhost processes duplicate their sends.
    log = FaultLog(log_dir / "clients.jsonl")
    faults = plan.model_copy(update={"late_share": 0.0})
    return [
        OrderflowClient(
            FaultyQueueFactory(system.client_queues(client), faults, log),
            reply_queue=client.reply_queue,
            orders_queue=client.inbound_queue,
        )
        for client in system.clients[:clients]
    ]


def _chaos_intruder(system: DemoSystem, clients: int, *, seed: int) -> Intruder:
    """The intruder (the client registered after the ``clients`` chaos clients), not started yet, on
    its own credentials; its SAS is tried on an agent request queue and a host's agent response queue
    besides the victims' inbound queues."""
    client = system.clients[clients]
    settings = Settings.load(env=system.env)
    first_agent = new_order_workflow(settings.WORKFLOW_VERSION).steps[0].agent
    host_id = next(iter(system.fleet.specs.values())).host_id
    credentials = system.client_credentials(client)
    return Intruder(
        client,
        credentials.queues(),
        credentials.inbound_url,
        victims=system.clients[:clients],
        order_ids=[o.order_id for o in system.catalog.orders[:INTRUDER_TARGET_POOL]],
        states=system.stores.state,
        foreign_queues=[
            settings.agent_queue(first_agent),
            f"{settings.AGENT_RESPONSES_QUEUE}-{host_id}",
        ],
        plan=IntruderPlan(seed=seed),
    )


def _settle_under_chaos(
    system: DemoSystem, chaos_clients: list[OrderflowClient], chaos: Chaos, *, budget_s: float
) -> Settling:
    """Start the chaos (and the intruder), submit the orders and wait for them to settle, then stop the
    chaos."""

    def status() -> str:
        counts = chaos.counts(system.run_dir)
        outages = sum(counts[kind.value] for kind in OUTAGE_KINDS)
        return (
            f"kills {counts['kills']} · leader pauses {counts['leader_pauses']} · "
            f"duplicates {counts['duplicates_delivered']} · late {counts['late_responses']} · "
            f"outages {outages} · long handlers {counts['long_handlers']}"
        )

    for maker in chaos.threads():
        maker.start()
    others = [chaos.attacker.client.client_id] if chaos.attacker is not None else []
    settling = submit_and_settle(system, chaos_clients, budget_s=budget_s, status=status, others=others)
    # The last replies and the summary are read from a quiet system.
    for maker in reversed(chaos.threads()):
        maker.stop()
    return settling


def _chaos_report(
    system: DemoSystem,
    chaos_clients: list[OrderflowClient],
    settling: Settling,
    chaos: Chaos,
    *,
    processes: int,
    clients: int,
    asked: Mapping[str, Any],
) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """The chaos report (its own keys, the demo report's others, then ``unexercised``) and the
    mismatched orders."""
    attacker = chaos.attacker
    others = [attacker.client.client_id] if attacker is not None else []
    offset_s = chaos.skewed.offset_s if chaos.skewed is not None else 0.0
    demo_report, mismatched = build_report(
        system,
        chaos_clients,
        settling,
        processes=processes,
        kills=len(chaos.killer.kills) if chaos.killer is not None else 0,
        others=others,
        clock_slack_s=STORE_TIME_SLACK_S,  # the skewed host stamps on the store's time too
    )
    intruder_report = _intruder_report(system, attacker, settling) if attacker is not None else {}
    records = catalog_records(all_records(system.stores.state), others)
    report: dict[str, Any] = {
        "orders": len(system.catalog.orders),
        "settled": demo_report["submitted"] - demo_report["not_terminal"],
        "not_terminal": demo_report["not_terminal"],
        "duplicate_effects": demo_report["duplicate_effects"],
        "uncompensated_effects": demo_report["uncompensated_effects"],
        "misrouted_replies": count_misrouted_replies(
            {c.reply_queue: c.replies.received for c in chaos_clients}, settling.owners
        )
        + sum(c.replies.foreign for c in chaos_clients)
        + intruder_report.pop("intruder_misrouted_replies", 0),
        "cross_client_effects": intruder_report.pop("cross_client_effects", 0),
        "max_recovery_s": max_recovery_s(records),
        **chaos.counts(system.run_dir),
        "clock_offset_s": offset_s,
        "clock_skew_alerts": count_alerts(system.run_dir, "clock_skew"),
        "clients": clients,
        "duplicate_replies_dropped": sum(c.replies.duplicates for c in chaos_clients),
        **intruder_report,
    }
    report.update({k: v for k, v in demo_report.items() if k not in report})
    report["unexercised"] = unexercised(report, **asked)
    return report, mismatched


def _intruder_report(system: DemoSystem, attacker: Intruder, settling: Settling) -> dict[str, Any]:
    """The intruder's keys of the report: ``cross_client_effects`` (and by kind),
    ``intruder_misrouted_replies`` (replies it got for an order id it never submitted, for
    ``misrouted_replies``), ``intruder_attacks`` per kind, ``intruder_refusals`` (403s on foreign queues),
    ``intruder_orders`` and ``intruder_orders_settled``, ``intruder_replays`` and
    ``intruder_conflict_alerts``.

    Once its last messages are dead-lettered and its own orders settled (or :data:`INTRUDER_SETTLE_S`
    passed), the driver acts as an operator (:func:`_as_operator`) and counts what it was shown too.
    """
    attacks = attacker.snapshot()
    # The account key's factory: only it may read the intruder's dead-letter queue.
    with StorageQueueFactory.from_connection_string(system.endpoints.storage_connection_string) as queues:

        def count(operator: OperatorFindings | None) -> tuple[CrossClientEffects, list[StateRecord]]:
            attacker.sdk.poll()
            records = all_records(system.stores.state)
            effects = count_cross_client_effects(
                records,
                intruder=attacker.client,
                clients=system.clients,
                owners=settling.owners,
                attacks=attacks,
                dead_letters=every_dead_letter(queues, attacker.client.inbound_queue),
                operator=operator,
            )
            return effects, records

        _await_refusals(lambda: count(None), attacker.client.client_id, INTRUDER_SETTLE_S)
        findings = _as_operator(system, attacker, attacks, lambda f: count(f)[0])
        effects, records = count(findings)
    own, settled = settled_own_orders(records, attacker.client.client_id)
    mine = attacker.own_order_ids()
    flood = flood_alerts(findings.alerts, attacker.client.client_id)
    return {
        "cross_client_effects": effects.total,
        "intruder_misrouted_replies": count_misrouted_replies(
            {attacker.client.reply_queue: attacker.sdk.replies.received},
            dict.fromkeys(mine, attacker.client.reply_queue),
        )
        + attacker.sdk.replies.foreign,
        "cross_client_effects_by_kind": vars(effects).copy(),
        "intruder_attacks": attack_counts(attacks),
        "intruder_refusals": sum(1 for a in attacks if a.refused),
        "intruder_orders": own,
        "intruder_orders_settled": settled,
        "intruder_replays": len(findings.replayed),
        "intruder_conflict_alerts": {"stored": len(flood), "count": sum(a.count for a in flood)},
    }


def _await_refusals(
    count: Callable[[], tuple[CrossClientEffects, list[StateRecord]]], client_id: str, within_s: float
) -> None:
    """Count every second until every attack was refused as expected and the intruder's own orders
    settled, or ``within_s`` seconds passed."""
    deadline = time.monotonic() + within_s
    while True:
        effects, records = count()
        own, settled = settled_own_orders(records, client_id)
        if (effects.attack_unrefused == 0 and settled == own) or time.monotonic() >= deadline:
            return
        time.sleep(1.0)


def _as_operator(
    system: DemoSystem,
    attacker: Intruder,
    attacks: Sequence[Attack],
    count: Callable[[OperatorFindings], CrossClientEffects],
) -> OperatorFindings:
    """The driver as an operator, through the operator API (:mod:`devhost.intruder_operator`): list the
    intruder's dead letters, replay its ``correlation_id`` attacks, wait (up to :data:`REPLAY_SETTLE_S`)
    for the replays to be dead-lettered again, list them again, and read the stored alerts; the ETags
    of the victim records the replays name are read before and after."""
    queue = attacker.client.inbound_queue
    correlation = {a.message_id for a in attacks if a.kind is AttackKind.CORRELATION_ID}
    victims = replayed_victims(attacks)
    with OperatorApiClient(system.api_url, token=operator_token()) as api:
        session = OperatorSession(api)
        findings = session.findings
        before = victim_etags(system.stores.state, victims)
        session.replay(queue, session.dead_letters(queue), correlation)
        deadline = time.monotonic() + REPLAY_SETTLE_S
        while count(findings).attack_unrefused and time.monotonic() < deadline:
            time.sleep(1.0)
        session.dead_letters(queue)
        after = victim_etags(system.stores.state, victims)
        findings.victims_changed = sum(1 for key, etag in after.items() if before.get(key) != etag)
        findings.alerts = session.alerts()
    findings.alert_page = MAX_LIMIT
    findings.alert_window_s = Settings.load(env=system.env).ALERT_WINDOW_S
    return findings


def _write_events(run_dir: Path, chaos: Chaos) -> None:
    """What the chaos did, when: for reading the processes' logs side by side."""
    events = {
        "kills": chaos.killer.kills if chaos.killer is not None else [],
        "leaderPauses": chaos.pauser.pauses if chaos.pauser is not None else [],
        "outages": chaos.outages.windows if chaos.outages is not None else [],
        "skewedHost": vars(chaos.skewed) if chaos.skewed is not None else None,
    }
    (run_dir / "chaos-events.json").write_text(json.dumps(events, indent=2) + "\n", encoding="utf-8")


def _print_verdict(
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


app = typer.Typer(add_completion=False)


@app.command()
def main(  # noqa: PLR0917 (typer passes each option as a parameter)
    orders: Annotated[
        int,
        typer.Option(
            help="How many TPC-H orders to submit (15000 for all); the default is enough for the run to "
            "outlast its third outage slot."
        ),
    ] = 400,
    processes: Annotated[
        int,
        typer.Option(
            help="devhost processes: the last runs the agents and the submission, the others the scheduler "
            f"roles (leader pauses need {PAUSE_MIN_PROCESSES} or more)."
        ),
    ] = 3,
    kill_every: Annotated[
        float, typer.Option(help="SIGKILL a random devhost process every this many seconds (0: never).")
    ] = 5.0,
    duplicate_share: Annotated[
        float, typer.Option(help="Share of sent messages delivered twice, 0 to 1.")
    ] = 0.05,
    late_share: Annotated[
        float, typer.Option(help="Share of agent responses delivered past their deadline, 0 to 1.")
    ] = 0.03,
    pause_every: Annotated[
        float, typer.Option(help="SIGSTOP the supervisor leader every this many seconds (0: never).")
    ] = 30.0,
    outage_every: Annotated[
        float,
        typer.Option(
            help="One outage every this many seconds: the state store's, the queues' (each longer than a "
            "step's deadline) and a dependency's, in turn (0: never)."
        ),
    ] = 30.0,
    long_share: Annotated[
        float, typer.Option(help="Share of the services' calls answered after longer than a queue lock.")
    ] = 0.03,
    skew: Annotated[
        bool, typer.Option(help="Run one scheduler process with its clock 20-40 s ahead or behind.")
    ] = True,
    clients: Annotated[int, typer.Option(help="Clients, each with its own reply queue.")] = 3,
    intruder: Annotated[
        bool, typer.Option(help="Add a client that attacks the others' orders (devhost.intruder).")
    ] = True,
    seed: Annotated[int, typer.Option(help="Seed of the kills and the delivery faults.")] = 20261129,
    timeout_s: Annotated[
        float | None,
        typer.Option(help="Give up waiting after this many seconds (default: scaled to --orders)."),
    ] = None,
    report: Annotated[Path, typer.Option(help="Where the JSON report is written.")] = REPORT_PATH,
) -> None:
    """Run the chaos run and write chaos-report.json (or --report); exits 1 if any invariant fails.

    Bad arguments, and chaos that cannot happen with them, exit 2 and a run that cannot start exits 1,
    each with one line on stderr. SIGTERM and SIGHUP stop it as Ctrl-C does (a paused leader is
    resumed, everything started is stopped), then it exits 128 + the signal.
    """
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    plan: dict[str, Any] = {
        "orders": orders,
        "processes": processes,
        "kill_every_s": kill_every,
        "duplicate_share": duplicate_share,
        "late_share": late_share,
        "pause_every_s": pause_every,
        "outage_every_s": outage_every,
        "long_share": long_share,
        "skew": skew,
        "clients": clients,
        "timeout_s": timeout_s,
    }
    outcome = run_driver(
        lambda: check_chaos_args(**plan),
        lambda: run_chaos(**plan, intruder=intruder, seed=seed, report_path=report),
    )
    raise typer.Exit(1 if failed_invariants(outcome) else 0)


if __name__ == "__main__":
    app()
