"""Every rate the cost model applies, with its billing rule, its source and the date it was read.

A rate is *read* when the page named says the figure in the stored copy read on that date; a *list
price, not re-read* is the figure the model uses where the page's stored copy renders no figure or the
page is not stored, with the page that should be checked named. US regions, pay-as-you-go, USD.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True)
class Rate:
    """One meter's rate.

    Attributes:
        key: The name the model looks the rate up by.
        meter: The meter as the bill names it.
        usd: Price in USD per ``unit``.
        unit: What one ``usd`` buys (``"GB-s"``, ``"million operations"``, ...).
        rule: The billing rule the model applies with it.
        source: The page the rule and figure come from.
        read: ``"read YYYY-MM-DD"`` or ``"list price, not re-read"`` with why.
    """

    key: str
    meter: str
    usd: float
    unit: str
    rule: str
    source: str
    read: str


FLEX = "https://learn.microsoft.com/azure/azure-functions/flex-consumption-plan#billing"
FLEX_COSTS = "https://learn.microsoft.com/azure/azure-functions/functions-consumption-costs"
FLEX_RATES = "https://modal.com/blog/azure-function-pricing-guide"
DEDICATED = "https://learn.microsoft.com/azure/azure-functions/dedicated-plan"
APP_SERVICE_RATES = (
    "https://github.com/microsoft/azure-skills/blob/main/skills/azure-app-onboard/prepare/references/"
    "pricing-guide.md"
)
SERVICE_BUS = "https://www.azure.cn/en-us/pricing/details/service-bus/"
COSMOS = "https://learn.microsoft.com/azure/cosmos-db/serverless"
MONITOR = "https://monitoringcost.com/azure-monitor-cost"
MONITOR_PRICING = "https://azure.microsoft.com/pricing/details/monitor/"
STORAGE = "https://azure.microsoft.com/pricing/details/storage/queues/"
DURABLE_STORAGE = (
    "https://learn.microsoft.com/azure/azure-functions/durable/durable-functions-azure-storage-provider"
)
STEP_FUNCTIONS = "https://aws.amazon.com/step-functions/pricing/"
TEMPORAL = "https://docs.temporal.io/cloud/pricing"

RATES: Final[tuple[Rate, ...]] = (
    Rate(
        "flex_on_demand_gbs",
        "Flex Consumption on-demand execution time",
        0.000026,
        "GB-s",
        "instance memory (512, 2,048 or 4,096 MB) for as long as an on-demand instance is actively "
        "executing; each active period at least 1,000 ms, then rounded up to 100 ms; each Service Bus "
        "trigger and timer scales in a group of its own, the Durable triggers share one",
        f"{FLEX}; {FLEX_COSTS}; the rate from {FLEX_RATES}",
        "rule read 2026-12-07 (the 1,000 ms minimum and the scale groups: flex-consumption-plan.md in "
        "MicrosoftDocs/azure-docs); rate read 2026-12-07 from a third-party quote of 2025-05-22 "
        "(Azure's pricing page renders no figures in the stored copy)",
    ),
    Rate(
        "flex_free_gbs",
        "Flex Consumption on-demand free grant",
        100_000,
        "GB-s a month",
        "taken off on-demand execution time each month, per subscription; none for always-ready",
        f"{FLEX_COSTS}; figure from {FLEX_RATES}",
        "read 2026-12-07 (third-party quote)",
    ),
    Rate(
        "flex_executions",
        "Flex Consumption executions",
        0.40,
        "million executions",
        "every execution, an orchestrator episode counted as one",
        f"{FLEX_COSTS}; figure from {FLEX_RATES}",
        "read 2026-12-07 (third-party quote)",
    ),
    Rate(
        "flex_free_executions",
        "Flex Consumption free executions",
        250_000,
        "executions a month",
        "taken off on-demand executions each month, per subscription",
        FLEX_RATES,
        "read 2026-12-07 (third-party quote)",
    ),
    Rate(
        "flex_always_ready_baseline_gbs",
        "Flex Consumption always-ready baseline",
        0.000004,
        "GB-s",
        "instance memory of every always-ready instance, all month, busy or not",
        f"{FLEX}; {FLEX_RATES}",
        "list price, not re-read: the stored copies render no figure",
    ),
    Rate(
        "flex_always_ready_execution_gbs",
        "Flex Consumption always-ready execution time",
        0.000016,
        "GB-s",
        "instance memory while an always-ready instance is executing (same 1,000 ms minimum), no free grant",
        f"{FLEX}; {FLEX_RATES}",
        "list price, not re-read: the stored copies render no figure",
    ),
    Rate(
        "app_service_b1_hour",
        "App Service plan Basic B1 (Linux), Dedicated",
        0.018,
        "instance-hour",
        "each instance (1 vCPU, 1.75 GB) every hour the plan has it, busy or not; no execution or memory "
        "time meter; Always On, which a Dedicated plan's Service Bus and Durable triggers need, included",
        f"{DEDICATED}; figure from {APP_SERVICE_RATES}",
        "rule read 2026-12-07; figure read 2026-12-07 (Microsoft's pricing guide for its Azure skills: "
        "about $13.14 a month, 730 hours; it warns its reference values may be outdated)",
    ),
    Rate(
        "service_bus_base_hour",
        "Service Bus Standard base charge",
        0.0135,
        "hour",
        "730 hours a month; includes the first 13 million operations",
        SERVICE_BUS,
        "list price, not re-read: azure.microsoft.com renders no figures; the azure.cn copy read "
        "2026-12-07 gives the same tiers in CNY (base ¥0.0851/hour)",
    ),
    Rate(
        "service_bus_included_ops",
        "Service Bus Standard included operations",
        13_000_000,
        "operations a month",
        "an operation is any API call to the service: send, receive, complete",
        SERVICE_BUS,
        "read 2026-12-07",
    ),
    Rate(
        "service_bus_ops_13m_100m",
        "Service Bus Standard operations, 13M–100M",
        0.80,
        "million operations",
        "operations past the included 13 million, up to 100 million a month",
        SERVICE_BUS,
        "list price, not re-read (the azure.cn copy read 2026-12-07: ¥5.21; 100M–2,500M ¥3.20, ratio 1.6 "
        "as $0.80 / $0.50)",
    ),
    Rate(
        "service_bus_ops_100m_2500m",
        "Service Bus Standard operations, 100M–2,500M",
        0.50,
        "million operations",
        "operations from 100 million to 2,500 million a month",
        SERVICE_BUS,
        "list price, not re-read",
    ),
    Rate(
        "cosmos_ru",
        "Cosmos DB serverless request units",
        0.25,
        "million RU",
        "every operation's request charge; a point read of 1 KB is 1 RU",
        COSMOS,
        "rule read 2026-12-07; figure a list price, not re-read (the stored page renders none)",
    ),
    Rate(
        "cosmos_storage_gb_month",
        "Cosmos DB serverless storage",
        0.25,
        "GB-month",
        "data and index stored, averaged over the month",
        COSMOS,
        "list price, not re-read",
    ),
    Rate(
        "storage_queue_ops",
        "Azure Storage queue operations (general-purpose v2)",
        0.004,
        "10,000 operations",
        "every request to a Durable Functions queue: put, get, delete, and every empty poll",
        f"{STORAGE}; {DURABLE_STORAGE}",
        "list price, not re-read: no Storage pricing page is in the corpus; Microsoft's Azure Storage "
        "provider page (read 2026-12-07) warns that v2 accounts can cost Durable Functions significantly "
        "more than v1",
    ),
    Rate(
        "storage_table_transactions",
        "Azure Table storage transactions",
        0.00036,
        "10,000 transactions",
        "every request to the task hub's History and Instances tables",
        "https://azure.microsoft.com/pricing/details/storage/tables/",
        "list price, not re-read: no Storage pricing page is in the corpus",
    ),
    Rate(
        "log_analytics_gb",
        "Log Analytics Analytics Logs ingestion",
        2.30,
        "GB",
        "billed size of every record kept (about a quarter under the JSON sent); Application Insights "
        "(workspace-based) bills here",
        f"https://learn.microsoft.com/azure/azure-monitor/logs/cost-logs; figure from {MONITOR}",
        "read 2026-12-07 (third-party quote; Microsoft's page gives the rule, not the figure)",
    ),
    Rate(
        "log_analytics_free_gb",
        "Log Analytics free ingestion",
        5,
        "GB a month",
        "per billing account, each month",
        MONITOR,
        "read 2026-12-07 (third-party quote)",
    ),
    Rate(
        "metric_alert_series",
        "Azure Monitor metric alert, per time series monitored",
        0.10,
        "time series a month",
        "each series a metric alert rule evaluates (a rule split by queue watches one series per queue)",
        MONITOR_PRICING,
        "list price, not re-read: Azure Monitor's pricing page is not in the corpus",
    ),
    Rate(
        "log_alert_5min",
        "Azure Monitor log search alert evaluated every 5 minutes",
        1.50,
        "rule a month",
        "each log search alert rule, by how often it runs",
        MONITOR_PRICING,
        "list price, not re-read",
    ),
    Rate(
        "log_alert_15min",
        "Azure Monitor log search alert evaluated every 15 minutes",
        0.50,
        "rule a month",
        "each log search alert rule, by how often it runs",
        MONITOR_PRICING,
        "list price, not re-read",
    ),
    Rate(
        "step_functions_transition",
        "AWS Step Functions standard workflows",
        0.025,
        "1,000 state transitions",
        "each state entered, retries included; 4,000 free a month",
        STEP_FUNCTIONS,
        "read 2026-12-07",
    ),
    Rate(
        "temporal_action",
        "Temporal Cloud Actions (first 5M a month)",
        50.0,
        "million Actions",
        "workflow started, each activity started or retried; $45 per million for the next 5M",
        TEMPORAL,
        "read 2026-12-07 (docs/evaluate/temporal-cloud/pricing.mdx in temporalio/documentation)",
    ),
    Rate(
        "temporal_action_5m_10m",
        "Temporal Cloud Actions (5M–10M a month)",
        45.0,
        "million Actions",
        "the next 5 million Actions in a month",
        TEMPORAL,
        "read 2026-12-07",
    ),
    Rate(
        "temporal_action_10m_20m",
        "Temporal Cloud Actions (10M–20M a month)",
        40.0,
        "million Actions",
        "the next 10 million Actions in a month",
        TEMPORAL,
        "read 2026-12-07",
    ),
    Rate(
        "temporal_action_20m_50m",
        "Temporal Cloud Actions (20M–50M a month)",
        35.0,
        "million Actions",
        "the next 30 million Actions in a month",
        TEMPORAL,
        "read 2026-12-07",
    ),
    Rate(
        "temporal_action_50m_100m",
        "Temporal Cloud Actions (50M–100M a month)",
        30.0,
        "million Actions",
        "the next 50 million Actions in a month",
        TEMPORAL,
        "read 2026-12-07",
    ),
    Rate(
        "temporal_action_100m_200m",
        "Temporal Cloud Actions (100M–200M a month)",
        25.0,
        "million Actions",
        "the next 100 million Actions in a month; past 200 million, priced by Temporal's sales",
        TEMPORAL,
        "read 2026-12-07",
    ),
    Rate(
        "temporal_essentials_month",
        "Temporal Cloud Essentials plan",
        100.0,
        "month",
        "the greater of $100 a month or 5% of usage; includes 1M Actions",
        TEMPORAL,
        "read 2026-12-07",
    ),
)
"""Every rate, in the order the docs list them."""

HOURS_PER_MONTH: Final = 730.0
"""Azure's monthly hours (its pricing pages' convention)."""
SECONDS_PER_MONTH: Final = HOURS_PER_MONTH * 3600.0


def rate(key: str) -> float:
    """The USD figure of the rate named ``key``.

    Raises:
        KeyError: No rate has that key.
    """
    for entry in RATES:
        if entry.key == key:
            return entry.usd
    raise KeyError(key)
