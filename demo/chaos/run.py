"""``make chaos``: the demo's orders under every fault a distributed deployment meets at once.

The run is the demo's (:mod:`demo.run`: Azurite, cosmosdb-server, the demo services with their
faults, ``--processes`` devhost processes, real TPC-H orders), with, all at the same time:

- **SIGKILL and restart**: a random devhost process every ``--kill-every`` seconds
  (:class:`demo.fleet.Killer`);
- **duplicate delivery**: a ``--duplicate-share`` of every message sent (submissions, agent requests,
  agent responses, client replies) delivered twice under the same message id
  (:mod:`demo.chaos.delivery`; the driver duplicates its clients' submissions itself);
- **late responses**: a ``--late-share`` of agent responses delivered after their step's deadline, so the
  durable timer wins, the supervisor recovers the order, and the late answer must be dropped; the demo
  services' own "hang past the deadline" fault stays on too;
- **a paused supervisor leader**: every ``--pause-every`` seconds the process holding the supervisor lease
  is SIGSTOPped for longer than the lease, then SIGCONTed: another process takes the lead meanwhile, and
  the paused one wakes up believing it still leads (:class:`demo.chaos.leader.LeaderPauser`).
  Conditional writes must keep that harmless;
- **several clients**: ``--clients`` clients, each with its own private reply queue, so a reply that
  reaches the wrong client is seen (``misrouted_replies``);
- **an intruder**: one more registered client on its own credentials (:mod:`demo.intruder.attacks`) that
  reuses the others' order ids, cancels their orders, names their reply queues, sends operator actions,
  uses its SAS on their queues, sends hostile text and correlation ids naming their orders, and floods
  conflicting resends; afterwards the run, as an operator, replays its dead letters through the operator
  API. Whatever it achieves on their orders, or on what an operator sees of them, is a
  ``cross_client_effect``.

The run's parts: :mod:`demo.chaos.config` (its settings and the checks of its arguments),
:mod:`demo.chaos.leader` (the leader pauser), :mod:`demo.chaos.report` and :mod:`demo.chaos.outcome`
(the counts, the invariants and the report).

It writes ``chaos-report.json`` (the demo report's keys plus the chaos counts and ``max_recovery_s``) and
exits 1, naming them, if any invariant in :data:`demo.chaos.report.CHAOS_INVARIANTS` is not 0.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Annotated, Any

import typer

from demo.chaos.claim_kills import MARKERS, ClaimKiller
from demo.chaos.config import (
    ALL_OUTAGES,
    INTRUDER_TARGET_POOL,
    PAUSE_MARGIN_S,
    PAUSE_MIN_PROCESSES,
    REPORT_PATH,
    chaos_budget_s,
    check_chaos_args,
)
from demo.chaos.delivery import (
    CHAOS_ENV,
    DeliveryFaults,
    FaultLog,
    FaultyQueueFactory,
)
from demo.chaos.faults import (
    CHAOS_SETTINGS,
    SERVICES,
    SkewedHost,
    dependency_outage,
    draw_skewed_host,
    emulator_outage,
    long_handler_faults,
    short_hold_faults,
)
from demo.chaos.faulty_host import MODULE as FAULTY_HOST
from demo.chaos.leader import LeaderPauser, lease_holder_reader
from demo.chaos.outages import OUTAGE_KINDS, OutageKind, OutageScheduler
from demo.chaos.outcome import chaos_report
from demo.chaos.report import Chaos, failed_invariants, print_verdict, write_events
from demo.config import DEMO_FAULTS, console, new_run_dir
from demo.faults import FaultPlan
from demo.fleet import Killer, devhost_specs, quiet_sdk_logs
from demo.intruder.attacks import INTRUDER_CLIENT
from demo.intruder.intruder import Intruder, IntruderPlan
from demo.outcome import (
    write_report,
)
from demo.system import DemoSystem, Settling, demo_system, submit_and_settle
from devhost.__main__ import CLOCK_OFFSET_ENV
from devhost.cli import run_driver
from devhost.settings import load_settings
from orderflow.settings import Settings
from orderflow.workflows import new_order_workflow
from orderflow_client.client import OrderflowClient

logger = logging.getLogger(__name__)


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
    claim_kill_share: float = 0.02,
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
        processes: devhost processes (see :func:`demo.fleet.devhost_specs`); pausing the leader needs
            two running the supervisor, so at least 3.
        kill_every_s: SIGKILL a random devhost process every this many seconds and restart it (0: never).
        duplicate_share: Share of sent messages delivered twice, in [0, 1].
        late_share: Share of agent responses delivered after their step's deadline, in [0, 1].
        pause_every_s: SIGSTOP the supervisor leader every this many seconds (0: never).
        pause_s: How long a pause lasts, seconds (None: the lease period plus
            :data:`demo.chaos.config.PAUSE_MARGIN_S`).
        first_pause_after_s: Seconds from the first submission to the first pause (None: ``pause_every_s``).
        outage_every_s: One outage every this many seconds, the state store's, the queues' and a
            dependency's in turn (:mod:`demo.chaos.outages`; 0: none).
        outage_kinds: The kinds of outage taken in turn (:data:`demo.chaos.config.ALL_OUTAGES`: every kind).
        long_share: Share of the demo services' calls that answer after longer than a queue lock
            (:func:`demo.chaos.faults.long_handler_faults`; 0: none).
        skew: Run one scheduler process with its clock tens of seconds off
            (:func:`demo.chaos.faults.draw_skewed_host`).
        claim_kill_share: Share of new orders whose submitting process is SIGKILLed between the create
            of their record and its claim, and restarted (:mod:`demo.chaos.claim_kills`; 0: none).
        clients: Clients submitting the orders in turn, each with its own reply queue.
        intruder: Register one more client, :data:`demo.intruder.attacks.INTRUDER_CLIENT`, that attacks
            theirs.
        seed: Seed of the kills and of the delivery faults' draws.
        timeout_s: Stop waiting for orders to settle after this many seconds (None: scaled to ``orders``).
        faults: Faults the demo services inject.
        report_path: Where the JSON report is written.

    Raises:
        ValueError: an argument :func:`demo.chaos.config.check_chaos_args` refuses (nothing was started).
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
        "claim_kill_share": claim_kill_share,
    }
    check_chaos_args(orders=orders, processes=processes, clients=clients, timeout_s=timeout_s, **asked)
    run_dir = new_run_dir()
    log_dir = run_dir / "delivery-faults"
    plan = _delivery_faults(log_dir, asked, seed=seed)
    skewed = _skewed_host(seed, processes) if skew else None
    faults = short_hold_faults(long_handler_faults(faults, long_share))
    _print_plan(run_dir, orders=orders, processes=processes, clients=clients, skewed=skewed, **asked)
    with ExitStack() as stack, quiet_sdk_logs():
        system = stack.enter_context(
            demo_system(
                orders=orders,
                processes=processes,
                faults=faults,
                run_dir=run_dir,
                extra_env={CHAOS_ENV: plan.model_dump_json(), **CHAOS_SETTINGS},
                host_module=FAULTY_HOST,
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
        claim_killer = _claim_killer(stack, system, log_dir, claim_kill_share)
        chaos = Chaos(killer, pauser, attacker, outages, skewed, claim_killer)
        budget_s = chaos_budget_s(orders, timeout_s, outages=outage_every_s > 0)
        settling = _settle_under_chaos(system, chaos_clients, chaos, budget_s=budget_s)
        report, mismatched = chaos_report(
            system, chaos_clients, settling, chaos, processes=processes, clients=clients, asked=asked
        )
        write_events(run_dir, chaos)

    write_report(report, report_path)
    print_verdict(report, mismatched, report_path, asked)
    return report


def _delivery_faults(log_dir: Path, asked: Mapping[str, Any], *, seed: int) -> DeliveryFaults:
    """The devhost processes' delivery faults for the chaos ``asked`` (the shares of duplicated and late
    deliveries, long handlers counted when any are injected), logged under ``log_dir``."""
    return DeliveryFaults(
        duplicate_share=asked["duplicate_share"],
        late_share=asked["late_share"],
        long_handlers=asked["long_share"] > 0,
        claim_kill_share=asked["claim_kill_share"],
        seed=seed,
        log_dir=str(log_dir),
    )


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
    claim_kill_share: float,
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
        f"long calls {long_share:.0%}, kills between create and claim {claim_kill_share:.0%}, {clock}; "
        f"logs in {run_dir}"
    )


def _claim_killer(stack: ExitStack, system: DemoSystem, log_dir: Path, share: float) -> ClaimKiller | None:
    """The killer between a create and its claim (None: ``share`` is 0), not started yet; ``stack`` stops
    it before it stops the fleet."""
    if share <= 0:
        return None
    claim_killer = ClaimKiller(system.fleet, log_dir / MARKERS)
    stack.callback(claim_killer.stop)
    return claim_killer


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
        step_timeout_s=Settings.load(env=system.env).steps.STEP_TIMEOUT_S,
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
    settings, local = load_settings(system.env)
    killer = Killer(system.fleet, kill_every_s, seed=seed) if kill_every_s > 0 else None
    if killer is not None:
        stack.callback(killer.stop)
    pauser = None
    if pause_every_s > 0:
        pauser = LeaderPauser(
            system.fleet,
            lease_holder_reader(settings, local),
            every_s=pause_every_s,
            pause_s=pause_s if pause_s is not None else local.SUPERVISOR_LEASE_S + PAUSE_MARGIN_S,
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
    first_agent = new_order_workflow(settings.steps.WORKFLOW_VERSION).steps[0].agent
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
            settings.queues.agent_queue(first_agent),
            f"{settings.queues.AGENT_RESPONSES_QUEUE}-{host_id}",
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
            help="devhost processes: the last runs the agents, the others the scheduler roles and the "
            f"submission (leader pauses need {PAUSE_MIN_PROCESSES} or more)."
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
    claim_kill_share: Annotated[
        float,
        typer.Option(
            help="Share of new orders whose submitting process is SIGKILLed between the create and the claim."
        ),
    ] = 0.02,
    clients: Annotated[int, typer.Option(help="Clients, each with its own reply queue.")] = 3,
    intruder: Annotated[
        bool, typer.Option(help="Add a client that attacks the others' orders (demo.intruder.attacks).")
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
        "claim_kill_share": claim_kill_share,
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
