"""Fakes of the ports that have no in-memory adapter in the package, and small builders for tests."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from intake.submission import handle_intake_message
from operator_api.suspension import set_suspension
from orderflow.attempts import claim
from orderflow.clients import RegisteredClient
from orderflow.clock import Clock, FakeClock
from orderflow.contracts import StartStepInput, StepResult
from orderflow.operator_auth import Principal
from orderflow.orchestration import InstanceStatus
from orderflow.queues.base import MessageQueue, ReceivedMessage
from orderflow.queues.memory import InMemoryQueueFactory
from orderflow.records import ProcessState, StateRecord
from orderflow.settings import Settings
from orderflow.stores.memory import InMemoryAlertStore, InMemoryOrderStore, InMemoryStateStore
from orderflow.workflows import ORDER_V2, WorkflowDefinition
from supervisor.recovery import Recovery, recover
from supervisor.sweep import SweepReport, run_sweep
from tests.activity_json import start_step
from tests.host_deps import HostDeps


@dataclass
class RecordingClient:
    """An :class:`OrchestrationClient` that records what it was asked to do."""

    existing: set[str] = field(default_factory=set)
    started: list[str] = field(default_factory=list)
    payloads: dict[str, dict[str, Any]] = field(default_factory=dict)
    statuses: dict[str, InstanceStatus] = field(default_factory=dict)
    raised: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)

    def start(self, name: str, instance_id: str, payload: dict[str, Any]) -> bool:
        if instance_id in self.existing:
            return False
        self.existing.add(instance_id)
        self.started.append(instance_id)
        self.payloads[instance_id] = payload
        return True

    def get_status(self, instance_id: str) -> InstanceStatus | None:
        return self.statuses.get(instance_id)

    def raise_event(self, instance_id: str, name: str, payload: dict[str, Any]) -> None:
        self.raised.append((instance_id, name, payload))


def client_for(reply_queue: str = "client-a", client_id: str = "a") -> RegisteredClient:
    """A registered client answered on ``reply_queue`` (what the tests' order bodies name as ``replyTo``);
    its inbound queue is ``orders-<client_id>``."""
    return RegisteredClient.model_validate({"id": client_id, "replyQueue": reply_queue})


TEST_CLIENT = client_for()
"""The client the tests' orders arrive for: ``a``, inbound queue ``orders-a``, reply queue ``client-a`` (the
default of :func:`order_body`); the Functions app under test registers it too (``tests/conftest.py``)."""

TEST_CLIENTS = json.dumps([{"id": TEST_CLIENT.client_id, "replyQueue": TEST_CLIENT.reply_queue}])
"""``CLIENTS`` registering :data:`TEST_CLIENT`."""


def order_body(order_id: str = "o-1", *, reply_to: str = "client-a", **changes: Any) -> str:
    """A valid submission body (one line: sku 10 x 5); ``order_id`` is the client's order id (``o-1``) or
    an order key (``a:o-1``), of which the body holds the client's order id."""
    body: dict[str, Any] = {
        "schemaVersion": 1,
        "orderId": order_id.rpartition(":")[2],
        "customerId": "1",
        "customerName": "Customer#000000001",
        "currency": "USD",
        "amount": "1000.50",
        "items": [{"sku": "10", "quantity": 5}],
        "carrier": "TRUCK",
        "replyTo": reply_to,
    }
    body.update(changes)
    return json.dumps(body)


def received(queue: MessageQueue) -> list[ReceivedMessage]:
    """Receive (and complete) everything visible on ``queue`` now, in order."""
    out: list[ReceivedMessage] = []
    while True:
        batch = queue.receive(max_messages=32, lock_s=60)
        if not batch:
            return out
        for message in batch:
            queue.complete(message)
        out.extend(batch)


def memory_deps(clock: FakeClock, **settings: Any) -> HostDeps:
    """Activity dependencies over the in-memory stores and queues, with ``settings`` overridden; the
    registry holds :data:`TEST_CLIENT` unless ``CLIENTS`` is given."""
    queues = InMemoryQueueFactory()
    return HostDeps(
        states=InMemoryStateStore(),
        orders=InMemoryOrderStore(),
        queues=queues,
        clock=clock,
        settings=Settings.load({}, **{"CLIENTS": TEST_CLIENTS, **settings}),
        dead_letters=queues,
        alerts=InMemoryAlertStore(clock=clock),
    )


def take_in(
    deps: HostDeps, message: ReceivedMessage, client: RegisteredClient = TEST_CLIENT, **options: Any
) -> Any:
    """The intake of ``message`` from ``client``'s inbound queue, as a host runs it, on ``deps``; ``options``
    are :func:`~intake.submission.handle_intake_message`'s other keywords (``message_id``, ``replays``...)."""
    return handle_intake_message(
        message.body,
        client=client,
        reply_to=message.reply_to,
        orders=deps.orders,
        states=deps.states,
        queues=deps.queues,
        clock=deps.clock,
        steps=deps.settings.steps,
        starter=deps.settings.starter,
        queue_names=deps.settings.queues,
        **options,
    )


def submit_and_claim(
    deps: HostDeps, *, definition: WorkflowDefinition, order_id: str = "a:o-1", **order: Any
) -> StateRecord:
    """Submit ``order_id`` (``order_body`` with ``order`` changed) on ``definition`` and claim attempt 1."""
    handle_intake_message(
        order_body(order_id, **order),
        client=TEST_CLIENT,
        orders=deps.orders,
        states=deps.states,
        queues=deps.queues,
        clock=deps.clock,
        steps=deps.settings.steps,
        starter=deps.settings.starter,
        queue_names=deps.settings.queues,
        definition=definition,
    )
    won = claim(
        deps.states,
        deps.states.get(order_id),
        deps.clock,
        deps.settings.starter,
        deps.settings.steps,
        host_id=deps.settings.queues.HOST_ID,
    )
    assert won is not None
    return won.item


RESERVED = StepResult(step="reserve_inventory", result={"reservationId": "r-1"}, calls=1)
"""The first step's result in the order-v2 starts below."""


def start_v2_step(deps: HostDeps, step: str, *, response_queue: str = "agent-responses-h1") -> dict[str, Any]:
    """Run the ``start_step`` activity of ``a:o-1``'s attempt 1 on order-v2 for ``step``: the
    ``reserve_inventory`` step, or a later one with :data:`RESERVED` as the completion before it. Returns
    the activity's result (its ``outcome``...)."""
    start = StartStepInput(
        order_id="a:o-1",
        instance_id="a:o-1:1",
        workflow_version=ORDER_V2.version,
        step=step,
        timeout_s=8,
        completed=None if step == RESERVED.step else RESERVED,
        response_queue=response_queue,
    )
    return start_step(start.to_payload(), deps)


def pause_for_review(deps: HostDeps, *, response_queue: str = "agent-responses-h1") -> StateRecord:
    """Submit ``a:o-1`` on order-v2 for 1000.50, claim attempt 1 and run its steps up to the charge, which
    waits for a review (``deps`` must review amounts above 500): the record, ``AwaitingReview``."""
    submit_and_claim(deps, definition=ORDER_V2, amount="1000.50")
    for step in ("reserve_inventory", "charge_payment"):
        start_v2_step(deps, step, response_queue=response_queue)
    record = deps.states.get("a:o-1").item
    assert record.process_state is ProcessState.AWAITING_REVIEW
    return record


def suspend(deps: HostDeps, principal: Principal, order_id: str = "a:o-1") -> None:
    """``principal``, an operator, suspends ``order_id`` with one conditional write on its record as read
    now; the suspension must be accepted."""
    found = deps.states.get(order_id)
    outcome = set_suspension(
        order_id,
        principal,
        suspend=True,
        if_match=found.etag,
        states=deps.states,
        queues=deps.queues,
        clock=deps.clock,
    )
    assert outcome.refusal is None


def sweep_once(deps: HostDeps, clock: Clock | None = None, **options: Any) -> SweepReport:
    """One supervisor sweep of ``deps`` with its own settings' sections, on ``clock`` (default
    ``deps.clock``); ``options`` are :func:`supervisor.sweep.run_sweep`'s others (``cursor``,
    ``keep_going``)."""
    return run_sweep(
        states=deps.states,
        queues=deps.queues,
        clock=deps.clock if clock is None else clock,
        supervisor=deps.settings.supervisor,
        scans=deps.settings.scans,
        host_id=deps.settings.queues.HOST_ID,
        **options,
    )


def recover_once(deps: HostDeps, key: str, clock: Clock | None = None) -> Recovery:
    """The supervisor's recovery of the record stored under ``key``, as read now, with ``deps``' own
    settings sections, on ``clock`` (default ``deps.clock``)."""
    return recover(
        deps.states,
        deps.states.get(key),
        queues=deps.queues,
        clock=deps.clock if clock is None else clock,
        supervisor=deps.settings.supervisor,
        host_id=deps.settings.queues.HOST_ID,
    )
