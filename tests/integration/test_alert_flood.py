"""One client resending one order id with other content, many times, through the real intake: its
``conflicting_order`` alerts are counted into one stored alert per window (the next window starts another),
and the other clients' alerts stay in the newest page of the operator API's alert list. Runs on the
in-memory adapters and on the local emulators (cosmosdb-server, Azurite)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from devhost.settings import load_settings
from operator_api.alerts import DEFAULT_LIMIT
from operator_api.handler import handle_operator_request
from operator_api.routing import OperatorApiSections
from orderflow.clock import FakeClock
from orderflow.operator_auth import OPERATOR_ROLE
from tests.dev_host import dev_host
from tests.harness import FAST_SETTINGS
from tests.host_deps import HostDeps
from tests.operator_tokens import TrustedIssuer
from tests.unit.fakes import order_body

pytestmark = pytest.mark.integration

RESENDS = 200


@contextmanager
def intake(deps: HostDeps, clock: FakeClock, *client_ids: str) -> Iterator[HostDeps]:
    """A devhost running the submission role for ``client_ids`` (queues of their own) on ``clock``."""
    clients = [{"id": c, "replyQueue": f"replies-{c}"} for c in client_ids]
    settings, local = load_settings(
        {}, **{**FAST_SETTINGS, "CLIENTS": json.dumps(clients), "HOST_ID": client_ids[0]}
    )
    running = replace(deps, settings=settings, local=local, clock=clock)
    host = dev_host(running, ("submission",))
    host.start()
    try:
        yield running
    finally:
        host.stop()


def wait_until(predicate: Callable[[], bool], *, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def dead_letters(deps: HostDeps, queue: str) -> int:
    """How many dead letters ``queue`` holds (every page)."""
    assert deps.dead_letters is not None
    count, token = 0, None
    for _ in range(100):
        page = deps.dead_letters.dead_letter_page(queue, max_messages=32, continuation=token)
        count += len(page.items)
        token = page.continuation
        if token is None:
            break
    return count


def send(deps: HostDeps, client: str, body: str, message_id: str) -> None:
    deps.queues.queue(f"orders-{client}").send(body, message_id=message_id)


def listed(deps: HostDeps, trusted: TrustedIssuer, query: str = "") -> list[dict[str, Any]]:
    answer = handle_operator_request(
        "GET",
        "/api/operator/alerts",
        trusted.bearer("ana", OPERATOR_ROLE),
        b"",
        deps=deps,
        sections=OperatorApiSections.of(deps.settings),
        validator=trusted.validator,
        query=query,
    )
    assert answer.status == 200, answer.body
    alerts: list[dict[str, Any]] = answer.body["alerts"]
    return alerts


def test_one_client_resending_one_order_id_makes_one_counted_alert_and_hides_no_other(
    deps: HostDeps, trusted: TrustedIssuer
) -> None:
    run = uuid.uuid4().hex[:6]
    flooder, other = f"a{run}", f"b{run}"
    # A fixed time of today: every resend falls in one window (no window ends in the test's seconds).
    clock = FakeClock(datetime.now(UTC).replace(hour=12, minute=0, second=0, microsecond=0))
    with intake(deps, clock, flooder, other) as running:
        # The other client's alert comes first: the flood would be newer than it.
        send(running, other, order_body("o-9", reply_to=f"replies-{other}"), "o-9:1")
        send(running, other, order_body("o-9", reply_to=f"replies-{other}", amount="2.00"), "o-9:2")
        wait_until(lambda: dead_letters(running, f"orders-{other}") == 1)
        clock.advance(1)
        send(running, flooder, order_body("o-1", reply_to=f"replies-{flooder}"), "o-1:0")
        for n in range(1, RESENDS + 1):
            body = order_body("o-1", reply_to=f"replies-{flooder}", amount=f"{n}.00")
            send(running, flooder, body, f"o-1:{n}")
        wait_until(lambda: dead_letters(running, f"orders-{flooder}") == RESENDS, timeout_s=120)

        newest = listed(running, trusted)
        assert len(newest) <= DEFAULT_LIMIT
        by_client = {a["details"]["client_id"]: a for a in newest if a["kind"] == "conflicting_order"}
        assert sorted(by_client) == sorted([flooder, other]), "another client's alert left the newest page"
        flood = by_client[flooder]
        assert (flood["count"], flood["orderId"]) == (RESENDS, f"{flooder}:o-1")
        assert flood["firstSeen"] == flood["lastSeen"] == flood["at"]
        assert by_client[other]["count"] == 1

        # The next window starts a stored alert of its own.
        clock.advance(running.settings.alerts.ALERT_WINDOW_S)
        send(running, flooder, order_body("o-1", reply_to=f"replies-{flooder}", amount="0.01"), "o-1:next")
        wait_until(lambda: dead_letters(running, f"orders-{flooder}") == RESENDS + 1)
        later = listed(running, trusted, f"kind=conflicting_order&since={clock.now():%Y-%m-%dT%H:%M:%SZ}")

    [next_window] = later
    assert (next_window["count"], next_window["details"]["client_id"]) == (1, flooder)
    assert next_window["id"] != flood["id"] and next_window["firstSeen"] > flood["lastSeen"]
