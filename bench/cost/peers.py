"""The same 3-step order priced on the peers by the same rates: a bare Durable Functions saga on Flex
Consumption, AWS Step Functions standard workflows and Temporal Cloud. None counts its steps' own
compute (Temporal's workers run on the user's machines; Step Functions' HTTP tasks call the services)."""

from __future__ import annotations

from bench.cost.inputs import AzureConfig, Estimates, OrderCounts
from bench.cost.model import (
    Group,
    MonthCost,
    durable_queue_ops,
    durable_table_ops,
    flex_cost,
    metered_share,
    polling_ops,
    span_bytes,
    spread,
    storage_cost,
    telemetry_cost,
)
from bench.cost.prices import SECONDS_PER_MONTH, rate

SAGA_EPISODES_PER_STEP = 1
"""A bare saga's orchestrator runs one episode per activity result, and one to start."""


def durable_saga_month(counts: OrderCounts, est: Estimates, config: AzureConfig, orders: float) -> MonthCost:
    """A bare Durable Functions saga: an HTTP-started orchestration whose three activities call the
    services themselves (no Service Bus, no state store, no timers), on ``config``'s Flex instances."""
    per_s = orders / SECONDS_PER_MONTH
    steps = counts.remote_steps
    episodes = 1 + SAGA_EPISODES_PER_STEP * steps
    span = steps * est.agent_call_s
    groups = [
        Group("http", metered_share(per_s, (0.0,), est.execution_s), orders),
        Group(
            "durable",
            metered_share(per_s, spread(episodes + steps, span), est.execution_s),
            orders * (episodes + steps),
        ),
    ]
    month = MonthCost(orders)
    month.lines.update(flex_cost(groups, config))
    month.lines["Storage transactions"] = storage_cost(
        orders * durable_queue_ops(steps, 0, est) + polling_ops(config, est, orders),
        orders * durable_table_ops(episodes, est),
    )
    share = (episodes + 2 * steps + 1) / (counts.episodes + counts.activities + 2 * steps + 1)
    month.lines["Telemetry ingestion"] = telemetry_cost(
        orders * span_bytes(counts, est) * share * config.trace_sampling / 1e9
    )
    return month


def step_functions_transitions(counts: OrderCounts) -> float:
    """States entered by one order: a Task state per step and the Succeed state."""
    return counts.remote_steps + 1


def step_functions_month(counts: OrderCounts, orders: float) -> MonthCost:
    """AWS Step Functions standard workflows: state transitions past the 4,000 free a month."""
    transitions = max(0.0, orders * step_functions_transitions(counts) - 4_000)
    month = MonthCost(orders)
    month.lines["Step Functions state transitions"] = transitions / 1_000 * rate("step_functions_transition")
    return month


TEMPORAL_TIERS = (
    (5_000_000, "temporal_action"),
    (5_000_000, "temporal_action_5m_10m"),
    (10_000_000, "temporal_action_10m_20m"),
    (30_000_000, "temporal_action_20m_50m"),
    (50_000_000, "temporal_action_50m_100m"),
    (100_000_000, "temporal_action_100m_200m"),
)
"""Pay-as-you-go Action tiers: (Actions in the tier, rate key)."""

TEMPORAL_INCLUDED_ACTIONS = 1_000_000
"""Actions the Essentials plan includes each month."""


def temporal_actions(counts: OrderCounts) -> float:
    """Actions of one order: the workflow started and each activity started."""
    return 1 + counts.remote_steps


def temporal_month(counts: OrderCounts, orders: float) -> MonthCost:
    """Temporal Cloud, Essentials: Actions past the plan's by tier, and the plan (the greater of its
    minimum and 5% of usage).

    Raises:
        ValueError: More Actions than the published tiers price (over 201 million a month).
    """
    left = max(0.0, orders * temporal_actions(counts) - TEMPORAL_INCLUDED_ACTIONS)
    usage = 0.0
    for size, key in TEMPORAL_TIERS:
        taken = min(left, size)
        usage += taken * rate(key) / 1_000_000
        left -= taken
    if left > 0:
        raise ValueError("past the published Action tiers: priced by Temporal's sales")
    month = MonthCost(orders)
    month.lines["Temporal Actions"] = usage
    month.lines["Temporal Essentials plan"] = max(rate("temporal_essentials_month"), 0.05 * usage)
    return month
