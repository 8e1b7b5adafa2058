"""What the cost and latency models take: per-order counts (measured by ``make bench``, or estimated
and said so), the shape of an order's work on Azure, and the Azure configuration priced.

The checked-in figures (:data:`MEASURED`, :data:`ESTIMATED`, :data:`CURRENT`, :data:`CHOSEN`) are what
``docs/deploy.md`` renders; :func:`counts_from_report` takes the measured ones from a newer
``bench-report.json`` instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final


@dataclass(frozen=True)
class OrderCounts:
    """Per happy-path order of the 3-step workflow.

    Attributes:
        messages: Service Bus messages sent (orders, agent requests and responses, replies).
        state_creates: State-store creates (the ``Pending`` record).
        state_replaces: State-store conditional replaces.
        order_creates: Order-document creates.
        point_reads: State- and order-store point reads on Azure.
        query_pages: Query pages of the loops, per order.
        episodes: Orchestrator episodes (Durable Functions executions).
        activities: Activity executions.
        remote_steps: Steps calling a remote service (each one agent execution and one response).
        local_order_s: One order at a time on 2 devhost processes, p50 seconds: every role's processing,
            the emulators' requests and the demo services' calls.
        order_document_bytes: The order document as stored (system properties included, index aside).
        state_record_bytes: The settled state record as stored.
        history_bytes: Timeline entries moved out of the record into ``orderhistory`` (none for a happy
            path's few writes).
        purged_bytes: All of them after the retention purge, which redacts and deletes nothing.
        span_records: Spans the worker exports for an order (requests and dependencies: orderflow's
            roles, the Azure SDK calls and HTTP calls they make).
        span_value_bytes: Those spans' values as text (Log Analytics' billed size before the columns
            ingestion adds).
        log_records: Log records the worker exports for an order (orderflow's events).
        log_value_bytes: Those records' values as text.
        measured_on: The ``make bench`` run the measured counts come from.
    """

    messages: float = 9
    state_creates: float = 1
    state_replaces: float = 5
    order_creates: float = 1
    point_reads: float = 1
    query_pages: float = 0.4
    episodes: float = 7
    activities: float = 3
    remote_steps: float = 3
    local_order_s: float = 0.082
    order_document_bytes: float = 703
    state_record_bytes: float = 5198
    history_bytes: float = 0
    purged_bytes: float = 5754
    span_records: float = 46.7
    span_value_bytes: float = 22_378
    log_records: float = 12
    log_value_bytes: float = 7_102
    measured_on: str = (
        "docs/benchmarks.md: the quiet run of 2026-12-07 13:09 (per order, one at a time); the stored "
        "and telemetry bytes, the runs of 2026-12-08"
    )


MEASURED: Final = OrderCounts()
"""The counts of the last ``make bench`` run written up in docs/benchmarks.md."""

MEASURED_BASIS: Final[Mapping[str, str]] = {
    "messages": "measured: `per_order.queue_sends.total`",
    "state_creates": "measured: `per_order.state_store.creates`",
    "state_replaces": "measured: `per_order.state_store.replaces`",
    "order_creates": "measured: `per_order.order_store.writes`",
    "point_reads": "estimated: 0 measured in one process (its cache); 1 where the starter runs on "
    "another instance than the submission",
    "query_pages": "measured: `per_order.state_store.query_pages` (grows with the run's length)",
    "episodes": "measured: the durabletask backend's episodes in docs/benchmarks.md",
    "activities": "measured: the workflow's activities in docs/benchmarks.md",
    "remote_steps": "measured: `per_order.remote_steps`",
    "local_order_s": 'measured: `orderflow.one_at_a_time["2"].latency.p50_s`',
    "order_document_bytes": "measured: `per_order.stored_bytes.orders` (2026-12-08, docs/benchmarks.md)",
    "state_record_bytes": "measured: `per_order.stored_bytes.orderstate` (the same run)",
    "history_bytes": "measured: `per_order.stored_bytes.orderhistory` (the same run)",
    "purged_bytes": "measured: `per_order.purged_bytes.total`, after the supervisor's retention purge ran "
    "on the run's settled orders (the same run)",
    "span_records": "measured: `per_order.telemetry.items` (`RequestData` and `RemoteDependencyData`): a "
    "devhost's Azure Monitor exporter, every trace kept, the host's work left out (2026-12-08, "
    "docs/benchmarks.md)",
    "span_value_bytes": "measured: `per_order.telemetry.value_bytes` of the same (the same run)",
    "log_records": "measured: `per_order.telemetry.items.MessageData` (the same run)",
    "log_value_bytes": "measured: `per_order.telemetry.value_bytes.MessageData` (the same run)",
}


@dataclass(frozen=True)
class Estimates:
    """Figures no local run measures, each an estimate the docs say is one.

    Attributes:
        sb_ops_per_message: Service Bus operations per message (send, receive, complete).
        ru_query_page: Request units of a query page (the minimum charge of a query).
        index_share: A document's index as a share of its bytes (Cosmos DB stores and bills both).
        retained_days: Days an order keeps its payment and customer data (``COMPENSATION_LOG_RETENTION_S``).
        age_months: The month of a deployment's life the model prices: every earlier month's orders are
            still stored.
        tx_per_episode: Azure Storage transactions of one orchestrator episode (history and instance
            table writes, the history read of its replay).
        tx_per_message: Azure Storage transactions of one Durable queue message (put, get, delete).
        ingestion_added_bytes: Billed bytes Log Analytics adds to each record at ingestion (columns no
            envelope carries).
        host_span_bytes: Billed bytes per order of the Functions host's request spans.
        host_log_bytes: Billed telemetry bytes per order of the host's Information log records (each
            execution's start and end, Durable Functions' tracking events), never sampled.
        timer_run_bytes: Billed telemetry bytes of one timer run.
        starter_ru: Request units of one starter (sweeper) run's query.
        supervisor_ru: Request units of one supervisor sweep (its queries and sweep document).
        breaker_uses: Circuit-breaker consultations per order (an admission before each step, the agent's
            result after it), each a point read unless the host read that breaker within its cache time.
        durable_span_s: Seconds between an order's first and last Durable execution on Azure.
        responses_span_s: Seconds between an order's first and last response execution.
        sb_hop_s: Seconds from a Service Bus send to the trigger's execution, warm.
        agent_call_s: Seconds of an agent's execution (its remote call).
        execution_s: Seconds of any other execution (a few writes and a send, warm).
        cold_start_s: Seconds a scale group at zero takes to start its first instance.
        scale_in_s: Seconds a group stays up without executions.
        empty_receive_ops: Service Bus operations billed for a receive call that returns no message.
        azure_cpu_s_per_order: CPU seconds an order takes on Azure, the worker's and the host's.
    """

    sb_ops_per_message: float = 3
    ru_query_page: float = 3
    index_share: float = 0.2
    retained_days: float = 30
    age_months: float = 12
    tx_per_episode: float = 3
    tx_per_message: float = 3
    ingestion_added_bytes: float = 120
    host_span_bytes: float = 11_900
    host_log_bytes: float = 38_400
    timer_run_bytes: float = 1_500
    starter_ru: float = 3
    supervisor_ru: float = 6
    breaker_uses: float = 6
    durable_span_s: float = 0.6
    responses_span_s: float = 0.4
    sb_hop_s: float = 0.02
    agent_call_s: float = 0.08
    execution_s: float = 0.03
    cold_start_s: float = 3.0
    scale_in_s: float = 300.0
    empty_receive_ops: float = 1
    azure_cpu_s_per_order: float = 0.2


ESTIMATED: Final = Estimates()

ESTIMATE_BASIS: Final[Mapping[str, str]] = {
    "sb_ops_per_message": "each message sent, received and completed once (the happy path)",
    "ru_query_page": "a query's minimum charge, about 3 RU",
    "index_share": "Microsoft's page on optimizing storage cost: an index not tuned by its policy is "
    "about 10–20% of the item's size; the upper figure, though `orders` and `orderstate` index only the "
    "paths their queries use",
    "retained_days": "the default `COMPENSATION_LOG_RETENTION_S`, 30 days",
    "age_months": "a deployment's first year: the stored orders, and their cost, grow with its age",
    "tx_per_episode": "table transactions: a History batch, an Instances write, the History read of "
    "the replay",
    "tx_per_message": "queue operations: a Durable queue message is put, got and deleted",
    "ingestion_added_bytes": "the columns a workspace-based Application Insights record has that the "
    "envelope does not carry: `TenantId` and `ResourceGUID` (36 each), the client's city, state and "
    "country from its address (about 30), `ClientIP`, `SourceSystem` and `PerformanceBucket` (about 18); "
    "the envelope's time is counted once, in its values; `Type`, `_ResourceId` and the other underscored "
    "columns are not billed (learn.microsoft.com/azure/azure-monitor/logs/cost-logs)",
    "host_span_bytes": "the host's request span per execution (17 an order) at 700 bytes: an orderflow "
    "request span's values measured 463 bytes, and the columns ingestion adds",
    "host_log_bytes": "no run measured them: 17 executions an order, each an 'Executing' and an "
    "'Executed' record (category `Function`), and about 30 Durable Functions tracking events (category "
    "`Host.Triggers.DurableTask`: the orchestration's Scheduled, Started and Awaited for each of its 7 "
    "episodes, Listening and ExternalEventRaised for each response, Completed; each activity's "
    "Scheduled, Started and Completed), 64 records at 600 bytes billed, as orderflow's event records",
    "timer_run_bytes": "a host request span and a log record or two per timer run",
    "starter_ru": "one query page finding nothing",
    "supervisor_ru": "the sweep's query pages finding nothing",
    "breaker_uses": "the starter's or a step's admission and the agent's result for each of three steps",
    "durable_span_s": "three agent round trips of about 0.12 s (two Service Bus hops and the call) and "
    "the polls for the three responses",
    "responses_span_s": "two agents' round trips between an order's first and last response",
    "sb_hop_s": "a push delivery to a warm Service Bus trigger",
    "agent_call_s": "an agent's execution: its remote call to a demo service",
    "execution_s": "the submission's, an episode's, an activity's or the listener's execution on a warm "
    "instance: a few requests of a few milliseconds each; far under the 1,000 ms minimum, so the billed "
    "time hardly moves with it",
    "cold_start_s": "a Python Flex instance starting from zero (no published figure)",
    "scale_in_s": "how long a group stays up idle (no published figure)",
    "empty_receive_ops": "any receive call is an operation, one that finds no message too (the Service "
    "Bus team's blog on billing, 2018-02-09: long polling makes one call per wait instead of a tight "
    "loop); a trigger's processor keeps `maxConcurrentCalls` receives waiting, each up to `tryTimeout` "
    "(Azure.Messaging.ServiceBus: the processor's receive wait defaults to the retry options' TryTimeout)",
    "azure_cpu_s_per_order": "orderflow's local processes (devhosts and durabletask backend) took "
    "0.07–0.11 s of CPU per order in `make bench` (docs/benchmarks.md, 2026-12-07), doubled for the "
    "Functions host's own work (its Service Bus and Durable Functions extensions, the gRPC to the "
    "worker), which no run here measured",
}
"""Why each estimate is what it is (docs/deploy.md renders these)."""


@dataclass(frozen=True)
class AzureConfig:
    """The deployment priced.

    Attributes:
        name: What the docs call it.
        memory_mb: Flex instance memory (512, 2,048 or 4,096).
        claim_on_submit: The submission starts the orchestration; the starter only sweeps.
        starter_period_s: The starter timer's period (``STARTER_SCHEDULE``).
        supervisor_period_s: The supervisor timer's period (``SUPERVISOR_SCHEDULE``).
        agent_triggers: Service Bus triggers for the agents, each a scale group.
        always_ready: Scale groups with one always-ready instance.
        trace_sampling: Share of traces kept (1 keeps every span).
        max_queue_polling_s: Durable Functions' ``maxQueuePollingInterval``.
        control_queues: Durable Functions' control queues (``partitionCount``).
        breaker_cache_s: Seconds a host reuses a breaker document it read (``BREAKER_CACHE_S``).
        metric_alert_series: Time series the metric alerts watch (one per queue they split by).
        log_alerts_5min: Log search alert rules evaluated every 5 minutes.
        log_alerts_15min: Log search alert rules evaluated every 15 minutes.
        sb_concurrent_calls: Receives a Service Bus trigger's instance keeps waiting (``maxConcurrentCalls``).
        sb_try_timeout_s: How long each waits for a message (``clientRetryOptions.tryTimeout``).
        events_sampled: orderflow's event and alert records are sampled with their traces (the Azure
            Monitor distro's ``enable_trace_based_sampling_for_logs``) instead of kept whole.
        host_info_logs: The host exports its Information log records (``host.json``'s ``Function`` and
            ``Host.Triggers.DurableTask`` categories at Information).
        dedicated: A Dedicated (App Service) plan of Basic B1 instances instead of Flex Consumption:
            every group runs on the plan's instances all month (Always On), none scales from zero.
    """

    name: str
    memory_mb: int = 2048
    claim_on_submit: bool = False
    starter_period_s: float = 5
    supervisor_period_s: float = 30
    agent_triggers: int = 4
    always_ready: frozenset[str] = field(default_factory=frozenset)
    trace_sampling: float = 1.0
    max_queue_polling_s: float = 2.0
    control_queues: int = 4
    breaker_cache_s: float = 1.0
    metric_alert_series: int = 7
    log_alerts_5min: int = 3
    log_alerts_15min: int = 0
    sb_concurrent_calls: int = 8
    sb_try_timeout_s: float = 10.0
    host_info_logs: bool = True
    events_sampled: bool = False
    dedicated: bool = False


CURRENT: Final = AzureConfig(name="the template before this model")
"""``infra/`` and ``host.json`` as they were: 2,048 MB, a 5 s starter, every trace kept."""

CHOSEN: Final = AzureConfig(
    name="the chosen configuration",
    memory_mb=512,
    claim_on_submit=True,
    starter_period_s=30,
    trace_sampling=0.1,
    max_queue_polling_s=1.0,
    control_queues=1,
    log_alerts_5min=1,
    log_alerts_15min=2,
    host_info_logs=False,
)
"""What the model finds cheapest that keeps the latency target: ``infra/`` and ``host.json`` apply every
setting (docs/deploy.md says why each, and where; tests/infra holds the template to it)."""

ONE_AGENT_TRIGGER: Final = replace(CHOSEN, name="one agent trigger (not built)", agent_triggers=1)
"""The chosen template with every agent behind one trigger: one scale group instead of four."""

ORDER_PATH_GROUPS: Final = frozenset({"submission", "durable", "responses", "agent-1", "agent-2", "agent-3"})
"""The scale groups an order passes through (the timers are not on its path)."""

DEDICATED_B1: Final = replace(CHOSEN, name="Dedicated plan, Basic B1 (not built)", dedicated=True)
"""The chosen settings on a Dedicated plan of Basic B1 instances: a flat price for the instances
instead of Flex's memory time and executions, nothing ever cold."""

READY_DURABLE: Final = replace(
    CHOSEN, name="the chosen configuration, always ready: durable", always_ready=frozenset({"durable"})
)
"""The chosen template with one always-ready instance for the Durable group (``ALWAYS_READY=durable``)."""

READY_PATH: Final = replace(
    CHOSEN,
    name="the chosen configuration, always ready: every group on the path",
    always_ready=ORDER_PATH_GROUPS,
)
"""The chosen template with one always-ready instance for each group an order passes through."""

FLEX_GROUPS: Final[Mapping[str, str]] = {
    "submission": "function:submission_demo",
    "durable": "durable",
    "responses": "function:response_listener",
    "agent-1": "function:agent_inventory",
    "agent-2": "function:agent_payment",
    "agent-3": "function:agent_shipping",
    "starter": "function:starter",
    "supervisor": "function:supervisor",
}
"""Each scale group of the model by the name Flex Consumption's ``alwaysReady`` gives it (``durable``, or
``function:<name>`` for a trigger scaled on its own), for the demo client and the demo workflow's three
agents: the values the template's ``alwaysReady`` parameter takes (docs/deploy.md)."""


def always_ready_setting(config: AzureConfig) -> str:
    """The template's ``alwaysReady`` parameter (``ALWAYS_READY``) for ``config``: its always-ready groups'
    Flex names, comma-separated, in :data:`FLEX_GROUPS` order; empty for none.

    Raises:
        KeyError: ``config`` names a group :data:`FLEX_GROUPS` does not.
    """
    unknown = set(config.always_ready) - set(FLEX_GROUPS)
    if unknown:
        raise KeyError(sorted(unknown))
    return ",".join(flex for group, flex in FLEX_GROUPS.items() if group in config.always_ready)


@dataclass(frozen=True)
class Memory:
    """What the instance memory is chosen against (MB of 10^6 bytes).

    Attributes:
        worker_mb: The app imported by the worker venv's interpreter, Application Insights configured
            (a report's ``orderflow.worker_memory.peak_rss_mb``).
        scheduler_mb: Peak resident set of the devhost process running the scheduler roles (the
            submission and its claim, the orchestrations and their activities, the response listener,
            the starter and the supervisor) in a 2-process window (a report's
            ``orderflow.runs["2"].measured.peak_rss_mb["devhost-1"]``).
        agents_mb: The same of the process running the agents (``["devhost-agents"]``).
        measured_on: The ``make bench`` run they come from.
    """

    worker_mb: float = 112.9
    scheduler_mb: float = 130.5
    agents_mb: float = 126.4
    measured_on: str = "2026-12-08, 100 orders at 8 in flight, docs/benchmarks.md"


MEMORY: Final = Memory()
"""The memory figures docs/deploy.md cites, from the ``make bench`` run ``measured_on`` names."""


VOLUMES: Final = (100_000, 1_000_000, 10_000_000)
"""Orders a month the cost is given at."""


def counts_from_report(report: Mapping[str, Any], base: OrderCounts = MEASURED) -> OrderCounts:
    """``base`` with the counts a ``bench-report.json`` measured (``orderflow.per_order``, and the
    2-process one-at-a-time p50), where the report holds them for a run in which every order was
    processed; ``base`` itself otherwise."""
    per_order = (report.get("orderflow") or {}).get("per_order") or {}
    if not per_order.get("all_processed"):
        return base
    state = per_order.get("state_store", {})
    one_at_a_time = (report["orderflow"].get("one_at_a_time") or {}).get("2") or {}
    local_s = (one_at_a_time.get("latency") or {}).get("p50_s")
    return replace(
        base,
        messages=float(per_order.get("queue_sends", {}).get("total", base.messages)),
        state_creates=float(state.get("creates", base.state_creates)),
        state_replaces=float(state.get("replaces", base.state_replaces)),
        order_creates=float(per_order.get("order_store", {}).get("writes", base.order_creates)),
        query_pages=float(state.get("query_pages", base.query_pages)),
        remote_steps=float(per_order.get("remote_steps", base.remote_steps)),
        local_order_s=float(local_s) if local_s else base.local_order_s,
        **_stored(per_order),
        **_telemetry(per_order.get("telemetry") or {}),
        measured_on=f"bench-report.json of {report.get('generated_at', 'an unknown date')}",
    )


def _stored(per_order: Mapping[str, Any]) -> dict[str, float]:
    """The stored bytes a report's counting run measured; none where it has none."""
    stored, purged = per_order.get("stored_bytes") or {}, per_order.get("purged_bytes") or {}
    if not stored or not purged:
        return {}
    return {
        "order_document_bytes": float(stored["orders"]),
        "state_record_bytes": float(stored["orderstate"]),
        "history_bytes": float(stored.get("orderhistory", 0.0)),
        "purged_bytes": float(purged["total"]),
    }


SPAN_TYPES: Final = ("RequestData", "RemoteDependencyData")
"""Application Insights item types of spans; every other type but metrics is a log record."""


def _telemetry(telemetry: Mapping[str, Any]) -> dict[str, float]:
    """The telemetry counts a report's run measured, where every one of its orders was processed."""
    if not telemetry.get("all_processed"):
        return {}
    items, values = telemetry["items"], telemetry["value_bytes"]
    logs = [kind for kind in items if kind not in SPAN_TYPES]
    return {
        "span_records": float(sum(items.get(kind, 0.0) for kind in SPAN_TYPES)),
        "span_value_bytes": float(sum(values.get(kind, 0.0) for kind in SPAN_TYPES)),
        "log_records": float(sum(items[kind] for kind in logs)),
        "log_value_bytes": float(sum(values.get(kind, 0.0) for kind in logs)),
    }
