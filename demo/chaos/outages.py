"""Outages for ``make chaos``: the state store, the queues and one dependency, each down for a window.

The windows come one after another, one per ``every_s`` slot of the run: slot *k* takes the kind
``kinds[k mod len(kinds)]`` of an order shuffled from the seed, starts at a point of its slot drawn from
the seed, and lasts a drawn duration. Outages of the store and the queues last longer than a step's
deadline (``STEP_TIMEOUT_S``, so that the deadlines the roles work to really run out while the service is
gone) but a bounded time (so that the run finishes); a dependency window lasts longer still, long enough
for the dependency's circuit breaker to open and probe. Windows never overlap: each ends before its
slot does. :func:`plan_window` is a pure function of (seed, slot), so a run is reproducible.

:class:`OutageScheduler` runs the windows on a thread of its own until stopped, with one callable per
kind that starts an outage and returns the callable that ends it (SIGSTOP / SIGCONT of an emulator, a
``PUT /faults`` of the demo services). Whatever happens, an outage started is ended before
:meth:`OutageScheduler.stop` returns.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

logger = logging.getLogger(__name__)


class OutageKind(StrEnum):
    """The kinds of outage; values are the report's counters."""

    STORE = "store_outages"
    QUEUE = "queue_outages"
    DEPENDENCY = "dependency_windows"


OUTAGE_KINDS: tuple[OutageKind, ...] = tuple(OutageKind)
"""Every kind, in the order the counters are reported."""

EMULATOR_OUTAGE_EXTRA_S = (2.0, 5.0)
"""Seconds an emulator outage lasts beyond a step's deadline: drawn between these bounds."""

DEPENDENCY_WINDOW_S = (15.0, 25.0)
"""Seconds a dependency stays down: drawn between these bounds (at least ``BREAKER_OPEN_S`` of the demo,
so that its breaker opens, then probes while the dependency is still down)."""

SLOT_MARGIN_S = 2.0
"""Seconds a window leaves free at each end of its slot, so two windows are never back to back."""


@dataclass(frozen=True)
class OutageWindow:
    """One outage: its kind, its start (seconds from the scheduler's start) and its length in seconds, and,
    for a dependency window, the service that goes down."""

    kind: OutageKind
    start_s: float
    duration_s: float
    service: str = ""


def slot_length_s(every_s: float, step_timeout_s: float, kinds: Sequence[OutageKind] = OUTAGE_KINDS) -> float:
    """The slot of one window: ``every_s``, or longer when a window of one of ``kinds`` could not fit in it
    (seconds)."""
    emulators = step_timeout_s + EMULATOR_OUTAGE_EXTRA_S[1] if set(kinds) - {OutageKind.DEPENDENCY} else 0.0
    dependency = DEPENDENCY_WINDOW_S[1] if OutageKind.DEPENDENCY in kinds else 0.0
    return max(every_s, max(emulators, dependency) + 2 * SLOT_MARGIN_S)


def kind_order(seed: int, kinds: Sequence[OutageKind]) -> list[OutageKind]:
    """``kinds`` shuffled from ``seed``: the order the slots take them in, over and over."""
    order = list(kinds)
    random.Random(f"outage-kinds/{seed}").shuffle(order)
    return order


def plan_window(
    seed: int,
    slot: int,
    *,
    every_s: float,
    step_timeout_s: float,
    kinds: Sequence[OutageKind],
    services: Sequence[str],
) -> OutageWindow:
    """The window of slot ``slot`` (0-based); deterministic in its arguments.

    Args:
        seed: The run's seed.
        slot: Which slot.
        every_s: Seconds between the starts of two slots (:func:`slot_length_s` may lengthen it).
        step_timeout_s: ``STEP_TIMEOUT_S``: an emulator outage lasts longer.
        kinds: The kinds the run asked for (not empty).
        services: The services a dependency window may take down (not empty when ``kinds`` has it).

    Raises:
        ValueError: ``kinds`` is empty.
    """
    if not kinds:
        raise ValueError("an outage plan needs at least one kind")
    order = kind_order(seed, kinds)
    kind = order[slot % len(order)]
    draw = random.Random(f"outage/{seed}/{slot}")
    if kind is OutageKind.DEPENDENCY:
        duration = draw.uniform(*DEPENDENCY_WINDOW_S)
        service = draw.choice(list(services))
    else:
        duration = step_timeout_s + draw.uniform(*EMULATOR_OUTAGE_EXTRA_S)
        service = ""
    slot_s = slot_length_s(every_s, step_timeout_s, kinds)
    latest = slot_s - SLOT_MARGIN_S - duration
    start = slot * slot_s + draw.uniform(SLOT_MARGIN_S, max(SLOT_MARGIN_S, latest))
    return OutageWindow(kind, round(start, 3), round(duration, 3), service)


Outage = Callable[[OutageWindow], Callable[[], None]]
"""Starts one outage and returns what ends it."""


class OutageScheduler:
    """Runs :func:`plan_window`'s windows, slot after slot, until stopped.

    Args:
        outages: What starts each kind of outage (only these kinds are planned).
        seed, every_s, step_timeout_s, services: As for :func:`plan_window`.
        monotonic: Seconds of a monotonic clock.

    Attributes:
        windows: One entry per window that ran: the window's fields, ``at`` (epoch seconds of its start)
            and ``ended_after_s`` (how long it really lasted).
    """

    def __init__(
        self,
        outages: Mapping[OutageKind, Outage],
        *,
        seed: int,
        every_s: float,
        step_timeout_s: float,
        services: Sequence[str] = (),
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._outages = dict(outages)
        self._kinds = [kind for kind in OUTAGE_KINDS if kind in self._outages]
        self._seed = seed
        self._every_s = every_s
        self._step_timeout_s = step_timeout_s
        self._services = list(services)
        self._monotonic = monotonic
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.windows: list[dict[str, Any]] = []
        self._thread = threading.Thread(target=self._run, name="chaos-outages", daemon=True)

    def start(self) -> None:
        """Start: slot 0 begins now."""
        self._thread.start()

    def stop(self) -> None:
        """Stop; an outage under way is ended first."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=DEPENDENCY_WINDOW_S[1] + 30)

    def counts(self) -> dict[str, int]:
        """Windows run to their end so far, by kind (every kind, 0 included); one a stop cut short is not
        counted: it may not have outlasted a step's deadline."""
        with self._lock:
            ran = [entry["kind"] for entry in self.windows if entry["whole"]]
        return {kind.value: ran.count(kind.value) for kind in OUTAGE_KINDS}

    def _run(self) -> None:
        began = self._monotonic()
        for slot in range(1_000_000):
            window = plan_window(
                self._seed,
                slot,
                every_s=self._every_s,
                step_timeout_s=self._step_timeout_s,
                kinds=self._kinds,
                services=self._services,
            )
            if self._stop.wait(max(0.0, began + window.start_s - self._monotonic())):
                return
            self._run_window(window)

    def _run_window(self, window: OutageWindow) -> None:
        started = self._monotonic()
        entry = {**asdict(window), "kind": window.kind.value, "at": time.time()}
        try:
            end = self._outages[window.kind](window)
        except Exception:  # the chaos thread outlives a fault it could not inject
            logger.exception("could not start the %s outage", window.kind.value)
            return
        try:
            self._stop.wait(window.duration_s)  # a stop request cuts the window short
        finally:
            end()
        entry["ended_after_s"] = round(self._monotonic() - started, 3)
        entry["whole"] = entry["ended_after_s"] >= window.duration_s
        with self._lock:
            self.windows.append(entry)
