"""The bad-input corpus (``tests/corpus``) through both submission consumers, on in-memory stores and queues.

- Storage transport: a :class:`~devhost.host.DevHost` running the submission role consumes the in-memory
  queue (Storage semantics), every case between two valid orders, so that receive batches mix them.
- Service Bus transport: the Functions ``submission`` trigger, invoked as the Python worker invokes it,
  with real ``azure.servicebus.ServiceBusReceivedMessage`` objects (body bytes, ``ReplyTo`` property) and
  the extension's settlement actions recorded.

Each case must be dead-lettered with exactly its manifest reason, write nothing, and leave the valid
orders around it accepted; :func:`tests.corpus.problems` lists every broken promise at once.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from azure.servicebus import ServiceBusReceivedMessage
from azure.servicebus._pyamqp.message import Header, Message, Properties

import function_app
from devhost.settings import load_settings
from function_host.blueprints import intake as intake_blueprint
from function_host.blueprints.intake import submission_function_name
from intake.submission import handle_intake_message
from orderflow.clock import FakeClock, SystemClock
from orderflow.errors import ConflictingOrder, InvalidMessage, NotFound
from orderflow.messages import SUBMISSION_REASONS
from orderflow.queues.base import DeadLetter
from orderflow.queues.memory import InMemoryQueueFactory
from orderflow.settings import Settings
from orderflow.stores.base import StateQuery
from orderflow.stores.memory import InMemoryOrderStore, InMemoryStateStore
from tests.corpus import (
    CLIENT,
    REPLY_QUEUE,
    SERVICE_BUS,
    STORAGE,
    Case,
    CorpusRun,
    case_files,
    load_cases,
    manifest,
    problems,
    run_through_devhost,
    take_replies,
)
from tests.host_deps import HostDeps
from tests.unit.fakes import TEST_CLIENT

pytestmark = pytest.mark.unit

CASES = load_cases()
OTHER_REASONS = frozenset({"ConflictingOrder", "UnknownOrder"})
"""Dead-letter reasons decided after parsing: a conflicting duplicate, a request about no order."""


# --- the corpus itself -------------------------------------------------------------------------------


def test_the_manifest_lists_at_least_30_kinds_and_exactly_the_files_present() -> None:
    entries = manifest()

    assert len(entries) >= 30
    referenced = {str(e["file"]) for e in entries.values() if "file" in e}
    referenced |= {str(e["original"]) for e in entries.values() if "original" in e}
    assert referenced == case_files()
    for name, entry in entries.items():
        assert ("file" in entry) != ("generate" in entry), f"{name}: give exactly one of file and generate"
        assert "file" not in entry or Path(str(entry["file"])).stem == name, f"{name}: file named otherwise"
        assert entry["reason"] in SUBMISSION_REASONS | OTHER_REASONS, f"{name}: unknown reason"
        assert str(entry["why"]).strip(), f"{name}: no why"
        assert set(entry.get("transports", [STORAGE])) <= {STORAGE, SERVICE_BUS}  # type: ignore[call-overload]
    assert [case.name for case in CASES] == list(entries)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_each_case_is_refused_with_its_reason_and_writes_nothing(case: Case) -> None:
    deps = _memory_deps()
    if case.original is not None:
        handle_intake_message(case.original, client=TEST_CLIENT, **_handler_deps(deps))

    with pytest.raises((InvalidMessage, ConflictingOrder)) as caught:
        handle_intake_message(
            case.body, client=TEST_CLIENT, reply_to=case.transport_reply_to, **_handler_deps(deps)
        )

    error = caught.value
    assert isinstance(error, InvalidMessage | ConflictingOrder)
    assert error.reason == case.reason, error
    assert error.detail.strip()
    kept = case.order_ids() if case.original is not None else set()
    assert deps.states.count(StateQuery()) == len(kept)
    for order_id in case.order_ids() - kept:
        with pytest.raises(NotFound):
            deps.orders.get(order_id)
        with pytest.raises(NotFound):
            deps.states.get(order_id)


def test_a_body_too_large_for_a_storage_queue_is_refused_at_send() -> None:
    [oversized] = [case for case in CASES if case.reason == "TooLarge"]
    queue = InMemoryQueueFactory().queue("orders")

    with pytest.raises(ValueError, match="too large for a Storage queue"):
        queue.send(oversized.text, message_id="too-large")

    assert queue.approximate_count() == 0


# --- Storage transport: the devhost's consumer loop ----------------------------------------------------


def test_the_corpus_through_the_devhost_consumer_is_dead_lettered_and_writes_nothing() -> None:
    settings, local = load_settings({}, POLL_INTERVAL_S=0.01, POLL_MAX_INTERVAL_S=0.05)
    deps = replace(_memory_deps(), clock=SystemClock(), settings=settings, local=local)

    run = run_through_devhost(deps, CASES, run_id="unit")

    assert problems(run, deps) == []
    assert len(run.dead_letters) == len(run.cases) == sum(STORAGE in case.transports for case in CASES)
    assert len(run.valid_ids) > len(run.cases)


# --- Service Bus transport: the Functions trigger --------------------------------------------------------


@dataclass
class RecordingActions:
    """``ServiceBusMessageActions``: records each settlement as (verb, message id, reason, description)."""

    calls: list[tuple[str, str, str | None, str | None]] = field(default_factory=list)

    def complete(self, message: Any) -> None:
        self.calls.append(("complete", str(message.message_id), None, None))

    def abandon(self, message: Any) -> None:
        self.calls.append(("abandon", str(message.message_id), None, None))

    def deadletter(
        self,
        message: Any,
        deadletter_reason: str | None = None,
        deadletter_error_description: str | None = None,
    ) -> None:
        self.calls.append(
            ("deadletter", str(message.message_id), deadletter_reason, deadletter_error_description)
        )


def sdk_message(body: bytes, *, message_id: str, reply_to: str | None) -> ServiceBusReceivedMessage:
    """A real ``ServiceBusReceivedMessage`` built from an AMQP transfer, as the trigger receives it (the
    host's delivery count, 1 on a first delivery)."""
    amqp = Message(
        header=Header(delivery_count=1),
        properties=Properties(
            message_id=message_id.encode(),
            reply_to=None if reply_to is None else reply_to.encode(),
            content_type=b"application/json",
        ),
        message_annotations={b"x-opt-sequence-number": 1},
        delivery_annotations={b"x-opt-lock-token": uuid.uuid4()},
        data=[body],
    )
    return ServiceBusReceivedMessage(amqp, receiver=None)


@pytest.fixture
def admission_rebuilt() -> Iterator[None]:
    """The intake blueprint builds its admission control once per process: on this test's stores."""
    intake_blueprint._admission.cache_clear()
    yield
    intake_blueprint._admission.cache_clear()


DURABLE_CLIENT = json.dumps(
    {
        "taskHubName": "orderflowlocal",
        "creationUrls": {},
        "managementUrls": {},
        "baseUrl": "http://127.0.0.1:7071/runtime/webhooks/durabletask",
        "requiredQueryStringParameters": "",
        "rpcBaseUrl": "http://127.0.0.1:17071/durabletask/",
    }
)
"""The ``durableClient`` binding the host passes the trigger (unused here: nothing is claimed on submit)."""


def _submission_trigger() -> Callable[..., Any]:
    # get_functions() remembers the names it has seen, so each module that indexes the app starts clean.
    function_app.app.functions_bindings = None
    functions = {f.get_function_name(): f.get_user_function() for f in function_app.app.get_functions()}
    trigger: Callable[..., Any] = functions[submission_function_name(CLIENT)]
    return trigger


@pytest.mark.usefixtures("admission_rebuilt")
def test_the_corpus_through_the_functions_trigger_is_dead_lettered_and_writes_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    submission = _submission_trigger()
    run = CorpusRun("sb", [case for case in CASES if SERVICE_BUS in case.transports])
    stores = _memory_deps()
    states, orders = run.recording(stores.states, stores.orders)
    # The valid orders between the cases wait for a starter: what is counted is the intake's own writes.
    no_claim = Settings.load(env={}, HOST_ID="", CLAIM_ON_SUBMIT="false")
    trigger_deps = replace(stores, states=states, orders=orders, settings=no_claim)
    monkeypatch.setattr(intake_blueprint, "dependencies", lambda: trigger_deps)
    monkeypatch.setattr(intake_blueprint, "app_settings", lambda: trigger_deps.settings)
    # Bad input is dead-lettered, never redelivered: a redelivery would fail the test.
    monkeypatch.setattr(intake_blueprint, "redelivery", lambda: None)
    actions = RecordingActions()

    def deliver(body: bytes, message_id: str, reply_to: str | None) -> tuple[str, str | None, str | None]:
        received = sdk_message(body, message_id=message_id, reply_to=reply_to)
        asyncio.run(submission(message=received, message_actions=actions, client=DURABLE_CLIENT))
        [(verb, _, reason, description)] = [call for call in actions.calls if call[1] == message_id]
        return verb, reason, description

    def deliver_valid() -> None:
        order_id, body = run.new_valid_order()
        assert deliver(body, f"{order_id}:submit", REPLY_QUEUE) == ("complete", None, None)

    for case in run.cases:
        if case.original is not None:
            deliver(case.original, f"{run.message_id(case)}-original", REPLY_QUEUE)
    run.keep_originals(trigger_deps)
    for case in run.cases:
        deliver_valid()
        verb, reason, description = deliver(case.body, run.message_id(case), case.transport_reply_to)
        if verb == "deadletter":
            run.dead_letters[run.message_id(case)] = DeadLetter(
                message_id=run.message_id(case),
                body=case.text,  # the broker keeps the message itself; nothing is re-sent
                reason=reason or "",
                description=description or "",
                source_queue=CLIENT.inbound_queue,
                delivery_count=1,
                dead_lettered_at=datetime.now(UTC),
            )
    deliver_valid()  # the trigger still works after everything above
    take_replies(trigger_deps.queues, run)

    assert problems(run, stores) == []
    assert {verb for verb, *_ in actions.calls} == {"complete", "deadletter"}  # nothing abandoned
    assert {case.name for case in run.cases} >= {"oversized-body", "reply-to-mismatch", "non-utf8-latin1"}


# --- helpers --------------------------------------------------------------------------------------------


def _memory_deps() -> HostDeps:
    return HostDeps(
        states=InMemoryStateStore(),
        orders=InMemoryOrderStore(),
        queues=InMemoryQueueFactory(),
        clock=FakeClock(datetime(2026, 1, 1, 12, tzinfo=UTC)),
        settings=Settings.load(env={}, HOST_ID=""),
    )


def _handler_deps(deps: HostDeps) -> dict[str, Any]:
    return {
        "orders": deps.orders,
        "states": deps.states,
        "queues": deps.queues,
        "clock": deps.clock,
        "steps": deps.settings.steps,
        "starter": deps.settings.starter,
        "queue_names": deps.settings.queues,
    }
