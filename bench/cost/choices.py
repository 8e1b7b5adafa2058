"""The configuration docs/deploy.md recommends, setting by setting: each choice of
:data:`bench.cost.inputs.CHOSEN` with the model's figure for it and where the template applies it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from bench.cost.inputs import (
    CHOSEN,
    CURRENT,
    DEDICATED_B1,
    ESTIMATED,
    MEASURED,
    MEMORY,
    READY_DURABLE,
    READY_PATH,
    Estimates,
    Memory,
    OrderCounts,
    always_ready_setting,
)
from bench.cost.latency import order_hops, percentiles
from bench.cost.model import (
    DEDICATED_UTILISATION,
    SERVICE_BUS_GROUPS,
    dedicated_instances,
    log_bytes,
    orderflow_groups,
    orderflow_month,
)
from bench.cost.prices import HOURS_PER_MONTH, SECONDS_PER_MONTH, rate
from bench.cost.render import LOW, TARGET_IDLE, figures, money


def _delta(field: str, value: Any, orders: float, counts: OrderCounts, est: Estimates) -> float:
    """USD a month the chosen configuration saves over itself with ``field`` set to ``value``."""
    other = replace(CHOSEN, **{field: value})
    return (
        orderflow_month(counts, est, other, orders).total - orderflow_month(counts, est, CHOSEN, orders).total
    )


def _delta_alerts(counts: OrderCounts, est: Estimates) -> float:
    """USD a month the chosen configuration saves over its two 15-minute log alerts run every 5 minutes."""
    every_5 = replace(
        CHOSEN, log_alerts_5min=CHOSEN.log_alerts_5min + 2, log_alerts_15min=CHOSEN.log_alerts_15min - 2
    )
    return orderflow_month(counts, est, every_5, 0).total - orderflow_month(counts, est, CHOSEN, 0).total


def _first_after_idle(fig: dict[str, Any], name: str) -> float:
    return float(fig["latency_s"][name]["first order after idle"][0])


def _always_ready(fig: dict[str, Any]) -> str:
    def idle(name: str) -> float:
        return float(fig["cost"][f"orderflow, {name}"]["idle_month"])

    def at_1m(name: str) -> float:
        return float(fig["cost"][f"orderflow, {name}"]["per_million"]["1,000,000"])

    base = idle(CHOSEN.name)
    return (
        "- **Always-ready instances: a parameter, off by default** (`alwaysReady` in `infra/main.bicep`, "
        "`ALWAYS_READY` in azd's environment: Flex group names, comma-separated, one instance each in "
        "`infra/modules/functionapp.bicep`'s `scaleAndConcurrency.alwaysReady`). An always-ready instance "
        "bills its memory all month, busy or not, and runs its executions at a lower rate with no free "
        "grant, so a group busy more than 40% of the month costs no more with one. The choice is latency "
        "after an idle spell against the idle month (the tables' *always ready* rows): "
        f"`ALWAYS_READY={always_ready_setting(READY_DURABLE)}` takes the first order after idle from "
        f"{_first_after_idle(fig, CHOSEN.name):.1f} s to {_first_after_idle(fig, READY_DURABLE.name):.1f} s "
        f"for {money(idle(READY_DURABLE.name) - base)} a month more idle (its baseline and the Durable "
        "group's polls, which then never stop), and about the same at a million orders a month "
        f"({money(at_1m(READY_DURABLE.name))} per million); every group on the path, "
        f"`ALWAYS_READY={always_ready_setting(READY_PATH)}` (the demo client's submission and the demo "
        f"workflow's agents), takes it to {_first_after_idle(fig, READY_PATH.name):.2f} s for "
        f"{money(idle(READY_PATH.name) - base)} a month more idle, over the idle target. Each other client's "
        "submission is `function:submission_<client>` and each other agent `function:agent_<agent>`."
    )


def break_even(counts: OrderCounts, est: Estimates) -> float:
    """Orders a month above which the Dedicated plan's month costs less than the chosen Flex template's
    (bisection between none and ten million, to the nearest thousand).

    Raises:
        ValueError: The Dedicated plan is not dearer idle and cheaper at ten million.
    """

    def dearer(orders: float) -> bool:
        flex = orderflow_month(counts, est, CHOSEN, orders).total
        return orderflow_month(counts, est, DEDICATED_B1, orders).total > flex

    low, high = 0.0, 10_000_000.0
    if not dearer(low) or dearer(high):
        raise ValueError("the Dedicated plan does not cross the Flex template between 0 and 10M")
    while high - low > 1_000:
        middle = (low + high) / 2
        low, high = (middle, high) if dearer(middle) else (low, middle)
    return round(high, -3)


def _dedicated(fig: dict[str, Any], counts: OrderCounts, est: Estimates) -> str:
    """The Dedicated plan's bullet: what it costs, where it beats Flex, and why the template keeps Flex."""
    row = fig["cost"][f"orderflow, {DEDICATED_B1.name}"]
    one_instance = DEDICATED_UTILISATION / est.azure_cpu_s_per_order * SECONDS_PER_MONTH
    return (
        f"- **Flex Consumption, kept over a Dedicated plan** (the *{DEDICATED_B1.name}* rows): Basic B1 "
        "instances (1 vCPU, 1.75 GB, Always On, which a Dedicated plan's Service Bus and Durable triggers "
        f"need) at {money(rate('app_service_b1_hour') * HOURS_PER_MONTH)} a month each, busy or not, with no "
        "execution or memory-time meter; the settings otherwise the chosen ones. At "
        f"{est.azure_cpu_s_per_order:g} s of CPU an order on Azure (an estimate) one instance carries up to "
        f"{one_instance / 1e6:.1f} million orders a month at {DEDICATED_UTILISATION:.0%} of its core "
        f"({dedicated_instances(10_000_000, est)} at ten million). It is cheaper than the chosen template "
        f"above {break_even(counts, est):,.0f} orders a month "
        f"({money(row['per_million']['1,000,000'])} per million at a million, "
        f"{money(row['per_million']['10,000,000'])} at ten million) and never cold "
        f"({_first_after_idle(fig, DEDICATED_B1.name):.2f} s p50 for the first order after idle), but its "
        f"idle month is {money(row['idle_month'])} (the instance, and the Durable group's and triggers' "
        f"polls, which never stop), over the idle target of {money(TARGET_IDLE)}, and it scales out only "
        "when told to. The "
        "template keeps Flex for the idle month and for scale-out without an operator; a deployment that "
        "runs above the break-even all month would take a `Microsoft.Web/serverfarms` plan of SKU `B1` with "
        "`alwaysOn` in place of the Flex plan, which `infra/` does not build."
    )


def _p50(config_field: str, value: Any, counts: OrderCounts, est: Estimates) -> float:
    return percentiles(order_hops(counts, est, replace(CHOSEN, **{config_field: value}), LOW))[0]


def _one_control_queue(counts: OrderCounts, est: Estimates) -> str:
    """The partition count's bullet: what one control queue saves and the throughput it leaves."""
    m = 1_000_000
    return (
        f"- **One control queue**, applied (`partitionCount` {CHOSEN.control_queues} in `host.json`; the "
        f"default is {CURRENT.control_queues}): "
        f"{money(_delta('control_queues', CURRENT.control_queues, m, counts, est))} a month less at a "
        "million orders (the Durable group's empty polls and the scale controller's, two queues instead of "
        "five) and "
        f"{money(_delta('control_queues', CURRENT.control_queues, 0, counts, est))} idle. The trade-off is "
        "throughput: one partition lets one instance at a time run orchestration episodes (activities still "
        "scale out). orderflow's episodes took about 6.4 ms of CPU per order locally (14% of the scheduler "
        "devhost's 45.8 ms, docs/benchmarks.md), so ten million orders a month (3.8 a second) ask about "
        "24 ms a second of that instance; Microsoft's Azure Storage provider page says few partitions give "
        "great orchestration throughput when the work is in activities, and has a new task hub created to "
        "change the count: a deployment whose task hub exists takes it with a new `TASK_HUB_NAME`."
    )


def _sampling(counts: OrderCounts, est: Estimates) -> str:
    """The trace sampling bullet: what it saves, who reads the settings, and what stays unsampled."""
    m = 1_000_000
    host_unsampled = m * est.host_span_bytes * (1 - CHOSEN.trace_sampling) / 1e9 * rate("log_analytics_gb")
    return (
        f"- **Traces sampled at {CHOSEN.trace_sampling:.0%}**, applied (app settings "
        "`OTEL_TRACES_SAMPLER=microsoft.fixed_percentage` and "
        f"`OTEL_TRACES_SAMPLER_ARG={CHOSEN.trace_sampling:g}` in `infra/modules/functionapp.bicep`): "
        f"{money(_delta('trace_sampling', 1.0, m, counts, est))} a month less at a million orders. The "
        "worker's Azure Monitor distro reads them (azure-monitor-opentelemetry 1.8, whose default "
        "otherwise keeps up to 5 traces a second), and so does the Functions host from 4.1048.100 "
        "(Azure/azure-functions-host pull request 11568); the sampler hashes the trace id, so an order's "
        "trace is kept or dropped whole. Metrics are never sampled, and orderflow's events and alerts are "
        "log records, kept whatever their trace's decision (the distro's trace-based log sampling is off "
        "unless asked for): `tests/infra/test_cost_configuration.py` holds the template to the priced share "
        "and shows both ([operations.md](operations.md#export)). One report (Azure/azure-functions-host "
        "issue 11745, on Container Apps) saw the host's volume unchanged by the settings: should the host "
        f"keep its request spans ({est.host_span_bytes:,.0f} bytes an order) unsampled, that is "
        f"{money(host_unsampled)} a month more at a million orders; the `requests` table's volume after a "
        "deployment tells."
    )


def _host_logs(counts: OrderCounts, est: Estimates) -> str:
    """The host log levels' bullet: what the host's Information records would cost, and where what they
    said is kept."""
    m = 1_000_000
    return (
        "- **The host's Information log records off**, applied (`host.json`: `Function` and "
        "`Host.Triggers.DurableTask` at Warning, were Information): "
        f"{money(_delta('host_info_logs', True, m, counts, est))} a month less at a million orders, by an "
        f"estimate no run measured ({est.host_log_bytes:,.0f} bytes an order: each execution's 'Executing' "
        "and 'Executed' records and Durable Functions' tracking events, which no sampler drops). What they "
        "said is kept elsewhere: each invocation's start, duration and outcome in the host's request spans "
        "(sampled with the traces), each order's steps in orderflow's events and timeline (never sampled), "
        "each orchestration's history in the task hub's History table; failures are logged at Error and "
        "stay ([operations.md](operations.md#hostjson-and-why))."
    )


def _events(counts: OrderCounts, est: Estimates) -> str:
    """The events' bullet: what keeping them whole costs, and what sampling them would lose."""
    m = 1_000_000
    kept = log_bytes(counts, est)
    return (
        "- **orderflow's events kept whole, not sampled with their traces**, kept (the Azure Monitor "
        "distro's `enable_trace_based_sampling_for_logs`, off unless asked for): "
        f"{counts.log_records:g} records an order, {kept:,.0f} bytes billed (their values as measured, "
        "docs/benchmarks.md, and the columns ingestion adds), "
        "most of the telemetry meter once the free 5 GB are spent. Sampled with their traces they would "
        f"cost {money(-_delta('events_sampled', True, m, counts, est))} a month less at a million orders, "
        "and App Insights would show one order in ten step by step instead of every one, the same orders "
        "whose spans it keeps; the distro's sampling would drop alert records of unsampled traces too. "
        "Every order's timeline in its state record (`orderflow status`, the console) stays whole either "
        "way, and the alert rules count metrics, which are never sampled."
    )


def _service_bus_settings(counts: OrderCounts, est: Estimates) -> str:
    """The Service Bus trigger settings' bullet: what their waiting receives cost and what would move it."""
    m = 1_000_000
    triggers = [g for g in orderflow_groups(counts, est, CHOSEN, m) if g.name in SERVICE_BUS_GROUPS]
    triggers += [g for g in orderflow_groups(counts, est, CHOSEN, m) if g.name.startswith("agent-")]
    waiting = -_delta("sb_concurrent_calls", 0, m, counts, est)
    return (
        f"- **Service Bus trigger settings kept** (`maxConcurrentCalls` {CHOSEN.sb_concurrent_calls}, "
        f"`clientRetryOptions.tryTimeout` {CHOSEN.sb_try_timeout_s:g} s, no prefetch; `host.json`): while "
        "a Service Bus trigger's group has an instance up, its processor keeps that many receives waiting, "
        f"each an operation when it comes back empty. At a million orders a month the {len(triggers)} busy "
        f"triggers' waiting receives cost {money(waiting)} a month (none idle: the groups are at zero). A "
        f"`tryTimeout` of 20 s would save {money(-_delta('sb_try_timeout_s', 20.0, m, counts, est))}, but a "
        "hung call would then hold a message most of its 30 s lock "
        "([operations.md](operations.md#hostjson-and-why)); 4 concurrent calls would save "
        f"{money(-_delta('sb_concurrent_calls', 4, m, counts, est))} and halve what one instance takes on "
        "before Flex scales the group out, which no figure here measures."
    )


def _memory(counts: OrderCounts, est: Estimates, mem: Memory = MEMORY) -> str:
    """The instance memory's bullet: what it saves and the measured footprints it is chosen against."""
    largest = max(mem.worker_mb, mem.scheduler_mb, mem.agents_mb)
    saved = _delta("memory_mb", CURRENT.memory_mb, 1_000_000, counts, est)
    return (
        f"- **Instance memory {CHOSEN.memory_mb} MB**, applied (`instanceMemoryMB` in "
        f"`infra/modules/functionapp.bicep`; was {CURRENT.memory_mb:,}): {money(saved)} a month less at "
        "a million orders (memory time scales with it). `make bench` measures what the worker holds: the "
        "app imported by the worker venv's interpreter with Application Insights configured, "
        f"{mem.worker_mb:.0f} MB (`orderflow.worker_memory`, `VmHWM`: a lower bound, before the language "
        "worker's own modules and any invocation), and the peak resident set of "
        "the devhost processes running the same roles under load, "
        f"{mem.scheduler_mb:.0f} MB (the scheduler roles) and {mem.agents_mb:.0f} MB (the agents) in a "
        f"2-process window (`measured.peak_rss_mb`; {mem.measured_on}). That leaves about "
        f"{CHOSEN.memory_mb - largest:.0f} MB of a {CHOSEN.memory_mb} MB instance to the Functions host; "
        f"watch the app's memory working set and go back to {CURRENT.memory_mb:,} if an instance runs short."
    )


def choices(counts: OrderCounts = MEASURED, est: Estimates = ESTIMATED) -> list[str]:
    """Each setting of the chosen configuration with the model's figure for it, and where the template
    applies it."""
    m = 1_000_000
    fig = figures(counts, est)
    return [
        _memory(counts, est),
        f"- **Claim on submit, the starter a {CHOSEN.starter_period_s:g} s sweeper**, applied (app settings "
        "in `infra/modules/functionapp.bicep`: `CLAIM_ON_SUBMIT` true, `STARTER_SCHEDULE` "
        f"`*/30 * * * * *`, was every {CURRENT.starter_period_s:g} s): the idle month is "
        f"{money(_delta('starter_period_s', CURRENT.starter_period_s, 0, counts, est))} less (the sweeper's "
        "runs fit the free grant at 512 MB), and the starter's wait leaves the order's path: the latency "
        "table's rows with the starter claiming every 5 s against the chosen ones.",
        "- **Supervisor every 30 s, kept** (`SUPERVISOR_SCHEDULE` in `infra/modules/functionapp.bicep`): "
        f"every 60 s would save {money(-_delta('supervisor_period_s', 60, 0, counts, est))} a month idle "
        "(its runs fit the free grant at 512 MB) and let a stuck order wait 30 s longer for recovery.",
        _sampling(counts, est),
        f"- **`maxQueuePollingInterval` 1 s**, applied (`host.json`; was 2): p50 at {LOW:,} a month "
        f"{_p50('max_queue_polling_s', 2.0, counts, est):.2f} s at 2 s, "
        f"{_p50('max_queue_polling_s', 1.0, counts, est):.2f} s at 1 s, for "
        f"{money(-_delta('max_queue_polling_s', 2.0, m, counts, est))} a month more empty polls at a "
        "million.",
        _one_control_queue(counts, est),
        "- **Four agent triggers, kept**: one trigger for every agent would be one scale group instead of "
        f"three busy ones, {money(-_delta('agent_triggers', 1, m, counts, est))} a month less at a million "
        "orders (the table's *one agent trigger* row); it needs one agent queue and a dispatch by message, "
        "and gives up the per-agent queues' bulkhead.",
        _always_ready(fig),
        _dedicated(fig, counts, est),
        "- **Breaker cache 1 s, kept** (`BREAKER_CACHE_S`, its default): 5 s would save "
        f"{money(-_delta('breaker_cache_s', 5.0, m, counts, est))} a month at a million orders and let a "
        "breaker another host opened go unseen 4 s longer.",
        "- **The two log alerts whose window is 15 minutes evaluated every 15 minutes**, applied (stuck "
        "orders and retry budget exhausted, `evaluationFrequency` in `infra/modules/alerts.bicep`): "
        f"{money(_delta_alerts(counts, est))} a month less, idle or not, and an operator hears of either up "
        "to 10 minutes later; compensation failed stays every 5 minutes "
        f"({money(orderflow_month(counts, est, CHOSEN, 0).lines['Alert rules'])} a month with the metric "
        "alerts' series). `tests/infra/test_cost_configuration.py` holds each rule's frequency and the "
        "metric alerts' series to what the model prices.",
        _host_logs(counts, est),
        _events(counts, est),
        _service_bus_settings(counts, est),
    ]
