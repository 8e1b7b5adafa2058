"""orderflow under measurement: devhost processes for throughput and latency, in-process runs for counts.

- :func:`throughput_run` starts ``python -m devhost`` processes the way ``make demo`` does
  (:mod:`devhost.demo`'s ``Fleet``, ``devhost_specs``, ``host_env``) and drives them through the client
  SDK from this process, closed loop (:func:`bench.load.run_orderflow_load`).
- :func:`counting_run` runs every role in this process (:class:`devhost.host.DevHost`) over the real
  Cosmos DB (cosmosdb-server) and Storage-queue (Azurite) adapters wrapped in the counting wrappers, so
  each store and queue operation is counted where it is made, labelled with the function that made it.
- :func:`hard_down_run` runs the same in-process system while one demo service answers every call 503,
  and counts from the demo services' audit how many calls each order made to it.

Every run uses a database, queues and a lease blob of its own on the shared emulators.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.counting import OperationCounts, calling_function
from bench.counting.cpu import CpuClock, child_pids
from bench.counting.http import HttpCounter
from bench.counting.queues import CountingQueueFactory
from bench.counting.stores import CountingOrderStore, CountingStateStore
from bench.load import LoadResult, run_orderflow_load
from bench.measure import BACKEND_SUFFIX, Instruments, Probed, snapshot, window_figures
from bench.probe import FILE_ENV, TARGETS_ENV
from bench.profiling import PySpy, summarise_stacks
from bench.stats import at_most, latency_summary, per_order, throughput
from bench.workload import submissions
from demo.faults import FaultPlan
from demo.tpch import DemoOrder
from devhost.client_credentials import issue_client_credentials
from devhost.demo import (
    DEMO_SETTINGS,
    Child,
    DevhostSpec,
    Fleet,
    all_records,
    devhost_specs,
    host_env,
    start_child,
)
from devhost.emulators import REPO_ROOT, LocalEndpoints
from devhost.host import ALL_ROLES, DevHost
from devhost.wakeup_channel import WakeupChannel
from orderflow.breaker import circuit_breakers
from orderflow.client import OrderflowClient
from orderflow.clock import SystemClock
from orderflow.dependencies import Dependencies
from orderflow.queues.storage import StorageQueueFactory
from orderflow.records import StateRecord, client_order_id, order_key
from orderflow.settings import Settings
from orderflow.stores.cosmos import CosmosStores
from orderflow.workflows import CURRENT_WORKFLOW

logger = logging.getLogger(__name__)

REMOTE_STEPS = len(CURRENT_WORKFLOW.steps)
"""n, the remote steps of the workflow new orders run (reserve, charge, ship)."""

WRITE_HELPERS = ("orderflow.protocol.conditional",)
"""Shared write primitives looked through when labelling a store call, so the label names the role
function that used them (``start_step``, not ``update``)."""

HARD_DOWN_SETTINGS: dict[str, str] = {
    "SUPERVISOR_INTERVAL_S": "0.5",
    "SUPERVISOR_BACKOFF_INITIAL_S": "0.2",
    "SUPERVISOR_BACKOFF_MAX_S": "1",
    "SUPERVISOR_EXTENDED_BACKOFF_S": "1",
    "STARTER_INTERVAL_S": "0.2",
    "AGENT_BACKOFF_INITIAL_S": "0.05",
    "AGENT_BACKOFF_MAX_S": "0.2",
}
"""Shorter back-offs (supervisor and agent) for the hard-down run, so an order exhausts its attempts in
seconds rather than minutes. The calls an order makes do not depend on them: the retry budget, the calls
reserved per step attempt and ``SUPERVISOR_MAX_FAILURES`` decide those.

The poison guard stays on, at its default: a dead service's ``transient_exhausted`` never counts as an
order failing the same way (supervisor.poison.NOT_THE_ORDERS), so each order runs to its give-up."""

HARD_DOWN_BREAKER_SETTINGS: dict[str, str] = {
    "BREAKER_OPEN_S": "2",
    "BREAKER_OPEN_MAX_S": "4",
    "BREAKER_MAX_WAIT_S": "10",
    "BREAKER_CACHE_S": "0.2",
}
"""The circuit breaker's timings in the hard-down run with the breaker, shortened as the back-offs are
(a probe every 2-4 s, orders given up after 10 s of waiting instead of 15 minutes), so the run ends in
seconds. ``BREAKER_FAILURES_TO_OPEN`` keeps its default. The run without the breaker sets
``BREAKER_ENABLED=false``: every order retries the dead service on its own budget, as before breakers."""


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
        "ORDERS_QUEUE": f"orders-{tag}",
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
        if name == settings.ORDERS_QUEUE or settings.clients().for_inbound_queue(name) is not None:
            return "orders"
        if name.startswith(settings.AGENT_RESPONSES_QUEUE):
            return "agent_responses"
        if name.startswith(settings.AGENT_QUEUE_PREFIX):
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


def _connect(endpoints: LocalEndpoints, settings: Settings) -> CosmosStores:
    """The run's stores on the local cosmosdb-server (its certificate is self-signed)."""
    return CosmosStores.connect(
        endpoints.cosmos_endpoint,
        key=endpoints.cosmos_key,
        database=settings.COSMOS_DATABASE,
        verify_tls=False,
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
    settings = Settings.load(env)
    # Create the containers once, before several processes race to.
    stores = _connect(endpoints, settings)
    specs = devhost_specs(processes)
    start = probed_start(env, run_dir, measuring.targets) if measuring is not None else None
    (registered,) = settings.clients()
    # Bound before the fleet starts, so that every devhost finds it on its first scan.
    try:
        wakeups = reply_wakeups(Path(env["WAKEUP_DIR"]), registered.reply_queue)
    except BaseException:
        stores.close()
        raise
    fleet = Fleet(specs, env, run_dir, start=start)
    try:
        instruments = _instruments(fleet, run_dir, measuring) if measuring is not None else None
        profiled = [
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
        # The client holds what a registered client holds: a SAS for each of its two queues.
        credentials = issue_client_credentials(endpoints.storage_connection_string, registered)
        client = OrderflowClient(
            credentials.queues(), reply_queue=registered.reply_queue, orders_queue=registered.inbound_queue
        )
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


def recoveries(records: Sequence[StateRecord]) -> dict[str, int]:
    """How many orders needed more than one attempt (a step overran its deadline, or its process
    died, and the supervisor re-queued it), and the most attempts one order took."""
    return {
        "recovered_orders": sum(1 for record in records if record.attempt > 1),
        "attempts_max": max((record.attempt for record in records), default=0),
    }


@dataclass
class CountedSystem:
    """An in-process orderflow system whose adapters count every operation."""

    host: DevHost
    client: OrderflowClient
    stores: CosmosStores
    state_counts: OperationCounts
    order_counts: OperationCounts
    queue_counts: OperationCounts


@contextmanager
def counted_system(
    endpoints: LocalEndpoints, services_url: str, *, tag: str, overrides: Mapping[str, str] | None = None
) -> Iterator[CountedSystem]:
    """Every role in this process (one :class:`DevHost`) over counting-wrapped real adapters.

    Settings are the demo's (``DEMO_SETTINGS``) with ``overrides``, on a database and queues of the run's own.
    """
    env = {**DEMO_SETTINGS, **(overrides or {}), **isolation(tag)}
    env.update({"DEMO_SERVICES_URL": services_url, "HOST_ID": f"h{tag}", "COSMOS_VERIFY_TLS": "false"})
    settings = Settings.load(env)
    stores = _connect(endpoints, settings)
    state_counts, order_counts, queue_counts = OperationCounts(), OperationCounts(), OperationCounts()
    label = calling_function(skip_modules=WRITE_HELPERS)
    queues = CountingQueueFactory(
        StorageQueueFactory.from_connection_string(endpoints.storage_connection_string),
        counts=queue_counts,
        role_of=queue_role(settings),
    )
    clock = SystemClock()
    deps = Dependencies(
        states=CountingStateStore(stores.state, counts=state_counts, label=label),
        orders=CountingOrderStore(stores.orders, counts=order_counts, label=label),
        queues=queues,
        clock=clock,
        settings=settings,
        breakers=circuit_breakers(stores.breakers, clock, settings),
    )
    host = DevHost(deps, ALL_ROLES)
    # The client's queue operations are counted too: it shares the counting factory (the account key).
    (registered,) = settings.clients()
    client = OrderflowClient(
        queues, reply_queue=registered.reply_queue, orders_queue=registered.inbound_queue
    )
    host.start()
    try:
        yield CountedSystem(host, client, stores, state_counts, order_counts, queue_counts)
    finally:
        host.stop()
        stores.close()


def count_breakdown(
    state: OperationCounts, orders: OperationCounts, queues: OperationCounts, *, processed: int
) -> dict[str, Any]:
    """Per-order operation counts of ``processed`` happy-path orders, and the targets they are held to.

    Point operations (reads, creates, replaces) and queue sends are per order by nature. Query pages and
    the items they return come from the loops (starter, supervisor, reply relay, admission control) and
    grow with the run's length as much as with its orders: they are given as totals and per order.

    Raises:
        ValueError: ``processed`` is not positive.
    """
    creates, replaces = state.total("create"), state.total("replace")
    writes = creates + replaces
    sends = queues.by_label("send")
    state_writes_by_function: Counter[str] = Counter(state.by_label("create"))
    state_writes_by_function.update(state.by_label("replace"))
    n = REMOTE_STEPS
    queue_sends = {
        role: per_order(sends.get(role, 0), processed)
        for role in ("orders", "agent_requests", "agent_responses", "replies")
    }
    return {
        "orders": processed,
        "remote_steps": n,
        "state_store": {
            "point_reads": per_order(state.total("read"), processed),
            "creates": per_order(creates, processed),
            "replaces": per_order(replaces, processed),
            "writes": per_order(writes, processed),
            "replace_conflicts": per_order(state.total("replace_conflict"), processed),
            "query_pages": per_order(state.total("query_page"), processed),
            "query_items": per_order(state.total("query_item"), processed),
            "counts": per_order(state.total("count"), processed),
        },
        "state_writes_by_function": {
            label: per_order(count, processed) for label, count in sorted(state_writes_by_function.items())
        },
        "state_reads_by_function": {
            label: per_order(count, processed) for label, count in state.by_label("read").items()
        },
        "state_queries_total": {
            "pages": state.by_label("query_page"),
            "items": state.by_label("query_item"),
            "counts": state.by_label("count"),
        },
        "order_store": {
            "writes": per_order(orders.total("create"), processed),
            "reads": per_order(orders.total("read"), processed),
        },
        "queue_sends": {**queue_sends, "total": per_order(sum(sends.values()), processed)},
        "targets": {
            "state_writes": at_most(per_order(writes, processed), n + 2),
            "point_reads": at_most(per_order(state.total("read"), processed), 1),
            "queue_messages": at_most(per_order(sum(sends.values()), processed), 2 * n + 3),
        },
    }


def counting_run(
    *,
    orders: Sequence[DemoOrder],
    endpoints: LocalEndpoints,
    services_url: str,
    concurrency: int,
    timeout_s: float,
    overrides: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Per-order store and queue operations of happy-path orders, counted by the adapters in process.

    The roles run with the demo's settings and ``overrides``.

    Returns:
        :func:`count_breakdown` fields, plus ``method``, the load's ``outcomes``, and ``all_processed``
        (the counts are per order only when every order was processed).
    """
    tag = f"c{uuid.uuid4().hex[:6]}"
    with counted_system(endpoints, services_url, tag=tag, overrides=overrides) as system:
        result = run_orderflow_load(
            system.client,
            submissions(orders, run=tag, reply_to=system.client.reply_queue),
            concurrency=concurrency,
            timeout_s=timeout_s,
        )
    processed = result.outcomes.get("Processed", 0)
    breakdown = count_breakdown(
        system.state_counts, system.order_counts, system.queue_counts, processed=max(processed, 1)
    )
    return {
        "method": "in-process: every role in one DevHost over the Cosmos DB (cosmosdb-server) and Storage "
        "queue (Azurite) adapters, wrapped in bench.counting.stores / bench.counting.queues",
        "outcomes": dict(sorted(result.outcomes.items())),
        "all_processed": processed == len(orders),
        **breakdown,
    }


def hard_down_calls(
    audit_keys: dict[str, Any], *, service: str | None, order_ids: Sequence[str]
) -> dict[str, dict[str, int]]:
    """Calls each order made to ``service`` (None: to every service), from the demo services' audit:
    ``{orderId: {forward, undo}}``.

    The audit is keyed by idempotency key, ``{orderKey}:{step}`` or ``{orderKey}:{step}:undo``, with the
    order key ``{clientId}:{orderId}``; ``order_ids`` are the clients' own ids (unique in a run).
    """
    calls = {order_id: {"forward": 0, "undo": 0} for order_id in order_ids}
    for key, entry in audit_keys.items():
        order_id = client_order_id(key.removesuffix(":undo").rpartition(":")[0])
        if order_id not in calls:
            continue
        if service is not None and not str(entry.get("endpoint", "")).startswith(f"{service}."):
            continue
        calls[order_id]["undo" if entry.get("undo") else "forward"] += int(entry.get("calls", 0))
    return calls


def hard_down_run(
    *,
    orders: Sequence[DemoOrder],
    endpoints: LocalEndpoints,
    services_url: str,
    service: str,
    timeout_s: float,
    overrides: Mapping[str, str] = HARD_DOWN_SETTINGS,
) -> dict[str, Any]:
    """Calls per order to a service that answers every call 503, against the order's retry budget.

    The demo services' fault plan is set to ``unavailable_services=[service]`` for the run and cleared
    after it. ``overrides`` are settings over the demo's (shorter back-offs by default). Forward calls
    are what the retry budget limits; undo calls (compensation, which spends no budget) are counted apart.

    Returns:
        ``service``, ``orders``, the final ``outcomes``, ``forward_calls`` and ``undo_calls`` (max, mean),
        ``budget`` (the records' ``retryBudget.limit``), ``budget_spent_max``, ``all_forward_calls_max``
        (an order's forward calls to every service) and the target ``forward_calls_within_budget`` (held
        against those).
    """
    tag = f"d{uuid.uuid4().hex[:6]}"
    with httpx.Client(base_url=services_url, timeout=30) as http:
        http.put("/faults", json=FaultPlan(unavailable_services=(service,)).model_dump(mode="json"))
        try:
            with counted_system(endpoints, services_url, tag=tag, overrides=overrides) as system:
                messages = submissions(orders, run=tag, reply_to=system.client.reply_queue)
                result = run_orderflow_load(
                    system.client, messages, concurrency=len(messages), timeout_s=timeout_s
                )
                order_ids = [str(m["orderId"]) for m in messages]
                (registered,) = system.host.deps.settings.clients()
                keys = [order_key(registered.client_id, order_id) for order_id in order_ids]
                records = [system.host.deps.states.get(key).item for key in keys]
        finally:
            http.put("/faults", json=FaultPlan().model_dump(mode="json"))
        audit = http.get("/audit").json()
    calls = hard_down_calls(audit.get("keys", {}), service=service, order_ids=order_ids)
    forward = [c["forward"] for c in calls.values()]
    undo = [c["undo"] for c in calls.values()]
    # The budget bounds an order's forward calls to every service, not only to the one that is down.
    every = hard_down_calls(audit.get("keys", {}), service=None, order_ids=order_ids)
    all_forward = [c["forward"] for c in every.values()]
    budget = max(record.retry_budget.limit for record in records)
    return {
        "service": service,
        "orders": len(orders),
        "method": "in-process system as for the counts, demo settings with shorter supervisor back-offs; "
        "calls counted by the demo services' audit",
        "outcomes": dict(sorted(result.outcomes.items())),
        "final_states": dict(sorted(Counter(r.process_state.value for r in records).items())),
        "forward_calls": {
            "max": max(forward),
            "mean": round(sum(forward) / len(forward), 2),
            "total": sum(forward),
        },
        "undo_calls": {"max": max(undo), "mean": round(sum(undo) / len(undo), 2)},
        "budget": budget,
        "budget_spent_max": max(record.retry_budget.spent for record in records),
        "all_forward_calls_max": max(all_forward),
        "forward_calls_within_budget": at_most(max(all_forward), budget),
    }


def hard_down_comparison(
    *,
    orders: Sequence[DemoOrder],
    endpoints: LocalEndpoints,
    services_url: str,
    service: str,
    timeout_s: float,
    overrides: Mapping[str, str] = HARD_DOWN_SETTINGS,
    breaker_overrides: Mapping[str, str] = HARD_DOWN_BREAKER_SETTINGS,
) -> dict[str, Any]:
    """The hard-down run twice on the same orders: without circuit breakers, then with them.

    Returns:
        The run without breakers (:func:`hard_down_run`'s fields, as before breakers existed), with
        ``with_breaker``: the same fields for the run with breakers, and ``calls_to_dead_service``:
        forward calls to ``service`` in total and per order, both ways.
    """
    runs = [
        hard_down_run(
            orders=orders,
            endpoints=endpoints,
            services_url=services_url,
            service=service,
            timeout_s=timeout_s,
            overrides=settings,
        )
        for settings in (
            {**overrides, "BREAKER_ENABLED": "false"},
            {**overrides, **breaker_overrides, "BREAKER_ENABLED": "true"},
        )
    ]
    without, with_breaker = runs
    count = max(len(orders), 1)
    totals = {
        "without_breaker": without["forward_calls"]["total"],
        "with_breaker": with_breaker["forward_calls"]["total"],
    }
    return {
        **without,
        "with_breaker": with_breaker,
        "calls_to_dead_service": {
            "total": totals,
            "per_order": {name: round(total / count, 2) for name, total in totals.items()},
        },
    }
