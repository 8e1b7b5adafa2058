"""Cosmos DB in the cost model: request units by document size (Microsoft's RU table at the sizes
``make bench`` measures) and the storage an order keeps, month after month."""

from __future__ import annotations

from itertools import pairwise
from typing import Final, Literal

from bench.cost.inputs import Estimates, OrderCounts

RU_TABLE: Final[tuple[tuple[float, float, float], ...]] = (
    (1, 1.00, 4.95),
    (2, 1.04, 6.29),
    (4, 1.14, 6.67),
    (8, 1.33, 7.04),
    (16, 1.67, 9.52),
    (32, 2.19, 11.23),
    (64, 4.76, 22.67),
)
"""(document KB, point read RU, write RU): Microsoft's table of request units by document size
(learn.microsoft.com/azure/cosmos-db/understand-request-unit-consumption, "Document size", read
2026-12-08; reads at session consistency, which orderflow's clients use), to 64 KB."""

REPLACE_FACTOR: Final = 2.0
"""A replace's request units against a create's of the same document: it deletes the stored document
and inserts the new one (Microsoft's RU page: "Updates approximately consume twice as many RUs as
creates when only a small number of index terms change")."""

BREAKER_DOCUMENT_BYTES: Final = 1_000
"""A circuit breaker's document is a few hundred bytes: its point read is the table's 1 KB one."""


def request_units(size_bytes: float, operation: Literal["read", "write"]) -> float:
    """Request units of a point read or a write (a create; see :data:`REPLACE_FACTOR`) of a document of
    ``size_bytes``, interpolated linearly between :data:`RU_TABLE`'s rows; a document under 1 KB is
    charged as 1 KB.

    Raises:
        ValueError: the document is over the table's 64 KB, or its size is negative.
    """
    if size_bytes < 0:
        raise ValueError(f"a document of {size_bytes} bytes")
    kb = max(size_bytes / 1_000, RU_TABLE[0][0])
    column = 1 if operation == "read" else 2
    for low, high in pairwise(RU_TABLE):
        if kb <= high[0]:
            share = (kb - low[0]) / (high[0] - low[0])
            return low[column] + share * (high[column] - low[column])
    raise ValueError(f"a document of {kb:g} KB is beyond the table's {RU_TABLE[-1][0]:g} KB")


def order_request_units(counts: OrderCounts, est: Estimates) -> float:
    """Cosmos DB request units of one order: its writes, reads, loop query pages and retention pass (the
    order document's point read and redacting replace, and the state record's replace).

    Every state record write is priced at the record's size when the order is settled, its largest (the
    record grows with each step's result, its compensation log and timeline); a point read reads the state
    record.
    """
    record_write = request_units(counts.state_record_bytes, "write")
    document_write = request_units(counts.order_document_bytes, "write")
    record_read = request_units(counts.state_record_bytes, "read")
    document_read = request_units(counts.order_document_bytes, "read")
    retention = document_read + REPLACE_FACTOR * (document_write + record_write)
    return (
        counts.state_creates * record_write
        + counts.state_replaces * record_write * REPLACE_FACTOR
        + counts.order_creates * document_write
        + counts.point_reads * record_read
        + counts.query_pages * est.ru_query_page
        + retention
    )


ALWAYS_FILLED: Final = 2
"""Containers that hold documents whatever the volume: ``breakers`` and ``alerts`` (the supervisor's sweep
record and its per-minute tallies, each with a time-to-live)."""


def cosmos_storage_gb(orders: float, counts: OrderCounts, est: Estimates) -> float:
    """Cosmos DB storage billed in month ``est.age_months`` of ``orders`` a month (GB, the month's mean).

    The stock at mid-month: the orders of the last ``est.retained_days`` at their measured bytes and every
    earlier one at its bytes after the purge (which deletes nothing), each with ``est.index_share`` more
    for its index. Each container that holds anything is billed at least 1 GB (Microsoft's pricing model
    page: "The smallest amount of data billed for any non empty container is 1 GB"): ``orders`` and
    ``orderstate`` once there are orders (split as the measured bytes are; ``orderhistory``'s, when a
    path writes any, with the state records'), and :data:`ALWAYS_FILLED` more.
    """
    age = max(0.0, est.age_months - 0.5)
    retained = min(age, est.retained_days / 30)
    stored = counts.order_document_bytes + counts.state_record_bytes + counts.history_bytes
    stock = stored * retained + counts.purged_bytes * (age - retained)
    gb = orders * stock * (1 + est.index_share) / 1e9
    document_share = counts.order_document_bytes / stored
    filled = [gb * document_share, gb * (1 - document_share)] if gb > 0 else []
    return sum(max(part, 1.0) for part in filled) + ALWAYS_FILLED * 1.0
