"""The console over a client's hostile text (tests/hostile_text.py), in headless Chromium, against a real
devhost system with two registered clients.

The attacker holds only its own inbound queue. For each class of hostile text it sends a body that is
not JSON under that message id, and an order whose ``orderId``, ``customerName`` and ``carrier`` carry
it: the intake dead-letters both. It also sends an order whose ``customerName`` and ``carrier`` carry
the text under a valid order id: taken where the intake takes such text (markup), and then cancelled
with the text as the reason and sent again with other content (a counted ``conflicting_order`` alert);
dead-lettered where it refuses it. Its correlation ids carry the text, or name the other client's
order, as one body's order id does.

Each console page that shows this data (dead letters and each dead letter, orders and each order,
alerts, dashboard) renders with no script error, every API call it made answered 200 with JSON of the
shape the operator API's document gives, and the text is on the page as text: no element made of it,
markup literal, and every control, bidi and zero-width character shown as its escape (dom.js
``visible``, the CLI's rule). A replay from the console of a dead letter naming the other client's
order is not linked, and that order's record and timeline stay as they were.
"""

from __future__ import annotations

import json
import re
import sys
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from pydantic import ValidationError

from operator_api.routes import openapi_document
from orderflow.client_text import encodable, visible
from orderflow.messages import SubmitOrder
from orderflow.protocol.state_machine import SETTLED_STATES
from orderflow.records import ProcessState, TimelineEntry, order_key
from orderflow.replays import replay_message_id
from tests.browser.helpers import Console, confirm, running_console
from tests.hostile_text import HOSTILE, unsafe_characters

pytestmark = pytest.mark.browser

MARKUP = '<img src=x onerror="window.pwned=1"><script>window.pwned=2</script><b id=bold>x</b>'
"""HTML a page would run if it parsed client text as markup."""
CASES = {**HOSTILE, "html-markup": MARKUP}
"""Every class of hostile text, and HTML."""
REVIEW_ABOVE = 100_000_000
"""Orders above this amount pause for review (the attacker's do; the other client's order does not)."""
ATTACKER_AMOUNT = "900000000.00"
OTHER_ORDER = "tpch-1"
"""The other client's order, processed before the attacker sends anything."""


@dataclass
class Sent:
    """The running console and what the attacker sent."""

    console: Console
    other_key: str
    other_etag: str
    other_timeline: list[TimelineEntry]
    accepted: dict[str, str] = field(default_factory=dict)
    """Order key -> the hostile text its fields (and its cancel's reason) carry."""
    dead_letter_count: int = 0

    @property
    def inbound(self) -> str:
        return self.console.system.client.orders_queue


def order_with(console: Console, order_id: str, text: str) -> dict[str, Any]:
    """A submission of the attacker's whose customer name and carrier carry ``text``."""
    system = console.system
    [order] = [o for o in system.catalog.orders if o.order_id == OTHER_ORDER]
    body = order.to_submission(system.client.reply_queue)
    body.update(orderId=order_id, customerName=text, carrier=text[:32], amount=ATTACKER_AMOUNT)
    return body


def taken(body: dict[str, Any]) -> bool:
    """Whether the intake's message model takes ``body``."""
    try:
        SubmitOrder.model_validate(body)
    except ValidationError:
        return False
    return True


def stored_timeline(console: Console, key: str) -> list[TimelineEntry]:
    """The order's timeline as the store holds it: the history container's entries, then the record's."""
    states = console.system.deps.states
    chunks = states.history(key, max_item_count=100)
    assert chunks.continuation is None
    entries = [entry for chunk in chunks.items for entry in chunk.entries]
    last = max((entry.seq for entry in entries), default=0)
    return entries + [entry for entry in states.get(key).item.timeline if entry.seq > last]


def dead_letters(sent: Sent) -> list[dict[str, Any]]:
    """The attacker's inbound queue's dead letters, as the API lists them."""
    answer = sent.console.api("GET", f"deadletters/{sent.inbound}?limit=100")
    assert answer.status_code == 200, answer.text[:300]
    assert answer.json()["continuation"] is None
    found: list[dict[str, Any]] = answer.json()["deadLetters"]
    return found


def send_every_case(sent: Sent) -> None:
    """Everything the attacker sends, and the wait until the intake handled it all."""
    system = sent.console.system
    queue = system.deps.queues.queue(sent.inbound)
    for n, text in enumerate(CASES.values()):
        queue.send(text, message_id=text, correlation_id=sent.other_key)
        fields = order_with(sent.console, text, text)
        queue.send(json.dumps(fields, ensure_ascii=False), message_id=f"order {text}", correlation_id=text)
        body = order_with(sent.console, f"hostile-{n}", text)
        queue.send(
            json.dumps(body, ensure_ascii=False), message_id=f"fields {text}", correlation_id=sent.other_key
        )
        if taken(body):
            sent.accepted[system.key(f"hostile-{n}")] = text
        sent.dead_letter_count += 2 if taken(body) else 3
    # A body naming the other client's order (not an order id of this client's: refused).
    foreign = order_with(sent.console, sent.other_key, "someone")
    queue.send(json.dumps(foreign), message_id="foreign order", correlation_id=sent.other_key)
    sent.dead_letter_count += 1
    assert {"rich-markup", "html-markup"} <= {
        name for name, text in CASES.items() if text in sent.accepted.values()
    }

    def states() -> set[ProcessState]:
        return {system.deps.states.get(key).item.process_state for key in sent.accepted}

    system.wait_until(lambda: states() == {ProcessState.AWAITING_REVIEW}, timeout_s=30)
    for key, text in sent.accepted.items():
        order_id = key.partition(":")[2]
        system.client.cancel(order_id, reason=text)
        conflicting = {**order_with(sent.console, order_id, text), "customerName": "someone else"}
        system.client.send_raw(json.dumps(conflicting), message_id=f"{order_id}:conflict")
        sent.dead_letter_count += 1
    system.wait_until(lambda: states() <= SETTLED_STATES, timeout_s=30)
    system.wait_until(lambda: len(dead_letters(sent)) == sent.dead_letter_count, timeout_s=30)


@pytest.fixture(scope="module")
def sent() -> Iterator[Sent]:
    with running_console(more_clients=("other",), REVIEW_AMOUNT_ABOVE=REVIEW_ABOVE) as console:
        system = console.system
        other, other_client = system.other_client("other")
        [order] = [o for o in system.catalog.orders if o.order_id == OTHER_ORDER]
        other_client.submit(order.to_submission(other.reply_queue))
        other_key = order_key(other.client_id, OTHER_ORDER)
        states = system.deps.states
        system.wait_until(
            lambda: (
                states.get(other_key).item.process_state is ProcessState.PROCESSED
                and states.get(other_key).item.pending_reply is None
            ),
            timeout_s=30,
        )
        found = states.get(other_key)
        sent = Sent(console, other_key, found.etag, stored_timeline(console, other_key))
        send_every_case(sent)
        yield sent


@pytest.fixture
def console(sent: Sent) -> Console:
    return sent.console


# What every page must satisfy.


@cache
def documented_answers() -> list[tuple[re.Pattern[str], str, str, dict[str, Any]]]:
    """(path pattern, method, status, schema) of each JSON answer the operator API's document gives,
    literal paths first (``deadletters/{queue}/purge`` before ``deadletters/{queue}/{deadLetterId}``)."""
    document = openapi_document()
    found = []
    for path, operations in document["paths"].items():
        pattern = re.compile(re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(path)) + "$")
        for method, operation in operations.items():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            for status, answer in operation["responses"].items():
                schema = answer["content"]["application/json"]["schema"]
                found.append((pattern, method.upper(), status, {**document, **schema}))
    return sorted(found, key=lambda row: row[0].pattern.count("[^/]+"))


def schema_of(path: str, method: str, status: int) -> dict[str, Any]:
    for pattern, documented, answered, schema in documented_answers():
        if pattern.match(path) and documented == method and answered == str(status):
            return schema
    raise AssertionError(f"{method} {path} answered {status}: not in the document")


@dataclass
class Watched:
    """What a page did while watched: the operator API's answers, and its script errors."""

    answers: list[Any] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def take(self) -> tuple[list[Any], list[str]]:
        answers, errors = self.answers, self.errors
        self.answers, self.errors = [], []
        return answers, errors


def watch(page: Any) -> Watched:
    watched = Watched()

    def answered(response: Any) -> None:
        path = response.url.split("?")[0].split("#")[0]
        if "/api/operator/" in path and "/api/operator/console/" not in path:
            watched.answers.append(response)

    page.on("response", answered)
    page.on("pageerror", lambda exc: watched.errors.append(str(exc)))
    return watched


def assert_rendered_as_documented(page: Any, watched: Watched) -> int:
    """The page made API calls since last checked, each answered 200 with strict UTF-8 JSON of its
    documented shape, and raised no script error; its text holds no control, bidi or zero-width
    character, and nothing the text held became an element. The number of calls."""
    answers, errors = watched.take()
    assert errors == []
    assert answers
    for answer in answers:
        path = "/api/operator/" + answer.url.split("/api/operator/", 1)[1].split("?")[0]
        assert answer.status == 200, (answer.request.method, path, answer.status)
        assert answer.headers["content-type"].startswith("application/json")
        body = json.loads(answer.body().decode("utf-8"))
        Draft202012Validator(schema_of(path, answer.request.method, answer.status)).validate(body)
    assert unsafe_characters(page.evaluate("document.body.textContent")) == []
    assert page.locator("main img, main script, main iframe, #bold").count() == 0
    assert page.evaluate("window.pwned") is None
    return len(answers)


def shown(text: str) -> str:
    """What the console shows of a client's text: the API's text (a surrogate as U+FFFD) made visible."""
    return visible(encodable(text))


def cells(page: Any, test_id: str) -> list[list[str]]:
    """The text of each cell of each row of the table ``test_id``, as in the page (not as laid out)."""
    body = page.locator(f"[data-testid={test_id}] tbody tr")
    return [body.nth(i).locator("td").all_text_contents() for i in range(body.count())]


def shown_facts(page: Any) -> dict[str, str]:
    """The page's facts list: each name's value, as text."""
    names = page.locator(".facts dt").all_text_contents()
    return dict(zip(names, page.locator(".facts dd").all_text_contents(), strict=True))


def assert_other_order_untouched(sent: Sent) -> None:
    found = sent.console.system.deps.states.get(sent.other_key)
    assert found.etag == sent.other_etag
    assert stored_timeline(sent.console, sent.other_key) == sent.other_timeline


# The pages.


def test_the_dead_letters_page_lists_each_hostile_message_as_text(page: Any, sent: Sent) -> None:
    watched = watch(page)
    listed = {d["deadLetterId"]: d for d in dead_letters(sent)}
    page.goto(f"{sent.console.url}#/deadletters?queue={sent.inbound}")
    page.wait_for_selector(f"[data-testid=queue-name]:text-is('{sent.inbound}')")

    assert_rendered_as_documented(page, watched)
    rows = {row[0]: row for row in cells(page, "dead-letters")}
    assert len(rows) == len(listed) == sent.dead_letter_count
    for dead_id, dead in listed.items():
        assert rows[dead_id][1:3] == [dead["reason"], visible(dead["description"])]
        assert rows[dead_id][5] == visible(dead["messageId"])
    messages = {row[5] for row in rows.values()}
    for text in CASES.values():  # each class is listed (a long message id cut, as the queue keeps it)
        assert any(shown(text).startswith(m) and len(m) >= min(len(shown(text)), 200) for m in messages)
    assert "[bold red]all replayed OK[/bold red] [link=https://evil.example]x[/link] :skull:" in messages
    assert "\\x1b[2J\\x1b[3J\\x1b[Hall dead letters replayed OK" in messages
    assert "invoice-\\u202egnp.exe" in messages and MARKUP in messages
    assert_other_order_untouched(sent)


def test_each_dead_letters_page_shows_its_ids_and_body_as_text_and_links_no_other_clients_order(
    page: Any, sent: Sent
) -> None:
    watched = watch(page)
    own = f"{sent.console.system.deps.settings.queues.HOST_ID}:"
    for dead in dead_letters(sent):
        page.goto(f"{sent.console.url}#/deadletters/{sent.inbound}/{dead['deadLetterId']}")
        page.wait_for_selector(f"[data-testid=dead-letter-id]:text-is('{dead['deadLetterId']}')")
        page.wait_for_selector("[data-testid=dead-letter-body]")

        assert_rendered_as_documented(page, watched)
        facts = shown_facts(page)
        assert facts["message id"] == visible(dead["messageId"])
        assert facts.get("correlation id", "") == visible(dead["correlationId"] or "")
        assert facts["description"] == visible(dead["description"])
        assert page.text_content("[data-testid=dead-letter-body]") == visible(dead["body"])
        link = page.locator("[data-testid=dead-letter-order] a.order-link")
        if dead["orderId"] is None:
            assert (facts["order"], link.count()) == ("not linked", 0)
        else:  # a conflicting resend names the attacker's own order, which it is about
            assert dead["orderId"].startswith(own) and dead["orderId"] in sent.accepted
            assert (facts["order"], link.get_attribute("href")) == (
                dead["orderId"],
                f"#/orders/{dead['orderId'].replace(':', '%3A')}",
            )
    assert_other_order_untouched(sent)


def test_the_orders_and_each_hostile_orders_page_show_its_clients_text_as_text(page: Any, sent: Sent) -> None:
    watched = watch(page)
    page.goto(f"{sent.console.url}#/orders")
    page.wait_for_selector("[data-testid=orders] tbody tr")
    assert_rendered_as_documented(page, watched)
    listed = [row[0] for row in cells(page, "orders")]
    assert sorted(listed) == sorted([*sent.accepted, sent.other_key])

    for key, text in sent.accepted.items():
        page.goto(f"{sent.console.url}#/orders/{key}")
        page.wait_for_selector(f"[data-testid=order-key]:text-is('{key}')")
        page.wait_for_selector("[data-testid=timeline] tbody tr")
        assert_rendered_as_documented(page, watched)
        facts = shown_facts(page)
        record = sent.console.system.deps.states.get(key).item
        assert record.last_error is not None and record.last_error.message == text
        error = record.last_error
        at = f" at {error.step}" if error.step else ""
        assert facts["last error"] == f"{error.code or error.kind}{at}: {visible(text)}"
        assert [row[0] for row in cells(page, "timeline")] == [
            str(e.seq) for e in stored_timeline(sent.console, key)
        ]
    assert_other_order_untouched(sent)


def test_the_alerts_page_shows_the_clients_counted_alert(page: Any, sent: Sent) -> None:
    watched = watch(page)
    page.goto(f"{sent.console.url}#/alerts?kind=conflicting_order")
    page.wait_for_selector("[data-testid=alerts] tbody tr")

    assert_rendered_as_documented(page, watched)
    [alert] = sent.console.api("GET", "alerts?kind=conflicting_order").json()["alerts"]
    [row] = cells(page, "alerts")
    assert alert["count"] == len(sent.accepted)
    assert (row[1], row[3], row[4]) == (str(len(sent.accepted)), "conflicting_order", alert["orderId"])
    assert alert["orderId"] in sent.accepted


def test_the_dashboard_counts_the_clients_orders(page: Any, sent: Sent) -> None:
    watched = watch(page)
    page.goto(f"{sent.console.url}#/?stuckFor=3600")
    page.wait_for_selector("[data-testid=order-count]")
    page.wait_for_selector("[data-testid=activity]")

    assert assert_rendered_as_documented(page, watched) >= 3
    assert page.text_content("[data-testid=order-count]") == f"{len(sent.accepted) + 1} orders"


def test_a_replay_of_a_dead_letter_naming_another_clients_order_is_not_linked_and_leaves_it_as_it_was(
    page: Any, sent: Sent
) -> None:
    text = HOSTILE["bidi-override"]
    [dead] = [d for d in dead_letters(sent) if d["messageId"] == text]
    assert dead["correlationId"] == sent.other_key and dead["orderId"] is None
    watched = watch(page)
    page.goto(f"{sent.console.url}#/deadletters/{sent.inbound}/{dead['deadLetterId']}")
    page.wait_for_selector("[data-testid=dead-letter-body]")
    assert_rendered_as_documented(page, watched)
    assert page.text_content("[data-testid=dead-letter-order]") == "not linked"

    confirm(page, "replay", of=dead["deadLetterId"])
    said = page.locator("[data-testid=dead-letter-outcome]")
    said.locator("text=Not linked to an order").wait_for()
    assert_rendered_as_documented(page, watched)
    replayed = page.locator("[data-testid=replay-message-id]")
    assert replayed.evaluate("(e) => e.tagName") == "BDI"  # isolated: it cannot reorder the sentence
    again = replay_message_id(text, queue=sent.inbound, dead_letter_id=dead["deadLetterId"])
    assert replayed.text_content() == "invoice-\\u202egnp.exe" + again.removeprefix(text)
    assert said.locator("a.order-link").count() == 0
    # The intake dead-letters the replayed message again: only then has it done all it would.
    sent.console.system.wait_until(lambda: any(d["messageId"] == again for d in dead_letters(sent)))
    assert_other_order_untouched(sent)
    [entry] = [d for d in dead_letters(sent) if d["messageId"] == again]
    assert (entry["correlationId"], entry["orderId"]) == (sent.other_key, None)


# The rule itself.


def code_point_runs(keep: Callable[[str], bool]) -> list[tuple[int, int]]:
    """The runs ``(first, last)`` of consecutive code points whose character ``keep`` takes."""
    runs: list[tuple[int, int]] = []
    for code in range(sys.maxunicode + 1):
        if not keep(chr(code)):
            continue
        if runs and runs[-1][1] == code - 1:
            runs[-1] = (runs[-1][0], code)
        else:
            runs.append((code, code))
    return runs


VISIBLE_IN_BROWSER = """async ([texts, runs, samples]) => {
    const { visible } = await import("./dom.js");
    const escaped = [];
    for (const [first, last] of runs) {
        for (let code = first; code <= last; code += 1) {
            const char = String.fromCodePoint(code);
            const shown = visible(char);
            if (shown !== char) escaped.push([code, shown]);
        }
    }
    return [texts.map(visible), escaped, samples.map((code) => visible(String.fromCodePoint(code)))];
}"""


def test_the_consoles_visible_is_the_clis(page: Any) -> None:
    """dom.js ``visible`` restates :func:`orderflow.client_text.visible`: the same text for every hostile
    class, and the same escapes of the same characters over every code point Python's Unicode database
    assigns (but private use: a few of those, and of the unassigned ones, are compared). The browser's
    Unicode may be later and assign more."""
    texts = [encodable(text) for text in CASES.values()]
    runs = code_point_runs(lambda char: unicodedata.category(char) not in ("Cn", "Co"))
    samples = [0xE000, 0xF8FF, 0xF0000, 0x10FFFD, 0x0378, 0xFFFF, 0x10FFFF]

    shown_texts, escaped, shown_samples = page.evaluate(VISIBLE_IN_BROWSER, [texts, runs, samples])

    assert shown_texts == [visible(text) for text in texts]
    expected = [
        [code, visible(chr(code))]
        for first, last in runs
        for code in range(first, last + 1)
        if not chr(code).isprintable()
    ]
    assert escaped == expected
    assert shown_samples == [visible(chr(code)) for code in samples]
    assert {"\\x1b", "\\u202e", "\\u200b", "\\udc80", "\\n", "\\x85", "\\U000e0001"} <= {
        s for _, s in escaped
    }
