"""The deeper faults of ``make chaos``: what each does to the running system, and how it is counted.

- **store and queue outages**: cosmosdb-server or Azurite SIGSTOPped (it keeps its data and its sockets,
  and answers nothing) for longer than a step's deadline, then SIGCONTed (:func:`emulator_outage`);
- **a dependency down for a window**: one demo service made hard down through ``PUT /faults``
  (``unavailable_services``), then given its plan back (:func:`dependency_outage`);
- **a host with a skewed clock**: one scheduler process started with its clock tens of seconds ahead of
  or behind the others' (:data:`devhost.__main__.CLOCK_OFFSET_ENV`, :func:`draw_skewed_host`), far past
  ``CLOCK_SKEW_TOLERANCE_S``: every deadline is on the state store's time, so the run must stay correct,
  and the host raises ``clock_skew`` (:func:`count_alerts` counts them from the processes' logs);
- **long handlers**: a share of the demo services' calls answered after longer than a queue lock
  (:func:`long_handler_faults`), under the chaos cadences of :data:`CHAOS_SETTINGS`, so the agents'
  handlers outlast their message's lock and must keep it by renewal.

docs/demo.md, "make chaos", says why each is sized as it is.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from demo.chaos.outages import OutageWindow
from demo.faults import FaultPlan
from devhost.emulators import EmulatorProcess

CHAOS_SETTINGS: dict[str, str] = {
    "STEP_TIMEOUT_S": "5",
    "AGENT_CALL_TIMEOUT_S": "4",
    "QUEUE_LOCK_S": "3",
    "QUEUE_READ_TIMEOUT_S": "1.4",
}
"""The chaos run's cadences over the demo's: a queue lock (3 s) shorter than a long call
(:data:`LONG_CALL_S`), which is shorter than one call's timeout (4 s) and a step's deadline (5 s), so
a long handler succeeds only if its lock was renewed; a queue read timeout under half the lock, so a
renewal returns in time."""

LONG_CALL_S = 3.4
"""Seconds a long call of the demo services takes before it answers normally: longer than the chaos
``QUEUE_LOCK_S``, shorter than its ``AGENT_CALL_TIMEOUT_S``."""

SKEW_S = (20.0, 40.0)
"""Seconds the skewed host's clock runs off, ahead or behind, drawn between these: far more than a step's
deadline, so a deadline read on the host's own clock would be recovered early (ahead) or born expired
(behind), and one read on the store's time is not."""

RESTORE_TRIES = 10
"""Times the end of a dependency window tries to give the services their plan back, 1 s apart."""

SERVICES = ("inventory", "payments", "shipping")
"""The demo services a dependency window may take down."""


def long_handler_faults(faults: FaultPlan, long_share: float) -> FaultPlan:
    """``faults`` with ``long_share`` of calls slowed by :data:`LONG_CALL_S` (the plan's latency fault,
    which a chaos run with long handlers uses for them; unchanged when ``long_share`` is 0)."""
    if long_share <= 0:
        return faults
    return faults.model_copy(update={"latency_rate": long_share, "latency_s": LONG_CALL_S})


CHAOS_HOLD_S = 20.0
"""Seconds the demo services keep a hold in a chaos run (``order-v6`` asks for 120): more than the steps
from a reservation to its commit take when nothing goes wrong (a commit starts only while every hold
outlives ``HOLD_SKEW_MARGIN_S`` plus a step's deadline, 7 s), less than a hung call and its recovery, a
kill or an outage, so that holds expire during the run and are re-acquired."""


def short_hold_faults(faults: FaultPlan) -> FaultPlan:
    """``faults`` with holds kept at most :data:`CHAOS_HOLD_S` (unchanged when the plan caps them)."""
    if faults.hold_s_max is not None:
        return faults
    return faults.model_copy(update={"hold_s_max": CHAOS_HOLD_S})


@dataclass(frozen=True)
class SkewedHost:
    """The devhost process whose clock is skewed, and by how much (seconds ahead; negative: behind)."""

    process: str
    offset_s: float


def draw_skewed_host(seed: int, processes: Sequence[str]) -> SkewedHost:
    """The skewed host of a run: one of ``processes`` (the scheduler processes, which run the supervisor),
    ahead or behind by :data:`SKEW_S`, all drawn from ``seed``.

    Raises:
        ValueError: ``processes`` is empty.
    """
    if not processes:
        raise ValueError("a skewed host needs a process to skew")
    draw = random.Random(f"skew/{seed}")
    process = draw.choice(sorted(processes))
    sign = draw.choice((1.0, -1.0))
    return SkewedHost(process, round(sign * draw.uniform(*SKEW_S), 3))


def emulator_outage(emulator: EmulatorProcess) -> Callable[[OutageWindow], Callable[[], None]]:
    """An outage of ``emulator``: SIGSTOP it; what it returns SIGCONTs it."""

    def start(_window: OutageWindow) -> Callable[[], None]:
        emulator.pause()
        return emulator.resume

    return start


def dependency_outage(services_url: str, plan: FaultPlan) -> Callable[[OutageWindow], Callable[[], None]]:
    """A dependency window: ``PUT /faults`` with the window's service hard down on top of ``plan``; what it
    returns puts ``plan`` back.

    Raises:
        httpx.HTTPError: the services did not take the plan (the window then does not count).
    """

    def put(body: FaultPlan) -> None:
        with httpx.Client(base_url=services_url, timeout=10.0) as http:
            http.put("/faults", json=body.model_dump(mode="json")).raise_for_status()

    def restore() -> None:
        # Left down, the dependency would hold every order past the run's end: try for a while.
        for _ in range(RESTORE_TRIES - 1):
            try:
                put(plan)
            except httpx.HTTPError:
                time.sleep(1.0)
                continue
            return
        put(plan)

    def start(window: OutageWindow) -> Callable[[], None]:
        put(plan.model_copy(update={"unavailable_services": (window.service,)}))
        return restore

    return start


def count_alerts(log_dir: Path, name: str) -> int:
    """``ALERT <name>`` lines in the devhost processes' logs under ``log_dir`` (``devhost-*.log``)."""
    marker = f"ALERT {name} "
    return sum(
        path.read_text(encoding="utf-8", errors="replace").count(marker)
        for path in sorted(log_dir.glob("devhost-*.log"))
    )
