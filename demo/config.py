"""The demo's settings (its data set, its faults, the payment service's refund policy, its client, the
devhost processes' cadences), the terminal the drivers print to, and the checks of a run's arguments.
"""

from __future__ import annotations

import itertools
import math
import time
from decimal import Decimal
from pathlib import Path

from rich.console import Console

from demo.faults import FaultPlan
from demo.services.payments import RefundPolicy
from demo.tpch import DEFAULT_SCALE, DEFAULT_STOCK_DIVISOR
from devhost.emulators import REPO_ROOT
from orderflow.settings import Settings

console = Console()
"""The terminal the demo and chaos drivers print their progress and summaries to."""

MAX_FAILURES = Settings.load({}).supervisor.SUPERVISOR_MAX_FAILURES

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
applies. The benchmark runs with them too (:mod:`bench`)."""

DEMO_WORKFLOW_SETTINGS: dict[str, str] = {"WORKFLOW_VERSION": "order-v6"}
"""The workflow ``make demo`` and ``make chaos`` start new orders with (:func:`demo.system.demo_system`):
``order-v6``, the stock and the payment held before anything commits, the review and the fallback
carrier. Apart from :data:`DEMO_SETTINGS`, which the benchmark shares: its orders keep the default
workflow, so that its measurements stay comparable with its baselines and its peers' three steps."""


def stock_divisor_for(orders: int) -> int:
    """Stock divisor that leaves roughly 5–10% of the first ``orders`` orders out of stock.

    Demand per part grows with the number of orders, so the divisor shrinks: measured 180 → 7% at 200
    orders and 65 → 4% at 2,000 (demo.tpch); this power law passes near both points.
    """
    if orders <= 200:
        return DEFAULT_STOCK_DIVISOR
    scaled: float = DEFAULT_STOCK_DIVISOR * (200.0 / orders) ** 0.44
    return max(1, round(scaled))


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
