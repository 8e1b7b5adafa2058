"""The latency model's sampling on fixed hops, and the waits it puts on an order's path."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bench.cost.inputs import CHOSEN, DEDICATED_B1, ESTIMATED, MEASURED, READY_PATH
from bench.cost.latency import Hop, idle_chance, order_hops, percentiles

pytestmark = pytest.mark.unit


def test_fixed_hops_add_up() -> None:
    assert percentiles([Hop("a", fixed_s=0.25), Hop("b", fixed_s=0.5)]) == (0.75, 0.75)


def test_a_uniform_wait_has_its_median_at_half_and_p95_near_the_top() -> None:
    p50, p95 = percentiles([Hop("wait", wait_max_s=2.0)])
    assert p50 == pytest.approx(1.0, abs=0.05)
    assert p95 == pytest.approx(1.9, abs=0.05)


def test_only_the_part_of_a_wait_past_its_overlap_counts() -> None:
    # uniform(0, 2) less 1: zero half the time, so the median is 0; p95 is about 1.9 - 1.
    p50, p95 = percentiles([Hop("wait", wait_max_s=2.0, overlap_s=1.0)])
    assert p50 == pytest.approx(0.0, abs=0.02)
    assert p95 == pytest.approx(0.9, abs=0.05)


def test_a_certain_cold_start_always_counts() -> None:
    assert percentiles([Hop("cold", cold_chance=1.0, cold_s=3.0)]) == (3.0, 3.0)


def test_idle_chance() -> None:
    assert idle_chance(0, 300) == 1.0
    assert idle_chance(0.01, 100) == pytest.approx(0.36788, abs=1e-5)


def test_the_starter_timer_is_on_the_path_only_without_claim_on_submit() -> None:
    names = {h.name for h in order_hops(MEASURED, ESTIMATED, CHOSEN, 100_000)}
    assert "starter timer" not in names
    claiming = order_hops(
        MEASURED, ESTIMATED, replace(CHOSEN, claim_on_submit=False, starter_period_s=5), 1e5
    )
    assert [h.wait_max_s for h in claiming if h.name == "starter timer"] == [5]


def test_every_group_is_cold_after_an_idle_spell_unless_always_ready() -> None:
    cold = [h for h in order_hops(MEASURED, ESTIMATED, CHOSEN, 0) if h.cold_chance]
    # submission, Durable, three agent groups, responses
    assert len(cold) == 6 and all(h.cold_chance == 1.0 for h in cold)
    ready = replace(CHOSEN, always_ready=frozenset({"durable"}))
    assert len([h for h in order_hops(MEASURED, ESTIMATED, ready, 0) if h.cold_chance]) == 5


def test_durable_polls_wait_at_most_the_polling_interval() -> None:
    hops = order_hops(MEASURED, ESTIMATED, replace(CHOSEN, max_queue_polling_s=0.05), 100_000)
    polls = [h for h in hops if "Durable queue poll" in h.name]
    # One per step: each response the listener raises from another instance.
    assert len(polls) == 3 and max(h.wait_max_s for h in polls) == 0.05


def test_the_measured_local_time_and_the_service_bus_hops_are_fixed_terms() -> None:
    hops = order_hops(replace(MEASURED, local_order_s=0.5), ESTIMATED, CHOSEN, 100_000)
    fixed = {h.name: h.fixed_s for h in hops if h.fixed_s}
    # Eight deliveries on the path: the submission, three requests, three responses, the final reply.
    assert fixed == {
        "the order's local processing (measured)": 0.5,
        "Service Bus deliveries": pytest.approx(8 * ESTIMATED.sb_hop_s),
    }


def test_every_group_on_the_path_always_ready_leaves_no_cold_start_after_idle() -> None:
    assert [h.name for h in order_hops(MEASURED, ESTIMATED, READY_PATH, 0) if h.cold_chance] == []


def test_nothing_is_ever_cold_on_a_dedicated_plan() -> None:
    for orders in (0, 100_000):
        assert [h.name for h in order_hops(MEASURED, ESTIMATED, DEDICATED_B1, orders) if h.cold_chance] == []
    # The same waits otherwise: the first order after idle as fast as one at low load.
    assert percentiles(order_hops(MEASURED, ESTIMATED, DEDICATED_B1, 0)) == percentiles(
        order_hops(MEASURED, ESTIMATED, READY_PATH, 0)
    )
