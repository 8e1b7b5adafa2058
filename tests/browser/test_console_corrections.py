"""The console resubmits an ``Error`` order with corrected input, in headless Chromium against a real
devhost system: an order-v4 order whose carrier (``CAMEL``) the shipping service refuses waits in
``Error``; an operator gives a carrier that is not a JSON object (refused before any call), one with a
duplicate key (sent as typed, refused by the API), then one the step takes, and the order ships.
Screenshots go to ``.test-artifacts/``."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from orderflow.records import ProcessState
from tests.browser.helpers import Console, open_order, running_console, shoot

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def console() -> Iterator[Console]:
    with running_console(WORKFLOW_VERSION="order-v4") as console:
        system = console.system
        order = next(o for o in system.catalog.orders if o.order_id == "tpch-1")
        system.client.submit(replace(order, carrier="CAMEL").to_submission(system.client.reply_queue))
        system.wait_until(lambda: system.record("tpch-1").process_state is ProcessState.ERROR, timeout_s=30)
        yield console


def resubmit_with(page: Any, text: str) -> None:
    page.click("[data-action=resubmit]")
    page.wait_for_selector("#confirm[open]")
    page.fill("#resubmit-input", text)
    page.click("#confirm-ok")
    page.wait_for_selector("#confirm:not([open])", state="attached")


def test_an_operator_corrects_a_refused_carrier_from_the_console(
    page: Any, console: Console, artifacts: Path
) -> None:
    system = console.system
    key = open_order(page, console, "tpch-1")
    assert page.inner_text("[data-testid=process-state]") == "Error"
    # Waiting for a correction, it may be compensated instead: nothing irreversible was done.
    assert page.locator("[data-action=compensate]").count() == 1
    etag = console.api("GET", f"orders/{key}").headers["ETag"]

    resubmit_with(page, '["AIR"]')
    page.wait_for_selector("#notice:text('must be a JSON object')")
    assert console.api("GET", f"orders/{key}").headers["ETag"] == etag  # nothing was sent

    # Sent as typed: the API's own duplicate check refuses what JSON.parse would take as its last value.
    page.click("#reload")
    page.wait_for_selector("[data-testid=process-state]:text-is('Error')")
    resubmit_with(page, '{"carrier": "AIR", "carrier": "SHIP"}')
    page.wait_for_selector("#notice:text('duplicate key')")
    assert console.api("GET", f"orders/{key}").headers["ETag"] == etag  # refused: nothing was written

    page.click("#reload")
    page.wait_for_selector("[data-testid=process-state]:text-is('Error')")
    resubmit_with(page, '{"carrier": "AIR"}')
    page.wait_for_selector("#notice:text('Resubmit: NewAttempt.')")
    system.wait_until(lambda: system.record("tpch-1").process_state is ProcessState.PROCESSED, timeout_s=30)
    page.click("#reload")
    page.wait_for_selector("[data-testid=process-state]:text-is('Processed')")

    shown = page.inner_text("[data-testid=corrections]")
    assert f"{key}:create_shipment:correction-1" in shown and 'carrier: "AIR"' in shown and "ana" in shown
    assert "corrected carrier" in page.inner_text("[data-testid=timeline]")
    record = system.record("tpch-1")
    assert record.steps["create_shipment"].result is not None
    assert record.steps["create_shipment"].result["carrier"] == "AIR"
    shoot(page, artifacts, "order-corrected")
