"""The cost section of ``docs/deploy.md``, rendered from :func:`bench.cost.render.figures` and the
inputs; :func:`replace_between` puts it (and the README's sentence) in place."""

from __future__ import annotations

from dataclasses import asdict, replace
from decimal import Decimal
from typing import Any

from bench.cost.inputs import (
    CHOSEN,
    CURRENT,
    ESTIMATE_BASIS,
    ESTIMATED,
    MEASURED,
    MEASURED_BASIS,
    VOLUMES,
    Estimates,
    OrderCounts,
)
from bench.cost.latency import order_hops, percentiles
from bench.cost.model import orderflow_month
from bench.cost.prices import RATES
from bench.cost.render import (
    BEGIN,
    END,
    LOW,
    TARGET_IDLE,
    TARGET_P50_S,
    TARGET_PER_MILLION,
    figures,
    money,
)

INTRO = """\
## Cost per million orders

`python -m bench.cost` computes this section (and the README's cost sentence) from the per-order counts
`make bench` measures, the estimates beside them, and each meter's billing rule and rate in
`bench/cost/prices.py`; it writes the same figures into `bench-report.json` (`cost`), and a test checks
that this section is its rendering of the checked-in inputs. It is a model: nothing here ran on Azure's
meters, and the estimates say where a measurement is missing. Pay-as-you-go, US regions, USD, happy-path
orders of the 3-step workflow spread evenly over a 730-hour month; the remote services, data transfer
and the steps' own compute elsewhere are not counted.

The term that dominates is Flex Consumption's memory time: an on-demand instance is billed for its
memory while it executes, each active period for at least 1,000 ms, and every Service Bus trigger and
timer scales as a group of its own (the Durable triggers share one). An order touches six groups (the
submission, the Durable group, the response listener and one per agent), so at low volume each order
pays several one-second minimums whatever its code takes; at high volume a group's executions overlap
and the minimum stops mattering."""


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def _cost_table(fig: dict[str, Any]) -> list[str]:
    header = ["system", *(f"per million at {n:,}/month" for n in VOLUMES), "idle month"]
    rows = [
        [name, *(money(v) for v in figs["per_million"].values()), money(figs["idle_month"])]
        for name, figs in fig["cost"].items()
    ]
    return _table(header, rows)


def _verdict(fig: dict[str, Any]) -> list[str]:
    chosen = fig["cost"][f"orderflow, {CHOSEN.name}"]
    at_1m = chosen["per_million"]["1,000,000"]
    p50 = fig["latency_s"][CHOSEN.name][f"{LOW:,} a month"][0]
    hosted = ("AWS Step Functions (standard)", "Temporal Cloud (Essentials)")
    dearer = {
        volume: [
            name
            for name in hosted
            if fig["cost"][name]["per_million"][volume] > chosen["per_million"][volume]
        ]
        or ["neither"]
        for volume in ("1,000,000", "10,000,000")
    }
    meters = sorted(fig["chosen_meters_at_1m"].items(), key=lambda kv: -kv[1])[:3]
    held = ", ".join(f"{name} {money(usd)}" for name, usd in meters)
    idle_meters = sorted(fig["chosen_meters_idle"].items(), key=lambda kv: -kv[1])
    idle = ", ".join(f"{name} {money(usd)}" for name, usd in idle_meters)
    flex = fig["chosen_meters_at_1m"]["Flex memory time"]
    counts = fig["counts"]
    writes = counts["state_creates"] + counts["state_replaces"]
    return [
        f"- **Cost at a million orders a month: {money(at_1m)} per million**, "
        f"target {money(TARGET_PER_MILLION)}: "
        + (
            "met."
            if at_1m <= TARGET_PER_MILLION
            else f"**not met**; the terms holding it are {held}. Flex memory time is the one the "
            f"configuration moves; every other meter together comes to {money(at_1m - flex)}, so no "
            "setting of the template brings the total under the target while each order sends "
            f"{counts['messages']:g} Service Bus messages, makes {writes:g} state writes and runs its "
            "Durable Functions history through Azure Storage."
        ),
        f"- **Idle: {money(chosen['idle_month'])} a month**, target {money(TARGET_IDLE)}: "
        + ("met" if chosen["idle_month"] <= TARGET_IDLE else "**not met**")
        + f" ({idle}; Service Bus Standard is needed for duplicate detection, and the alert rules are "
        "the lever: [below](#the-configuration-and-why)).",
        f"- **Modelled p50 at {LOW:,} orders a month: {p50:.2f} s**, target {TARGET_P50_S:.0f} s: "
        + ("met." if p50 <= TARGET_P50_S else "**not met**."),
        "- Dearer than orderflow by this model, of the hosted workflow engines: at a million orders a month "
        f"{' and '.join(dearer['1,000,000'])}; at ten million {' and '.join(dearer['10,000,000'])}. The "
        "bare Durable Functions saga is cheaper than orderflow at every volume: it has no queues between "
        "roles and no state record a supervisor can recover an order from.",
    ]


def _latency_table(fig: dict[str, Any]) -> list[str]:
    rows = [
        [config, load, f"{p50:.2f}", f"{p95:.2f}"]
        for config, loads in fig["latency_s"].items()
        for load, (p50, p95) in loads.items()
    ]
    return _table(["configuration", "load", "p50 s", "p95 s"], rows)


def _delta(field: str, value: Any, orders: float, counts: OrderCounts, est: Estimates) -> float:
    """USD a month the chosen configuration saves over itself with ``field`` set to ``value``."""
    other = replace(CHOSEN, **{field: value})
    return (
        orderflow_month(counts, est, other, orders).total - orderflow_month(counts, est, CHOSEN, orders).total
    )


def _delta_alerts(counts: OrderCounts, est: Estimates) -> float:
    """USD a month the chosen configuration would save with two log alerts evaluated every 15 minutes."""
    fewer = replace(
        CHOSEN, log_alerts_5min=CHOSEN.log_alerts_5min - 2, log_alerts_15min=CHOSEN.log_alerts_15min + 2
    )
    return orderflow_month(counts, est, CHOSEN, 0).total - orderflow_month(counts, est, fewer, 0).total


def _p50(config_field: str, value: Any, counts: OrderCounts, est: Estimates) -> float:
    return percentiles(order_hops(counts, est, replace(CHOSEN, **{config_field: value}), LOW))[0]


def choices(counts: OrderCounts = MEASURED, est: Estimates = ESTIMATED) -> list[str]:
    """Each setting of the chosen configuration with the model's figure for it."""
    m = 1_000_000
    return [
        f"- **Instance memory 512 MB** (was {CURRENT.memory_mb:,}; `infra/modules/functionapp.bicep`): "
        f"{money(_delta('memory_mb', 2048, m, counts, est))} "
        "a month less at a million orders (memory time scales with it). The worker's import footprint is "
        "111 MB (the app imported, `ru_maxrss`), and the local processes running the same roles peaked at "
        "130 MB (the scheduler roles) and 126 MB (the submission and the agents) in a 40-order demo on 2 "
        "processes (2026-12-07, `ps` every 3 s; `make bench` does not record memory). That leaves about "
        "380 MB of a 512 MB instance to the Functions host; watch the app's memory working set and go back "
        "to 2,048 if an instance runs short.",
        f"- **Claim on submit, the starter a {CHOSEN.starter_period_s:g} s sweeper** (`CLAIM_ON_SUBMIT`; "
        f"`STARTER_SCHEDULE` was every {CURRENT.starter_period_s:g} s): the idle month is "
        f"{money(_delta('starter_period_s', CURRENT.starter_period_s, 0, counts, est))} less (the sweeper's "
        "runs fit the free grant at 512 MB), and the starter's wait leaves the order's path: the latency "
        "table's rows with the starter claiming every 5 s against the chosen ones. The template takes both "
        "with the submission's claim (`CLAIM_ON_SUBMIT` true, `STARTER_SCHEDULE` `*/30 * * * * *`).",
        "- **Supervisor every 30 s, kept**: every 60 s would save "
        f"{money(-_delta('supervisor_period_s', 60, 0, counts, est))} a month idle (its runs fit the free "
        "grant at 512 MB) and let a stuck order wait 30 s longer for recovery.",
        f"- **Traces sampled at 10%** (alerts, events and metrics kept): "
        f"{money(_delta('trace_sampling', 1.0, m, counts, est))} a month less at a million orders. "
        "*Not yet in "
        "the template*: the app settings `OTEL_TRACES_SAMPLER=microsoft.fixed_percentage` and "
        "`OTEL_TRACES_SAMPLER_ARG=0.1` ([operations.md](operations.md#export)).",
        f"- **`maxQueuePollingInterval` 1 s** (was 2; `host.json`): p50 at {LOW:,} a month "
        f"{_p50('max_queue_polling_s', 2.0, counts, est):.2f} s at 2 s, "
        f"{_p50('max_queue_polling_s', 1.0, counts, est):.2f} s at 1 s, for "
        f"{money(-_delta('max_queue_polling_s', 2.0, m, counts, est))} a month more empty polls at a "
        "million.",
        "- **Four agent triggers, kept**: one trigger for every agent would be one scale group instead of "
        f"three busy ones, {money(-_delta('agent_triggers', 1, m, counts, est))} a month less at a million "
        "orders (the table's *one agent trigger* row); it needs one agent queue and a dispatch by message, "
        "which is not built.",
        "- **No always-ready instance**: one for the Durable group removes its cold start after an idle "
        f"spell but costs {money(_delta('always_ready', frozenset({'durable'}), 0, counts, est))} a month "
        "idle, which the idle target cannot hold beside the Service Bus base charge.",
        "- **Breaker cache 1 s, kept** (`BREAKER_CACHE_S`): 5 s would save "
        f"{money(-_delta('breaker_cache_s', 5.0, m, counts, est))} a month at a million orders and let a "
        "breaker another host opened go unseen 4 s longer.",
        "- **Alert rules unchanged**: the three log search alerts run every 5 minutes "
        f"({money(orderflow_month(counts, est, CHOSEN, 0).lines['Alert rules'])} a month with the metric "
        "alerts' series). Evaluating the two whose window is 15 minutes (stuck orders, retry budget) every "
        f"15 minutes would save {money(_delta_alerts(counts, est))} a month and tell an operator up to 10 "
        "minutes later; no infrastructure test holds alert frequencies, so the template keeps them.",
        "- **Service Bus settings unchanged** (`maxConcurrentCalls` 8, `tryTimeout` 10 s, no prefetch): no "
        "meter in the model depends on them at these volumes; one instance per group serves them.",
    ]


def _inputs_tables(counts: OrderCounts, est: Estimates) -> list[str]:
    counted = asdict(counts)
    rows = [[name, f"{counted[name]:g}", basis] for name, basis in MEASURED_BASIS.items()]
    lines = [f"**Per-order counts** (from {counts.measured_on}):", ""]
    lines += _table(["count", "per order", "measured or estimated"], rows)
    lines += [
        "",
        "**Estimates** (nothing `make bench` measures these; `bench/cost/inputs.py` says what each is):",
        "",
    ]
    estimate_rows = [[name, f"{value:g}", ESTIMATE_BASIS[name]] for name, value in asdict(est).items()]
    lines += _table(["estimate", "value", "why"], estimate_rows)
    lines += [""]
    lines += ["**Rates**, each with its rule, its source and when it was read:", ""]
    rate_rows = [[r.meter, _rate(r.usd, r.unit), r.rule, r.source, r.read] for r in RATES]
    return lines + _table(["meter", "rate", "rule", "source", "read"], rate_rows)


def _rate(value: float, unit: str) -> str:
    """``$0.000026 per GB-s``, or ``100,000 GB-s a month`` for a grant (a unit that is not a price)."""
    if unit.endswith("a month") and not unit.startswith("month"):
        return f"{value:,.0f} {unit}"
    return f"${format(Decimal(str(value)), 'f')} per {unit}"


def section(counts: OrderCounts = MEASURED, est: Estimates = ESTIMATED) -> str:
    """The whole cost section of docs/deploy.md, markers included."""
    fig = figures(counts, est)
    lines = [BEGIN, INTRO, "", "### What it comes to", ""]
    lines += [*_cost_table(fig), "", *_verdict(fig)]
    lines += ["", "### The chosen configuration's meters at a million orders a month", ""]
    lines += _table(["meter", "USD a month"], [[k, money(v)] for k, v in fig["chosen_meters_at_1m"].items()])
    lines += ["", "### Latency on Azure: a model, not a measurement", ""]
    lines += [
        "Each order's measured local time plus the waits Azure adds on its path (`bench/cost/latency.py`): "
        "Service Bus deliveries, the starter's period where the starter claims, Durable Functions' queue "
        "polling back-off (up to `maxQueuePollingInterval`) for the messages another instance sends (the "
        "orchestration's start and each response the listener raises), and a cold start wherever a scale "
        "group may be at zero (no execution within its scale-in time). p50 and p95 of 20,000 seeded draws. "
        "*Low load* is 100,000 orders a month, one every 26 s on average.",
        "",
    ]
    lines += _latency_table(fig)
    lines += ["", "### The configuration and why", "", *choices(counts, est)]
    lines += ["", "### Inputs", "", *_inputs_tables(counts, est), END]
    return "\n".join(lines) + "\n"


def replace_between(text: str, begin: str, end: str, body: str) -> str:
    """``text`` with everything from ``begin`` to ``end`` (both included) replaced by ``body``.

    Raises:
        ValueError: ``text`` lacks either marker, or has them out of order.
    """
    start, stop = text.find(begin), text.find(end)
    if start < 0 or stop < start:
        raise ValueError(f"markers {begin!r} ... {end!r} not found in order")
    return text[:start] + body.rstrip("\n") + text[stop + len(end) :]
