"""The interpreter's cyclic garbage collector, set for a long-running host.

CPython collects its youngest generation every :data:`DEFAULT_GEN0_THRESHOLD` (700) new container
objects. A host handling orders allocates thousands per order (SDK requests, pydantic models, dicts of
headers), nearly all freed at once by reference counting, so each collection walks the few hundred
objects that happen to be alive in flight: the same work again and again, several per order.
Collecting every :data:`GEN0_THRESHOLD` allocations walks a similar live set ten times less often; the
cycles it finds wait a little longer to be freed (a few megabytes at most). :func:`settle_heap` also
freezes what start-up allocated (modules, clients, schemas), which no full collection then walks again.
"""

from __future__ import annotations

import gc

DEFAULT_GEN0_THRESHOLD = 700
"""CPython's own threshold of the youngest generation (new container objects between collections)."""

GEN0_THRESHOLD = 10_000
"""New container objects between two collections of the youngest generation, in a settled host."""


def settle_heap(*, gen0_threshold: int = GEN0_THRESHOLD) -> tuple[int, int, int]:
    """Collect what start-up left, freeze the survivors and collect the youngest generation every
    ``gen0_threshold`` allocations (the older generations' thresholds are kept). Call once, after the
    host has started and before it takes work.

    Returns:
        The thresholds before, as :func:`gc.get_threshold` gave them.

    Raises:
        ValueError: ``gen0_threshold`` is below CPython's own default (that would collect more often).
    """
    if gen0_threshold < DEFAULT_GEN0_THRESHOLD:
        raise ValueError(f"gen0_threshold must be at least {DEFAULT_GEN0_THRESHOLD}")
    before = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(gen0_threshold, before[1], before[2])
    return before
