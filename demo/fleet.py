"""The processes a demo run starts: the demo services and the devhost processes (:class:`Fleet`),
which :class:`Killer` SIGKILLs and restarts and a driver may pause.
"""

from __future__ import annotations

import logging
import os
import random
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from demo.config import DEMO_SETTINGS
from demo.faults import FaultPlan
from demo.services.bindings import demo_bindings_json
from demo.services.payments import RefundPolicy
from devhost.emulators import REPO_ROOT, LocalEndpoints

logger = logging.getLogger(__name__)


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


SCHEDULER_ROLES = "submission,starter,orchestrator,listener,supervisor"
"""The roles of the demo's scheduler processes: each has its durabletask backend and worker, and starts
the orders it takes in at once (``CLAIM_ON_SUBMIT``)."""

AGENT_ROLES = "agents"
"""The roles of the demo's last process when there are several."""


def devhost_specs(processes: int, *, api_port: int = 0) -> list[DevhostSpec]:
    """The demo's devhost processes: the last runs the agents, the others the scheduler roles with the
    submission; a single process runs every role.

    Agents get a process of their own because they wait on remote calls and would otherwise compete
    with the orchestrations for one interpreter. The submission runs where the orchestrations do: an
    orchestration lives in the process that claimed it, and the submission claims and starts each new
    order in its own process at once, waiting for no starter (the schedulers share out the clients'
    queues as competing consumers). With
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
        start: Starts one process, given its spec and run number (default: ``python -m`` ``host_module``).
        host_module: The module the default ``start`` runs: ``devhost``, or an entry point that runs its
            command line with a queue wrapper (:mod:`demo.chaos.faulty_host`).
    """

    def __init__(
        self,
        specs: list[DevhostSpec],
        env: dict[str, str],
        log_dir: Path,
        *,
        start: Callable[[DevhostSpec, int], Child] | None = None,
        host_module: str = "devhost",
    ) -> None:
        # The fleet's processes wake each other's idle loops (devhost.wakeup_channel) unless told not to.
        self._env = {"WAKEUP_DIR": str(log_dir / "wakeups"), **env}
        self._log_dir = log_dir
        self._start_process = start or self._start_devhost
        self._host_module = host_module
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
            ["-m", self._host_module, *spec.arguments()],
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
    """Environment of a devhost process: connections, the demo cadences and the demo services' bindings
    (:func:`demo.services.bindings.demo_bindings_json`: tokens from the local issuer, which the services
    trust)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORDERFLOW_")}
    env.update(DEMO_SETTINGS)
    env.update(
        {
            "STORAGE_CONNECTION_STRING": endpoints.storage_connection_string,
            "COSMOS_ENDPOINT": endpoints.cosmos_endpoint,
            "COSMOS_KEY": endpoints.cosmos_key,
            "COSMOS_VERIFY_TLS": "false",
            "SERVICE_BINDINGS": demo_bindings_json(services_url),
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
