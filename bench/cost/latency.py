"""The latency model of one order on Azure: the order's measured local time plus the waits Azure adds
on its critical path, sampled to give p50 and p95. A model, not a measurement: nothing here ran on Azure.

The waits: each Service Bus hop (push delivery to a warm trigger); the starter timer's period when the
submission does not start the orchestration itself; Durable Functions' Azure Storage queue polling,
which backs off exponentially while a queue is empty up to ``maxQueuePollingInterval`` (durabletask's
``BackoffPollingHelper``: each empty poll doubles the delay, so after an idle gap ``g`` the poll in
progress is about ``g / 2`` long, and a message waits for its end). Only a message another instance
sends waits for a poll (Microsoft's Azure Storage provider page): the orchestration's start from the
submission and each response raised by the listener, one per step; an activity's work item and result
stay on the Durable group's instance. A cold start adds where a scale group may be at zero (no
execution within the scale-in time; never with an always-ready instance, nor on a Dedicated plan).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Final

from bench.cost.inputs import AzureConfig, Estimates, OrderCounts
from bench.cost.prices import SECONDS_PER_MONTH

SAMPLES: Final = 20_000
SEED: Final = 20261207


@dataclass(frozen=True)
class Hop:
    """One term of an order's latency.

    Attributes:
        name: What it is.
        fixed_s: Seconds it always takes.
        wait_max_s: A further wait uniform in ``[0, wait_max_s]``.
        overlap_s: Seconds of that wait spent alongside other work on the path (only the rest counts).
        cold_chance: Chance a scale group is at zero when the hop reaches it.
        cold_s: Seconds a cold start adds.
    """

    name: str
    fixed_s: float = 0.0
    wait_max_s: float = 0.0
    overlap_s: float = 0.0
    cold_chance: float = 0.0
    cold_s: float = 0.0


def idle_chance(per_second: float, scale_in_s: float) -> float:
    """Chance that no execution reached a group at ``per_second`` within its scale-in time."""
    return math.exp(-per_second * scale_in_s)


def order_hops(counts: OrderCounts, est: Estimates, config: AzureConfig, orders: float) -> list[Hop]:
    """The terms of an order's latency at ``orders`` a month (0: the first order after an idle spell,
    every group at zero)."""
    per_s = orders / SECONDS_PER_MONTH
    steps = int(counts.remote_steps)

    def cold(group: str, executions_per_order: float = 1.0) -> float:
        if config.dedicated or group in config.always_ready:
            return 0.0
        return idle_chance(per_s * executions_per_order, est.scale_in_s) if orders else 1.0

    gap = 2 * est.sb_hop_s + est.agent_call_s
    queue_rate = per_s * (counts.activities + 2 * counts.remote_steps + 1) / config.control_queues
    first_gap = 1 / queue_rate if queue_rate else math.inf
    hops = [
        Hop("the order's local processing (measured)", fixed_s=counts.local_order_s),
        Hop("Service Bus deliveries", fixed_s=(2 * steps + 2) * est.sb_hop_s),
        Hop("submission cold start", cold_chance=cold("submission"), cold_s=est.cold_start_s),
    ]
    if not config.claim_on_submit:
        hops.append(Hop("starter timer", wait_max_s=config.starter_period_s))
    hops.append(
        # The start waits for a poll while the first request makes its round trip.
        Hop(
            "first Durable queue poll",
            wait_max_s=min(config.max_queue_polling_s, first_gap / 2),
            overlap_s=gap if config.claim_on_submit else 0.0,
            cold_chance=cold("durable", counts.episodes + counts.activities),
            cold_s=est.cold_start_s,
        )
    )
    hops += [
        Hop(f"Durable queue poll {i + 2}", wait_max_s=min(config.max_queue_polling_s, gap / 2))
        for i in range(steps - 1)
    ]
    used = min(max(1, config.agent_triggers), steps)
    hops += [
        Hop(
            f"agent group {i + 1} cold start",
            cold_chance=cold(f"agent-{i + 1}", steps / used),
            cold_s=est.cold_start_s,
        )
        for i in range(used)
    ]
    hops.append(Hop("responses cold start", cold_chance=cold("responses", steps), cold_s=est.cold_start_s))
    return hops


def percentiles(hops: Sequence[Hop], *, samples: int = SAMPLES, seed: int = SEED) -> tuple[float, float]:
    """p50 and p95 (seconds) of the sum of ``hops``, from ``samples`` draws of a seeded generator."""
    return _percentiles(tuple(hops), samples, seed)


@lru_cache(maxsize=256)
def _percentiles(hops: tuple[Hop, ...], samples: int, seed: int) -> tuple[float, float]:
    rng = random.Random(seed)
    totals = sorted(
        sum(
            h.fixed_s
            + (max(0.0, rng.uniform(0, h.wait_max_s) - h.overlap_s) if h.wait_max_s else 0.0)
            + (h.cold_s if h.cold_chance and rng.random() < h.cold_chance else 0.0)
            for h in hops
        )
        for _ in range(samples)
    )
    return totals[samples // 2], totals[int(samples * 0.95)]
