"""The cost section of ``docs/deploy.md``, rendered from :func:`bench.cost.render.figures` and the
inputs; :func:`replace_between` puts it (and the README's sentence) in place."""

from __future__ import annotations

from dataclasses import asdict
from decimal import Decimal
from typing import Any, Literal

from bench.cost.choices import choices
from bench.cost.cosmos import BREAKER_DOCUMENT_BYTES, request_units
from bench.cost.inputs import (
    CHOSEN,
    DEDICATED_B1,
    ESTIMATE_BASIS,
    ESTIMATED,
    MEASURED,
    MEASURED_BASIS,
    ONE_AGENT_TRIGGER,
    ORDER_PATH_GROUPS,
    VOLUMES,
    Estimates,
    OrderCounts,
)
from bench.cost.model import (
    orderflow_groups,
)
from bench.cost.prices import RATES, rate
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

The meter the template's shape decides is Flex Consumption's memory time: an on-demand instance is
billed for its memory while it executes, each active period for at least 1,000 ms (time already billed
is not billed again, so executions that start and end within a billed second add nothing: the model
replays the Functions host's own metering, `FlexConsumptionMetricsPublisher`), and every Service Bus
trigger and timer scales as a group of its own (the Durable triggers share one). An order touches six
groups (the submission, the Durable group, the response listener and one per agent), so at low volume
each order pays several one-second minimums whatever its code takes; the busier a group, the more of its
executions share a billed second, but a group busy a tenth of the month can still be billed most of it."""


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


def held_above(fig: dict[str, Any], at_1m: float, counts: OrderCounts, est: Estimates) -> str:
    """Why the cost at a million orders a month stays above the target: the term and what moves it."""
    flex = fig["chosen_meters_at_1m"]["Flex memory time"]
    shares = [
        g.busy_share for g in orderflow_groups(counts, est, CHOSEN, 1_000_000) if g.name in ORDER_PATH_GROUPS
    ]
    one_trigger = fig["cost"][f"orderflow, {ONE_AGENT_TRIGGER.name}"]["per_million"]["1,000,000"]
    dedicated = fig["cost"][f"orderflow, {DEDICATED_B1.name}"]
    groups = (
        f"each of the {len(ORDER_PATH_GROUPS)} scale groups an order passes through (the submission, the "
        "Durable group, the response listener, one per agent) is billed at least 1,000 ms of "
        f"{CHOSEN.memory_mb} MB per active period, and at a million orders a month (one every 2.6 s) "
        "each group's instance is billed "
        f"{min(shares):.0%}–{max(shares):.0%} of the month whatever its code takes"
    )
    others = at_1m - flex
    if others > TARGET_PER_MILLION:
        meters = sorted(fig["chosen_meters_at_1m"].items(), key=lambda item: -item[1])[:4]
        held = (
            f"No one meter holds it above {money(TARGET_PER_MILLION)}: every meter but Flex memory time "
            f"comes to {money(others)} by itself. The largest are "
            + ", ".join(f"{name} {money(usd)}" for name, usd in meters)
            + f". Flex memory time: {groups}."
        )
    else:
        held = (
            f"The term holding it above {money(TARGET_PER_MILLION)} is Flex memory time, {money(flex)}: "
            f"{groups}. Every other meter together comes to {money(others)}."
        )
    return (
        f"**not met: {money(at_1m)} is the best figure of this template.** {held} One agent trigger "
        "instead of four would take two "
        f"groups off an order's path ({money(one_trigger)}, the table's *one agent trigger* row), still "
        "above the target, and would give up the per-agent queues, the bulkhead that keeps one failing "
        "service's requests from holding up the other agents'; the template keeps them. "
        + dedicated_against_target(dedicated)
    )


def dedicated_against_target(dedicated: dict[str, Any]) -> str:
    """What the Dedicated plan's row says about the cost target at a million orders a month."""
    at_1m, idle = dedicated["per_million"]["1,000,000"], dedicated["idle_month"]
    row = f"the *{DEDICATED_B1.name}* row"
    if at_1m <= TARGET_PER_MILLION:
        return (
            f"A Dedicated plan ({row}) meets it, {money(at_1m)}, and idles at {money(idle)}, over the idle "
            "target: the two cost targets ask for opposite plans (the Dedicated plan's bullet below)."
        )
    return (
        f"Nor does a Dedicated plan ({row}), which has no memory-time meter: {money(at_1m)}, idling at "
        f"{money(idle)} (the Dedicated plan's bullet below)."
    )


def _verdict(fig: dict[str, Any], counts: OrderCounts, est: Estimates) -> list[str]:
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
    idle_meters = sorted(fig["chosen_meters_idle"].items(), key=lambda kv: -kv[1])
    idle = ", ".join(f"{name} {money(usd)}" for name, usd in idle_meters)
    return [
        f"- **Cost at a million orders a month: {money(at_1m)} per million**, "
        f"target {money(TARGET_PER_MILLION)}: "
        + ("met." if at_1m <= TARGET_PER_MILLION else held_above(fig, at_1m, counts, est)),
        f"- **Idle: {money(chosen['idle_month'])} a month**, target {money(TARGET_IDLE)}: "
        + ("met" if chosen["idle_month"] <= TARGET_IDLE else "**not met**")
        + f" ({idle}; Service Bus Standard, needed for duplicate detection, is most of it).",
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
    lines += ["", *_request_unit_table(counts), ""]
    lines += ["**Rates**, each with its rule, its source and when it was read:", ""]
    rate_rows = [[r.meter, _rate(r.usd, r.unit), r.rule, r.source, r.read] for r in RATES]
    return lines + _table(["meter", "rate", "rule", "source", "read"], rate_rows)


def _request_unit_table(counts: OrderCounts) -> list[str]:
    """Each priced Cosmos DB operation's request units, from Microsoft's table at the measured sizes."""
    rows: list[tuple[str, float, Literal["read", "write"]]] = [
        ("the state record's create (a replace: twice it)", counts.state_record_bytes, "write"),
        ("the order document's create", counts.order_document_bytes, "write"),
        ("a point read of the state record", counts.state_record_bytes, "read"),
        ("a point read of a circuit breaker", BREAKER_DOCUMENT_BYTES, "read"),
    ]
    lines = [
        "**Request units**, Microsoft's table by document size (`RU_TABLE` in `bench/cost/cosmos.py`) at "
        "the measured sizes:",
        "",
    ]
    body = [[what, f"{size:,.0f}", f"{request_units(size, op):.2f}"] for what, size, op in rows]
    return lines + _table(["operation", "bytes", "RU"], body)


def _rate(value: float, unit: str) -> str:
    """``$0.000026 per GB-s``, or ``100,000 GB-s a month`` for a grant (a unit that is not a price)."""
    if unit.endswith("a month") and not unit.startswith("month"):
        return f"{value:,.0f} {unit}"
    return f"${format(Decimal(str(value)), 'f')} per {unit}"


def _storage_growth(counts: OrderCounts, est: Estimates) -> str:
    """Which month of a deployment the figures price, and why that matters: stored orders only grow."""
    kept_kb = counts.purged_bytes * (1 + est.index_share) / 1_000
    growth = kept_kb * rate("cosmos_storage_gb_month")
    return (
        f"Every figure prices month {est.age_months:.0f} of a deployment's life. The retention purge "
        "redacts an order's documents and deletes none (the keys, statuses and times stay: "
        f"[data.md](data.md)), so every earlier month's orders are still stored, about {kept_kb:.1f} KB "
        f"each with their index, and Cosmos DB storage grows by {money(growth)} a month for every million "
        "orders a month, for as long as the deployment runs."
    )


def section(counts: OrderCounts = MEASURED, est: Estimates = ESTIMATED) -> str:
    """The whole cost section of docs/deploy.md, markers included."""
    fig = figures(counts, est)
    lines = [BEGIN, INTRO, "", _storage_growth(counts, est), "", "### What it comes to", ""]
    lines += [*_cost_table(fig), "", *_verdict(fig, counts, est)]
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
