"""The TPC-H catalog loader, on the hand-written tpchgen-cli-format tables in tests/data/tpch."""

from __future__ import annotations

import sys
from decimal import Decimal
from pathlib import Path

import pytest

from demo import tpch
from demo.tpch import (
    SHIP_MODES,
    DemoOrder,
    OrderLine,
    customer_declined,
    ensure_dataset,
    load_catalog,
    simulate_out_of_stock,
)

pytestmark = pytest.mark.unit

DATA = Path(__file__).resolve().parents[1] / "data" / "tpch"


def test_loads_the_first_orders_by_key_with_their_line_items() -> None:
    catalog = load_catalog(DATA, orders=2, stock_divisor=1)

    assert [order.order_id for order in catalog.orders] == ["tpch-1", "tpch-2"]
    first = catalog.orders[0]
    assert first.order_key == 1
    assert first.customer_key == 1
    assert first.customer_name == "Customer#000000001"
    assert first.amount == Decimal("1000.50")
    assert first.currency == "USD"
    assert first.items == (OrderLine(10, 5), OrderLine(20, 3), OrderLine(30, 2))
    assert first.order_date == "1996-01-02"
    assert first.order_priority == "5-LOW"


def test_all_orders_when_no_limit_and_sparse_keys_kept() -> None:
    catalog = load_catalog(DATA, orders=None, stock_divisor=1)

    assert [order.order_key for order in catalog.orders] == [1, 2, 3, 32]
    assert catalog.orders[3].items == (OrderLine(30, 4), OrderLine(40, 4), OrderLine(10, 1), OrderLine(20, 2))
    assert catalog.order("tpch-32") is catalog.orders[3]
    with pytest.raises(KeyError):
        catalog.order("tpch-4")


def test_carrier_is_the_most_common_ship_mode_with_ties_alphabetical() -> None:
    carriers = {o.order_id: o.carrier for o in load_catalog(DATA, orders=None, stock_divisor=1).orders}

    assert carriers == {
        "tpch-1": "TRUCK",  # TRUCK twice, MAIL once
        "tpch-2": "AIR",  # AIR and REG AIR once each
        "tpch-3": "SHIP",
        "tpch-32": "FOB",  # FOB and RAIL twice each
    }
    assert set(carriers.values()) <= SHIP_MODES


def test_stock_is_summed_availqty_integer_divided() -> None:
    assert load_catalog(DATA, orders=1, stock_divisor=1).stock == {10: 123, 20: 100, 30: 9, 40: 200, 50: 7}

    catalog = load_catalog(DATA, orders=1, stock_divisor=10)

    assert catalog.stock == {10: 12, 20: 10, 30: 0, 40: 20, 50: 0}
    assert catalog.stock_divisor == 10


def test_balances_and_card_declines() -> None:
    catalog = load_catalog(DATA, orders=None, stock_divisor=1)

    assert catalog.balances == {1: Decimal("711.56"), 2: Decimal("-45.10"), 3: Decimal("0.00")}
    declined = [o.order_id for o in catalog.orders if customer_declined(o)]
    assert declined == ["tpch-2"]  # a zero balance is not negative


def test_to_submission_is_the_order_message_body() -> None:
    order = load_catalog(DATA, orders=2, stock_divisor=1).orders[1]

    assert order.to_submission("client-7-replies") == {
        "schemaVersion": 1,
        "orderId": "tpch-2",
        "customerId": "2",
        "customerName": "Customer#000000002",
        "currency": "USD",
        "amount": "250.00",
        "items": [{"sku": "10", "quantity": 7}, {"sku": "40", "quantity": 1}],
        "carrier": "AIR",
        "replyTo": "client-7-replies",
    }


def test_simulated_reservations_run_out_in_order() -> None:
    catalog = load_catalog(DATA, orders=None, stock_divisor=2)
    # Stock: 10 -> 61, 20 -> 50, 30 -> 4. tpch-1 takes 20x3 and 30x2, so tpch-3 (20x50) and
    # tpch-32 (30x4) find too little.
    assert simulate_out_of_stock(catalog.orders, catalog.stock) == ["tpch-3", "tpch-32"]
    assert catalog.stock[30] == 4  # the simulation works on a copy


def test_simulated_reservations_without_declined_customers() -> None:
    orders = load_catalog(DATA, orders=None, stock_divisor=1).orders
    stock = {10: 12, 20: 100, 30: 100, 40: 100}
    # tpch-1 takes 10x5 and tpch-2 10x7, leaving none for tpch-32's 10x1...
    assert simulate_out_of_stock(orders, stock) == ["tpch-32"]
    # ...unless tpch-2, whose customer's card is declined, holds no stock.
    assert simulate_out_of_stock(orders, stock, skip_declined_customers=True) == []


def test_rejects_a_bad_divisor_and_limit() -> None:
    with pytest.raises(ValueError, match="stock_divisor"):
        load_catalog(DATA, orders=1, stock_divisor=0)
    with pytest.raises(ValueError, match="orders"):
        load_catalog(DATA, orders=-1, stock_divisor=1)


def test_first_orders_by_key_even_when_the_file_is_not_sorted(tmp_path: Path) -> None:
    for name in ("customer.csv", "lineitem.csv", "partsupp.csv"):
        (tmp_path / name).write_bytes((DATA / name).read_bytes())
    header, *rows = (DATA / "orders.csv").read_text().splitlines()
    (tmp_path / "orders.csv").write_text("\n".join([header, *reversed(rows)]) + "\n")

    catalog = load_catalog(tmp_path, orders=2, stock_divisor=1)

    assert [o.order_id for o in catalog.orders] == ["tpch-1", "tpch-2"]


def test_ensure_dataset_keeps_tables_that_are_there(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail() -> Path:
        raise AssertionError("must not generate")

    monkeypatch.setattr(tpch, "find_tpchgen", fail)

    assert ensure_dataset(DATA) == DATA


def test_ensure_dataset_runs_tpchgen_and_moves_the_tables_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A stand-in for tpchgen-cli that records its arguments and copies the fixture tables.
    fake = tmp_path / "fake-tpchgen"
    fake.write_text(
        f"#!{sys.executable}\n"
        "import pathlib, shutil, sys\n"
        f"pathlib.Path({str(tmp_path / 'argv.txt')!r}).write_text(' '.join(sys.argv[1:]))\n"
        "out = pathlib.Path(sys.argv[sys.argv.index('--output-dir') + 1])\n"
        f"for f in pathlib.Path({str(DATA)!r}).glob('*.csv'): shutil.copy(f, out / f.name)\n"
    )
    fake.chmod(0o755)
    monkeypatch.setattr(tpch, "find_tpchgen", lambda: fake)
    target = tmp_path / "data" / "tpch"

    assert ensure_dataset(target, 0.01) == target

    argv = (tmp_path / "argv.txt").read_text().split()
    assert argv[:3] == ["csv", "-s", "0.01"]
    assert sorted(p.name for p in target.glob("*.csv")) == [
        "customer.csv",
        "lineitem.csv",
        "orders.csv",
        "partsupp.csv",
    ]
    assert len(load_catalog(target, orders=None, stock_divisor=1).orders) == 4
    # Same scale again: nothing regenerated. Another scale: regenerated.
    (tmp_path / "argv.txt").unlink()
    ensure_dataset(target, 0.01)
    assert not (tmp_path / "argv.txt").exists()
    ensure_dataset(target, 0.1)
    assert (tmp_path / "argv.txt").read_text().split()[:3] == ["csv", "-s", "0.1"]


def test_demo_order_is_frozen() -> None:
    order: DemoOrder = load_catalog(DATA, orders=1, stock_divisor=1).orders[0]
    with pytest.raises(AttributeError):
        order.carrier = "AIR"  # type: ignore[misc]
