"""The benchmark's orders: real TPC-H orders that take the happy path, the same ones for every system.

Every run submits the same TPC-H orders, each under an id of its own (``{run}-tpch-{key}``), so that
the systems do identical remote work against one demo-services process without one run's idempotency
keys answering for another's. An order takes the happy path when its customer's card is not declined,
its amount is at most the review threshold (no review pause) and its items stay in stock with the
stock divisor 1 through every run.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from demo.tpch import Catalog, DemoOrder, customer_declined, simulate_out_of_stock

STOCK_DIVISOR = 1
"""Each part's whole ``ps_availqty``: no order of the benchmark runs out of stock."""


def happy_orders(catalog: Catalog, count: int, *, review_above: Decimal, runs: int) -> list[DemoOrder]:
    """The first ``count`` orders of ``catalog`` that take the happy path in each of ``runs`` runs.

    Args:
        catalog: The TPC-H catalog (its stock is the demo services' starting stock).
        count: Orders wanted.
        review_above: Orders above this amount would pause for review; 0 means review is off.
        runs: How many times the same orders are placed against the same stock.

    Raises:
        ValueError: the catalog has fewer than ``count`` such orders.
    """
    candidates = [
        order
        for order in catalog.orders
        if not customer_declined(order) and (review_above <= 0 or order.amount <= review_above)
    ]
    # Every run reserves the same items again: drop what would run out by the last run.
    short = set(simulate_out_of_stock(candidates[:count] * runs, catalog.stock))
    chosen = [order for order in candidates if order.order_id not in short][:count]
    if len(chosen) < count:
        raise ValueError(f"the catalog has only {len(chosen)} happy-path orders; {count} wanted")
    return chosen


def submissions(orders: Sequence[DemoOrder], *, run: str, reply_to: str) -> list[dict[str, Any]]:
    """The order messages of one run: each order's id prefixed with ``run`` (``{run}-tpch-{key}``).

    Raises:
        ValueError: ``run`` is empty or contains characters an order id may not (``:`` ...).
    """
    if not run or not run.replace("-", "").isalnum():
        raise ValueError(f"run tag {run!r} must be letters, digits and dashes")
    out = []
    for order in orders:
        message = order.to_submission(reply_to)
        message["orderId"] = f"{run}-{order.order_id}"
        out.append(message)
    return out
