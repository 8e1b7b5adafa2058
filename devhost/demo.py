"""``make demo``: the local demo, end to end, on real TPC-H orders.

1. Generates the TPC-H data set (scale factor 0.01) with ``tpchgen-cli`` if it is not there yet.
2. Starts Azurite and cosmosdb-server, the demo services (with injected faults) and ``--processes``
   devhost processes (the last one runs the agents and the submission, the others the scheduler
   roles; one process runs every role). The first also serves the operator API and its web console,
   trusting tokens of the local signing key (``python -m devhost.local_issuer login``), which is made
   if there is none; the console's URL and how to sign in are printed.
3. Submits ``--orders`` TPC-H orders through the client SDK, shows progress while they settle, reads
   the state store and the demo services' audit, prints a summary and writes ``demo-report.json``.
   With ``--kill-every S`` a random devhost process is SIGKILLed every S seconds and restarted, and the
   report adds ``kills`` and ``recoveries``.
4. With ``--keep`` (``make demo KEEP=1``), keeps the system and the console up until Ctrl-C.
5. Stops everything it started, whatever happened.

Besides how each order ended, the report checks that no order was driven by two attempts at once
(``overlapping_attempts``): from the state records' ``attemptHistory`` (each attempt's tenure ends before
the next one's claim) and from the demo services' audit (no call made for an attempt arrives after the
next attempt was claimed).

An order must end the way its data says: a customer with a negative balance is declined, an order
whose items ran out of stock is refused, every other order is processed — unless the injected faults
exhausted what the design allows (the supervisor's failure threshold or the retry budget), which the
report counts separately. ``mismatched`` counts orders that ended any other way.

The run is made of parts other drivers reuse (``make chaos``, :mod:`devhost.chaos`): :func:`demo_system`
starts and stops everything, :class:`Fleet` and :class:`Killer` restart, kill and pause devhost
processes, :func:`submit_and_settle` submits through one or more clients and waits, and
:func:`build_report` reads the outcome.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import os
import random
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from decimal import Decimal
from itertools import pairwise
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from azure.core.exceptions import AzureError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from demo.faults import FaultPlan
from demo.services import RefundPolicy
from demo.tpch import (
    DEFAULT_SCALE,
    DEFAULT_STOCK_DIVISOR,
    Catalog,
    DemoOrder,
    customer_declined,
    ensure_dataset,
    load_catalog,
)
from devhost.cli import run_driver
from devhost.client_credentials import ClientCredentials, issue_client_credentials
from devhost.emulators import REPO_ROOT, LocalEmulators, LocalEndpoints, start_local_emulators
from devhost.host import free_port
from devhost.local_issuer import LocalIssuer, ensure_signing_key
from operator_api.handler import CONSOLE_PATH
from orderflow.client import FINAL_STATUSES, OrderflowClient
from orderflow.clients import RegisteredClient
from orderflow.effects import PAST_POINT_OF_NO_RETURN
from orderflow.errors import TransientError
from orderflow.protocol.state_machine import SETTLED_STATES
from orderflow.queues.storage import StorageQueueFactory
from orderflow.records import ProcessState, StateRecord, client_order_id, parse_utc
from orderflow.settings import Settings
from orderflow.stores.base import StateQuery, StateStore
from orderflow.stores.cosmos import CosmosStores

logger = logging.getLogger(__name__)
console = Console()

MAX_FAILURES = Settings().SUPERVISOR_MAX_FAILURES

DATA_DIR = REPO_ROOT / ".data" / "tpch"
REPORT_PATH = REPO_ROOT / "demo-report.json"
RUNS_DIR = REPO_ROOT / ".run"

TPCH_ORDERS = round(1_500_000 * DEFAULT_SCALE)
"""Orders in the demo's TPC-H data set (15,000 at scale factor 0.01: TPC-H has 1.5 million per unit)."""

DEMO_FAULTS = FaultPlan(
    transient_rate=0.10,
    hang_rate=0.03,
    hang_s=10.0,
    lost_response_rate=0.02,
    latency_rate=0.05,
    latency_s=0.3,
    seed=20261129,
)
"""Faults injected on top of the data's own failures: 10% transient 5xx, 3% hangs past the step
deadline (the hung call applies its effect after 10 s), 2% "effect applied, response lost", 5% slow."""

DEMO_REFUND_POLICY = RefundPolicy(fee=Decimal("1.00"), fee_after_s=5.0)
"""The payment service keeps a 1.00 cancellation fee when a charge is refunded more than 5 s after it was
made: compensation is a business undo, not a reset."""

DEMO_CLIENT = "demo"
"""The demo's registered client: inbound queue ``orders-demo``, reply queue ``replies-demo``."""

DEMO_OUTSTANDING = 120
"""Most orders the demo client keeps submitted but not yet settled (client-side flow control)."""

DEMO_SETTINGS: dict[str, str] = {
    "STEP_TIMEOUT_S": "4",
    "AGENT_CALL_TIMEOUT_S": "2",
    "CLAIM_TIMEOUT_S": "20",
    "START_LATENCY_S": "2",
    "SUPERVISOR_INTERVAL_S": "2",
    "SUPERVISOR_BACKOFF_INITIAL_S": "1",
    "SUPERVISOR_BACKOFF_MAX_S": "8",
    "SUPERVISOR_EXTENDED_BACKOFF_S": "10",
    "REPLY_GRACE_S": "10",
    "STARTER_INTERVAL_S": "0.5",
    "POLL_INTERVAL_S": "0.1",
    "MAX_IN_FLIGHT_PER_HOST": "32",
    "AGENT_CONCURRENCY": "24",
    "REVIEW_AMOUNT_ABOVE": "300000",
    "REVIEW_TIMEOUT_S": "3",
    "REVIEW_DEFAULT": "approve",
}
"""Demo cadences: a 4 s step deadline so that a hang is detected and recovered within seconds (the first
step's, started by the claim, 2 s later: an orchestration starts in the claiming process); orders
above 300,000 (about 5% of TPC-H's) wait 3 s for a review nobody gives, then the default (approve)
applies."""


def stock_divisor_for(orders: int) -> int:
    """Stock divisor that leaves roughly 5–10% of the first ``orders`` orders out of stock.

    Demand per part grows with the number of orders, so the divisor shrinks: measured 180 → 7% at 200
    orders and 65 → 4% at 2,000 (demo.tpch); this power law passes near both points.
    """
    if orders <= 200:
        return DEFAULT_STOCK_DIVISOR
    scaled: float = DEFAULT_STOCK_DIVISOR * (200.0 / orders) ** 0.44
    return max(1, round(scaled))


@dataclass
class Child:
    """A child process started by the demo, with the line it printed when ready."""

    name: str
    process: subprocess.Popen[str]
    ready_line: str
    log_path: Path

    def kill(self) -> None:
        """SIGKILL the process (no clean-up runs in it) and reap it."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def pause(self) -> bool:
        """SIGSTOP the process (it keeps its state and wakes where it stopped); False if it has exited."""
        if self.process.poll() is not None:
            return False
        self.process.send_signal(signal.SIGSTOP)
        return True

    def resume(self) -> None:
        """SIGCONT the process if it is still running (a killed one has been reaped: nothing is sent)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)

    def stop(self, timeout_s: float = 15.0) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_child(
    name: str, args: list[str], env: dict[str, str], ready: str, log_dir: Path, *, log_name: str | None = None
) -> Child:
    """Start ``python args...``; wait until its stdout prints a line containing ``ready``."""
    log_path = log_dir / f"{log_name or name}.log"
    process = subprocess.Popen(
        [sys.executable, *args],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=log_path.open("w", encoding="utf-8"),
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    assert process.stdout is not None
    try:
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            if not line:
                if process.poll() is not None:
                    raise RuntimeError(f"{name} exited with {process.returncode}; see {log_path}")
                continue
            if ready in line:
                # Keep draining stdout so the child never blocks on a full pipe.
                threading.Thread(target=lambda: [None for _ in process.stdout or []], daemon=True).start()
                return Child(name, process, line.strip(), log_path)
        raise RuntimeError(f"{name} did not become ready within 60 s; see {log_path}")
    except BaseException:
        # Not ready (or interrupted by Ctrl-C while waiting): the child is in its own session, so the
        # terminal's signal never reaches it; nobody else knows of it yet.
        process.kill()
        process.wait()
        raise


def start_demo_services(
    data_dir: Path,
    log_dir: Path,
    *,
    orders: int,
    stock_divisor: int,
    faults: FaultPlan,
    refunds: RefundPolicy | None = None,
) -> Child:
    """Start ``python -m demo.services`` on a free port with the first ``orders`` TPC-H orders' stock.

    Its URL is the last word of the child's ``ready_line``.

    Raises:
        RuntimeError: the services did not start.
    """
    args = ["-m", "demo.services", "--port", "0", "--data-dir", str(data_dir), "--orders", str(orders)]
    args += ["--stock-divisor", str(stock_divisor), "--faults", faults.model_dump_json()]
    if refunds is not None:
        args += ["--cancellation-fee", str(refunds.fee), "--fee-after-s", str(refunds.fee_after_s)]
    return start_child("demo-services", args, dict(os.environ), "demo services listening on", log_dir)


@dataclass(frozen=True)
class DevhostSpec:
    """How to (re)start one devhost process: its name, host id, roles and, when it runs the operator API,
    the API's loopback port (0: none given); ``env``: variables of this process only, over the fleet's
    (a restart keeps them)."""

    name: str
    host_id: str
    roles: str
    api_port: int = 0
    env: tuple[tuple[str, str], ...] = ()

    def arguments(self) -> list[str]:
        """The process's ``python -m devhost`` options: ``--host-id``, ``--roles`` and any ``--api-port``."""
        api = ["--api-port", str(self.api_port)] if self.api_port else []
        return ["--host-id", self.host_id, "--roles", self.roles, *api]

    def environment(self, fleet_env: Mapping[str, str]) -> dict[str, str]:
        """The process's environment: ``fleet_env`` with this process's own ``env`` over it."""
        return {**fleet_env, **dict(self.env)}


SCHEDULER_ROLES = "starter,orchestrator,listener,supervisor"
"""The roles of the demo's scheduler processes: each has its durabletask backend and worker."""

AGENT_ROLES = "submission,agents"
"""The roles of the demo's last process when there are several."""


def devhost_specs(processes: int, *, api_port: int = 0) -> list[DevhostSpec]:
    """The demo's devhost processes: the last runs the agents and the submission, the others the
    scheduler roles; a single process runs every role.

    Agents get a process of their own because they wait on remote calls and would otherwise compete
    with the orchestrations for one interpreter. The submission runs beside them because it needs no
    orchestration (only the stores and queues) and a scheduler process's interpreter is the busiest one
    (docs/benchmarks.md); its ``Pending`` records wake the starters through the wake-up channel. With
    ``api_port``, the first process also serves the operator API on that loopback port (a restart keeps
    it).
    """
    if processes < 1:
        raise ValueError("the demo needs at least one devhost process")
    if processes == 1:
        return [DevhostSpec("devhost-1", "demo-1", "all", api_port)]
    specs = [DevhostSpec(f"devhost-{n}", f"demo-{n}", SCHEDULER_ROLES) for n in range(1, processes)]
    if api_port:
        specs[0] = replace(specs[0], roles=f"{SCHEDULER_ROLES},api", api_port=api_port)
    return [*specs, DevhostSpec("devhost-agents", "demo-agents", AGENT_ROLES)]


class Fleet:
    """The demo's devhost processes, restartable after a SIGKILL, and pausable (SIGSTOP/SIGCONT).

    Args:
        specs: The processes.
        env: Their environment.
        log_dir: Where their logs go (``<name>.log``, then ``<name>.<run>.log`` after restarts).
        start: Starts one process, given its spec and run number (default: ``python -m devhost``).
    """

    def __init__(
        self,
        specs: list[DevhostSpec],
        env: dict[str, str],
        log_dir: Path,
        *,
        start: Callable[[DevhostSpec, int], Child] | None = None,
    ) -> None:
        # The fleet's processes wake each other's idle loops (devhost.wakeup_channel) unless told not to.
        self._env = {"WAKEUP_DIR": str(log_dir / "wakeups"), **env}
        self._log_dir = log_dir
        self._start_process = start or self._start_devhost
        self._lock = threading.Lock()
        self._starts: Counter[str] = Counter()
        self._paused: dict[str, Child] = {}
        self.children: dict[str, Child] = {}
        try:
            for spec in specs:
                self.children[spec.name] = self._start(spec)
        except BaseException:
            # Nobody holds this fleet yet to stop it: the processes already started would outlive the
            # run (each is in a session of its own).
            for child in self.children.values():
                child.stop()
            raise
        self.specs = {spec.name: spec for spec in specs}

    def _start(self, spec: DevhostSpec) -> Child:
        self._starts[spec.name] += 1
        return self._start_process(spec, self._starts[spec.name])

    def _start_devhost(self, spec: DevhostSpec, run: int) -> Child:
        return start_child(
            spec.name,
            ["-m", "devhost", *spec.arguments()],
            spec.environment(self._env),
            "ready",
            self._log_dir,
            log_name=spec.name if run == 1 else f"{spec.name}.{run}",
        )

    def killable(self) -> list[str]:
        """Names of the processes not paused now, sorted."""
        with self._lock:
            return sorted(name for name in self.specs if name not in self._paused)

    def kill_and_restart(self, name: str) -> bool:
        """SIGKILL process ``name`` and start it again under the same host id (same response queue).

        A paused process is spared (it must wake up to show that its stale view is harmless).

        Returns:
            True when it was killed and restarted; False when it is paused.

        Raises:
            RuntimeError: the new process did not start.
        """
        with self._lock:
            if name in self._paused:
                return False
            self.children[name].kill()
            self.children[name] = self._start(self.specs[name])
            return True

    def restart(self, name: str) -> bool:
        """Start process ``name`` again if it is not running (its last start failed); True once it runs.

        Raises:
            RuntimeError: the new process did not start.
        """
        with self._lock:
            if name in self._paused or self.children[name].process.poll() is None:
                return True
            self.children[name] = self._start(self.specs[name])
            return True

    def pause(self, name: str, pid: int) -> bool:
        """SIGSTOP process ``name`` if its current process is ``pid`` (not since killed and restarted).

        Returns:
            True when it was paused (until :meth:`resume`); False otherwise.
        """
        with self._lock:
            child = self.children.get(name)
            if child is None or name in self._paused or child.process.pid != pid or not child.pause():
                return False
            self._paused[name] = child
            return True

    def resume(self, name: str) -> None:
        """SIGCONT process ``name`` if it is paused."""
        with self._lock:
            child = self._paused.pop(name, None)
            if child is not None:
                child.resume()

    def stop(self) -> None:
        """SIGTERM every process (SIGKILL after 15 s); a paused one is resumed first."""
        with self._lock:
            for child in self._paused.values():
                child.resume()
            self._paused.clear()
            for child in self.children.values():
                child.stop()


RESTART_RETRY_S = 2.0
"""Seconds between two starts of a devhost process whose start failed."""


class Killer:
    """SIGKILLs a random devhost process (not a paused one) every ``every_s`` seconds and restarts it, until
    stopped; a restart that fails is tried again until the process runs."""

    def __init__(self, fleet: Fleet, every_s: float, *, seed: int) -> None:
        self._fleet = fleet
        self._every_s = every_s
        self._random = random.Random(seed)
        self._stop = threading.Event()
        self.kills: list[dict[str, Any]] = []
        self._thread = threading.Thread(target=self._run, name="demo-killer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        # Kills are every_s apart, start to start: the restart (a few seconds of imports) is not added.
        next_kill = time.monotonic() + self._every_s
        while not self._stop.wait(max(0.0, next_kill - time.monotonic())):
            next_kill = time.monotonic() + self._every_s
            candidates = self._fleet.killable()
            if not candidates:
                continue
            name = self._random.choice(candidates)
            try:
                killed = self._fleet.kill_and_restart(name)
            except RuntimeError:
                # A process started while the store or the queues are down exits: a process manager
                # starts it again until it comes up, and so does the killer (no kill meanwhile).
                logger.warning("restarting %s failed; starting it again", name, exc_info=True)
                self.kills.append({"process": name, "at": time.time()})
                self._restart_until_up(name)
                continue
            if killed:
                self.kills.append({"process": name, "at": time.time()})

    def _restart_until_up(self, name: str) -> None:
        """Start ``name`` every :data:`RESTART_RETRY_S` seconds until it runs (or the killer stops)."""
        while not self._stop.wait(RESTART_RETRY_S):
            try:
                self._fleet.restart(name)
            except RuntimeError:
                logger.warning("restarting %s failed again", name, exc_info=True)
                continue
            return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=120)


def host_env(endpoints: LocalEndpoints, services_url: str) -> dict[str, str]:
    """Environment of a devhost process: connections plus the demo cadences."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORDERFLOW_")}
    env.update(DEMO_SETTINGS)
    env.update(
        {
            "STORAGE_CONNECTION_STRING": endpoints.storage_connection_string,
            "COSMOS_ENDPOINT": endpoints.cosmos_endpoint,
            "COSMOS_KEY": endpoints.cosmos_key,
            "COSMOS_VERIFY_TLS": "false",
            "DEMO_SERVICES_URL": services_url,
            "PYTHONWARNINGS": "ignore:Unverified HTTPS request",
        }
    )
    return env


@contextmanager
def quiet_sdk_logs() -> Iterator[None]:
    for name in ("azure", "urllib3", "httpx", "durabletask"):
        logging.getLogger(name).setLevel(logging.WARNING)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Unverified HTTPS request")
        yield


def all_records(states: StateStore) -> list[StateRecord]:
    """Every state record, paged."""
    out: list[StateRecord] = []
    continuation: str | None = None
    while True:
        page = states.query(StateQuery(), max_item_count=500, continuation=continuation)
        out.extend(v.item for v in page.items)
        continuation = page.continuation
        if continuation is None:
            return out


def active_effects(facts: dict[str, Any]) -> int:
    """Effects of an order still in place at the demo services: reservations not released, shipments
    not cancelled, and a charge not refunded (counted once). A cancellation fee the refund kept by the
    payment service's rule is not an effect left behind."""
    summary = facts.get("summary", {})
    charged = Decimal(summary.get("netCharged") or "0") > Decimal(summary.get("feeKept") or "0")
    return int(summary.get("activeReservations", 0)) + int(summary.get("activeShipments", 0)) + int(charged)


def classify(order: DemoOrder, record: StateRecord | None, facts: dict[str, Any], max_failures: int) -> str:
    """How an order ended compared with what its data says.

    Returns:
        ``ok``; ``exhausted`` (the injected faults pushed it past the supervisor's threshold or the retry
        budget, and it was compensated); ``escalated`` (stopped past a point of no return, left for an
        operator); ``compensation_failed``; ``not_terminal``; or ``mismatched:<why>``.
    """
    if record is None:
        return "mismatched:no state record"
    if record.process_state not in SETTLED_STATES:
        return "not_terminal"
    error = record.last_error
    code = error.code if error else None
    if record.process_state is ProcessState.PROCESSED:
        return _classify_processed(order, facts.get("summary", {}))
    if record.process_state is ProcessState.COMPENSATION_FAILED:
        return "compensation_failed"
    if record.process_state is ProcessState.ERROR:
        return "escalated" if code == PAST_POINT_OF_NO_RETURN else f"mismatched:error {code}"
    if record.process_state is not ProcessState.COMPENSATED:
        return f"mismatched:{record.process_state.value}"
    return _classify_compensated(order, record, facts, code, max_failures)


def _classify_processed(order: DemoOrder, summary: dict[str, Any]) -> str:
    """:func:`classify` for a ``Processed`` order: one reservation, one shipment, the total charged."""
    if customer_declined(order):
        return "mismatched:processed a declined customer"
    if summary.get("activeReservations") != 1 or summary.get("activeShipments") != 1:
        return "mismatched:processed without exactly one reservation and one shipment"
    if summary.get("netCharged") != f"{order.amount:.2f}":
        return "mismatched:charged amount differs from the order total"
    return "ok"


def _classify_compensated(
    order: DemoOrder, record: StateRecord, facts: dict[str, Any], code: str | None, max_failures: int
) -> str:
    """:func:`classify` for a ``Compensated`` order: nothing left in place, and a cause its data justifies."""
    if active_effects(facts):
        return "mismatched:compensated but effects remain"
    if code == "card_declined":
        return "ok" if customer_declined(order) else "mismatched:declined a customer in credit"
    if code == "out_of_stock":
        declines = [d for d in facts.get("declines", []) if d.get("error") == "out_of_stock"]
        justified = any(int(d["available"]) < int(d["requested"]) for d in declines)
        return "ok" if justified else "mismatched:out of stock without a justified decline"
    if code == "review_rejected":
        return "ok"  # a person (or the review's default) decided
    if code in ("too_many_failures", "retry_budget_exhausted") or record.failure_count >= max_failures:
        return "exhausted"
    return f"mismatched:compensated for {code}"


STORE_TIME_SLACK_S = 1.0
"""Seconds a host's stamp of the store's time may be off the true time: its measured interval is at most
the store's stamp resolution (one second) wide once the host has written, and narrows from there."""


def attempt_overlaps(
    records: dict[str, StateRecord], audit_keys: dict[str, Any], *, clock_slack_s: float = 0.0
) -> dict[str, str]:
    """Orders that two attempts drove at once, with why: ``{orderId: reason}`` (empty when none).

    Two checks, from two independent sources:

    - the state store: in ``attemptHistory`` every attempt's tenure ended (``endedAt``) no later than the
      next attempt's claim (``claimedAt``);
    - the demo services' audit: no call made for attempt *k* (its ``Orderflow-Instance-Id`` header)
      arrived after attempt *k + 1* was claimed.

    The services stamp this machine's wall clock (UTC), and the hosts the state store's time as each one
    reads it (orderflow.store_clock), which cosmosdb-server keeps on this machine's clock: a host's
    stamps are then off by at most its measured interval (:data:`STORE_TIME_SLACK_S`), whatever its own
    clock's offset, and a time is counted later than another only by more than ``clock_slack_s``.
    """
    slack = timedelta(seconds=clock_slack_s)
    overlaps: dict[str, str] = {}
    next_claim: dict[str, datetime] = {}
    for order_id, record in records.items():
        history = sorted(record.attempt_history, key=lambda e: e.attempt)
        for earlier, later in pairwise(history):
            next_claim[earlier.instance_id] = later.claimed_at
            if earlier.ended_at is None or earlier.ended_at > later.claimed_at + slack:
                overlaps[order_id] = (
                    f"attempt {earlier.attempt} still owned the record "
                    f"when attempt {later.attempt} was claimed"
                )
    for key, entry in audit_keys.items():
        for call in entry.get("received", []):
            instance = call.get("instance")
            claimed = next_claim.get(instance) if instance else None
            if claimed is not None and parse_utc(call["at"]) > claimed + slack:
                order_id = client_order_id(str(entry.get("orderId") or instance.rpartition(":")[0]))
                overlaps.setdefault(
                    order_id, f"a call of {instance} ({key}) arrived after the next attempt was claimed"
                )
    return overlaps


def _key(records: Mapping[str, StateRecord], order_id: str) -> str:
    record = records.get(order_id)
    return record.order_id if record is not None else order_id


def summarise(
    catalog: Catalog,
    records: dict[str, StateRecord],
    services_url: str,
    submitted: int,
    elapsed_s: float,
    *,
    clock_slack_s: float = 0.0,
) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """Build the report and the list of mismatched orders; ``records`` by the clients' own order ids
    (``clock_slack_s``: :func:`attempt_overlaps`)."""
    with httpx.Client(base_url=services_url, timeout=30) as http:
        audit = http.get("/audit").json()
        # The services know an order by its key, {clientId}:{orderId}; an order never recorded has none.
        facts = {
            o.order_id: http.get(f"/orders/{_key(records, o.order_id)}/facts").json() for o in catalog.orders
        }
    states = Counter(r.process_state for r in records.values())
    verdicts = {
        o.order_id: classify(o, records.get(o.order_id), facts[o.order_id], MAX_FAILURES)
        for o in catalog.orders
    }
    mismatched = [(oid, v.split(":", 1)[1]) for oid, v in verdicts.items() if v.startswith("mismatched")]
    settled = sum(states[s] for s in SETTLED_STATES)
    overlaps = attempt_overlaps(records, audit.get("keys", {}), clock_slack_s=clock_slack_s)
    report = {
        "submitted": submitted,
        "processed": states[ProcessState.PROCESSED],
        "error": states[ProcessState.ERROR],
        "compensated": states[ProcessState.COMPENSATED],
        "compensation_failed": states[ProcessState.COMPENSATION_FAILED],
        "awaiting_review": states[ProcessState.AWAITING_REVIEW],
        "not_terminal": submitted - settled,
        # Effects left in place by orders that did not complete, except those an operator owns
        # (CompensationFailed, or stopped past a point of no return): must be 0.
        "uncompensated_effects": sum(
            active_effects(facts[o.order_id])
            for o in catalog.orders
            if verdicts[o.order_id] not in ("compensation_failed", "escalated")
            and (rec := records.get(o.order_id)) is not None
            and rec.process_state is not ProcessState.PROCESSED
        ),
        "duplicate_effects": int(audit["duplicate_effects"]) + int(audit.get("duplicate_order_effects", 0)),
        "mismatched": len(mismatched),
        "overlapping_attempts": len(overlaps),
        "exhausted": sum(1 for v in verdicts.values() if v == "exhausted"),
        "escalated": sum(1 for v in verdicts.values() if v == "escalated"),
        "reviewed": sum(1 for r in records.values() if r.review is not None),
        "declined_card": sum(
            1 for r in records.values() if r.last_error and r.last_error.code == "card_declined"
        ),
        "out_of_stock": sum(
            1 for r in records.values() if r.last_error and r.last_error.code == "out_of_stock"
        ),
        "recovered_orders": sum(1 for r in records.values() if r.failure_count > 0),
        "recoveries": sum(1 for r in records.values() for e in r.attempt_history if e.outcome == "recovered"),
        "gave_up": sum(1 for r in records.values() for e in r.attempt_history if e.outcome == "gave_up"),
        "attempts_max": max((r.attempt for r in records.values()), default=0),
        "calls_per_step_max": int(audit["calls_per_key_max"]),
        "faults_injected": int(audit.get("faults_total", 0)),
        "fees_kept": audit.get("fees_kept_total", "0.00"),
        "elapsed_s": round(elapsed_s, 2),
        "orders_per_s": round(submitted / elapsed_s, 2) if elapsed_s > 0 else 0.0,
    }
    # Listed with the mismatches for the operator, counted apart in the report.
    mismatched += [(oid, f"driven by two attempts at once: {why}") for oid, why in overlaps.items()]
    return report, mismatched


INVARIANTS = (
    "timed_out",
    "not_terminal",
    "duplicate_effects",
    "uncompensated_effects",
    "mismatched",
    "overlapping_attempts",
    "missing_final_replies",
)
"""Report entries that must be 0; the demo exits 1 otherwise."""


def print_summary(
    report: dict[str, Any],
    mismatched: list[tuple[str, str]],
    *,
    title: str = "orderflow demo",
    invariants: Sequence[str] = INVARIANTS,
) -> None:
    """Print the report as a table, failed invariants in red, then the first 20 mismatched orders."""
    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, value in report.items():
        style = ""
        if key in invariants and value:
            style = "bold red"
        table.add_row(key, f"[{style}]{value}[/{style}]" if style else str(value))
    console.print(table)
    for order_id, why in mismatched[:20]:
        console.print(f"[red]mismatched[/red] {order_id}: {why}")


def new_run_dir(prefix: str = "", *, root: Path = RUNS_DIR) -> Path:
    """A fresh directory for one run's logs: ``<root>/<prefix><YYYYmmdd-HHMMSS>`` (local time), or with
    ``-2``, ``-3`` ... appended when runs started in the same second already took that name.

    Each candidate is created without ``exist_ok``: creating a directory is atomic, so two runs (two
    processes) never share one and overwrite each other's logs.

    Args:
        prefix: Put before the time (``bench-`` for the benchmark).
        root: Where the run directories are (default ``.run`` in the repository).
    """
    root.mkdir(parents=True, exist_ok=True)
    stamp = prefix + time.strftime("%Y%m%d-%H%M%S")
    for n in itertools.count(1):
        run_dir = root / (stamp if n == 1 else f"{stamp}-{n}")
        try:
            run_dir.mkdir()
        except FileExistsError:
            continue
        return run_dir
    raise AssertionError("unreachable")  # itertools.count never ends


def check_run_args(*, orders: int, processes: int, kill_every_s: float, timeout_s: float | None) -> None:
    """Refuse, before anything starts, arguments a demo (or chaos) run cannot honour.

    Args:
        orders: TPC-H orders to submit: 1 to :data:`TPCH_ORDERS`.
        processes: devhost processes: at least 1.
        kill_every_s: Seconds between SIGKILLs: 0 (none) or more.
        timeout_s: Seconds to wait for the orders to settle: more than 0, or None (scaled to ``orders``).

    Raises:
        ValueError: one line naming the option, the make variable that sets it, and what it accepts.
    """
    if orders < 1:
        raise ValueError(f"--orders (ORDERS) must be at least 1, not {orders}")
    if orders > TPCH_ORDERS:
        raise ValueError(
            f"--orders (ORDERS) must be at most {TPCH_ORDERS}, every order of the TPC-H data set "
            f"(scale factor {DEFAULT_SCALE:g}); not {orders}"
        )
    if processes < 1:
        raise ValueError(f"--processes (PROCESSES) must be at least 1, not {processes}")
    if not (math.isfinite(kill_every_s) and kill_every_s >= 0):
        raise ValueError(
            f"--kill-every (KILL_EVERY) must be seconds between kills, or 0 for none; not {kill_every_s:g}"
        )
    if timeout_s is not None and not (math.isfinite(timeout_s) and timeout_s > 0):
        raise ValueError(
            f"--timeout-s must be more than 0 seconds (or left out: scaled to --orders); not {timeout_s:g}"
        )


def settle_budget_s(orders: int, timeout_s: float | None) -> float:
    """Seconds a run waits for its orders to settle: ``timeout_s``, or a bound scaled to ``orders``.

    Generous: about 8 orders/s are measured on 2 cores; the bound only stops a run that is stuck.
    """
    return timeout_s if timeout_s is not None else max(180.0, 60.0 + orders * 0.5)


@dataclass
class DemoSystem:
    """What :func:`demo_system` started, for a driver to submit to and inspect.

    Attributes:
        run_dir: The run's log directory.
        catalog: The TPC-H orders of the run and the stock they draw on.
        endpoints: Azurite's and cosmosdb-server's connection details.
        services_url: Base URL of the demo services.
        env: The devhost processes' environment (:func:`host_env` plus the driver's additions, and the
            registered clients as ``CLIENTS``).
        stores: The state and order stores, for the driver's own reads.
        fleet: The devhost processes.
        clients: The registered clients, in order.
        api_url: Base URL of the operator API (the first devhost process serves it); tokens for it come
            from ``python -m devhost.local_issuer login``.
        emulators: Azurite's and cosmosdb-server's processes (the chaos run pauses them).
    """

    run_dir: Path
    catalog: Catalog
    endpoints: LocalEndpoints
    services_url: str
    env: dict[str, str]
    stores: CosmosStores
    fleet: Fleet
    clients: tuple[RegisteredClient, ...]
    api_url: str
    emulators: LocalEmulators | None = None

    def client_credentials(self, client: RegisteredClient) -> ClientCredentials:
        """What the devhost issues ``client``: a SAS for each of its two queues, nothing else."""
        return issue_client_credentials(self.endpoints.storage_connection_string, client)

    def client_queues(self, client: RegisteredClient) -> StorageQueueFactory:
        """A queue factory with ``client``'s credentials only (its inbound and reply queues)."""
        return self.client_credentials(client).queues()

    def sdk_client(self, client: RegisteredClient) -> OrderflowClient:
        """The client SDK of ``client``, on its own credentials."""
        return OrderflowClient(
            self.client_queues(client), reply_queue=client.reply_queue, orders_queue=client.inbound_queue
        )


@contextmanager
def demo_system(
    *,
    orders: int,
    processes: int,
    faults: FaultPlan,
    run_dir: Path,
    extra_env: Mapping[str, str] | None = None,
    client_ids: Sequence[str] = (DEMO_CLIENT,),
    process_env: Mapping[str, Mapping[str, str]] | None = None,
) -> Iterator[DemoSystem]:
    """Start the emulators, the demo services and the devhost processes; stop them all on exit.

    The first devhost process serves the operator API on a free loopback port, with the local token
    issuer's JWKS: the local signing key is made if there is none yet (``.data/local-issuer``), and every
    process gets the ``OPERATOR_*`` settings that trust it.

    Args:
        orders: TPC-H orders the run will submit (the first ``orders`` by order key).
        processes: devhost processes (see :func:`devhost_specs`).
        faults: Faults the demo services inject.
        run_dir: Where the children's logs go.
        extra_env: Variables added to every devhost process's environment.
        client_ids: The clients registered (``CLIENTS``), each with its default queues.
        process_env: Variables of one devhost process only, by its name (``devhost-agents``), over the
            others.

    Raises:
        RuntimeError: a child process did not start.
    """
    data_dir = ensure_dataset(DATA_DIR)
    divisor = stock_divisor_for(orders)
    catalog = load_catalog(data_dir, orders=orders, stock_divisor=divisor)
    with ExitStack() as stack:
        emulators = start_local_emulators()
        stack.callback(emulators.stop)
        endpoints = emulators.endpoints
        services = start_demo_services(
            data_dir, run_dir, orders=orders, stock_divisor=divisor, faults=faults, refunds=DEMO_REFUND_POLICY
        )
        stack.callback(services.stop)
        services_url = services.ready_line.rsplit(" ", 1)[-1]
        env = host_env(endpoints, services_url)
        issuer = LocalIssuer(ensure_signing_key())
        api_port = free_port()
        env.update(issuer.operator_settings(f"http://127.0.0.1:{api_port}{issuer.jwks_path}"))
        env.update(extra_env or {})
        env["CLIENTS"] = json.dumps([{"id": client_id} for client_id in client_ids])
        registered = tuple(Settings.load(env).clients())
        # Create the containers once, before several hosts race to.
        stores = CosmosStores.connect(endpoints.cosmos_endpoint, key=endpoints.cosmos_key, verify_tls=False)
        stack.callback(stores.close)
        specs = [
            replace(spec, env=tuple(sorted((process_env or {}).get(spec.name, {}).items())))
            for spec in devhost_specs(processes, api_port=api_port)
        ]
        fleet = Fleet(specs, env, run_dir)
        stack.callback(fleet.stop)
        api_url = f"http://127.0.0.1:{api_port}"
        yield DemoSystem(
            run_dir, catalog, endpoints, services_url, env, stores, fleet, registered, api_url, emulators
        )


@dataclass
class Settling:
    """How submitting and settling went.

    Attributes:
        submitted: Orders submitted.
        timed_out: The orders had not all settled within the budget.
        elapsed_s: Seconds from the first submission to the last order settled (or to the budget's end).
        owners: The reply queue of the client that submitted each order, by order id.
    """

    submitted: int
    timed_out: bool
    elapsed_s: float
    owners: dict[str, str]


def submit_and_settle(
    system: DemoSystem,
    clients: Sequence[OrderflowClient],
    *,
    budget_s: float,
    outstanding: int = DEMO_OUTSTANDING,
    status: Callable[[], str] | None = None,
    others: Sequence[str] = (),
) -> Settling:
    """Submit the catalog's orders through ``clients`` (in turn) and wait, with progress bars, until they
    have all settled or ``budget_s`` seconds pass. Every client's reply queue is drained meanwhile. The
    clients only submit: none ever cancels an order.

    Args:
        system: The running system.
        clients: The clients; order *i* goes through client *i mod len(clients)*.
        budget_s: Seconds to wait for the orders to settle.
        outstanding: Most orders kept submitted but not yet settled (client-side flow control).
        status: Called every tick for a line shown under the progress bars (what the chaos is doing).
        others: Ids of registered clients whose orders are not the catalog's (the chaos intruder): their
            settled orders are not counted.
    """
    if not clients:
        raise ValueError("at least one client is needed")
    stores = system.stores
    started = time.monotonic()
    owners: dict[str, str] = {}
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    ) as progress:
        submitting = progress.add_task("submitting", total=len(system.catalog.orders))
        settling = progress.add_task("settled", total=len(system.catalog.orders))
        # The clients keep at most ``outstanding`` orders unsettled, as a well-behaved client would: a
        # burst of thousands queued at once makes every step wait in queues past its deadline, and
        # measures recovery instead of processing.
        pending = list(system.catalog.orders)
        submitted = 0
        deadline = started + budget_s
        settled = 0
        next_count = 0.0
        timed_out = True
        while time.monotonic() < deadline:
            if time.monotonic() >= next_count:
                # A COUNT scans the store on cosmosdb-server: every 2 s is plenty for a progress bar.
                settled = _count_settled(stores.state, others, settled)
                next_count = time.monotonic() + 2.0
            submitted += _submit_some(clients, pending, owners, room=outstanding - (submitted - settled))
            progress.update(submitting, completed=submitted)
            progress.update(settling, completed=settled)
            if status is not None:
                progress.update(settling, description=f"settled  {status()}")
            _drain_replies(clients)
            if not pending and settled >= submitted:
                timed_out = False
                break
            time.sleep(0.5)
    return Settling(
        submitted=len(system.catalog.orders) - len(pending),
        timed_out=timed_out,
        elapsed_s=time.monotonic() - started,
        owners=owners,
    )


def _count_settled(states: StateStore, others: Sequence[str], last: int) -> int:
    """:func:`catalog_settled`, or ``last`` while the store is unreachable (a chaos outage)."""
    try:
        return catalog_settled(states, others)
    except (TransientError, AzureError):
        return last


def _submit_some(
    clients: Sequence[OrderflowClient], pending: list[DemoOrder], owners: dict[str, str], *, room: int
) -> int:
    """Submit up to ``room`` of ``pending`` (taken from its front), the next client in turn for each
    (by the count in ``owners``); returns how many. A send the queue refuses as transient (a chaos
    outage) stops the batch: that order stays first in ``pending``, and is sent again next tick under the
    same id (a submission that did reach the queue is a duplicate its consumer drops)."""
    sent = 0
    while pending and sent < room:
        client = clients[len(owners) % len(clients)]
        try:
            order_id = client.submit(pending[0].to_submission(client.reply_queue))
        except TransientError:
            break
        pending.pop(0)
        owners[order_id] = client.reply_queue
        sent += 1
    return sent


def _drain_replies(clients: Sequence[OrderflowClient]) -> None:
    """Receive every client's replies there are now (replies arrive faster than one batch per tick);
    a client whose queue is unreachable (a chaos outage) is read next tick."""
    for client in clients:
        try:
            while client.poll():
                pass
        except TransientError:
            continue


def catalog_settled(states: StateStore, others: Sequence[str] = ()) -> int:
    """Settled orders of every client but ``others`` (client ids), by COUNT queries."""
    settled = StateQuery(process_states=tuple(SETTLED_STATES))
    return states.count(settled) - sum(states.count(replace(settled, client_id=c)) for c in others)


def catalog_records(records: Iterable[StateRecord], others: Collection[str] = ()) -> list[StateRecord]:
    """The records of the catalog's orders: those neither stored under nor recorded for a client of
    ``others`` (client ids; the chaos intruder, which reuses the catalog's order ids)."""
    return [
        r
        for r in records
        if r.order_id.partition(":")[0] not in others and (r.client_id is None or r.client_id not in others)
    ]


def await_final_replies(
    clients: Sequence[OrderflowClient], owners: Mapping[str, str], *, timeout_s: float
) -> None:
    """Poll every client until each has a final reply for every order it submitted, or ``timeout_s``
    seconds pass (one deadline for all clients)."""
    deadline = time.monotonic() + timeout_s
    for client in clients:
        mine = [oid for oid, queue in owners.items() if queue == client.reply_queue]
        client.wait_for(mine, timeout_s=max(0.0, deadline - time.monotonic()))


def missing_final_replies(
    records: Mapping[str, StateRecord], owners: Mapping[str, str], clients: Sequence[OrderflowClient]
) -> int:
    """Settled orders whose final status did not reach the client that submitted them."""
    latest = {client.reply_queue: client.replies.latest for client in clients}
    missing = 0
    for order_id, record in records.items():
        if record.process_state not in SETTLED_STATES:
            continue
        reply = latest.get(owners.get(order_id, ""), {}).get(order_id)
        if reply is None or reply.status not in FINAL_STATUSES:
            missing += 1
    return missing


def build_report(
    system: DemoSystem,
    clients: Sequence[OrderflowClient],
    settling: Settling,
    *,
    processes: int,
    kills: int,
    others: Collection[str] = (),
    clock_slack_s: float = STORE_TIME_SLACK_S,
) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """The demo report of a run whose orders have settled (or timed out), and its mismatched orders.

    Gives the last final replies up to 60 s to arrive, then reads the state store and the demo services.
    The orders of ``others`` (client ids whose orders are not the catalog's) are left out;
    ``clock_slack_s``: :func:`attempt_overlaps`.
    """
    # Every settled order owes its client a final reply; give the last ones a moment to arrive.
    await_final_replies(clients, settling.owners, timeout_s=60.0)
    # By the clients' own order ids, as the catalog names them (each catalog order has one client).
    records = {
        client_order_id(r.order_id): r for r in catalog_records(all_records(system.stores.state), others)
    }
    report, mismatched = summarise(
        system.catalog,
        records,
        system.services_url,
        settling.submitted,
        settling.elapsed_s,
        clock_slack_s=clock_slack_s,
    )
    report["final_replies"] = sum(
        client.replies.settled(oid for oid, queue in settling.owners.items() if queue == client.reply_queue)
        for client in clients
    )
    report["missing_final_replies"] = missing_final_replies(records, settling.owners, clients)
    report["processes"] = processes
    report["kills"] = kills
    # Orders that settle only after the time limit (and the killing) stopped do not count as a pass.
    report["timed_out"] = int(settling.timed_out)
    return report, mismatched


def write_report(report: dict[str, Any], report_path: Path) -> None:
    """Write ``report`` as indented JSON."""
    report_path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


SIGN_IN = (
    "sign in with a token from: .venv/bin/python -m devhost.local_issuer login --name <you> "
    "--role orderflow.operator --role orderflow.reviewer"
)
"""How to get a token for the console (and the CLI): the local issuer signs with the demo's key."""


def console_url(api_url: str) -> str:
    """The web console's page on the operator API at ``api_url``."""
    return f"{api_url}{CONSOLE_PATH}/"


def print_console(api_url: str) -> None:
    """Print where the operator API and the web console are, and how to sign in."""
    console.print(f"operator API on {api_url} (ORDERFLOW_API_URL)")
    console.print(
        f"web console: [bold]{console_url(api_url)}[/bold]; {SIGN_IN} (paste it on the sign-in page)"
    )


CLIENT_SETTINGS = (
    "STORAGE_CONNECTION_STRING",
    "COSMOS_ENDPOINT",
    "COSMOS_KEY",
    "COSMOS_VERIFY_TLS",
    "CLIENTS",
)
"""What ``orderflow submit|watch|status`` and ``python -m devhost.client_credentials`` read to reach a
running demo (the emulators' well-known development keys and the registered clients)."""


def write_client_settings(env: Mapping[str, str], api_url: str, run_dir: Path) -> Path:
    """Write the running demo's :data:`CLIENT_SETTINGS` and ``ORDERFLOW_API_URL`` to ``run_dir`` as a
    flat JSON object (what ``--env-file`` reads); returns its path."""
    path = run_dir / "settings.json"
    values = {name: env[name] for name in CLIENT_SETTINGS if name in env}
    path.write_text(json.dumps({**values, "ORDERFLOW_API_URL": api_url}, indent=2) + "\n", encoding="utf-8")
    return path


def keep_up(api_url: str, settings_file: Path | None = None) -> None:
    """Wait until Ctrl-C (SIGTERM and SIGHUP arrive as one too), the system still up; then return, so the
    demo stops everything it started and exits as its report says. ``settings_file`` (from
    :func:`write_client_settings`) is named for the client commands."""
    console.print(f"the system and the console stay up at {console_url(api_url)}: Ctrl-C stops them")
    if settings_file is not None:
        console.print(
            f"its settings are in {settings_file}: `orderflow submit|watch|status --env-file "
            f"{settings_file}`, or export them for `python -m devhost.client_credentials <client id>`"
        )
    try:
        while True:
            time.sleep(1.0)
    except KeyboardInterrupt:
        console.print("stopping")


def run_demo(
    *,
    orders: int,
    processes: int,
    timeout_s: float | None,
    faults: FaultPlan,
    kill_every_s: float = 0.0,
    seed: int = 20261129,
    report_path: Path = REPORT_PATH,
    keep: bool = False,
) -> dict[str, Any]:
    """Run the whole demo; returns the report (also written to ``report_path``).

    Args:
        orders: TPC-H orders to submit (the first ``orders`` by order key).
        processes: devhost processes (see :func:`devhost_specs`).
        timeout_s: Stop waiting for orders to settle after this many seconds (None: scaled to ``orders``).
        faults: Faults the demo services inject.
        kill_every_s: SIGKILL a random devhost process every this many seconds and restart it (0: never).
        seed: Seed of the choice of process to kill.
        report_path: Where the JSON report is written.
        keep: After the report, keep the system (and the console) up until Ctrl-C, SIGTERM or SIGHUP.

    Raises:
        ValueError: an argument :func:`check_run_args` refuses (nothing was started).
        RuntimeError: a child process did not start.
    """
    check_run_args(orders=orders, processes=processes, kill_every_s=kill_every_s, timeout_s=timeout_s)
    run_dir = new_run_dir()
    chaos = f", one SIGKILLed every {kill_every_s:g} s" if kill_every_s > 0 else ""
    console.print(
        f"[bold]orderflow demo[/bold]: {orders} TPC-H orders, {processes} devhost process(es){chaos}; "
        f"logs in {run_dir}"
    )
    with ExitStack() as stack, quiet_sdk_logs():
        system = stack.enter_context(
            demo_system(orders=orders, processes=processes, faults=faults, run_dir=run_dir)
        )
        print_console(system.api_url)
        killer = Killer(system.fleet, kill_every_s, seed=seed) if kill_every_s > 0 else None
        if killer is not None:
            stack.callback(killer.stop)
        client = system.sdk_client(system.clients[0])
        if killer is not None:
            killer.start()
        settling = submit_and_settle(system, [client], budget_s=settle_budget_s(orders, timeout_s))
        if killer is not None:
            killer.stop()  # the last orders' replies and the summary are read from a quiet system
        report, mismatched = build_report(
            system,
            [client],
            settling,
            processes=processes,
            kills=len(killer.kills) if killer is not None else 0,
        )
        write_report(report, report_path)
        print_summary(report, mismatched)
        console.print(f"report written to {report_path}")
        if keep:
            keep_up(system.api_url, write_client_settings(system.env, system.api_url, run_dir))
    return report


app = typer.Typer(add_completion=False)


@app.command()
def main(
    *,
    orders: Annotated[
        int, typer.Option(help=f"How many TPC-H orders to submit, 1 to {TPCH_ORDERS} (all of them).")
    ] = 200,
    processes: Annotated[
        int,
        typer.Option(
            help="devhost processes sharing the emulators: the last runs the agents and the submission, "
            "the others the scheduler roles (1: one process runs every role)."
        ),
    ] = 3,
    kill_every: Annotated[
        float,
        typer.Option(
            help="SIGKILL a random devhost process every this many seconds and restart it (0: never)."
        ),
    ] = 0.0,
    timeout_s: Annotated[
        float | None,
        typer.Option(help="Give up waiting after this many seconds (default: scaled to --orders)."),
    ] = None,
    no_faults: Annotated[bool, typer.Option(help="Inject no faults.")] = False,
    keep: Annotated[
        bool, typer.Option(help="Keep the system and the web console up after the report, until Ctrl-C.")
    ] = False,
) -> None:
    """Run the local demo and write demo-report.json; exits 1 if any invariant fails.

    Bad arguments exit 2 and a run that cannot start exits 1, each with one line on stderr. SIGTERM and
    SIGHUP stop it as Ctrl-C does: everything it started is stopped, then it exits 128 + the signal.
    """
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    report = run_driver(
        lambda: check_run_args(
            orders=orders, processes=processes, kill_every_s=kill_every, timeout_s=timeout_s
        ),
        lambda: run_demo(
            orders=orders,
            processes=processes,
            kill_every_s=kill_every,
            timeout_s=timeout_s,
            faults=FaultPlan() if no_faults else DEMO_FAULTS,
            keep=keep,
        ),
    )
    raise typer.Exit(1 if any(report[key] for key in INVARIANTS) else 0)


if __name__ == "__main__":
    app()
