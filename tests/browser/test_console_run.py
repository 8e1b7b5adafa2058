"""The console over a system whose orders run to the end (no review), in headless Chromium.

A bug in the intake (patched in, as in the integration test of replays) dead-letters ``tpch-1`` and
``tpch-2`` after their second delivery (``MAX_DELIVERY_COUNT=2``): the operator finds them on the
dead-letters page, purges ``tpch-2`` from its own page, and once the bug is fixed replays ``tpch-1``
from the list, which is then processed. A short run of eight orders (each fixture order twice, under
new ids) runs to the end, and the console's order list shows every order in the store, each with the
timeline its record (and the history container) holds. Screenshots go to ``.test-artifacts/``.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import devhost.handlers
from intake import submission
from orderflow.errors import NotFound
from orderflow.records import ProcessState, StateRecord, TimelineEntry
from orderflow.replays import replay_message_id
from orderflow.stores.base import StateQuery, StateStore
from tests.browser.helpers import Console, confirm, running_console, shoot

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def console() -> Iterator[Console]:
    with running_console(MAX_DELIVERY_COUNT=2) as console:
        yield console


def shown_time(iso: str) -> str:
    """A time as the console shows it (dom.js ``when``): the ISO text to the second, ``T`` a space."""
    return re.sub(r"\.\d+", "", iso.replace("T", " "))


def rows(page: Any, test_id: str) -> list[list[str]]:
    """The cells' texts of each row of the table ``test_id``."""
    body = page.locator(f"[data-testid={test_id}] tbody tr")
    return [body.nth(i).locator("td").all_inner_texts() for i in range(body.count())]


def dead_letters_of(console: Console, queue: str) -> list[dict[str, Any]]:
    answer = console.api("GET", f"deadletters/{queue}?limit=100")
    assert answer.status_code == 200, answer.text
    found: list[dict[str, Any]] = answer.json()["deadLetters"]
    return found


def test_dead_letters_are_found_one_purged_and_one_replayed_once_fixed_and_processed(
    page: Any, console: Console, artifacts: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fixed = threading.Event()
    real = submission.handle_intake_message  # what the host calls, patched below

    def buggy(*args: Any, **kwargs: Any) -> Any:
        if not fixed.is_set():
            raise RuntimeError("a bug in the intake, fixed since")
        return real(*args, **kwargs)

    monkeypatch.setattr(devhost.handlers, "handle_intake_message", buggy)
    system = console.system
    inbound = system.client.orders_queue
    store = system.deps.dead_letters
    assert store is not None
    system.submit_all(["tpch-1", "tpch-2"])
    system.wait_until(lambda: len(store.dead_letter_page(inbound).items) == 2, timeout_s=15)
    listed = {json.loads(d["body"])["orderId"]: d for d in dead_letters_of(console, inbound)}
    replayed, purged = listed["tpch-1"], listed["tpch-2"]

    # From the dashboard to the dead-letters page: the picker offers exactly the deployment's queues.
    page.click("[data-testid=dead-letters-link]")
    page.wait_for_selector("[data-testid=dead-letters] tbody tr")
    queues = [q["name"] for q in console.api("GET", "queues").json()["queues"]]
    options = page.locator("#queue-picker option")
    assert [options.nth(i).get_attribute("value") for i in range(options.count())] == queues
    assert page.input_value("#queue-picker") == inbound == queues[0]
    assert page.inner_text("[data-testid=queue-name]") == inbound
    expected = {
        d["deadLetterId"]: [
            d["deadLetterId"],
            "MaxDeliveryCountExceeded",
            "RuntimeError: a bug in the intake, fixed since",
            shown_time(d["deadLetteredAt"]),
            "2",
            d["messageId"],
        ]
        for d in listed.values()
    }
    assert {row[0]: row[:6] for row in rows(page, "dead-letters")} == expected
    shoot(page, artifacts, "dead-letters")

    # One dead letter's page: its body as it was; purged from there (once cancelled: nothing is sent).
    page.click(f"a.dead-letter-link:text-is('{purged['deadLetterId']}')")
    page.wait_for_selector("[data-testid=dead-letter-body]")
    assert page.inner_text("[data-testid=dead-letter-body]") == purged["body"]
    assert page.inner_text("[data-testid=dead-letter-reason]") == "MaxDeliveryCountExceeded"
    shoot(page, artifacts, "dead-letter")
    confirm(page, "purge", of=purged["deadLetterId"], accept=False)
    assert len(dead_letters_of(console, inbound)) == 2
    confirm(page, "purge", of=purged["deadLetterId"])
    page.wait_for_selector(f"[data-testid=dead-letter-outcome]:text-is('Purged {purged['deadLetterId']}.')")
    assert [d["deadLetterId"] for d in dead_letters_of(console, inbound)] == [replayed["deadLetterId"]]
    page.click("[data-testid=back-to-queue]")
    page.wait_for_selector("[data-testid=dead-letters] tbody tr")
    assert [row[0] for row in rows(page, "dead-letters")] == [replayed["deadLetterId"]]

    fixed.set()
    confirm(page, "replay", of=replayed["deadLetterId"])
    outcome = page.locator("[data-testid=dead-letter-outcome]")
    dead_id = replayed["deadLetterId"]
    replay_id = replay_message_id(replayed["messageId"], queue=inbound, dead_letter_id=dead_id)
    outcome.locator(f"text=as {replay_id}").wait_for()
    assert page.inner_text("[data-testid=dead-letters]") == "No dead letter on this queue."
    assert dead_letters_of(console, inbound) == []
    key = system.key("tpch-1")
    system.wait_until(lambda: system.record("tpch-1").process_state is ProcessState.PROCESSED, timeout_s=30)
    outcome.locator(f"a.order-link:text-is('{key}')").click()
    page.wait_for_selector("[data-testid=process-state]:text-is('Processed')")
    assert page.inner_text("[data-testid=order-key]") == key
    shoot(page, artifacts, "dead-letter-replayed-order-processed")
    with pytest.raises(NotFound):  # the purged one never became an order
        system.deps.states.get(system.key("tpch-2"))


def every_record(states: StateStore) -> list[StateRecord]:
    page = states.query(StateQuery(), max_item_count=1000)
    assert page.continuation is None
    return [found.item for found in page.items]


def stored_timeline(states: StateStore, record: StateRecord) -> list[TimelineEntry]:
    """The history container's entries of ``record``, then the record's own after them (read from the
    store, not through the API)."""
    entries: list[TimelineEntry] = []
    continuation: str | None = None
    while True:
        chunks = states.history(record.order_id, max_item_count=100, continuation=continuation)
        entries += [entry for chunk in chunks.items for entry in chunk.entries]
        continuation = chunks.continuation
        if continuation is None:
            break
    last = max((entry.seq for entry in entries), default=0)
    return entries + [entry for entry in record.timeline if entry.seq > last]


def timeline_row(entry: TimelineEntry) -> list[str]:
    """The first seven cells page-order.js renders for ``entry``: #, at, role, by, action, state, attempt."""
    at = entry.model_dump(mode="json", by_alias=True)["at"]
    return [
        str(entry.seq),
        shown_time(at),
        entry.role,
        entry.by_name or entry.by or "",
        entry.action or "",
        f"{entry.from_state or '—'} → {entry.to_state}",
        str(entry.attempt),
    ]


RUN_COPIES = ("run-a", "run-b")


def test_after_a_run_every_order_is_on_the_console_with_its_records_timeline(
    page: Any, console: Console, artifacts: Path
) -> None:
    system = console.system
    reply_queue = system.client.reply_queue
    run = [f"{copy}-{order.order_id}" for copy in RUN_COPIES for order in system.catalog.orders]
    for copy in RUN_COPIES:
        for order in system.catalog.orders:
            system.client.submit(
                replace(order, order_id=f"{copy}-{order.order_id}").to_submission(reply_queue)
            )
    settled = system.wait_settled(run, timeout_s=45)
    # Settled and replied to: nothing writes the records any more.
    system.wait_until(lambda: all(r.pending_reply is None for r in every_record(system.deps.states)))
    records = {record.order_id: record for record in every_record(system.deps.states)}
    assert {system.key(order_id) for order_id in run} <= set(records)
    assert {r.process_state for r in settled.values()} >= {ProcessState.PROCESSED}

    page.goto(f"{console.url}#/orders")
    page.wait_for_selector("[data-testid=orders] tbody tr")
    listed = [row[0] for row in rows(page, "orders")]
    assert sorted(listed) == sorted(records)  # every order in the store, each once
    assert page.inner_text("[data-testid=orders-count]") == f"{len(records)} orders"
    shoot(page, artifacts, "orders-after-a-run")

    for key, record in sorted(records.items()):
        page.click(f"a.order-link:text-is('{key}')")
        page.wait_for_selector(f"[data-testid=order-key]:text-is('{key}')")
        page.wait_for_selector("[data-testid=timeline] tbody tr")
        expected = [timeline_row(entry) for entry in stored_timeline(system.deps.states, record)]
        assert [row[:7] for row in rows(page, "timeline")] == expected, key
        assert expected[-1][5].endswith(f"→ {record.process_state}")
        assert page.inner_text("[data-testid=process-state]") == str(record.process_state)
        if key == system.key(run[0]):
            shoot(page, artifacts, "order-after-a-run")
        page.go_back()
        page.wait_for_selector("[data-testid=orders] tbody tr")


def test_a_dead_letter_whose_correlation_id_names_another_clients_order_is_shown_not_linked(
    page: Any, console: Console, artifacts: Path
) -> None:
    system = console.system
    inbound = system.client.orders_queue
    system.deps.queues.queue(inbound).send("{not json", message_id="m-foreign", correlation_id="other:tpch-1")
    system.wait_until(
        lambda: any(d["messageId"] == "m-foreign" for d in dead_letters_of(console, inbound)), timeout_s=15
    )
    [dead] = [d for d in dead_letters_of(console, inbound) if d["messageId"] == "m-foreign"]

    page.goto(f"{console.url}#/deadletters/{inbound}/{dead['deadLetterId']}")
    page.wait_for_selector("[data-testid=dead-letter-body]")
    shown = page.locator("[data-testid=dead-letter-order]")
    assert (dead["orderId"], shown.inner_text(), shown.locator("a").count()) == (None, "not linked", 0)
    shoot(page, artifacts, "dead-letter-not-linked")
    confirm(page, "replay", of=dead["deadLetterId"])
    said = page.locator("[data-testid=dead-letter-outcome]")
    said.locator("text=Not linked to an order").wait_for()
    assert said.locator("a.order-link").count() == 0
