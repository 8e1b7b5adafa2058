"""The web console end to end in headless Chromium, against a real devhost system (demo services, the
workflow on durabletask, the operator API on loopback trusting a local issuer's tokens).

Four orders pause for review (``REVIEW_AMOUNT_ABOVE=1``): ``tpch-1`` is approved from the console,
``tpch-3`` suspended and resumed (once against a stale ETag), ``tpch-32`` stopped by an operator whose
name and reason are markup, and ``tpch-2`` is left waiting: the stuck order. Screenshots go to
``.test-artifacts/``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devhost.local_issuer import local_object_id
from orderflow.operator_actions import NOT_SUSPENDED, RESUBMITTABLE_STATES, OperatorAction, action_refusal
from orderflow.protocol.state_machine import SETTLED_STATES
from orderflow.records import ProcessState
from tests.browser.helpers import Console, confirm, open_order, running_console, shoot

pytestmark = pytest.mark.browser

ORDERS = ["tpch-1", "tpch-2", "tpch-3", "tpch-32"]


@pytest.fixture(scope="module")
def console() -> Iterator[Console]:
    with running_console(REVIEW_AMOUNT_ABOVE=1.0, REVIEW_TIMEOUT_S=300) as console:
        system = console.system
        system.submit_all(ORDERS)
        system.wait_until(
            lambda: all(system.record(o).process_state is ProcessState.AWAITING_REVIEW for o in ORDERS),
            timeout_s=30,
        )
        yield console


def test_sign_in_find_the_stuck_order_read_its_timeline_and_approve_it(
    page: Any, console: Console, artifacts: Path
) -> None:
    system = console.system
    key = system.key("tpch-1")
    assert page.inner_text("[data-testid=signed-in-as]") == "ana"

    # Paused for review and not written since: stuck, once a second has passed.
    def stuck_keys() -> set[str]:
        return {o["orderId"] for o in console.api("GET", "orders?stuckFor=1").json()["orders"]}

    system.wait_until(lambda: key in stuck_keys(), timeout_s=10)
    page.goto(f"{console.url}#/?stuckFor=1")
    stuck = page.locator("[data-testid=stuck-orders]")
    stuck.locator(f"a:text-is('{key}')").wait_for()
    awaiting = page.locator("[data-testid=chart-states] [data-label=AwaitingReview]")
    listed = console.api("GET", "orders?state=AwaitingReview").json()["orders"]
    assert int(awaiting.get_attribute("data-value")) == len(listed) >= 1
    shoot(page, artifacts, "dashboard")

    stuck.locator(f"a:text-is('{key}')").click()
    page.wait_for_selector("[data-testid=timeline] tbody tr")
    assert page.inner_text("[data-testid=order-key]") == key
    assert page.inner_text("[data-testid=process-state]") == "AwaitingReview"
    entries = console.api("GET", f"orders/{key}/timeline").json()["entries"]
    shown = page.locator("[data-testid=timeline] tbody tr td:first-child").all_inner_texts()
    assert shown == [str(entry["seq"]) for entry in entries]
    assert "AwaitingReview" in page.locator("[data-testid=timeline] tbody tr").last.inner_text()
    shoot(page, artifacts, "order-awaiting-review")

    confirm(page, "reject", accept=False)  # cancelled at the confirmation: nothing is sent
    review = system.record("tpch-1").review
    assert review is not None and review.decision is None

    confirm(page, "approve")
    page.wait_for_selector("#notice:text('Approve: approve.')")
    system.wait_until(lambda: system.record("tpch-1").process_state is ProcessState.PROCESSED, timeout_s=30)
    page.click("#reload")
    page.wait_for_selector("[data-testid=process-state]:text-is('Processed')")
    record = system.record("tpch-1")
    assert record.review is not None
    assert (record.review.decision, record.review.decided_by_name) == ("approve", "ana")
    assert record.review.decided_by == f"{console.issuer.tenant_id}/{local_object_id('ana')}"
    assert "Processed" in page.locator("[data-testid=replies]").inner_text()
    shoot(page, artifacts, "order-processed")


def test_suspend_against_a_stale_etag_is_refused_then_suspend_and_resume(
    page: Any, console: Console, artifacts: Path
) -> None:
    system = console.system
    key = open_order(page, console, "tpch-3")
    seen = page.inner_text("[data-testid=etag]")
    # Another operator suspends and resumes it behind this page's back: the same state, a new ETag.
    for action in ("suspend", "resume"):
        assert console.api("POST", f"orders/{key}/{action}", name="otto").status_code == 200

    confirm(page, "suspend")
    page.wait_for_selector("#notice:text('PreconditionFailed')")
    assert system.record("tpch-3").suspended_at is None
    current = console.api("GET", f"orders/{key}").headers["ETag"]
    assert current != seen
    page.wait_for_selector(f"[data-testid=etag]:text-is('{current}')")  # shown again, at its current version

    confirm(page, "suspend")
    page.wait_for_selector("[data-testid=suspended]:text('by ana')")
    assert system.record("tpch-3").suspended_by_name == "ana"
    shoot(page, artifacts, "order-suspended")

    confirm(page, "resume")
    page.wait_for_selector("[data-testid=suspended]:text-is('no')")
    record = system.record("tpch-3")
    assert (record.suspended_at, record.process_state) == (None, ProcessState.AWAITING_REVIEW)
    actions = [e["action"] for e in console.api("GET", f"orders/{key}/timeline").json()["entries"]]
    assert actions[-4:] == ["suspend", "resume", "suspend", "resume"]


MARKUP_NAME = '<img src=x onerror="window.pwned=1">'
MARKUP_REASON = '<script>window.pwned=2</script><b id="bold">dispute</b><img src=x onerror="window.pwned=3">'


def test_a_reason_and_a_name_that_are_markup_are_shown_as_text(
    page: Any, console: Console, artifacts: Path
) -> None:
    system = console.system
    key = system.key("tpch-32")
    stopped = console.api(
        "POST", f"orders/{key}/compensate", name=MARKUP_NAME, json={"reason": MARKUP_REASON}
    )
    assert stopped.status_code == 202

    open_order(page, console, "tpch-32")
    page.wait_for_selector("[data-testid=timeline] tbody tr")

    assert page.inner_text("[data-testid=stop-reason]") == MARKUP_REASON
    assert MARKUP_NAME in page.locator("[data-testid=timeline]").inner_text()
    assert page.locator("main img, main script, #bold").count() == 0
    assert page.evaluate("window.pwned") is None
    assert system.record("tpch-32").stop_reason == MARKUP_REASON
    shoot(page, artifacts, "order-markup-as-text")
    # Its owner waits for a review, so the supervisor compensates it once CLAIM_TIMEOUT_S has passed:
    # settled here, or it would leave AwaitingReview under the next test's bulk action.
    system.wait_until(
        lambda: system.record("tpch-32").process_state is ProcessState.COMPENSATED, timeout_s=30
    )


def test_the_alerts_page_lists_an_alert_the_system_raised_and_the_supervisor_page_its_sweeps(
    page: Any, console: Console, artifacts: Path
) -> None:
    system = console.system
    key = system.key("tpch-2")
    # The same order id with other content: intake dead-letters it and raises conflicting_order.
    [order] = [o for o in system.catalog.orders if o.order_id == "tpch-2"]
    # Sent twice with other content each time: one stored alert, counted twice.
    conflicting = order.to_submission(system.client.reply_queue)
    conflicting["customerName"] = "<b>someone else</b>"
    system.client.send_raw(json.dumps(conflicting), message_id="tpch-2:conflict-1")
    conflicting["customerName"] = "<b>someone else again</b>"
    system.client.send_raw(json.dumps(conflicting), message_id="tpch-2:conflict-2")

    def raised() -> list[dict[str, Any]]:
        alerts: list[dict[str, Any]] = console.api("GET", "alerts?kind=conflicting_order").json()["alerts"]
        return [a for a in alerts if a["orderId"] == key]

    system.wait_until(lambda: [a["count"] for a in raised()] == [2], timeout_s=15)
    page.goto(f"{console.url}#/alerts")
    listed = page.locator("[data-testid=alerts] tbody tr", has=page.locator(f"a:text-is('{key}')"))
    listed.wait_for()
    row = listed.inner_text()
    assert "conflicting_order" in row and raised()[0]["suggestedAction"] in row
    assert listed.locator("[data-testid=alert-count]").inner_text() == "2"
    shoot(page, artifacts, "alerts")

    system.wait_until(lambda: console.api("GET", "supervisor").json()["leader"] is not None, timeout_s=15)
    page.goto(f"{console.url}#/supervisor")
    page.wait_for_selector("[data-testid=sweeps] tbody tr")
    status = console.api("GET", "supervisor").json()
    assert page.inner_text("[data-testid=leader]") == f"{status['leader']} (lease)"
    assert status["leader"] == system.deps.settings.queues.HOST_ID
    shoot(page, artifacts, "supervisor")


def test_a_bulk_suspend_lists_first_refuses_an_order_changed_since_and_does_the_rest(
    page: Any, console: Console, artifacts: Path
) -> None:
    system = console.system
    waiting = [o["orderId"] for o in console.api("GET", "orders?state=AwaitingReview").json()["orders"]]
    assert len(waiting) >= 2
    etags = {key: console.api("GET", f"orders/{key}").headers["ETag"] for key in waiting}
    page.goto(f"{console.url}#/orders?state=AwaitingReview")
    page.wait_for_selector("[data-action=bulk-suspend]")

    confirm(page, "bulk-suspend", accept=False)  # the dry-run list, cancelled: nothing is sent
    assert {key: console.api("GET", f"orders/{key}").headers["ETag"] for key in waiting} == etags

    page.click("[data-action=bulk-suspend]")
    page.wait_for_selector("#confirm[open]")
    plan = page.locator("[data-testid=bulk-plan] tbody tr").all_inner_texts()
    assert [row.split("\t")[0] for row in plan] == waiting
    assert all(row.split("\t")[-1] == "act" for row in plan)
    shoot(page, artifacts, "orders-bulk-dry-run")
    changed = waiting[0]  # another operator acts on it while the list is on screen: a new version
    for action in ("suspend", "resume"):
        assert console.api("POST", f"orders/{changed}/{action}", name="otto").status_code == 200
    page.click("#confirm-ok")

    counts = page.locator("[data-testid=bulk-counts]")
    counts.wait_for()
    assert counts.inner_text() == f"done {len(waiting) - 1}, refused 1, failed 0, not sent 0, skipped 0"
    problems = page.locator("[data-testid=bulk-problems] tbody tr").all_inner_texts()
    assert len(problems) == 1 and problems[0].split("\t")[:4] == [
        changed,
        "refused",
        "412",
        "PreconditionFailed",
    ]
    records = {key: system.deps.states.get(key).item for key in waiting}
    assert records[changed].suspended_at is None
    assert {records[key].suspended_by_name for key in waiting[1:]} == {"ana"}
    shoot(page, artifacts, "orders-bulk-summary")

    confirm(page, "bulk-resume")  # the page listed again after the run: resume what was suspended
    resumed = f"done {len(waiting) - 1}, refused 0, failed 0, not sent 0, skipped 1"
    page.wait_for_selector(f"[data-testid=bulk-counts]:text-is('{resumed}')")
    assert all(system.deps.states.get(key).item.suspended_at is None for key in waiting)


def test_the_consoles_bulk_skip_rule_is_the_apis(page: Any) -> None:
    """bulk.js restates :func:`orderflow.operator_actions.action_refusal` for listed orders: the same code
    for every action, state and suspension, or the console would send what the API refuses (or skip what it
    would do)."""
    combos = [
        (action.value, state.value, suspended)
        for action in OperatorAction
        for state in ProcessState
        for suspended in (False, True)
    ]

    in_browser = page.evaluate(
        """async (combos) => {
            const { refusal } = await import("./bulk.js");
            return combos.map(([action, processState, suspended]) => {
                const refused = refusal(action, { processState, suspended });
                return refused ? refused.code : null;
            });
        }""",
        combos,
    )

    expected = []
    for action, state, suspended in combos:
        refused = action_refusal(OperatorAction(action), ProcessState(state), suspended=suspended)
        expected.append(None if refused is None else refused.code)
    assert in_browser == expected
    assert None in expected and NOT_SUSPENDED in expected  # both outcomes are compared


def test_the_console_knows_every_state_and_which_are_settled(page: Any) -> None:
    known = page.evaluate(
        """async () => {
            const { STATES, SETTLED, FAILED } = await import("./states.js");
            return [STATES, [...SETTLED], [...FAILED]];
        }"""
    )

    states, settled, failed = known
    assert sorted(states) == sorted(state.value for state in ProcessState)
    assert sorted(settled) == sorted(state.value for state in SETTLED_STATES)
    assert sorted(failed) == sorted(state.value for state in RESUBMITTABLE_STATES)


def test_an_unknown_state_in_the_address_is_said_not_silently_dropped(page: Any, console: Console) -> None:
    page.goto(f"{console.url}#/orders?state=Bogus<b>")
    page.wait_for_selector("[data-testid=orders-count]")

    notice = page.locator("#notice")
    assert notice.is_visible()
    assert notice.text_content() == 'No state is called "Bogus<b>": every order is listed.'
    assert page.locator("[data-action=bulk-suspend]").count() == 0  # no bulk action on every order


def test_a_page_left_before_it_loaded_never_replaces_the_page_opened_after_it(
    page: Any, console: Console
) -> None:
    # The dashboard's activity request is held, so the dashboard is still loading when the operator
    # moves on to the orders; its answer then arrives after the orders page has rendered.
    held: list[Any] = []

    def hold(route: Any) -> None:  # Playwright takes a Python function, not a bound builtin
        held.append(route)

    page.goto(f"{console.url}#/supervisor")  # away from the dashboard sign-in lands on, so it loads anew
    page.wait_for_selector("h1:text-is('Supervisor')")
    page.route("**/activity?*", hold)
    page.goto(f"{console.url}#/")
    page.wait_for_selector("text=Loading orders…")
    while not held:
        page.wait_for_timeout(20)
    page.goto(f"{console.url}#/orders")
    page.wait_for_selector("[data-testid=orders-count]")

    with page.expect_response("**/activity?*"):
        held[0].continue_()
    page.evaluate("() => new Promise((done) => setTimeout(done, 200))")  # the dashboard's render runs

    assert page.locator("[data-testid=orders-count]").is_visible()
    assert page.locator("[data-testid=order-count]").count() == 0  # the dashboard's summary
    assert page.locator("h1").all_text_contents() == ["Orders"]
