"""The cost model: an order's work on Azure by scale group and meter, priced by :mod:`bench.cost.prices`.

Flex Consumption bills an instance's memory while it executes, as the Functions host meters it
(:func:`metered_s`, a port of ``FlexConsumptionMetricsPublisher.MeterCurrentActiveInterval`` in
Azure/azure-functions-host): an active period (from an execution starting on an idle instance to the
last one ending) is billed at least ``MIN_ACTIVE_S``, rounded up to ``GRANULARITY_S``, and time already
billed is never billed again, so executions that start and end inside a billed second add nothing. Each
group's orders arrive at random (Poisson, at the month's average rate); :func:`metered_share` replays
the host's metering over a seeded run of them to give the share of the month a group's one instance is
billed. A timer of period ``P`` is billed ``MIN_ACTIVE_S / P`` of the month. One instance per group holds
these rates: an execution lasts well under a second and each instance runs several at once.

A Dedicated (App Service) plan, priced beside it, bills its instances by the hour instead, busy or not:
every group is up all month, never cold, and polls all month.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Final

from bench.cost.cosmos import BREAKER_DOCUMENT_BYTES, cosmos_storage_gb, order_request_units, request_units
from bench.cost.inputs import AzureConfig, Estimates, OrderCounts
from bench.cost.prices import HOURS_PER_MONTH, SECONDS_PER_MONTH, rate

MIN_ACTIVE_S: Final = 1.0
"""Flex Consumption's minimum billable active period (seconds)."""

GRANULARITY_S: Final = 0.1
"""Flex Consumption bills an active period rounded up to this many seconds."""

ORDERS_SIMULATED: Final = 10_000
"""Orders :func:`metered_share` replays the host's metering over (seeded: the same figures every run)."""

DEDICATED_UTILISATION: Final = 0.5
"""The share of a Dedicated instance's core the month's mean load may take: the rest is headroom for an
hour's peak above the mean, since a Basic plan scales out only when told to."""


@dataclass(frozen=True)
class Group:
    """One Flex scale group's load in a month.

    Attributes:
        name: The group (``durable``, ``submission``, ``agent-1`` ...).
        busy_share: Share of the month its instance is billed as executing (0–1).
        executions: Executions in the month.
    """

    name: str
    busy_share: float
    executions: float


@dataclass
class MonthCost:
    """A month's bill, meter by meter (USD).

    Attributes:
        orders: Orders in the month.
        lines: USD by meter name, in the order the docs list them.
    """

    orders: float
    lines: dict[str, float] = field(default_factory=dict)

    @property
    def total(self) -> float:
        """USD for the month, every meter."""
        return sum(self.lines.values())

    def per_million(self) -> float:
        """USD per million orders (the month's total over its orders).

        Raises:
            ZeroDivisionError: The month has no orders.
        """
        return self.total / self.orders * 1_000_000


def poisson_share(per_second: float, window_s: float) -> float:
    """Share of time covered by windows of ``window_s`` starting at Poisson arrivals of ``per_second``."""
    return 1.0 - math.exp(-per_second * window_s)


def metered_s(executions: Sequence[tuple[float, float]]) -> float:
    """Seconds Flex bills one instance for ``executions`` (``(start, end)`` pairs, seconds, any order).

    The Functions host's metering (``FlexConsumptionMetricsPublisher`` in Azure/azure-functions-host):
    an active period runs from an execution starting while none runs to the last one ending. When it
    ends it is billed from its start, or from the end of what was billed before if that is later, at
    least ``MIN_ACTIVE_S`` and rounded up to ``GRANULARITY_S``; a period ending inside time already
    billed adds nothing. An execution that ends as another starts ends its period first, as the host is
    told of it; executions of no length are left out. (The host also bills a period still running at
    each metrics publish; the executions here are far shorter than its interval.)
    """
    timed = [(s, e) for s, e in executions if e > s]
    # An end before a start at the same instant: the host meters each completion as it is told of it.
    events = sorted([(s, 1) for s, _ in timed] + [(e, -1) for _, e in timed])
    active, start, billed_to, total = 0, 0.0, -math.inf, 0.0
    for at, change in events:
        if change > 0:
            if active == 0:
                start = at
            active += 1
            continue
        active -= 1
        if active == 0:
            since = max(start, billed_to)
            if at > since:
                # Less a hair, so that float noise (1.2000000001 s) does not round up a step.
                duration = math.ceil(max(at - since, MIN_ACTIVE_S) / GRANULARITY_S - 1e-9) * GRANULARITY_S
                total += duration
                billed_to = since + duration
    return total


@lru_cache(maxsize=256)
def metered_share(per_second: float, offsets: tuple[float, ...], execution_s: float) -> float:
    """Share of the time one instance is billed (:func:`metered_s`) when orders arrive at Poisson
    ``per_second`` and each runs one execution of ``execution_s`` seconds at each of ``offsets`` seconds
    after its arrival; a seeded run of :data:`ORDERS_SIMULATED` orders."""
    if per_second <= 0 or not offsets:
        return 0.0
    draw = random.Random(20261207)
    arrival, executions = 0.0, []
    for _ in range(ORDERS_SIMULATED):
        arrival += draw.expovariate(per_second)
        executions += [(arrival + offset, arrival + offset + execution_s) for offset in offsets]
    return min(1.0, metered_s(executions) / arrival)


def spread(executions: float, span_s: float) -> tuple[float, ...]:
    """Offsets (seconds after an order's first) of ``executions`` spread evenly over ``span_s``; a
    fractional count is rounded to the nearest whole one, at least one."""
    n = max(1, round(executions))
    return tuple(span_s * i / (n - 1) for i in range(n)) if n > 1 else (0.0,)


def timer_share(period_s: float) -> float:
    """Share of the month a timer of ``period_s`` keeps its group billed."""
    return min(1.0, MIN_ACTIVE_S / period_s)


def orderflow_groups(counts: OrderCounts, est: Estimates, config: AzureConfig, orders: float) -> list[Group]:
    """orderflow's scale groups under ``orders`` a month: the submission, the Durable triggers, the
    response listener, the agent triggers and the two timers."""
    per_s = orders / SECONDS_PER_MONTH
    steps = counts.remote_steps
    triggers = max(1, config.agent_triggers)
    used = min(float(triggers), steps)
    agent_span = est.responses_span_s * (steps / used - 1) / max(steps - 1, 1)
    work = est.execution_s
    groups = [
        Group("submission", metered_share(per_s, (0.0,), work), orders),
        Group(
            "durable",
            metered_share(per_s, spread(counts.episodes + counts.activities, est.durable_span_s), work),
            orders * (counts.episodes + counts.activities),
        ),
        Group("responses", metered_share(per_s, spread(steps, est.responses_span_s), work), orders * steps),
    ]
    groups += [
        Group(
            f"agent-{i + 1}",
            metered_share(per_s, spread(steps / used, agent_span), est.agent_call_s),
            orders * steps / used,
        )
        for i in range(int(used))
    ]
    groups += [
        Group("starter", timer_share(config.starter_period_s), SECONDS_PER_MONTH / config.starter_period_s),
        Group(
            "supervisor",
            timer_share(config.supervisor_period_s),
            SECONDS_PER_MONTH / config.supervisor_period_s,
        ),
    ]
    return groups


def flex_cost(groups: list[Group], config: AzureConfig) -> dict[str, float]:
    """Flex Consumption: on-demand memory time past the free grant, always-ready baseline and execution
    time for the groups in ``config.always_ready``, and executions, the on-demand ones past the free
    grant (always-ready billing has none) (USD a month)."""
    gb = config.memory_mb / 1024
    on_demand_gbs = sum(
        g.busy_share * SECONDS_PER_MONTH * gb for g in groups if g.name not in config.always_ready
    )
    ready = [g for g in groups if g.name in config.always_ready]
    baseline = len(ready) * SECONDS_PER_MONTH * gb * rate("flex_always_ready_baseline_gbs")
    ready_gbs = sum(g.busy_share * SECONDS_PER_MONTH * gb for g in ready)
    on_demand_runs = sum(g.executions for g in groups if g.name not in config.always_ready)
    executions = max(0.0, on_demand_runs - rate("flex_free_executions")) + sum(g.executions for g in ready)
    return {
        "Flex memory time": max(0.0, on_demand_gbs - rate("flex_free_gbs")) * rate("flex_on_demand_gbs")
        + ready_gbs * rate("flex_always_ready_execution_gbs"),
        "Flex always-ready baseline": baseline,
        "Flex executions": executions * rate("flex_executions") / 1_000_000,
    }


def dedicated_instances(orders: float, est: Estimates) -> int:
    """Basic B1 instances (one vCPU each) a Dedicated plan needs for ``orders`` a month: the month's mean
    CPU load over :data:`DEDICATED_UTILISATION` of a core each, and at least one."""
    load = orders / SECONDS_PER_MONTH * est.azure_cpu_s_per_order
    return max(1, math.ceil(load / DEDICATED_UTILISATION))


def dedicated_cost(orders: float, est: Estimates) -> dict[str, float]:
    """A Dedicated plan of Basic B1 instances: every hour of each instance, busy or not (USD a month)."""
    instance_month = HOURS_PER_MONTH * rate("app_service_b1_hour")
    return {"App Service plan (B1)": dedicated_instances(orders, est) * instance_month}


def always_up(config: AzureConfig, group: str) -> bool:
    """Whether ``group`` has an instance up all month: always-ready on Flex, every group on a Dedicated
    plan."""
    return config.dedicated or group in config.always_ready


def service_bus_cost(operations: float) -> float:
    """Service Bus Standard: the base charge, then operations past the included ones by tier (USD)."""
    base = rate("service_bus_base_hour") * SECONDS_PER_MONTH / 3600
    billable = max(0.0, operations - rate("service_bus_included_ops"))
    first = min(billable, 87_000_000)
    rest = billable - first
    return base + (first * rate("service_bus_ops_13m_100m") + rest * rate("service_bus_ops_100m_2500m")) / 1e6


SERVICE_BUS_GROUPS: Final = frozenset({"submission", "responses"})
"""The groups of Service Bus triggers besides the agents' (``agent-<n>``)."""

SCALE_CONTROLLER_POLL_S: Final = 10.0
"""The scale controller polls each control and work-item queue this often. Microsoft's Azure Storage
provider page says so (once every 10 seconds) for the Consumption and Premium plans; Flex Consumption is
assumed to poll alike, which no page states (at most $0.21 a month either way)."""


def breaker_reads(orders: float, est: Estimates, config: AzureConfig) -> float:
    """Breaker document reads in a month: each consultation reads unless the same breaker was consulted
    within the cache time before it (Poisson consultations: the chance of none is ``exp(-rate * cache)``)."""
    per_s = orders / SECONDS_PER_MONTH
    return orders * est.breaker_uses * math.exp(-per_s * config.breaker_cache_s)


def durable_queue_ops(activities: float, events: float, est: Estimates) -> float:
    """Queue operations of one orchestration: the control-queue messages (the start, each activity's
    result, each raised event) and the work items (one per activity)."""
    return (1 + activities + events + activities) * est.tx_per_message


def durable_table_ops(episodes: float, est: Estimates) -> float:
    """Table transactions of one orchestration: each episode's History and Instances writes and reads."""
    return episodes * est.tx_per_episode


def polling_ops(config: AzureConfig, est: Estimates, orders: float) -> float:
    """Queue operations of empty polls in a month: the Durable group's while it is up (it stays up
    ``est.scale_in_s`` after an order; always when always-ready or on a Dedicated plan), and the scale
    controller's (Flex only)."""
    per_s = orders / SECONDS_PER_MONTH
    up = 1.0 if always_up(config, "durable") else poisson_share(per_s, est.scale_in_s)
    queues = config.control_queues + 1
    # A Dedicated plan scales only when told to: no scale controller polls it.
    controller = 0.0 if config.dedicated else queues / SCALE_CONTROLLER_POLL_S
    return (queues / config.max_queue_polling_s * up + controller) * SECONDS_PER_MONTH


def empty_receives(groups: list[Group], est: Estimates, config: AzureConfig) -> float:
    """Service Bus operations of receives that find no message, in a month: while a Service Bus trigger's
    group has an instance up (within ``est.scale_in_s`` of an execution; always when always-ready or on a
    Dedicated plan), its
    ``config.sb_concurrent_calls`` receives each return empty every ``config.sb_try_timeout_s``."""
    per_instance_s = config.sb_concurrent_calls / config.sb_try_timeout_s * est.empty_receive_ops
    total = 0.0
    for g in groups:
        if g.name not in SERVICE_BUS_GROUPS and not g.name.startswith("agent-"):
            continue
        up = (
            1.0
            if always_up(config, g.name)
            else poisson_share(g.executions / SECONDS_PER_MONTH, est.scale_in_s)
        )
        total += up * per_instance_s * SECONDS_PER_MONTH
    return total


def storage_cost(queue_ops: float, table_ops: float) -> float:
    """Azure Storage: queue operations and table transactions (USD)."""
    return (queue_ops * rate("storage_queue_ops") + table_ops * rate("storage_table_transactions")) / 10_000


def alerts_cost(config: AzureConfig) -> float:
    """Azure Monitor alert rules, a fixed charge a month (USD)."""
    return (
        config.metric_alert_series * rate("metric_alert_series")
        + config.log_alerts_5min * rate("log_alert_5min")
        + config.log_alerts_15min * rate("log_alert_15min")
    )


def span_bytes(counts: OrderCounts, est: Estimates) -> float:
    """Billed bytes of an order's spans before sampling: the worker's, at their measured values and the
    columns ingestion adds to each, and the Functions host's request spans."""
    return counts.span_value_bytes + counts.span_records * est.ingestion_added_bytes + est.host_span_bytes


def log_bytes(counts: OrderCounts, est: Estimates) -> float:
    """Billed bytes of an order's log records (orderflow's events) before any sampling: the distro keeps
    them whatever their trace's decision unless told to sample them with it (``events_sampled``)."""
    return counts.log_value_bytes + counts.log_records * est.ingestion_added_bytes


def telemetry_cost(gigabytes: float) -> float:
    """Log Analytics ingestion past the free grant (USD)."""
    return max(0.0, gigabytes - rate("log_analytics_free_gb")) * rate("log_analytics_gb")


def orderflow_month(counts: OrderCounts, est: Estimates, config: AzureConfig, orders: float) -> MonthCost:
    """orderflow's Azure bill for a month of ``orders`` happy-path orders (0: the idle month)."""
    groups = orderflow_groups(counts, est, config, orders)
    timer_runs = sum(g.executions for g in groups if g.name in ("starter", "supervisor"))
    starter_runs = SECONDS_PER_MONTH / config.starter_period_s
    supervisor_runs = SECONDS_PER_MONTH / config.supervisor_period_s
    month = MonthCost(orders)
    month.lines.update(dedicated_cost(orders, est) if config.dedicated else flex_cost(groups, config))
    month.lines["Service Bus"] = service_bus_cost(
        orders * counts.messages * est.sb_ops_per_message + empty_receives(groups, est, config)
    )
    units = (
        orders * order_request_units(counts, est)
        + starter_runs * est.starter_ru
        + supervisor_runs * est.supervisor_ru
        + breaker_reads(orders, est, config) * request_units(BREAKER_DOCUMENT_BYTES, "read")
    )
    month.lines["Cosmos DB request units"] = units / 1e6 * rate("cosmos_ru")
    month.lines["Cosmos DB storage"] = cosmos_storage_gb(orders, counts, est) * rate(
        "cosmos_storage_gb_month"
    )
    queue_ops = orders * durable_queue_ops(counts.activities, counts.remote_steps, est)
    month.lines["Storage transactions"] = storage_cost(
        queue_ops + polling_ops(config, est, orders), orders * durable_table_ops(counts.episodes, est)
    )
    host_logs = est.host_log_bytes if config.host_info_logs else 0.0
    events = log_bytes(counts, est) * (config.trace_sampling if config.events_sampled else 1.0)
    telemetry = orders * (span_bytes(counts, est) * config.trace_sampling + events + host_logs)
    month.lines["Telemetry ingestion"] = telemetry_cost((telemetry + timer_runs * est.timer_run_bytes) / 1e9)
    month.lines["Alert rules"] = alerts_cost(config)
    return month
