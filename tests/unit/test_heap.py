"""The collector's settings of a settled host (orderflow.heap)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from orderflow.heap import DEFAULT_GEN0_THRESHOLD, GEN0_THRESHOLD, settle_heap

pytestmark = pytest.mark.unit


@pytest.fixture
def restored() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)
    gc.unfreeze()


def test_a_settled_heap_collects_the_young_generation_less_often_and_freezes_start_up(restored: None) -> None:
    gc.set_threshold(DEFAULT_GEN0_THRESHOLD, 10, 10)
    gc.unfreeze()
    start_up = [[n] for n in range(1000)]  # containers alive since "start-up"

    assert settle_heap() == (DEFAULT_GEN0_THRESHOLD, 10, 10)

    assert gc.get_threshold() == (GEN0_THRESHOLD, 10, 10)
    assert gc.get_freeze_count() >= len(start_up)
    assert GEN0_THRESHOLD == 10_000


def test_a_threshold_below_cpythons_own_is_refused(restored: None) -> None:
    with pytest.raises(ValueError, match="at least 700"):
        settle_heap(gen0_threshold=100)
