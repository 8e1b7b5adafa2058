"""The cost model's figures as ``bench-report.json``'s ``cost`` section, as the cost section of
``docs/deploy.md`` and as the README's cost sentence: all three from :func:`figures`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, replace
from typing import Any, Final

from bench.cost.inputs import (
    CHOSEN,
    CURRENT,
    DEDICATED_B1,
    ESTIMATED,
    MEASURED,
    ONE_AGENT_TRIGGER,
    READY_DURABLE,
    READY_PATH,
    VOLUMES,
    AzureConfig,
    Estimates,
    OrderCounts,
)
from bench.cost.latency import order_hops, percentiles
from bench.cost.model import MonthCost, orderflow_month
from bench.cost.peers import durable_saga_month, step_functions_month, temporal_month
from bench.cost.prices import RATES

BEGIN: Final = "<!-- cost model: begin (python -m bench.cost --write-docs) -->"
END: Final = "<!-- cost model: end -->"
SENTENCE_BEGIN: Final = "<!-- cost sentence -->"
SENTENCE_END: Final = "<!-- /cost sentence -->"
TARGET_PER_MILLION: Final = 100.0
TARGET_IDLE: Final = 15.0
TARGET_P50_S: Final = 1.0
LOW: Final = 100_000
STARTER_CLAIMING: Final = "the chosen configuration, the starter claiming every 5 s"


def _systems(counts: OrderCounts, est: Estimates) -> dict[str, Callable[[float], MonthCost]]:
    """Month-cost functions by system name: orderflow's configurations and the peers."""
    return {
        f"orderflow, {CURRENT.name}": lambda n: orderflow_month(counts, est, CURRENT, n),
        f"orderflow, {CHOSEN.name}": lambda n: orderflow_month(counts, est, CHOSEN, n),
        f"orderflow, {READY_DURABLE.name}": lambda n: orderflow_month(counts, est, READY_DURABLE, n),
        f"orderflow, {READY_PATH.name}": lambda n: orderflow_month(counts, est, READY_PATH, n),
        f"orderflow, {ONE_AGENT_TRIGGER.name}": lambda n: orderflow_month(counts, est, ONE_AGENT_TRIGGER, n),
        f"orderflow, {DEDICATED_B1.name}": lambda n: orderflow_month(counts, est, DEDICATED_B1, n),
        "bare Durable Functions saga": lambda n: durable_saga_month(counts, est, CHOSEN, n),
        "AWS Step Functions (standard)": lambda n: step_functions_month(counts, n),
        "Temporal Cloud (Essentials)": lambda n: temporal_month(counts, n),
    }


def _latency(counts: OrderCounts, est: Estimates, config: AzureConfig) -> dict[str, list[float]]:
    loads = {"first order after idle": 0.0, **{f"{n:,} a month": float(n) for n in VOLUMES}}
    return {
        name: [round(x, 2) for x in percentiles(order_hops(counts, est, config, n))]
        for name, n in loads.items()
    }


def figures(counts: OrderCounts = MEASURED, est: Estimates = ESTIMATED) -> dict[str, Any]:
    """Everything the docs and the report say: USD per million orders at each of :data:`VOLUMES` and
    per idle month by system, the chosen configuration's meters at 1M, and p50/p95 seconds by load."""
    cost = {
        name: {
            "per_million": {f"{n:,}": round(month(n).per_million(), 2) for n in VOLUMES},
            "idle_month": round(month(0).total, 2),
        }
        for name, month in _systems(counts, est).items()
    }
    meters = orderflow_month(counts, est, CHOSEN, 1_000_000).lines
    claim_off = replace(CHOSEN, name=STARTER_CLAIMING, claim_on_submit=False, starter_period_s=5)
    return {
        "counts": asdict(counts),
        "estimates": asdict(est),
        "configurations": {
            c.name: _config(c)
            for c in (CURRENT, CHOSEN, READY_DURABLE, READY_PATH, ONE_AGENT_TRIGGER, DEDICATED_B1)
        },
        "cost": cost,
        "chosen_meters_at_1m": {k: round(v, 2) for k, v in meters.items()},
        "chosen_meters_idle": {
            k: round(v, 2) for k, v in orderflow_month(counts, est, CHOSEN, 0).lines.items() if v
        },
        "rates": [asdict(r) for r in RATES],
        "latency_s": {
            c.name: _latency(counts, est, c)
            for c in (CURRENT, claim_off, CHOSEN, READY_DURABLE, READY_PATH, DEDICATED_B1)
        },
    }


def _config(config: AzureConfig) -> dict[str, Any]:
    out = asdict(config)
    out["always_ready"] = sorted(config.always_ready)
    return out


def money(usd: float) -> str:
    """USD as the docs write it: whole dollars from $10, cents below."""
    return f"${usd:,.0f}" if usd >= 10 else f"${usd:,.2f}"


def sentence(fig: dict[str, Any]) -> str:
    """The README's cost sentence."""
    cost = fig["cost"]
    chosen = cost[f"orderflow, {CHOSEN.name}"]
    low = fig["latency_s"][CHOSEN.name][f"{LOW:,} a month"]

    def at_1m(system: str) -> str:
        return money(cost[system]["per_million"]["1,000,000"])

    return (
        "The cost model (`python -m bench.cost`) puts it at "
        f"{money(chosen['per_million']['1,000,000'])} per million orders at a million a month, in month "
        f"{fig['estimates']['age_months']:.0f} of a deployment "
        f"(AWS Step Functions {at_1m('AWS Step Functions (standard)')}, Temporal Cloud "
        f"{at_1m('Temporal Cloud (Essentials)')}, a bare Durable Functions saga "
        f"{at_1m('bare Durable Functions saga')}, for the same order by the same model), "
        f"{money(chosen['per_million']['10,000,000'])} at ten million and "
        f"{money(chosen['idle_month'])} a month idle, with a modelled p50 of {low[0]:.2f} s at "
        f"{LOW:,} orders a month: a model from the counts `make bench` measures and the meters' "
        "documented rules, not a bill."
    )
