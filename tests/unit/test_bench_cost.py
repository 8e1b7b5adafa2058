"""The cost model's arithmetic on fixed inputs, against figures worked out by hand; the docs and the
README say what the model renders; infra/ and host.json carry the configuration the model chose."""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import pytest

from bench.cost.__main__ import main
from bench.cost.choices import break_even
from bench.cost.cosmos import cosmos_storage_gb, order_request_units, request_units
from bench.cost.docs import dedicated_against_target, held_above, replace_between, section
from bench.cost.inputs import (
    CHOSEN,
    CURRENT,
    DEDICATED_B1,
    ESTIMATE_BASIS,
    ESTIMATED,
    MEASURED,
    MEASURED_BASIS,
    READY_DURABLE,
    READY_PATH,
    AzureConfig,
    always_ready_setting,
    counts_from_report,
)
from bench.cost.model import (
    Group,
    breaker_reads,
    dedicated_instances,
    durable_queue_ops,
    durable_table_ops,
    empty_receives,
    flex_cost,
    log_bytes,
    metered_s,
    metered_share,
    orderflow_month,
    poisson_share,
    service_bus_cost,
    span_bytes,
    spread,
    timer_share,
)
from bench.cost.peers import step_functions_month, temporal_month
from bench.cost.prices import RATES, SECONDS_PER_MONTH
from bench.cost.render import BEGIN, END, SENTENCE_BEGIN, SENTENCE_END, figures, sentence

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]


def test_a_month_is_730_hours() -> None:
    assert SECONDS_PER_MONTH == 2_628_000


def test_busy_shares() -> None:
    assert poisson_share(0, 1) == 0
    assert poisson_share(1, 1) == pytest.approx(1 - math.exp(-1))
    assert timer_share(5) == pytest.approx(0.2)
    assert timer_share(0.5) == 1.0


def test_flex_meters_an_active_period_as_the_functions_host_does() -> None:
    # The host's own scenario: ten back-to-back executions of 100 ms are one period, billed 1,000 ms.
    assert metered_s([(i * 0.1, i * 0.1 + 0.1) for i in range(10)]) == pytest.approx(1.0)
    # A period past the minimum is billed whole, rounded up to 100 ms.
    assert metered_s([(0.0, 1.25)]) == pytest.approx(1.3)
    # Concurrent executions are one period, from the first start to the last end.
    assert metered_s([(0.0, 0.5), (0.2, 1.5)]) == pytest.approx(1.5)
    # One that ends as the next starts ends its period first, as the host is told (its Scenario 3) ...
    assert metered_s([(0.0, 1.05), (1.05, 1.2)]) == pytest.approx(1.1 + 1.0)
    assert metered_s([(0.5, 0.5)]) == 0
    # An execution that starts and ends inside a billed second adds nothing ...
    assert metered_s([(0.0, 0.1), (0.5, 0.6)]) == pytest.approx(1.0)
    # ... one that ends past it starts another minimum at the end of what was billed ...
    assert metered_s([(0.0, 0.1), (0.9, 1.1)]) == pytest.approx(2.0)
    # ... and periods apart are billed a minimum each.
    assert metered_s([(0.0, 0.1), (5.0, 5.1)]) == pytest.approx(2.0)
    assert metered_s([]) == 0


def test_a_groups_billed_share_of_the_month() -> None:
    assert metered_share(0, (0.0,), 0.03) == 0
    # One short execution an order: each billed second is followed by an exponential wait for the next
    # order, so the share is the renewal's 1 / (1 + 1/rate).
    assert metered_share(0.1, (0.0,), 0.03) == pytest.approx(0.1 / 1.1, rel=0.03)
    assert metered_share(2.0, (0.0,), 0.03) == pytest.approx(2 / 3, rel=0.03)
    # An order's burst within one second costs what one execution does; one over 1.5 s costs two seconds.
    rare = 0.001
    assert metered_share(rare, spread(10, 0.6), 0.03) == pytest.approx(rare, rel=0.05)
    assert metered_share(rare, spread(4, 1.5), 0.03) == pytest.approx(2 * rare, rel=0.05)
    assert spread(3, 0.4) == pytest.approx((0.0, 0.2, 0.4))
    assert spread(0.4, 1.0) == (0.0,)


def test_service_bus_base_then_tiers() -> None:
    assert service_bus_cost(0) == pytest.approx(9.855)  # 0.0135 x 730
    assert service_bus_cost(13_000_000) == pytest.approx(9.855)  # all included
    assert service_bus_cost(27_000_000) == pytest.approx(9.855 + 14 * 0.80)
    assert service_bus_cost(200_000_000) == pytest.approx(9.855 + 87 * 0.80 + 100 * 0.50)


def test_request_units_by_document_size_follow_microsofts_table_between_its_rows() -> None:
    # The table's own rows, then halfway between two of them; under 1 KB is charged as 1 KB.
    assert request_units(4_000, "write") == pytest.approx(6.67)
    assert request_units(2_000, "read") == pytest.approx(1.04)
    assert request_units(6_000, "write") == pytest.approx((6.67 + 7.04) / 2)
    assert request_units(12_000, "read") == pytest.approx((1.33 + 1.67) / 2)
    assert request_units(300, "write") == request_units(1_000, "write") == pytest.approx(4.95)
    assert request_units(64_000, "write") == pytest.approx(22.67)
    with pytest.raises(ValueError, match="beyond"):
        request_units(64_001, "write")
    with pytest.raises(ValueError, match="-1"):
        request_units(-1, "read")


def test_request_units_and_storage_transactions_of_an_order() -> None:
    # The settled state record of 5,198 bytes: a write 6.67 + 1.198 / 4 x 0.37, a read 1.14 + 1.198 / 4
    # x 0.19; the order document of 703 bytes: 4.95 and 1.00, the table's 1 KB row.
    record_write, record_read = 6.67 + 1.198 / 4 * 0.37, 1.14 + 1.198 / 4 * 0.19
    writes = record_write + 5 * 2 * record_write + 4.95  # create, 5 replaces at twice it, the document
    reads_and_pages = 1 * record_read + 0.4 * 3
    retention = 1.00 + 2 * (4.95 + record_write)  # the document's read and replace, the record's replace
    assert order_request_units(MEASURED, ESTIMATED) == pytest.approx(writes + reads_and_pages + retention)
    assert order_request_units(MEASURED, ESTIMATED) == pytest.approx(106.40, abs=0.01)
    # A larger record costs more at every write: 8 KB is the table's 7.04 a write.
    larger = replace(MEASURED, state_record_bytes=8_000)
    assert order_request_units(larger, ESTIMATED) - order_request_units(MEASURED, ESTIMATED) == pytest.approx(
        (7.04 - record_write) * (1 + 10 + 2) + (1.33 - record_read)
    )
    # (start, 3 results, 3 events, 3 work items) x 3 queue operations; 7 episodes x 3 table transactions
    assert durable_queue_ops(3, 3, ESTIMATED) == 30
    assert durable_table_ops(7, ESTIMATED) == 21
    assert durable_queue_ops(3, 0, ESTIMATED) == 21


def test_cosmos_storage_keeps_every_purged_order_and_bills_each_container_a_gigabyte_at_least() -> None:
    # Month 12 at a million orders a month, at mid-month: the last month's orders at their 5,901 bytes,
    # the 10.5 months before at 5,754 after the purge, each a fifth more for its index (GB); breakers
    # and alerts at their minimum gigabyte each.
    stored, purged = 703 + 5198, 5754
    assert cosmos_storage_gb(1_000_000, MEASURED, ESTIMATED) == pytest.approx(
        (stored + purged * 10.5) * 1.2 / 1_000 + 2
    )
    # Month 1: half a month's orders, 3.54 GB, of which the order documents' 0.42 GB is billed 1.
    month_1 = replace(ESTIMATED, age_months=1)
    half = stored * 0.5 * 1.2 / 1_000
    assert cosmos_storage_gb(1_000_000, MEASURED, month_1) == pytest.approx(1 + half * 5198 / stored + 2)
    # Nothing purged is ever deleted: each further month adds the purged orders.
    later = replace(ESTIMATED, age_months=13)
    assert cosmos_storage_gb(1_000_000, MEASURED, later) - cosmos_storage_gb(
        1_000_000, MEASURED, ESTIMATED
    ) == pytest.approx(purged * 1.2 / 1_000)
    # Too little data for the two order containers' minimum gigabyte each; none where nothing is stored.
    assert cosmos_storage_gb(10_000, MEASURED, month_1) == 4
    assert cosmos_storage_gb(0, MEASURED, ESTIMATED) == 2


def test_an_orders_telemetry_is_its_measured_values_with_the_columns_ingestion_adds() -> None:
    # Spans: 22,378 bytes of values in 46.7 records, 120 bytes more each, and the host's 11,900.
    assert span_bytes(MEASURED, ESTIMATED) == pytest.approx(22_378 + 46.7 * 120 + 11_900)
    assert log_bytes(MEASURED, ESTIMATED) == pytest.approx(7_102 + 12 * 120)
    # A million orders a month: a tenth of the spans, every log record, and the two 30 s timers' 175,200
    # runs at 1,500 bytes; the first 5 GB free, the rest at $2.30.
    month = orderflow_month(MEASURED, ESTIMATED, CHOSEN, 1_000_000)
    per_order = (22_378 + 46.7 * 120 + 11_900) * 0.1 + 7_102 + 12 * 120
    gigabytes = (1_000_000 * per_order + 175_200 * 1_500) / 1e9
    assert month.lines["Telemetry ingestion"] == pytest.approx((gigabytes - 5) * 2.30)
    # Events sampled with their traces: a tenth of them, like the spans.
    sampled = orderflow_month(MEASURED, ESTIMATED, replace(CHOSEN, events_sampled=True), 1_000_000)
    fewer = (1_000_000 * (per_order - 0.9 * (7_102 + 12 * 120)) + 175_200 * 1_500) / 1e9
    assert sampled.lines["Telemetry ingestion"] == pytest.approx(max(0.0, fewer - 5) * 2.30)
    # The host's Information records, when exported, are never sampled either.
    loud = orderflow_month(MEASURED, ESTIMATED, replace(CHOSEN, host_info_logs=True), 1_000_000)
    assert loud.lines["Telemetry ingestion"] - month.lines["Telemetry ingestion"] == pytest.approx(
        1_000_000 * 38_400 / 1e9 * 2.30
    )


def test_breaker_reads_fall_as_consultations_share_the_cache() -> None:
    config = AzureConfig(name="t", breaker_cache_s=1.0)
    assert breaker_reads(0, ESTIMATED, config) == 0
    # 2,628,000 orders a month is one a second: each of 6 consultations reads with chance exp(-1).
    assert breaker_reads(2_628_000, ESTIMATED, config) == pytest.approx(2_628_000 * 6 * math.exp(-1))
    assert breaker_reads(2_628_000, ESTIMATED, replace(config, breaker_cache_s=0)) == 2_628_000 * 6


def test_empty_receives_of_the_service_bus_triggers_while_their_groups_are_up() -> None:
    config = AzureConfig(name="t", sb_concurrent_calls=8, sb_try_timeout_s=10)
    busy = [Group("agent-1", 0.3, 2_628_000), Group("responses", 0.4, 2_628_000), Group("durable", 0.5, 1)]
    # One execution a second keeps each trigger's group up (1 - exp(-300)): 8 receives every 10 s each.
    assert empty_receives(busy, ESTIMATED, config) == pytest.approx(2 * 0.8 * 2_628_000)
    assert empty_receives([Group("submission", 0, 0)], ESTIMATED, config) == 0
    ready = replace(config, always_ready=frozenset({"submission"}), sb_try_timeout_s=20)
    assert empty_receives([Group("submission", 0, 0)], ESTIMATED, ready) == pytest.approx(0.4 * 2_628_000)


def test_flex_on_demand_and_always_ready() -> None:
    config = AzureConfig(name="t", memory_mb=1024)
    busy = Group("durable", 0.5, 1_250_000)
    on_demand = flex_cost([busy], config)
    assert on_demand["Flex memory time"] == pytest.approx((1_314_000 - 100_000) * 0.000026)  # 31.564
    assert on_demand["Flex executions"] == pytest.approx(1_000_000 * 0.40 / 1e6)
    assert on_demand["Flex always-ready baseline"] == 0
    ready = flex_cost([busy], replace(config, always_ready=frozenset({"durable"})))
    assert ready["Flex always-ready baseline"] == pytest.approx(2_628_000 * 0.000004)  # 10.512
    assert ready["Flex memory time"] == pytest.approx(1_314_000 * 0.000016)  # 21.024, no free grant
    assert ready["Flex executions"] == pytest.approx(1_250_000 * 0.40 / 1e6)  # nor a free execution grant


def test_the_idle_month_of_the_template_before_the_model() -> None:
    month = orderflow_month(MEASURED, ESTIMATED, CURRENT, 0)
    # Timers: (1/5 + 1/30) of the month at 2 GB, less 100,000 GB-s free.
    assert month.lines["Flex memory time"] == pytest.approx((1_226_400 - 100_000) * 0.000026)
    assert month.lines["Flex executions"] == pytest.approx((525_600 + 87_600 - 250_000) * 0.4e-6)
    assert month.lines["Service Bus"] == pytest.approx(9.855)
    assert month.lines["Cosmos DB request units"] == pytest.approx((525_600 * 3 + 87_600 * 6) * 0.25e-6)
    # The scale controller's polls of 4 control queues and the work-item queue, every 10 s.
    assert month.lines["Storage transactions"] == pytest.approx(5 / 10 * 2_628_000 / 10_000 * 0.004)
    assert month.lines["Telemetry ingestion"] == 0  # 0.92 GB, under the 5 GB free
    # 7 metric alert series at $0.10, 3 log alerts every 5 minutes at $1.50
    assert month.lines["Alert rules"] == pytest.approx(0.70 + 4.50)
    assert month.lines["Cosmos DB storage"] == pytest.approx(2 * 0.25)  # breakers' and alerts' minimum GB
    assert month.total == pytest.approx(40.33788 + 5.20 + 0.50)


def test_the_idle_month_of_the_chosen_configuration() -> None:
    month = orderflow_month(MEASURED, ESTIMATED, CHOSEN, 0)
    # Two 30 s timers at 512 MB: 87,600 GB-s and 175,200 runs, both inside the free grants.
    assert month.lines["Flex memory time"] == 0 and month.lines["Flex executions"] == 0
    assert month.lines["Cosmos DB request units"] == pytest.approx((87_600 * 3 + 87_600 * 6) * 0.25e-6)
    # The scale controller's polls of one control queue and the work-item queue, every 10 s.
    assert month.lines["Storage transactions"] == pytest.approx(2 / 10 * 2_628_000 / 10_000 * 0.004)
    # 7 metric alert series at $0.10, one log alert every 5 minutes at $1.50, two every 15 at $0.50.
    assert month.lines["Alert rules"] == pytest.approx(0.70 + 1.50 + 1.00)
    assert month.lines["Cosmos DB storage"] == pytest.approx(2 * 0.25)  # breakers' and alerts' minimum GB
    assert month.total == pytest.approx(9.855 + 0.1971 + 0.21024 + 3.20 + 0.50)


def test_an_always_ready_durable_group_bills_its_baseline_and_never_stops_polling() -> None:
    month = orderflow_month(MEASURED, ESTIMATED, READY_DURABLE, 0)
    # One 512 MB instance all month at $0.000004 per GB-s.
    assert month.lines["Flex always-ready baseline"] == pytest.approx(2_628_000 * 0.5 * 0.000004)  # 5.256
    # Its own polls of two queues every second, and the scale controller's.
    polls = (2 / 1 + 2 / 10) * 2_628_000
    assert month.lines["Storage transactions"] == pytest.approx(polls / 10_000 * 0.004)  # 2.31264
    assert month.total == pytest.approx(9.855 + 0.1971 + 2.31264 + 3.20 + 5.256 + 0.50)


def test_a_dedicated_plan_bills_its_instances_and_polls_all_month() -> None:
    month = orderflow_month(MEASURED, ESTIMATED, DEDICATED_B1, 0)
    # One B1 at $0.018 an hour, 730 hours; no Flex meter at all.
    assert month.lines["App Service plan (B1)"] == pytest.approx(13.14)
    assert not [line for line in month.lines if line.startswith("Flex")]
    # Five Service Bus triggers keep 8 receives waiting 10 s each all month: 10,512,000 operations,
    # inside the 13 million the base charge includes.
    assert month.lines["Service Bus"] == pytest.approx(9.855)
    # The Durable group polls two queues every second all month; no scale controller polls a Dedicated plan.
    assert month.lines["Storage transactions"] == pytest.approx(2 * 2_628_000 / 10_000 * 0.004)  # 2.1024
    assert month.total == pytest.approx(13.14 + 9.855 + 2.1024 + 0.1971 + 3.20 + 0.50)


def test_dedicated_instances_follow_the_mean_cpu_load_at_half_a_core_each() -> None:
    est = replace(ESTIMATED, azure_cpu_s_per_order=0.2)
    # Half a core is 2.5 orders a second at 0.2 s: 6,570,000 orders a month.
    assert dedicated_instances(0, est) == 1
    assert dedicated_instances(6_570_000, est) == 1
    assert dedicated_instances(6_571_000, est) == 2
    assert dedicated_instances(10_000_000, est) == 2
    assert orderflow_month(MEASURED, est, DEDICATED_B1, 10_000_000).lines[
        "App Service plan (B1)"
    ] == pytest.approx(2 * 13.14)


def test_the_dedicated_plan_is_cheaper_than_flex_only_above_the_break_even() -> None:
    orders = break_even(MEASURED, ESTIMATED)
    assert orders % 1000 == 0

    def cheaper(n: float) -> bool:
        return (
            orderflow_month(MEASURED, ESTIMATED, DEDICATED_B1, n).total
            < orderflow_month(MEASURED, ESTIMATED, CHOSEN, n).total
        )

    assert not cheaper(orders - 2_000) and cheaper(orders + 1_000)
    with pytest.raises(ValueError, match="does not cross"):
        break_even(MEASURED, replace(ESTIMATED, azure_cpu_s_per_order=100.0))


def test_the_always_ready_setting_names_flex_groups() -> None:
    assert always_ready_setting(CHOSEN) == ""
    assert always_ready_setting(READY_DURABLE) == "durable"
    assert always_ready_setting(READY_PATH).split(",") == [
        "function:submission_demo",
        "durable",
        "function:response_listener",
        "function:agent_inventory",
        "function:agent_payment",
        "function:agent_shipping",
    ]
    with pytest.raises(KeyError):
        always_ready_setting(replace(CHOSEN, always_ready=frozenset({"nowhere"})))


def test_step_functions_and_temporal() -> None:
    assert step_functions_month(MEASURED, 1_000_000).total == pytest.approx(
        (4_000_000 - 4_000) / 1000 * 0.025
    )
    assert temporal_month(MEASURED, 1_000_000).total == pytest.approx(3 * 50 + 100)
    # 40M Actions less 1M: 5M x 50 + 5M x 45 + 10M x 40 + 19M x 35; the plan's $100 above 5% of that.
    assert temporal_month(MEASURED, 10_000_000).total == pytest.approx(1540 + 100)
    # 80M Actions less 1M: the four tiers above (50M, $1,925), then 29M x 30; the plan 5% of $2,795.
    assert temporal_month(MEASURED, 20_000_000).total == pytest.approx(2795 * 1.05)
    # 200M Actions less 1M: every tier but the last whole, then 99M x 25.
    assert temporal_month(MEASURED, 50_000_000).lines["Temporal Actions"] == pytest.approx(
        1925 + 50 * 30 + 99 * 25
    )
    with pytest.raises(ValueError, match="tiers"):
        temporal_month(MEASURED, 51_000_000)


def test_the_chosen_configuration_is_cheaper_and_faster_than_the_one_before() -> None:
    fig = figures()
    before = fig["cost"][f"orderflow, {CURRENT.name}"]
    chosen = fig["cost"][f"orderflow, {CHOSEN.name}"]
    assert chosen["per_million"]["1,000,000"] < before["per_million"]["1,000,000"]
    assert chosen["idle_month"] < before["idle_month"]
    # Under $15 idle by the two log alerts evaluated every 15 minutes: every 5 minutes, over.
    every_5 = replace(CHOSEN, log_alerts_5min=3, log_alerts_15min=0)
    assert chosen["idle_month"] < 15 < orderflow_month(MEASURED, ESTIMATED, every_5, 0).total
    assert fig["latency_s"][CHOSEN.name]["100,000 a month"][0] <= 1.0


def test_counts_from_a_report_replace_the_measured_ones_only_when_every_order_was_processed() -> None:
    telemetry: dict[str, Any] = {
        "all_processed": True,
        "items": {"MessageData": 10.0, "RemoteDependencyData": 30.0, "RequestData": 7.0, "EventData": 1.0},
        "value_bytes": {"MessageData": 6000.0, "RemoteDependencyData": 20000.0, "RequestData": 3500.0},
    }
    per_order = {
        "all_processed": True,
        "queue_sends": {"total": 10},
        "state_store": {"replaces": 4},
        "stored_bytes": {"orders": 700.0, "orderstate": 5000.0, "orderhistory": 300.0, "total": 6000.0},
        "purged_bytes": {"orders": 600.0, "orderstate": 5200.0, "orderhistory": 0.0, "total": 5800.0},
        "telemetry": telemetry,
    }
    single = {"2": {"latency": {"p50_s": 0.05}}}
    orderflow = {"per_order": per_order, "one_at_a_time": single}
    report = {"generated_at": "2027-01-01T00:00:00+00:00", "orderflow": orderflow}
    counts = counts_from_report(report)
    assert (counts.messages, counts.state_replaces, counts.episodes) == (10, 4, MEASURED.episodes)
    assert counts.local_order_s == 0.05
    stored = (
        counts.order_document_bytes,
        counts.state_record_bytes,
        counts.history_bytes,
        counts.purged_bytes,
    )
    assert stored == (700.0, 5000.0, 300.0, 5800.0)
    # Spans are requests and dependencies; every other item a log record.
    assert (counts.span_records, counts.span_value_bytes) == (37, 23_500)
    assert (counts.log_records, counts.log_value_bytes) == (11, 6_000)
    unfinished = {**per_order, "telemetry": {**telemetry, "all_processed": False}}
    assert counts_from_report({"orderflow": {"per_order": unfinished}}).span_records == MEASURED.span_records
    older = {**per_order, "stored_bytes": None}
    assert counts_from_report({"orderflow": {"per_order": older}}).purged_bytes == MEASURED.purged_bytes
    assert counts.measured_on == "bench-report.json of 2027-01-01T00:00:00+00:00"
    assert counts_from_report({"orderflow": {"per_order": {**per_order, "all_processed": False}}}) == MEASURED
    assert counts_from_report({}) == MEASURED


def test_every_count_and_estimate_says_where_it_comes_from() -> None:
    assert set(ESTIMATE_BASIS) == set(asdict(ESTIMATED))
    assert set(MEASURED_BASIS) == set(asdict(MEASURED)) - {"measured_on"}


def test_every_rate_has_a_source_and_a_reading() -> None:
    keys = [r.key for r in RATES]
    assert len(keys) == len(set(keys))
    for entry in RATES:
        assert entry.source.startswith("http") and entry.read and entry.rule


def test_the_deploy_doc_section_is_the_rendering_of_the_checked_in_inputs() -> None:
    text = (REPO / "docs" / "deploy.md").read_text(encoding="utf-8")
    start, stop = text.index(BEGIN), text.index(END) + len(END)
    assert text[start:stop] + "\n" == section()


def test_the_readme_cost_sentence_is_the_models() -> None:
    text = " ".join((REPO / "README.md").read_text(encoding="utf-8").split())
    match = re.search(re.escape(SENTENCE_BEGIN) + "(.*?)" + re.escape(SENTENCE_END), text)
    assert match is not None
    assert match.group(1) == sentence(figures())
    assert "less than Step Functions" not in text and "$92" not in text


def test_replace_between_needs_both_markers() -> None:
    assert replace_between("a[x]b", "[", "]", "[y]") == "a[y]b"
    with pytest.raises(ValueError):
        replace_between("a]x[b", "[", "]", "")


def test_host_json_and_the_template_carry_the_chosen_settings() -> None:
    host = json.loads((REPO / "host.json").read_text(encoding="utf-8"))
    polling = host["extensions"]["durableTask"]["storageProvider"]["maxQueuePollingInterval"]
    assert polling == f"00:00:{CHOSEN.max_queue_polling_s:02.0f}"
    assert host["extensions"]["durableTask"]["storageProvider"]["partitionCount"] == CHOSEN.control_queues
    bicep = (REPO / "infra" / "modules" / "functionapp.bicep").read_text(encoding="utf-8")
    assert re.findall(r"instanceMemoryMB: (\d+)", bicep) == [str(CHOSEN.memory_mb)]


def test_the_command_writes_the_cost_section_into_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "bench-report.json"
    report.write_text(json.dumps({"orderflow": {"per_order": None}}), encoding="utf-8")
    assert main(["--report", str(report)]) == 0
    written = json.loads(report.read_text(encoding="utf-8"))
    assert written["cost"] == json.loads(json.dumps(figures()))
    assert sentence(figures()) in capsys.readouterr().out


def test_the_dedicated_plan_is_said_to_meet_the_cost_target_only_where_it_does() -> None:
    under = dedicated_against_target({"per_million": {"1,000,000": 93.0}, "idle_month": 28.0})
    over = dedicated_against_target({"per_million": {"1,000,000": 103.0}, "idle_month": 28.0})
    assert "meets it, $93" in under
    assert "meets" not in over
    assert "Nor does a Dedicated plan" in over and "$103" in over


def test_the_verdict_names_memory_time_as_the_term_above_the_target_only_when_the_rest_is_under_it() -> None:
    fig = figures()
    flex = fig["chosen_meters_at_1m"]["Flex memory time"]
    # The checked-in inputs: every other meter alone is over $100.
    at_1m = fig["cost"]["orderflow, the chosen configuration"]["per_million"]["1,000,000"]
    assert at_1m - flex > 100
    assert "No one meter holds it above $100" in held_above(fig, at_1m, MEASURED, ESTIMATED)
    # Were the rest $90, memory time would be the term that holds it.
    single = held_above(fig, flex + 90, MEASURED, ESTIMATED)
    assert "The term holding it above $100 is Flex memory time" in single
    assert "Every other meter together comes to $90" in single
