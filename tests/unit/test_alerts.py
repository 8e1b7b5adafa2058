"""Stored alerts and the supervisor's status: the table of kinds against the code and the docs, the sink,
the in-memory alerts store, and the two API routes (``GET /alerts``, ``GET /supervisor``)."""

from __future__ import annotations

import ast
import importlib
import json
import logging
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner, Result

from operator_api.answers import OperatorResponse
from operator_api.handler import handle_operator_request
from operator_api.routing import OperatorApiSections
from orderflow import telemetry
from orderflow.alert_sink import AlertSink
from orderflow.alerts import (
    ALERT_KINDS,
    ALERT_TTL_S,
    NOT_ALERTS,
    SWEEP_KIND,
    SWEEP_TTL_S,
    AlertDoc,
    alert_doc,
    counted,
    counted_alert_id,
    counted_source,
    window_start,
)
from orderflow.clock import FakeClock
from orderflow.consumer import Settlement, settle
from orderflow.errors import InvalidContinuation, TransientError
from orderflow.operator_auth import OPERATOR_ROLE, REVIEWER_ROLE
from orderflow.queues.base import ReceivedMessage
from orderflow.queues.memory import InMemoryQueueFactory
from orderflow.stores.base import AlertQuery
from orderflow.stores.memory import InMemoryAlertStore
from orderflow_client import cli, cli_common
from orderflow_client.operator_client import OperatorApiClient
from supervisor.status import record_sweep, sweep_doc
from supervisor.sweep import SweepReport
from tests.host_deps import HostDeps
from tests.operator_tokens import TrustedIssuer
from tests.unit.fakes import memory_deps

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("orderflow", "intake", "orchestrators", "activities", "agents", "supervisor", "operator_api")


def raised_kinds() -> set[str]:
    """The first argument of every ``telemetry.alert(...)`` in the app's source, resolved to its value."""
    kinds: set[str] = set()
    for top in SOURCES:
        for path in (REPO / top).rglob("*.py"):
            module = ".".join(path.relative_to(REPO).with_suffix("").parts)
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                called = node.func if isinstance(node, ast.Call) else None
                if not (isinstance(called, ast.Attribute) and called.attr == "alert"):
                    continue
                if not (isinstance(called.value, ast.Name) and called.value.id == "telemetry"):
                    continue
                assert isinstance(node, ast.Call)
                first = node.args[0]
                if isinstance(first, ast.Constant):
                    kinds.add(str(first.value))
                else:
                    assert isinstance(first, ast.Name), f"{module}: an alert name is a literal or a constant"
                    kinds.add(str(getattr(importlib.import_module(module), first.id)))
    return kinds


def documented_kinds() -> set[str]:
    """The kinds of docs/operations.md's table under "When an alert fires"."""
    text = (REPO / "docs" / "operations.md").read_text(encoding="utf-8")
    section = text.split("## When an alert fires", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `(\w+)` \|", section, flags=re.M))


def test_every_kind_raised_is_in_the_table_and_the_docs_name_the_same_kinds() -> None:
    raised = raised_kinds()
    assert {"order_gave_up", "past_point_of_no_return", "max_delivery_count", "clock_skew"} <= raised
    assert raised <= set(ALERT_KINDS), "a new alert kind needs its suggested action in orderflow.alerts"
    assert documented_kinds() == set(ALERT_KINDS)
    assert SWEEP_KIND not in ALERT_KINDS


def test_an_alert_document_carries_the_order_the_cause_and_the_suggested_action() -> None:
    clock = FakeClock()
    fields = {"order_id": "a:o-1", "instance_id": "a:o-1:2", "step": "charge", "reason": "too_many_failures"}

    doc = alert_doc("order_gave_up", {**fields, "attempt": 2, "note": None}, at=clock.now(), host="h1")

    assert (doc.kind, doc.order_id, doc.instance_id, doc.host) == ("order_gave_up", "a:o-1", "a:o-1:2", "h1")
    assert doc.cause == f"{ALERT_KINDS['order_gave_up'].summary} (reason=too_many_failures step=charge)"
    assert doc.suggested_action == ALERT_KINDS["order_gave_up"].action
    assert doc.details == {"step": "charge", "reason": "too_many_failures", "attempt": 2}
    assert doc.day == clock.now().date().isoformat()


def test_counting_windows_start_at_utc_midnight_and_never_span_two_days() -> None:
    noon = datetime(2026, 3, 1, 12, 34, 56, tzinfo=UTC)
    assert window_start(noon, 3600) == datetime(2026, 3, 1, 12, tzinfo=UTC)
    assert window_start(noon, 86_400) == datetime(2026, 3, 1, tzinfo=UTC)
    # 7 hours does not divide a day: the day's last window is shorter, the next day starts anew.
    late = datetime(2026, 3, 1, 23, 59, tzinfo=UTC)
    assert window_start(late, 7 * 3600) == datetime(2026, 3, 1, 21, tzinfo=UTC)
    assert window_start(late + timedelta(minutes=2), 7 * 3600) == datetime(2026, 3, 2, tzinfo=UTC)
    for bad in (0, 86_401):
        with pytest.raises(ValueError):
            window_start(noon, bad)
    with pytest.raises(ValueError):
        AlertSink(InMemoryAlertStore(), FakeClock(), "h1", window_s=0)


def test_only_the_kinds_raised_over_and_over_are_counted_and_only_by_the_field_that_names_the_cause() -> None:
    assert counted_source("conflicting_order", {"order_id": "a:o-1", "client_id": "a"}) == "a"
    assert counted_source("max_delivery_count", {"queue": "orders-a", "message_id": "m"}) == "orders-a"
    assert counted_source("scan_anomaly", {"loop": "sweep", "reason": "empty_pages"}) == "empty_pages"
    wait = {"order_id": "a:o-1", "step": "ship", "dependency": "shipping"}
    assert counted_source("dependency_wait_exhausted", wait) == "shipping"
    assert counted_source("conflicting_order", {"order_id": "a:o-1"}) is None
    assert counted_source("order_gave_up", {"order_id": "a:o-1", "client_id": "a"}) is None
    counted_kinds = {kind for kind, known in ALERT_KINDS.items() if known.counted_by}
    assert counted_kinds == {
        "conflicting_order",
        "max_delivery_count",
        "scan_anomaly",
        "service_auth_refused",
        "dependency_wait_exhausted",
    }


def test_a_counted_alert_adds_counts_keeps_the_first_time_and_the_latest_fields() -> None:
    at = datetime(2026, 3, 1, 12, tzinfo=UTC)
    alert_id = counted_alert_id("conflicting_order", "a", window_start(at, 3600))
    assert alert_id == counted_alert_id("conflicting_order", "a", at)  # deterministic: every writer's
    assert alert_id != counted_alert_id("conflicting_order", "b", at)

    def raised(order: str, seconds: int) -> AlertDoc:
        fields = {"order_id": order, "client_id": "a"}
        doc = alert_doc("conflicting_order", fields, at=at + timedelta(seconds=seconds), host="h1")
        return doc.model_copy(update={"id": alert_id})

    first = counted(None, raised("a:o-1", 10))
    later = counted(first, raised("a:o-2", 20))
    late_arrival = counted(later, raised("a:o-3", 5))  # raised earlier, written last
    assert (late_arrival.count, late_arrival.order_id, late_arrival.id) == (3, "a:o-2", alert_id)
    assert (late_arrival.first_seen, late_arrival.at) == (
        at + timedelta(seconds=5),
        at + timedelta(seconds=20),
    )
    with pytest.raises(ValueError):
        counted(first, raised("a:o-1", 30).model_copy(update={"id": "another"}))
    # A stored alert without a count reads as raised once, first at its time.
    stored = alert_doc("order_gave_up", {"order_id": "a:o-1"}, at=at, host="h").to_json_dict()
    del stored["count"], stored["firstSeen"]
    assert (AlertDoc.from_stored(stored).count, AlertDoc.from_stored(stored).first_seen) == (1, at)


def test_orders_given_up_while_one_dependency_is_down_are_one_counted_alert_per_window() -> None:
    # A client sending many orders while shipping is down must not push every other alert off the page.
    clock = FakeClock(datetime(2026, 3, 1, 12, tzinfo=UTC))
    store = InMemoryAlertStore(clock=clock)
    previous = telemetry.use_alert_sink(AlertSink(store, clock, "h1", window_s=3600))
    try:
        for n in range(40):
            telemetry.alert(
                "dependency_wait_exhausted", order_id=f"a:o-{n}", step="ship", dependency="shipping"
            )
            clock.advance(1)
        telemetry.alert("dependency_wait_exhausted", order_id="a:p-1", step="pay", dependency="payment")
    finally:
        telemetry.use_alert_sink(previous)
    stored = store.list_documents(AlertQuery(kind="dependency_wait_exhausted"), max_item_count=10).items
    assert sorted((d["details"]["dependency"], d["count"], d["orderId"]) for d in stored) == [
        ("payment", 1, "a:p-1"),
        ("shipping", 40, "a:o-39"),
    ]


def test_messages_failing_every_delivery_are_counted_per_queue_they_arrived_on() -> None:
    # A client's message that crashes its handler each time: max_delivery_count, counted by the queue.
    clock = FakeClock(datetime(2026, 3, 1, 12, tzinfo=UTC))
    store = InMemoryAlertStore(clock=clock)
    queues = InMemoryQueueFactory()

    def crash(message: ReceivedMessage) -> None:
        raise RuntimeError("the handler crashed")

    previous = telemetry.use_alert_sink(AlertSink(store, clock, "h1", window_s=3600))
    try:
        for name, sent in (("orders-a", 30), ("orders-b", 1)):
            queue = queues.queue(name)
            for n in range(sent):
                queue.send(f"body {n}", message_id=f"m-{n}")
            for message in queue.receive(max_messages=32):
                assert settle(queue, message, crash, max_delivery_count=1) is Settlement.DEAD_LETTERED
    finally:
        telemetry.use_alert_sink(previous)

    listed = store.list_documents(AlertQuery(kind="max_delivery_count"), max_item_count=10).items
    assert sorted((d["details"]["queue"], d["count"]) for d in listed) == [("orders-a", 30), ("orders-b", 1)]


class FailingAlerts(InMemoryAlertStore):
    def add(self, doc: Any) -> None:
        raise TransientError("the store is down")

    def get_alert(self, alert_id: str, *, day: str) -> Any:
        raise TransientError("the store is down")


def test_the_sink_keeps_what_telemetry_raises_and_a_failed_write_fails_nobody(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    store = InMemoryAlertStore(clock=clock)
    previous = telemetry.use_alert_sink(AlertSink(store, clock, "h1", window_s=3600))
    try:
        telemetry.alert("conflicting_order", order_id="a:o-7", client_id="a")
        telemetry.use_alert_sink(AlertSink(FailingAlerts(), clock, "h1", window_s=3600))
        with caplog.at_level(logging.WARNING, logger="orderflow.alert_sink"):
            telemetry.alert("max_delivery_count", queue="orders-a", message_id="m-1")  # does not raise
    finally:
        telemetry.use_alert_sink(previous)
    [kept] = store.list_documents(AlertQuery(), max_item_count=10).items
    assert (kept["kind"], kept["orderId"], kept["details"]) == (
        "conflicting_order",
        "a:o-7",
        {"client_id": "a"},
    )
    assert "alert max_delivery_count not kept in the alerts store: TransientError" in caplog.text


def test_the_memory_store_lists_newest_first_filters_pages_and_expires() -> None:
    clock = FakeClock()
    store = InMemoryAlertStore(clock=clock)
    first = clock.now()
    for minute, kind in enumerate(["order_gave_up", "breaker_open", "order_gave_up"]):
        store.add(
            alert_doc(kind, {"order_id": f"a:o-{minute}"}, at=first + timedelta(minutes=minute), host="h")
        )
    store.add(sweep_doc(SweepReport(), started=first, ended=first, host_id="h", leadership="lease"))

    alerts = AlertQuery(exclude_kinds=NOT_ALERTS)
    page = store.list_documents(alerts, max_item_count=2)
    rest = store.list_documents(alerts, max_item_count=2, continuation=page.continuation)
    assert [d["orderId"] for d in page.items + rest.items] == ["a:o-2", "a:o-1", "a:o-0"]
    assert rest.continuation is None
    gave_up = store.list_documents(
        AlertQuery(kind="order_gave_up", since=first + timedelta(minutes=1)), max_item_count=9
    )
    assert [d["orderId"] for d in gave_up.items] == ["a:o-2"]
    with pytest.raises(InvalidContinuation):
        store.list_documents(
            AlertQuery(kind="breaker_open"), max_item_count=2, continuation=page.continuation
        )

    clock.advance(SWEEP_TTL_S + 1)  # the sweep's own time-to-live is over, the alerts' is not
    assert store.list_documents(AlertQuery(kind=SWEEP_KIND), max_item_count=9).items == []
    assert len(store.list_documents(alerts, max_item_count=9).items) == 3
    clock.advance(ALERT_TTL_S)
    assert store.list_documents(alerts, max_item_count=9).items == []


def get(deps: HostDeps, trusted: TrustedIssuer, path: str, *roles: str) -> OperatorResponse:
    bare, _, query = path.partition("?")
    headers = trusted.bearer("ana", *roles)
    return handle_operator_request(
        "GET",
        bare,
        headers,
        b"",
        deps=deps,
        sections=OperatorApiSections.of(deps.settings),
        validator=trusted.validator,
        query=query,
    )


def test_the_alerts_route_lists_the_alerts_raised_for_either_role(trusted: TrustedIssuer) -> None:
    clock = FakeClock()
    deps = memory_deps(clock)
    assert deps.alerts is not None
    previous = telemetry.use_alert_sink(AlertSink(deps.alerts, deps.clock, "h1", window_s=3600))
    try:
        telemetry.alert("order_gave_up", order_id="a:o-1", instance_id="a:o-1:1", reason="too_many_failures")
        clock.advance(1)
        telemetry.alert("breaker_open", dependency="payment")
    finally:
        telemetry.use_alert_sink(previous)
    record_sweep(
        deps.alerts,
        sweep_doc(
            SweepReport(), started=deps.clock.now(), ended=deps.clock.now(), host_id="h1", leadership="lease"
        ),
    )

    listed = get(deps, trusted, "/api/operator/alerts", REVIEWER_ROLE)
    assert listed.status == 200
    assert [(a["kind"], a["orderId"]) for a in listed.body["alerts"]] == [
        ("breaker_open", None),
        ("order_gave_up", "a:o-1"),
    ]
    assert listed.body["alerts"][1]["suggestedAction"] == ALERT_KINDS["order_gave_up"].action
    assert listed.body["alerts"][1]["instanceId"] == "a:o-1:1"

    one = get(deps, trusted, "/api/operator/alerts?kind=order_gave_up&limit=1", OPERATOR_ROLE)
    assert [a["kind"] for a in one.body["alerts"]] == ["order_gave_up"] and one.body["continuation"] is None
    assert get(deps, trusted, "/api/operator/alerts?kind=supervisor_sweep", OPERATOR_ROLE).status == 400
    assert get(deps, trusted, "/api/operator/alerts?since=yesterday", OPERATOR_ROLE).status == 400
    assert get(deps, trusted, "/api/operator/alerts?state=Error", OPERATOR_ROLE).status == 400
    assert get(deps, trusted, "/api/operator/alerts").status == 403
    bare = memory_deps(FakeClock())
    bare.alerts = None
    assert get(bare, trusted, "/api/operator/alerts", OPERATOR_ROLE).status == 503


def test_the_supervisor_route_names_the_leader_while_its_last_sweep_is_fresh(trusted: TrustedIssuer) -> None:
    clock = FakeClock()
    deps = memory_deps(clock)
    assert deps.alerts is not None
    empty = get(deps, trusted, "/api/operator/supervisor", OPERATOR_ROLE).body
    assert (empty["leader"], empty["leadership"], empty["sweeps"]) == (None, None, [])

    report = SweepReport(scanned=4, requeued=["a:o-1"], gave_up=["a:o-2"], held=["a:o-3"], skipped=1)
    for host in ("h1", "h2"):
        clock.advance(2)
        now = deps.clock.now()
        assert record_sweep(
            deps.alerts,
            sweep_doc(
                report, started=now - timedelta(seconds=1), ended=now, host_id=host, leadership="lease"
            ),
        )
    status = get(deps, trusted, "/api/operator/supervisor", REVIEWER_ROLE).body
    assert (status["leader"], status["leadership"], status["stuckOrders"]) == ("h2", "lease", 3)
    assert [s["host"] for s in status["sweeps"]] == ["h2", "h1"]
    assert {k: status["sweeps"][0][k] for k in ("scanned", "recovered", "gaveUp", "held", "durationS")} == {
        "scanned": 4,
        "recovered": 1,
        "gaveUp": 1,
        "held": 1,
        "durationS": 1.0,
    }

    clock.advance(301)  # no sweep since: nobody is known to lead, and the gauge is silent
    stale = get(deps, trusted, "/api/operator/supervisor?limit=1", OPERATOR_ROLE).body
    assert (stale["leader"], stale["stuckOrders"], len(stale["sweeps"])) == (None, None, 1)

    now = deps.clock.now()
    record_sweep(
        deps.alerts, sweep_doc(report, started=now, ended=now, host_id="worker-7", leadership="timer")
    )
    timer = get(deps, trusted, "/api/operator/supervisor", OPERATOR_ROLE).body
    assert (timer["leader"], timer["leadership"]) == ("worker-7", "timer (singleton)")


def test_a_sweep_status_write_that_fails_is_logged_and_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    doc = sweep_doc(SweepReport(), started=clock.now(), ended=clock.now(), host_id="h1", leadership="lease")
    with caplog.at_level(logging.WARNING, logger="supervisor.status"):
        assert record_sweep(FailingAlerts(), doc) is False
    assert record_sweep(None, doc) is False
    assert "sweep status of h1 not written: TransientError" in caplog.text
    assert json.loads(doc.model_dump_json(by_alias=True))["ttl"] == SWEEP_TTL_S


@pytest.fixture
def cli_api(trusted: TrustedIssuer, monkeypatch: pytest.MonkeyPatch) -> HostDeps:
    """The operator API behind the CLI (in process), over the in-memory stores."""
    deps = memory_deps(FakeClock())

    def serve(request: httpx.Request) -> httpx.Response:
        answer = handle_operator_request(
            request.method,
            request.url.path,
            dict(request.headers),
            request.content,
            deps=deps,
            sections=OperatorApiSections.of(deps.settings),
            validator=trusted.validator,
            query=request.url.query.decode(),
        )
        return httpx.Response(answer.status, headers=answer.all_headers(), content=answer.content())

    def client(base_url: str, *, token: str, timeout_s: float) -> OperatorApiClient:
        return OperatorApiClient(
            base_url, token=token, timeout_s=timeout_s, transport=httpx.MockTransport(serve)
        )

    monkeypatch.setattr(cli_common, "OperatorApiClient", client)
    monkeypatch.setenv("ORDERFLOW_API_URL", "https://operator-api.test")
    monkeypatch.setenv("ORDERFLOW_TOKEN", trusted.issuer.mint(name="rita", roles=[REVIEWER_ROLE]))
    return deps


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli.app, list(args), env={"COLUMNS": "250"})


def test_orderflow_alerts_prints_a_table_of_the_stored_alerts(cli_api: HostDeps) -> None:
    assert cli_api.alerts is not None
    now = cli_api.clock.now()
    cli_api.alerts.add(
        alert_doc("poison_order", {"order_id": "a:o-4", "code": "[b]boom[/b]"}, at=now, host="h1")
    )
    cli_api.alerts.add(alert_doc("breaker_open", {"dependency": "payment"}, at=now, host="h1"))

    listed = invoke("alerts", "--kind", "poison_order")

    assert listed.exit_code == 0, listed.output
    assert (
        "a:o-4" in listed.output and "poison_order" in listed.output and "breaker_open" not in listed.output
    )
    assert "code=[b]boom[/b]" in listed.output  # shown as text, not as markup
    assert ALERT_KINDS["poison_order"].action[:40] in listed.output
    assert "│ 1 " in listed.output  # raised once

    counted_by_client = alert_doc(
        "conflicting_order", {"order_id": "a:o-5", "client_id": "a"}, at=now, host="h1"
    )
    first = now - timedelta(minutes=30)
    cli_api.alerts.add(counted_by_client.model_copy(update={"count": 200, "first_seen": first}))
    [row] = [line for line in invoke("alerts").output.splitlines() if "conflicting_order" in line]
    cells = [cell.strip() for cell in row.split("│")[1:4]]
    assert cells == [f"{now:%Y-%m-%dT%H:%M:%SZ}", "200", f"{first:%Y-%m-%dT%H:%M:%SZ}"]
    refused = invoke("alerts", "--kind", "no_such_kind")
    assert refused.exit_code == 2 and "InvalidValue" in refused.output


def test_orderflow_supervisor_status_prints_the_leader_and_the_sweeps(cli_api: HostDeps) -> None:
    assert invoke("supervisor", "status").output.startswith("no sweep recorded")
    now = cli_api.clock.now()
    report = SweepReport(scanned=7, requeued=["a:o-1", "a:o-2"], gave_up=["a:o-3"])
    record_sweep(cli_api.alerts, sweep_doc(report, started=now, ended=now, host_id="h9", leadership="lease"))

    shown = invoke("supervisor", "status")

    assert shown.exit_code == 0, shown.output
    assert "leader: h9 (lease); stuck orders: 7" in shown.output
    [row] = [line for line in shown.output.splitlines() if "h9" in line and "│" in line]
    assert [cell.strip() for cell in row.split("│")[3:7]] == ["7", "2", "1", "0"]
