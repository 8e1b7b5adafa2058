"""Throughput and latency of orderflow: ``python -m devhost`` processes started the way ``make demo``
does, driven closed loop through the client SDK, with the client woken by its reply queue."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.counting.cpu import CpuClock, child_pids
from bench.counting.http import HttpCounter
from bench.load import LoadResult, run_orderflow_load
from bench.measure import BACKEND_SUFFIX, Instruments, Probed, snapshot, window_figures
from bench.probe import FILE_ENV, TARGETS_ENV
from bench.profiling import PySpy, summarise_stacks
from bench.stats import latency_summary, throughput
from bench.workload import submissions
from demo.fleet import Child, DevhostSpec, Fleet, devhost_specs, host_env, start_child
from demo.outcome import all_records
from demo.tpch import DemoOrder
from devhost.client_credentials import issue_client_credentials
from devhost.emulators import REPO_ROOT, LocalEndpoints
from devhost.http_transport import transport_for
from devhost.wakeup_channel import WakeupChannel
from orderflow.clients import RegisteredClient
from orderflow.records import StateRecord, client_order_id
from orderflow.settings import Settings
from orderflow.stores.cosmos import CosmosStores
from orderflow.workflows import CURRENT_WORKFLOW
from orderflow_client.client import OrderflowClient

REMOTE_STEPS = len(CURRENT_WORKFLOW.steps)
"""n, the remote steps of the workflow new orders run (reserve, charge, ship)."""

WRITE_HELPERS = ("orderflow.protocol.conditional", "activities.fenced")
"""Shared write primitives looked through when labelling a store call, so the label names the role
function that used them (``start_step``, not ``update``)."""


def isolation(tag: str) -> dict[str, str]:
    """Settings that give a run its own database, queues, lease blob and registered client on shared
    emulators.

    Raises:
        ValueError: ``tag`` is not 2-20 lowercase letters and digits.
    """
    if not (tag.isascii() and tag.isalnum() and tag.islower() and 2 <= len(tag) <= 20):
        raise ValueError(f"run tag {tag!r} must be 2-20 lowercase letters and digits")
    return {
        "COSMOS_DATABASE": f"bench{tag}",
        "CLIENTS": json.dumps([{"id": f"bench-{tag}"}]),
        "AGENT_QUEUE_PREFIX": f"agent-{tag}-",
        "AGENT_RESPONSES_QUEUE": f"responses-{tag}",
        "SUPERVISOR_LEASE_BLOB": f"orderflow-leases/bench-{tag}",
    }


def queue_role(settings: Settings) -> Callable[[str], str]:
    """Maps a queue name to its role: ``orders``, ``agent_requests``, ``agent_responses``, ``replies``
    (any other queue: a client's private reply queue) or ``dead_letters``."""

    def role_of(name: str) -> str:
        if name.endswith("-deadletter"):
            return "dead_letters"
        if settings.clients.clients().for_inbound_queue(name) is not None:
            return "orders"
        if name.startswith(settings.queues.AGENT_RESPONSES_QUEUE):
            return "agent_responses"
        if name.startswith(settings.queues.AGENT_QUEUE_PREFIX):
            return "agent_requests"
        return "replies"

    return role_of


def summarise_load(result: LoadResult) -> dict[str, Any]:
    """A load result as report fields: outcomes, elapsed time, throughput and latency."""
    return {
        "submitted": result.submitted,
        "finished": result.finished,
        "outcomes": dict(sorted(result.outcomes.items())),
        "elapsed_s": round(result.elapsed_s, 3),
        "throughput_per_s": throughput(result.finished, result.elapsed_s),
        "latency": latency_summary(result.latencies_s),
        "transient_errors": result.transient_errors,
    }


def connect_stores(endpoints: LocalEndpoints, settings: Settings) -> CosmosStores:
    """The run's stores on the local cosmosdb-server (its certificate is self-signed)."""
    return CosmosStores.connect(
        endpoints.cosmos_endpoint,
        key=endpoints.cosmos_key,
        database=settings.connections.COSMOS_DATABASE,
        verify_tls=False,
        transport=transport_for(endpoints.cosmos_endpoint),
    )


@dataclass(frozen=True)
class Measuring:
    """How a throughput run measures its timed window (:mod:`bench.measure`).

    Attributes:
        pids: Other processes whose CPU is sampled, by name (emulators, demo services, this process).
        targets: ``"host:port"`` -> emulator name, for the devhost processes' HTTP counters.
        local: This process's HTTP counter (the client's requests), or None.
        profile: Sample every devhost process with py-spy during the window (the scheduler processes and
            the one with the agents and the submission: each spends its CPU differently).
        profile_rate: py-spy's samples per second.
    """

    pids: Mapping[str, int]
    targets: Mapping[str, str]
    local: HttpCounter | None = None
    profile: bool = False
    profile_rate: int = 50


def probed_start(
    env: Mapping[str, str], run_dir: Path, targets: Mapping[str, str]
) -> Callable[[DevhostSpec, int], Child]:
    """A :class:`Fleet` start function: ``python -m bench.probe`` (a counted devhost) with ``env``, its
    counts file in ``run_dir``."""

    def start(spec: DevhostSpec, run: int) -> Child:
        name = spec.name if run == 1 else f"{spec.name}.{run}"
        env_ = spec.environment(env)
        env_[FILE_ENV] = str(run_dir / f"{name}.counts.json")
        env_[TARGETS_ENV] = json.dumps(dict(targets))
        return start_child(
            spec.name,
            ["-m", "bench.probe", *spec.arguments()],
            env_,
            "ready",
            run_dir,
            log_name=name,
        )

    return start


def _instruments(fleet: Fleet, run_dir: Path, measuring: Measuring) -> Instruments:
    pids = {name: child.process.pid for name, child in fleet.children.items()}
    # Each devhost's durabletask backend is its child process (devhost.durabletask_backend): orderflow's
    # own too, counted apart because on Azure the Durable Functions extension does that work.
    backends = {
        f"{name} {BACKEND_SUFFIX}": child for name, pid in pids.items() for child in child_pids(pid)[:1]
    }
    return Instruments(
        cpu=CpuClock({**pids, **backends, **measuring.pids}),
        probes={name: Probed(pid, run_dir / f"{name}.counts.json") for name, pid in pids.items()},
        local=measuring.local,
        own=(*pids, *backends),
    )


WOKEN_IDLE_POLL_S = 0.25
"""The load generator's longest wait on an empty reply queue when devhosts wake it: the wait of a reply
whose wake-up was lost (as ``POLL_MAX_INTERVAL_S`` bounds a devhost loop's)."""

CLIENT_WAKEUP_ID = "bench-client"
"""The load generator's name in the run's wake-up directory."""


@dataclass(frozen=True)
class ClientWakeups:
    """The load generator's end of the run's wake-ups (:func:`reply_wakeups`).

    Attributes:
        channel: Its socket in the wake-up directory; ``channel.announce`` wakes the devhosts' loops.
        replied: Set when a devhost announces a send to the client's reply queue.
    """

    channel: WakeupChannel
    replied: threading.Event


def reply_wakeups(directory: Path, reply_queue: str) -> ClientWakeups:
    """The load generator's wake-ups, started (stop ``channel`` when done): ``replied`` is set when a
    devhost process sends to ``reply_queue``.

    The load generator binds a socket in the run's wake-up directory (``WAKEUP_DIR``,
    :mod:`devhost.wakeup_channel`) like a devhost process: a reply ends its idle wait as a send ends a
    devhost loop's (the client notices a reply when it is sent, not at its next poll), and its
    ``announce`` of each submission wakes the submission's idle loop (the order is taken when sent, not
    at that loop's next poll, up to ``POLL_MAX_INTERVAL_S``). The queues stay the source of truth (a
    datagram carries only a queue's name). On Service Bus neither is needed: the broker pushes each
    message to the receiver that holds a link to its entity, the Functions trigger and the client alike.
    """
    event = threading.Event()

    def on_name(name: str) -> None:
        if name == reply_queue:
            event.set()

    channel = WakeupChannel(directory, CLIENT_WAKEUP_ID, on_name)
    channel.start()
    return ClientWakeups(channel, event)


def _measured_load(
    client: OrderflowClient,
    messages: Sequence[Mapping[str, Any]],
    *,
    instruments: Instruments | None,
    profiled: Sequence[tuple[DevhostSpec, PySpy]],
    concurrency: int,
    timeout_s: float,
    wakeups: ClientWakeups,
) -> tuple[LoadResult, dict[str, Any]]:
    """The timed load, with the window's figures (and profiles) when ``instruments`` are given;
    ``profiled`` each devhost process to sample and its py-spy (not started); ``wakeups`` the load
    generator's (:func:`reply_wakeups`)."""

    def load() -> LoadResult:
        return run_orderflow_load(
            client,
            messages,
            concurrency=concurrency,
            timeout_s=timeout_s,
            wakeup=wakeups.replied,
            announce=wakeups.channel.announce,
            idle_poll_s=WOKEN_IDLE_POLL_S,
        )

    if instruments is None:
        return load(), {}
    for _, spy in profiled:
        spy.start()
    before = snapshot(instruments)
    result = load()
    after = snapshot(instruments)
    figures = window_figures(before, after, orders=max(result.finished, 1), own=instruments.own)
    if profiled:
        figures["profiles"] = [
            {
                "process": spec.name,
                "roles": spec.roles,
                "file": str(spy.output),
                **summarise_stacks(spy.stop(), repo_root=str(REPO_ROOT)),
            }
            for spec, spy in profiled
        ]
    return result, figures


def throughput_run(
    *,
    processes: int,
    orders: Sequence[DemoOrder],
    warmup: Sequence[DemoOrder],
    endpoints: LocalEndpoints,
    services_url: str,
    run_dir: Path,
    concurrency: int,
    timeout_s: float,
    overrides: Mapping[str, str] | None = None,
    measuring: Measuring | None = None,
) -> dict[str, Any]:
    """Throughput and latency of orderflow on ``processes`` devhost processes (faults off).

    The processes run with the demo's settings (``host_env``) and ``overrides``. The warm-up orders go
    through first and are not counted (first requests create queues and containers and fill caches).
    With ``measuring``, the devhost processes run under :mod:`bench.probe` and the timed window is
    measured (:func:`bench.measure.window_figures`, plus a py-spy profile when asked).

    Returns:
        :func:`summarise_load` fields plus ``processes``, ``roles``, :func:`recoveries` of the timed
        orders and, when measured, ``measured``.

    Raises:
        RuntimeError: a devhost process did not start.
    """
    tag = f"p{processes}c{concurrency}{uuid.uuid4().hex[:6]}"
    env = host_env(endpoints, services_url)
    env.update(overrides or {})
    env.update(isolation(tag))
    env.setdefault("WAKEUP_DIR", str(run_dir / f"wakeups-{tag}"))
    env.setdefault("WAKEUP_INBOUND", "true")  # the load generator announces each submission
    settings = Settings.load(env)
    # Create the containers once, before several processes race to.
    stores = connect_stores(endpoints, settings)
    specs = devhost_specs(processes)
    start = probed_start(env, run_dir, measuring.targets) if measuring is not None else None
    (registered,) = settings.clients.clients()
    # Bound before the fleet starts, so that every devhost finds it on its first scan.
    try:
        wakeups = reply_wakeups(Path(env["WAKEUP_DIR"]), registered.reply_queue)
    except BaseException:
        stores.close()
        raise
    fleet = Fleet(specs, env, run_dir, start=start)
    try:
        instruments = _instruments(fleet, run_dir, measuring) if measuring is not None else None
        profiled = _profilers(fleet, specs, run_dir, tag, measuring)
        client = registered_client(endpoints, registered)
        if warmup:
            run_orderflow_load(
                client,
                submissions(warmup, run=f"w{tag}", reply_to=client.reply_queue),
                concurrency=concurrency,
                timeout_s=timeout_s,
                wakeup=wakeups.replied,
                announce=wakeups.channel.announce,
                idle_poll_s=WOKEN_IDLE_POLL_S,
            )
        result, measured = _measured_load(
            client,
            submissions(orders, run=tag, reply_to=client.reply_queue),
            instruments=instruments,
            profiled=profiled,
            concurrency=concurrency,
            timeout_s=timeout_s,
            wakeups=wakeups,
        )
    finally:
        fleet.stop()
        wakeups.channel.stop()
    try:
        timed = [r for r in all_records(stores.state) if client_order_id(r.order_id).startswith(f"{tag}-")]
    finally:
        stores.close()
    return {
        "processes": processes,
        "concurrency": concurrency,
        "roles": [spec.roles for spec in specs],
        **summarise_load(result),
        **recoveries(timed),
        **({"measured": measured} if measured else {}),
    }


def _profilers(
    fleet: Fleet, specs: Sequence[DevhostSpec], run_dir: Path, tag: str, measuring: Measuring | None
) -> list[tuple[DevhostSpec, PySpy]]:
    """A py-spy profiler of each devhost process, its profile in ``run_dir/profile-<tag>-<name>.txt``,
    when ``measuring`` asks for a profile; else none."""
    return [
        (
            spec,
            PySpy(
                fleet.children[spec.name].process.pid,
                run_dir / f"profile-{tag}-{spec.name}.txt",
                rate=measuring.profile_rate,
            ),
        )
        for spec in specs
        if measuring is not None and measuring.profile
    ]


def registered_client(endpoints: LocalEndpoints, registered: RegisteredClient) -> OrderflowClient:
    """The load's client, holding what a registered client holds: a SAS for each of its two queues."""
    credentials = issue_client_credentials(endpoints.storage_connection_string, registered)
    return OrderflowClient(
        credentials.queues(), reply_queue=registered.reply_queue, orders_queue=registered.inbound_queue
    )


def recoveries(records: Sequence[StateRecord]) -> dict[str, int]:
    """How many orders needed more than one attempt (a step overran its deadline, or its process
    died, and the supervisor re-queued it), and the most attempts one order took."""
    return {
        "recovered_orders": sum(1 for record in records if record.attempt > 1),
        "attempts_max": max((record.attempt for record in records), default=0),
    }
