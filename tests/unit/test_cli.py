"""The ``orderflow`` command line over in-memory queues and stores (``connect_*`` are monkeypatched)."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from orderflow import cli
from orderflow.cli import app, generate_orders
from orderflow.errors import PermanentError, TransientError
from orderflow.messages import OrderStatus, StatusReply, SubmitOrder, parse_message, reply_message_id
from orderflow.queues.memory import InMemoryQueueFactory
from orderflow.records import (
    CompensationEntry,
    LastError,
    ProcessState,
    RetryBudget,
    StateRecord,
    StepState,
    StepStatus,
)
from orderflow.settings import Settings
from orderflow.stores.memory import InMemoryStateStore
from tests.unit.fakes import order_body, received

pytestmark = pytest.mark.unit

AT = datetime(2026, 1, 1, 12, tzinfo=UTC)


@dataclass
class FakeTime:
    """Stands in for the ``time`` module inside :mod:`orderflow.cli`: sleeping moves the clock."""

    now: float = 0.0
    slept: list[float] = field(default_factory=list)

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@dataclass
class FakeStores:
    """What :func:`orderflow.wiring.connect_stores` returns, as far as the CLI uses it."""

    state: InMemoryStateStore = field(default_factory=InMemoryStateStore)
    closed: bool = False

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def queues() -> InMemoryQueueFactory:
    now = [0.0]
    return InMemoryQueueFactory(clock=lambda: now[0])


@pytest.fixture
def connected(queues: InMemoryQueueFactory, monkeypatch: pytest.MonkeyPatch) -> list[Settings]:
    """Route ``connect_queues`` to the in-memory factory; returns the settings it was called with."""
    calls: list[Settings] = []

    def connect_queues(settings: Settings) -> InMemoryQueueFactory:
        calls.append(settings)
        return queues

    monkeypatch.setattr(cli, "connect_queues", connect_queues)
    return calls


def invoke(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def submitted(queues: InMemoryQueueFactory) -> list[SubmitOrder]:
    messages = queues.queue("orders").peek_all()
    orders = [parse_message(SubmitOrder, m.body) for m in messages]
    assert [m.message_id for m in messages] == [f"{o.order_id}:submit" for o in orders]
    return orders


def order(order_id: str, **changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(order_body(order_id, **changes))
    return data


# --- submit ---------------------------------------------------------------------------------------


def test_submit_generate_sends_valid_orders_replying_to_the_given_queue(
    queues: InMemoryQueueFactory, connected: list[Settings]
) -> None:
    result = invoke("submit", "--generate", "3", "--reply-to", "client-x")

    assert result.exit_code == 0, result.output
    orders = submitted(queues)
    assert len(orders) == 3
    assert {o.reply_to for o in orders} == {"client-x"}
    assert len({o.order_id for o in orders}) == 3
    assert "submitted 3 of 3 orders" in result.output
    assert len(connected) == 1


def test_submit_generate_without_a_seed_makes_fresh_order_ids(
    queues: InMemoryQueueFactory, connected: list[Settings]
) -> None:
    invoke("submit", "--generate", "2", "--reply-to", "client-x")
    invoke("submit", "--generate", "2", "--reply-to", "client-x")

    ids = [o.order_id for o in submitted(queues)]
    assert len(ids) == 4
    assert len(set(ids)) == 4  # a second run must not resubmit the first run's orders


def test_submit_generate_uses_the_seed(queues: InMemoryQueueFactory, connected: list[Settings]) -> None:
    result = invoke("submit", "--generate", "2", "--seed", "42", "--reply-to", "client-x")

    assert result.exit_code == 0, result.output
    assert [o.order_id for o in submitted(queues)] == [
        o["orderId"] for o in generate_orders(2, seed=42, reply_to="client-x")
    ]


def test_submit_file_with_a_json_array(
    queues: InMemoryQueueFactory, connected: list[Settings], tmp_path: Path
) -> None:
    path = tmp_path / "orders.json"
    path.write_text(json.dumps([order("o-1"), order("o-2")], indent=2), encoding="utf-8")

    result = invoke("submit", str(path), "--reply-to", "client-x")

    assert result.exit_code == 0, result.output
    assert [(o.order_id, o.reply_to) for o in submitted(queues)] == [("o-1", "client-x"), ("o-2", "client-x")]
    assert "submitted 2 of 2 orders" in result.output


def test_submit_file_with_json_lines(
    queues: InMemoryQueueFactory, connected: list[Settings], tmp_path: Path
) -> None:
    path = tmp_path / "orders.jsonl"
    lines = [order_body("o-1"), "", order_body("o-2"), order_body("o-3")]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")

    result = invoke("submit", str(path), "--reply-to", "client-x")

    assert result.exit_code == 0, result.output
    assert [o.order_id for o in submitted(queues)] == ["o-1", "o-2", "o-3"]


def test_submit_file_with_one_pretty_printed_object(
    queues: InMemoryQueueFactory, connected: list[Settings], tmp_path: Path
) -> None:
    path = tmp_path / "order.json"
    path.write_text(json.dumps(order("o-1"), indent=2), encoding="utf-8")

    result = invoke("submit", str(path), "--reply-to", "client-x")

    assert result.exit_code == 0, result.output
    assert [o.order_id for o in submitted(queues)] == ["o-1"]


def test_submit_file_with_a_utf8_bom(
    queues: InMemoryQueueFactory, connected: list[Settings], tmp_path: Path
) -> None:
    path = tmp_path / "orders.json"
    path.write_text("\ufeff" + json.dumps([order("o-1")]), encoding="utf-8")

    result = invoke("submit", str(path), "--reply-to", "client-x")

    assert result.exit_code == 0, result.output
    assert [o.order_id for o in submitted(queues)] == ["o-1"]


def test_submit_file_keeps_a_json_number_amount_exact(
    queues: InMemoryQueueFactory, connected: list[Settings], tmp_path: Path
) -> None:
    path = tmp_path / "order.json"
    path.write_text(order_body("o-1").replace('"1000.50"', "1000.10"), encoding="utf-8")

    result = invoke("submit", str(path), "--reply-to", "client-x")

    assert result.exit_code == 0, result.output
    [sent] = queues.queue("orders").peek_all()
    assert json.loads(sent.body)["amount"] == "1000.10"


def test_submit_file_reports_invalid_orders_and_sends_the_rest(
    queues: InMemoryQueueFactory, connected: list[Settings], tmp_path: Path
) -> None:
    path = tmp_path / "orders.json"
    path.write_text(json.dumps([order("o-1", currency="XYZ"), order("o-2")]), encoding="utf-8")

    result = invoke("submit", str(path), "--reply-to", "client-x")

    assert result.exit_code == 2, result.output  # not every order was sent
    assert [o.order_id for o in submitted(queues)] == ["o-2"]
    assert "not sent o-1" in result.output
    assert "submitted 1 of 2 orders" in result.output


def test_submit_with_both_a_file_and_generate_is_an_error(
    queues: InMemoryQueueFactory, connected: list[Settings], tmp_path: Path
) -> None:
    path = tmp_path / "orders.json"
    path.write_text(json.dumps([order("o-1")]), encoding="utf-8")

    result = invoke("submit", str(path), "--generate", "3", "--reply-to", "client-x")

    assert result.exit_code == 2
    assert "not both" in result.output
    assert queues.queue("orders").approximate_count() == 0
    assert connected == []


def test_submit_with_neither_a_file_nor_generate_is_an_error(
    queues: InMemoryQueueFactory, connected: list[Settings]
) -> None:
    result = invoke("submit", "--reply-to", "client-x")

    assert result.exit_code == 2
    assert queues.queue("orders").approximate_count() == 0


def test_submit_requires_reply_to(queues: InMemoryQueueFactory, connected: list[Settings]) -> None:
    result = invoke("submit", "--generate", "1")

    assert result.exit_code == 2
    assert "--reply-to" in result.output
    assert queues.queue("orders").approximate_count() == 0


@pytest.mark.parametrize("nested", [True, False], ids=["local-settings-values", "flat-object"])
def test_submit_reads_settings_from_the_env_file(
    queues: InMemoryQueueFactory, connected: list[Settings], tmp_path: Path, nested: bool
) -> None:
    values = {"STORAGE_CONNECTION_STRING": "UseDevelopmentStorage=true", "ORDERS_QUEUE": "orders"}
    env_file = tmp_path / "local.settings.json"
    env_file.write_text(
        json.dumps({"IsEncrypted": False, "Values": values} if nested else values), encoding="utf-8"
    )

    result = invoke("submit", "--generate", "1", "--reply-to", "client-x", "--env-file", str(env_file))

    assert result.exit_code == 0, result.output
    [settings] = connected
    assert settings.STORAGE_CONNECTION_STRING == "UseDevelopmentStorage=true"


# --- generate_orders ------------------------------------------------------------------------------


def test_generate_orders_is_deterministic_for_a_seed() -> None:
    first = generate_orders(20, seed=7, reply_to="client-x")

    assert first == generate_orders(20, seed=7, reply_to="client-x")
    assert first != generate_orders(20, seed=8, reply_to="client-x")
    assert generate_orders(5, seed=7, reply_to="client-x") == first[:5]


def test_generate_orders_are_valid_and_distinct() -> None:
    orders = generate_orders(200, seed=3, reply_to="client-y")

    parsed = [parse_message(SubmitOrder, json.dumps(o)) for o in orders]
    assert len({p.order_id for p in parsed}) == 200
    assert {p.reply_to for p in parsed} == {"client-y"}
    assert all(1 <= len(p.items) <= 4 for p in parsed)
    assert generate_orders(0, seed=3, reply_to="client-y") == []


# --- watch ----------------------------------------------------------------------------------------


def test_watch_prints_replies_and_a_summary(
    queues: InMemoryQueueFactory, connected: list[Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_time = FakeTime()
    monkeypatch.setattr(cli, "time", fake_time)
    replies = queues.queue("client-x")
    for order_id, status in [("o-1", OrderStatus.RECEIVED), ("o-1", OrderStatus.PROCESSED)] * 2 + [
        ("o-2", OrderStatus.RECEIVED)
    ]:
        reply = StatusReply(order_id=order_id, status=status, at=AT)
        replies.send(reply.to_json(), message_id=reply_message_id(order_id, status))

    result = invoke("watch", "--reply-to", "client-x", "--timeout", "1")

    assert result.exit_code == 0, result.output
    assert fake_time.now >= 1.0
    assert "o-1" in result.output
    assert "o-2" in result.output
    assert "Processed" in result.output
    assert "2 orders seen, 1 settled, 2 duplicates" in result.output
    assert replies.approximate_count() == 0


# --- status ---------------------------------------------------------------------------------------


def test_status_prints_the_state_record(monkeypatch: pytest.MonkeyPatch) -> None:
    stores = FakeStores()
    stores.state.create(
        StateRecord(
            id="o-1",
            order_id="o-1",
            process_state=ProcessState.PROCESSING,
            locked_by="o-1:2",
            attempt=2,
            reply_to="client-x",
            steps={
                "reserve": StepState(
                    status=StepStatus.COMPLETED,
                    attempts=1,
                    idempotency_key="o-1:reserve",
                    result={"id": "r-1"},
                )
            },
            retry_budget=RetryBudget(limit=24, spent=3),
            workflow_version="order-v1",
            created_at=AT,
            updated_at=AT,
        )
    )
    monkeypatch.setattr(cli, "connect_stores", lambda settings: stores)

    result = CliRunner().invoke(app, ["status", "o-1"], terminal_width=200)

    assert result.exit_code == 0, result.output
    assert "Processing" in result.output
    assert "o-1:2" in result.output
    assert "3/24" in result.output
    assert "Completed (attempts 1)" in result.output
    assert stores.closed


def test_status_of_an_unknown_order_exits_1(monkeypatch: pytest.MonkeyPatch) -> None:
    stores = FakeStores()
    monkeypatch.setattr(cli, "connect_stores", lambda settings: stores)

    result = CliRunner().invoke(app, ["status", "nope"], terminal_width=200)

    assert result.exit_code == 1
    assert "no order nope" in result.output
    assert stores.closed


# --- cancel ---------------------------------------------------------------------------------------


def test_cancel_sends_a_cancel_request_on_the_submission_queue(
    queues: InMemoryQueueFactory, connected: list[Settings]
) -> None:
    result = invoke("cancel", "o-7", "--reason", "changed my mind")

    assert result.exit_code == 0, result.output
    [message] = received(queues.queue("orders"))
    assert message.message_id.startswith("o-7:cancel:")  # fresh: a retried cancel is not a duplicate
    assert json.loads(message.body) == {
        "schemaVersion": 1,
        "type": "CancelOrder",
        "orderId": "o-7",
        "reason": "changed my mind",
    }
    assert "cancel requested for o-7" in result.output


def test_cancel_of_an_invalid_order_id_sends_nothing(
    queues: InMemoryQueueFactory, connected: list[Settings]
) -> None:
    result = invoke("cancel", "not an id!")

    assert result.exit_code == 2
    assert "not sent" in result.output
    assert received(queues.queue("orders")) == []


def test_status_shows_why_a_compensation_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    stores = FakeStores()
    stores.state.create(
        StateRecord(
            id="o-2",
            order_id="o-2",
            process_state=ProcessState.COMPENSATION_FAILED,
            reply_to="client-x",
            retry_budget=RetryBudget(limit=24),
            workflow_version="order-v1",
            compensation_log=[
                CompensationEntry(
                    step="reserve_inventory",
                    action="reserve",
                    undo="release",
                    undo_key="o-2:reserve_inventory:undo",
                    data={"reservationId": "r-9"},
                    recorded_at=AT,
                    status="CompensationFailed",
                )
            ],
            compensation_error=LastError(
                kind="permanent", code="undo_refused", message="refused", step="reserve_inventory", at=AT
            ),
            compensation_failures=2,
            created_at=AT,
            updated_at=AT,
        )
    )
    monkeypatch.setattr(cli, "connect_stores", lambda settings: stores)

    result = CliRunner().invoke(app, ["status", "o-2"], terminal_width=200)

    assert result.exit_code == 0, result.output
    assert "undo reserve_inventory" in result.output
    assert "release CompensationFailed" in result.output
    assert "r-9" in result.output
    flat = " ".join(result.output.split())
    assert "undo_refused" in flat and "(stuck 2" in flat


def test_status_prints_text_from_the_record_literally_never_as_markup(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # An operator name or an error message is text someone else wrote: "[/]" would be a markup error,
    # "[bold]" would vanish.
    stores = FakeStores()
    stores.state.create(
        StateRecord(
            id="o-3",
            order_id="o-3",
            process_state=ProcessState.ERROR,
            reply_to="client-x",
            retry_budget=RetryBudget(limit=24),
            workflow_version="order-v1",
            last_error=LastError(kind="permanent", code="bad", message="[/] and [bold]x[/bold]", at=AT),
            stop_requested_by="[/]",
            cancel_requested_at=AT,
            created_at=AT,
            updated_at=AT,
        )
    )
    monkeypatch.setattr(cli, "connect_stores", lambda settings: stores)

    result = CliRunner().invoke(app, ["status", "o-3"], terminal_width=200)

    assert result.exit_code == 0, result.output
    assert "[/] and [bold]x[/bold]" in result.output
    assert "[/] at" in result.output


@pytest.mark.parametrize(
    ("environment", "code", "expected"),
    [
        ({"STORAGE_CONNECTION_STRING": ""}, 2, "STORAGE_CONNECTION_STRING"),
        ({"STORAGE_CONNECTION_STRING": "not a connection string"}, 2, "error: "),
    ],
)
def test_the_entry_point_reports_unusable_settings_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    environment: dict[str, str],
    code: int,
    expected: str,
) -> None:
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(sys, "argv", ["orderflow", "watch", "--reply-to", "client-x", "--timeout", "0"])

    with pytest.raises(SystemExit) as exited:
        cli.main()

    assert exited.value.code == code
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("error: ") and expected in err[0]


def test_the_entry_point_reports_an_unreachable_queue_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def unreachable(settings: Settings) -> InMemoryQueueFactory:
        raise TransientError("queue service unreachable: connection refused")

    monkeypatch.setattr(cli, "connect_queues", unreachable)
    monkeypatch.setattr(sys, "argv", ["orderflow", "watch", "--reply-to", "client-x", "--timeout", "0"])

    with pytest.raises(SystemExit) as exited:
        cli.main()

    assert exited.value.code == 1
    assert (
        capsys.readouterr().err.strip() == "error: [transient] queue service unreachable: connection refused"
    )


# --- errors are one line, never a traceback -------------------------------------------------------


def one_line_error(result: Result) -> str:
    """The single line a failed command printed; fails on a traceback or anything longer."""
    assert not isinstance(result.exception, Exception), result.exception  # SystemExit is not an Exception
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith("error: ")
    return lines[0]


@dataclass
class RefusingStateStore:
    """A state store answering as Cosmos DB answers an id it cannot address (HTTP 400)."""

    asked: list[str] = field(default_factory=list)

    def get(self, order_id: str) -> Any:
        self.asked.append(order_id)
        raise PermanentError("cosmos_400", f"Cosmos DB answered 400 for state {order_id!r}")


@pytest.mark.parametrize("order_id", ["a/b", "a:1", "", "x" * 65, "é"])
def test_status_of_an_invalid_order_id_is_a_one_line_error(
    monkeypatch: pytest.MonkeyPatch, order_id: str
) -> None:
    stores = FakeStores(state=RefusingStateStore())  # type: ignore[arg-type]
    monkeypatch.setattr(cli, "connect_stores", lambda settings: stores)

    result = invoke("status", order_id)

    assert result.exit_code == 2
    line = one_line_error(result)
    assert "is not an order id" in line
    assert "1-64 letters, digits" in line
    assert stores.state.asked == []  # type: ignore[attr-defined]


def test_status_when_the_store_refuses_is_a_one_line_error(monkeypatch: pytest.MonkeyPatch) -> None:
    stores = FakeStores(state=RefusingStateStore())  # type: ignore[arg-type]
    monkeypatch.setattr(cli, "connect_stores", lambda settings: stores)

    result = invoke("status", "o-1")

    assert result.exit_code == 1
    assert (
        one_line_error(result)
        == "error: cannot read order o-1: [permanent] cosmos_400: Cosmos DB answered 400 for state 'o-1'"
    )
    assert stores.closed


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b'{"orderId": "Jos\xe9"}', "not UTF-8 text (byte 0xe9 at offset 16); save the file as UTF-8"),
        (b"\xff\xfe{\x00}\x00", "not UTF-8 text (byte 0xff at offset 0)"),  # UTF-16 with its BOM
        (b"[1, 2]", "order 1 is a JSON number, not an object"),
        (b'{"a": 1}\n[2]\n', "order 2 is a JSON array, not an object"),
        (b"{not json", "not a JSON order, JSON array or JSON lines"),
        (b'{"amount": 1e1000000000000000000}', "not a JSON order, JSON array or JSON lines"),
        (b'{"amount": ' + b"9" * 5000 + b"}", "not a JSON order, JSON array or JSON lines"),
    ],
    ids=[
        "latin-1",
        "utf-16",
        "array-of-numbers",
        "json-lines-with-an-array",
        "not-json",
        "huge-exponent",
        "huge-integer",
    ],
)
def test_submit_of_an_unreadable_order_file_is_a_one_line_error(
    queues: InMemoryQueueFactory, connected: list[Settings], tmp_path: Path, content: bytes, expected: str
) -> None:
    path = tmp_path / "orders.json"
    path.write_bytes(content)

    result = invoke("submit", str(path), "--reply-to", "client-x")

    assert result.exit_code == 2
    line = one_line_error(result)
    assert line.startswith(f"error: {path}: ")
    assert expected in line
    assert queues.queue("orders").approximate_count() == 0
    assert connected == []


def test_submit_of_a_missing_order_file_is_a_one_line_error(
    queues: InMemoryQueueFactory, connected: list[Settings], tmp_path: Path
) -> None:
    result = invoke("submit", str(tmp_path / "absent.json"), "--reply-to", "client-x")

    assert result.exit_code == 2
    assert "cannot read the order file: No such file or directory" in one_line_error(result)


@pytest.mark.parametrize(
    ("command", "reply_to", "what"),
    [
        ("submit", "orders", "the submission queue (ORDERS_QUEUE)"),
        ("submit", "agent-payment", "an agent request queue"),
        ("watch", "agent-responses-local", "an agent response queue"),
        ("watch", "client-x-deadletter", "a dead-letter queue"),
    ],
)
def test_a_reply_queue_naming_a_system_queue_is_refused(
    queues: InMemoryQueueFactory, connected: list[Settings], command: str, reply_to: str, what: str
) -> None:
    queues.queue(reply_to).send(order_body("o-1"), message_id="o-1:submit")
    extra = ["--generate", "1"] if command == "submit" else ["--timeout", "0"]

    result = invoke(command, "--reply-to", reply_to, *extra)

    assert result.exit_code == 2
    line = one_line_error(result)
    assert line.startswith(f"error: --reply-to {reply_to!r} is {what}")
    assert line.endswith(", not a client's reply queue")
    assert connected == []
    assert queues.queue(reply_to).approximate_count() == 1  # nothing sent, nothing consumed
