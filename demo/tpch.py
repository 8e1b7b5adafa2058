"""The demo's orders, stock and customer balances, read from real TPC-H data.

``tpchgen-cli csv`` writes one file per table, ``<output-dir>/<table>.csv``,
comma-delimited with a header row of the TPC-H column names (``o_orderkey``,
``l_partkey``, ...) and RFC 4180 quoting (comments contain commas). Rows come
out sorted by their primary key. This module generates that data set once
(:func:`ensure_dataset`) and turns it into a :class:`Catalog`
(:func:`load_catalog`): the first N orders by ``o_orderkey``, each with its
line items and carrier, the stock of every part and every customer's balance.

Two data-driven declines make the demo's unhappy paths real rather than
random:

* **Card declined**: a customer whose ``c_acctbal`` is negative (139 of the
  1,500 customers at SF 0.01, about 9 %) is declined by the payment service;
  see :func:`customer_declined`.
* **Out of stock**: a part's stock is the sum of ``ps_availqty`` over its
  suppliers, integer-divided by a divisor. See :data:`DEFAULT_STOCK_DIVISOR`.
"""

from __future__ import annotations

import csv
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_DEMO_ORDERS",
    "DEFAULT_SCALE",
    "DEFAULT_STOCK_DIVISOR",
    "REQUIRED_TABLES",
    "SHIP_MODES",
    "Catalog",
    "DemoOrder",
    "OrderLine",
    "customer_declined",
    "ensure_dataset",
    "find_tpchgen",
    "load_catalog",
    "simulate_out_of_stock",
]

logger = logging.getLogger(__name__)

DEFAULT_SCALE = 0.01
"""TPC-H scale factor of the demo data set (15,000 orders, 2,000 parts, 1,500 customers)."""

DEFAULT_DEMO_ORDERS = 200
"""Number of orders the default demo submits (the first 200 by ``o_orderkey``)."""

DEFAULT_STOCK_DIVISOR = 180
"""Divides each part's total ``ps_availqty`` to give its demo stock (units).

Reasoning: at SF 0.01 a part has four suppliers with 1..9,999 units each,
about 20,000 units in total, while a line item orders 1..50 units and the
first 200 orders (785 line items) touch 649 of the 2,000 parts, few of them
more than once. Undivided, nothing would ever run out; divided by 180 a part
holds ~111 units on average and 23 at least, so a part ordered by two or three
of the demo's orders runs dry, and orders placed later lose.

Measured with :func:`simulate_out_of_stock` (each order reserved atomically
in order-key order, nothing released) on tpchgen-cli 4.0.0's SF 0.01 data:

* first 200 orders: 14 declined for stock (7.0 %); 11 (5.5 %) when the 16
  orders of customers with a negative balance hold no stock (their
  reservation is released by compensation, or payment runs first);
* first 2,000 orders: 788 declined (39.4 %; 676 = 33.8 % without the 178
  card-declined orders): more orders share each part, so the fraction grows
  with the order count. For 2,000 orders a divisor of 65 gives 80 (4.0 %).

Concurrent processing reorders reservations, so a live run's count moves by
a few orders around these figures; the inventory service reports the stock
available at each decline so a checker can verify every one.
"""

SHIP_MODES: frozenset[str] = frozenset({"AIR", "FOB", "MAIL", "RAIL", "REG AIR", "SHIP", "TRUCK"})
"""The seven TPC-H ``l_shipmode`` values; the demo's carriers."""

REQUIRED_TABLES: tuple[str, ...] = ("orders", "lineitem", "customer", "partsupp")
"""Tables :func:`load_catalog` reads, each from ``<data_dir>/<table>.csv``."""

_SCALE_MARKER = "tpchgen-scale.txt"
_CENTS = Decimal("0.01")


@dataclass(frozen=True, slots=True)
class OrderLine:
    """One line item of a demo order.

    Attributes:
        part_key: TPC-H ``l_partkey``; the inventory SKU is ``str(part_key)``.
        quantity: Units ordered (``l_quantity``, 1..50).
    """

    part_key: int
    quantity: int


@dataclass(frozen=True, slots=True)
class DemoOrder:
    """One TPC-H order as the demo submits it.

    Attributes:
        order_id: ``"tpch-{o_orderkey}"``.
        order_key: TPC-H ``o_orderkey``.
        customer_key: TPC-H ``o_custkey``.
        customer_name: The customer's ``c_name``.
        customer_balance: The customer's ``c_acctbal`` (USD); negative means the card is declined.
        amount: ``o_totalprice`` (USD, 2 dp).
        currency: Always ``"USD"``.
        items: Line items in ``l_linenumber`` order.
        carrier: The order's most common ``l_shipmode``; ties go to the alphabetically first.
        order_date: ``o_orderdate`` (ISO 8601 date).
        order_priority: ``o_orderpriority`` (e.g. ``"1-URGENT"``).
    """

    order_id: str
    order_key: int
    customer_key: int
    customer_name: str
    customer_balance: Decimal
    amount: Decimal
    currency: str
    items: tuple[OrderLine, ...]
    carrier: str
    order_date: str
    order_priority: str

    def to_submission(self, reply_to: str) -> dict[str, Any]:
        """Build the JSON-able order message body for the ``orders`` queue.

        Args:
            reply_to: Name of the client's private reply queue.

        Returns:
            ``{"schemaVersion": 1, "orderId", "customerId", "customerName", "currency",
            "amount" (string, 2 dp), "items": [{"sku", "quantity"}], "carrier", "replyTo"}``.
        """
        return {
            "schemaVersion": 1,
            "orderId": self.order_id,
            "customerId": str(self.customer_key),
            "customerName": self.customer_name,
            "currency": self.currency,
            "amount": str(self.amount),
            "items": [{"sku": str(line.part_key), "quantity": line.quantity} for line in self.items],
            "carrier": self.carrier,
            "replyTo": reply_to,
        }


@dataclass(frozen=True, slots=True, repr=False)
class Catalog:
    """Everything the demo services and the demo client need from TPC-H.

    The mappings are shared; a consumer that mutates stock must copy it first
    (the services do).

    Attributes:
        orders: The loaded orders, ascending by ``o_orderkey``.
        stock: Part key -> units available (sum of ``ps_availqty`` // ``stock_divisor``), every part
            that has a supplier.
        balances: Customer key -> ``c_acctbal`` (USD), every customer.
        stock_divisor: The divisor ``stock`` was computed with.
    """

    orders: list[DemoOrder]
    stock: dict[int, int]
    balances: dict[int, Decimal]
    stock_divisor: int

    def __repr__(self) -> str:
        return (
            f"Catalog(orders={len(self.orders)}, skus={len(self.stock)}, "
            f"customers={len(self.balances)}, stock_divisor={self.stock_divisor})"
        )

    def order(self, order_id: str) -> DemoOrder:
        """Return the loaded order with this id.

        Raises:
            KeyError: The order is not in the catalog.
        """
        for candidate in self.orders:
            if candidate.order_id == order_id:
                return candidate
        raise KeyError(order_id)


def customer_declined(order: DemoOrder) -> bool:
    """Whether the payment service declines this order's card (the customer's balance is negative)."""
    return order.customer_balance < 0


def find_tpchgen() -> Path:
    """Locate the ``tpchgen-cli`` executable: beside ``sys.executable`` first, then on PATH.

    Raises:
        FileNotFoundError: Not installed; the message gives the install command.
    """
    name = "tpchgen-cli.exe" if os.name == "nt" else "tpchgen-cli"
    beside = Path(sys.executable).parent / name
    if beside.is_file():
        return beside
    found = shutil.which("tpchgen-cli")
    if found is not None:
        return Path(found)
    raise FileNotFoundError(
        f"tpchgen-cli not found beside {sys.executable} or on PATH; install it with: "
        "python -m pip install tpchgen-cli==4.0.0"
    )


def _dataset_present(data_dir: Path, scale: float) -> bool:
    if not all((data_dir / f"{table}.csv").is_file() for table in REQUIRED_TABLES):
        return False
    marker = data_dir / _SCALE_MARKER
    # Tables without a marker were put there by hand: trust them.
    return not marker.is_file() or float(marker.read_text().strip()) == scale


def ensure_dataset(data_dir: Path, scale: float = DEFAULT_SCALE) -> Path:
    """Generate the TPC-H CSV tables into ``data_dir`` unless they are already there.

    Runs ``tpchgen-cli csv -s SCALE --output-dir TMP`` in a temporary sibling
    directory and moves the files in, so an interrupted run never leaves half a
    table behind. A marker file records the scale; tables of another scale are
    regenerated.

    Args:
        data_dir: Directory that holds (or will hold) ``<table>.csv``; created if missing.
        scale: TPC-H scale factor (0.01 = 15,000 orders).

    Returns:
        ``data_dir``.

    Raises:
        FileNotFoundError: tpchgen-cli is not installed.
        RuntimeError: tpchgen-cli failed; the message carries its stderr.
    """
    if _dataset_present(data_dir, scale):
        return data_dir
    executable = find_tpchgen()
    data_dir.mkdir(parents=True, exist_ok=True)
    logger.info("generating TPC-H SF %s into %s with %s", scale, data_dir, executable)
    with tempfile.TemporaryDirectory(prefix=".tpchgen-", dir=data_dir.parent) as tmp:
        command = [str(executable), "csv", "-s", str(scale), "--output-dir", tmp, "--quiet"]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} exited {result.returncode}: {result.stderr.strip()}")
        for produced in Path(tmp).glob("*.csv"):
            os.replace(produced, data_dir / produced.name)
    (data_dir / _SCALE_MARKER).write_text(f"{scale}\n")
    return data_dir


def _rows(path: Path, columns: Sequence[str]) -> Iterator[tuple[str, ...]]:
    """Stream the named columns of one tpchgen-cli CSV file, header row skipped."""
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if header is None:
            return
        try:
            indexes = [header.index(column) for column in columns]
        except ValueError as exc:
            raise ValueError(f"{path}: header {header} lacks a column of {list(columns)}") from exc
        for row in reader:
            if row:
                yield tuple(row[i] for i in indexes)


def _first_orders(data_dir: Path, limit: int | None) -> list[tuple[int, int, Decimal, str, str]]:
    """Return (orderkey, custkey, totalprice, orderdate, priority) of the first ``limit`` orders by key."""
    columns = ("o_orderkey", "o_custkey", "o_totalprice", "o_orderdate", "o_orderpriority")
    selected: list[tuple[int, int, Decimal, str, str]] = []
    previous = -1
    in_order = True
    for key, cust, price, date, priority in _rows(data_dir / "orders.csv", columns):
        order_key = int(key)
        in_order = in_order and order_key > previous
        previous = order_key
        selected.append((order_key, int(cust), Decimal(price).quantize(_CENTS), date, priority))
        # tpchgen-cli writes orders by key: a file that starts sorted is taken to be sorted.
        if limit is not None and in_order and len(selected) >= limit:
            break
    selected.sort(key=lambda row: row[0])
    return selected if limit is None else selected[:limit]


def _line_items(data_dir: Path, order_keys: set[int]) -> dict[int, list[tuple[int, int, int, str]]]:
    """Map order key -> [(linenumber, partkey, quantity, shipmode)] for the given orders."""
    columns = ("l_orderkey", "l_partkey", "l_linenumber", "l_quantity", "l_shipmode")
    lines: dict[int, list[tuple[int, int, int, str]]] = {key: [] for key in order_keys}
    last_key = max(order_keys, default=0)
    previous = -1
    in_order = True
    for okey, pkey, number, quantity, mode in _rows(data_dir / "lineitem.csv", columns):
        order_key = int(okey)
        in_order = in_order and order_key >= previous
        previous = order_key
        if in_order and order_key > last_key:
            break  # sorted by order key: the rest belongs to orders not loaded
        bucket = lines.get(order_key)
        if bucket is not None:
            # l_quantity is an integral decimal; tolerate "17.00" as well as "17".
            bucket.append((int(number), int(pkey), int(Decimal(quantity)), mode))
    return lines


def _most_common_mode(modes: Iterable[str]) -> str:
    counts = Counter(modes)
    if not counts:
        return ""
    return min(counts, key=lambda mode: (-counts[mode], mode))


def load_catalog(
    data_dir: Path, *, orders: int | None = DEFAULT_DEMO_ORDERS, stock_divisor: int = DEFAULT_STOCK_DIVISOR
) -> Catalog:
    """Read the demo catalog from tpchgen-cli CSV tables.

    Streams ``orders.csv``, ``lineitem.csv``, ``customer.csv`` and ``partsupp.csv``
    with the csv module: the first 200 orders of SF 0.01 load in ~0.03 s, all 15,000 in ~0.5 s.

    Args:
        data_dir: Directory holding ``<table>.csv`` as written by ``tpchgen-cli csv``.
        orders: Load the first N orders by ``o_orderkey``; None loads all of them.
        stock_divisor: Each part's summed ``ps_availqty`` is integer-divided by this (>= 1).

    Returns:
        The catalog; orders whose customer is missing from ``customer.csv`` get an empty name and a
        zero balance.

    Raises:
        ValueError: ``stock_divisor`` < 1, ``orders`` < 0, or a table lacks a needed column.
        FileNotFoundError: A table is missing (run :func:`ensure_dataset`).
    """
    if stock_divisor < 1:
        raise ValueError(f"stock_divisor must be >= 1, got {stock_divisor}")
    if orders is not None and orders < 0:
        raise ValueError(f"orders must be >= 0 or None, got {orders}")

    customers: dict[int, tuple[str, Decimal]] = {
        int(key): (name, Decimal(balance))
        for key, name, balance in _rows(data_dir / "customer.csv", ("c_custkey", "c_name", "c_acctbal"))
    }

    available: dict[int, int] = {}
    for part, qty in _rows(data_dir / "partsupp.csv", ("ps_partkey", "ps_availqty")):
        part_key = int(part)
        available[part_key] = available.get(part_key, 0) + int(qty)

    headers = _first_orders(data_dir, orders)
    lines = _line_items(data_dir, {row[0] for row in headers})
    loaded: list[DemoOrder] = []
    for order_key, cust_key, price, date, priority in headers:
        order_lines = sorted(lines[order_key])
        name, balance = customers.get(cust_key, ("", Decimal("0.00")))
        loaded.append(
            DemoOrder(
                order_id=f"tpch-{order_key}",
                order_key=order_key,
                customer_key=cust_key,
                customer_name=name,
                customer_balance=balance,
                amount=price,
                currency="USD",
                items=tuple(OrderLine(part_key=part, quantity=qty) for _, part, qty, _ in order_lines),
                carrier=_most_common_mode(mode for *_, mode in order_lines),
                order_date=date,
                order_priority=priority,
            )
        )
    return Catalog(
        orders=loaded,
        stock={part: units // stock_divisor for part, units in available.items()},
        balances={key: balance for key, (_, balance) in customers.items()},
        stock_divisor=stock_divisor,
    )


def simulate_out_of_stock(
    orders: Iterable[DemoOrder], stock: Mapping[int, int], *, skip_declined_customers: bool = False
) -> list[str]:
    """Reserve each order's items atomically, in the given order, and list those that run out.

    This is the inventory service's rule replayed offline; it is how
    :data:`DEFAULT_STOCK_DIVISOR` was chosen. Nothing is released.

    Args:
        orders: Orders in processing order.
        stock: Part key -> units at the start; not modified.
        skip_declined_customers: Leave out orders whose card would be declined (as if payment ran
            first, or their reservation were released by compensation).

    Returns:
        Order ids declined for stock, in processing order.
    """
    remaining = dict(stock)
    declined: list[str] = []
    for order in orders:
        if skip_declined_customers and customer_declined(order):
            continue
        wanted: Counter[int] = Counter()
        for line in order.items:
            wanted[line.part_key] += line.quantity
        if all(remaining.get(part, 0) >= qty for part, qty in wanted.items()):
            for part, qty in wanted.items():
                remaining[part] -= qty
        else:
            declined.append(order.order_id)
    return declined
