"""The concurrency protocol against the real stores (cosmosdb-server via azure-cosmos) and in memory.

Time is a fake clock: the stores compare the deadlines the roles write, so no test sleeps.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import replace

import pytest

from intake.submission import handle_intake_message
from orchestrators.starter import run_starter_pass
from orderflow.clock import FakeClock
from orderflow.contracts import FinishOrderInput, Outcome, StartStepInput
from orderflow.records import ProcessState
from orderflow.settings import Settings
from orderflow.workflows import ORDER_V1
from supervisor.sweep import run_sweep
from tests.activity_json import finish_order, start_step
from tests.host_deps import HostDeps
from tests.unit.fakes import RecordingClient, client_for, order_body

pytestmark = pytest.mark.integration


@pytest.fixture
def activity_deps(deps: HostDeps) -> HostDeps:
    return replace(
        deps,
        clock=FakeClock(),
        # Own agent queues: Azurite is shared by every test of the session.
        settings=Settings.load(
            {},
            CLAIM_TIMEOUT_S=30,
            SUPERVISOR_BACKOFF_INITIAL_S=5,
            AGENT_QUEUE_PREFIX=f"a{uuid.uuid4().hex[:8]}-",
        ),
    )


def _submit(d: HostDeps, order_id: str) -> None:
    handle_intake_message(
        order_body(order_id, reply_to="client-p"),
        client=client_for("client-p"),
        orders=d.orders,
        states=d.states,
        queues=d.queues,
        clock=d.clock,
        steps=d.settings.steps,
        starter=d.settings.starter,
        queue_names=d.settings.queues,
    )


def test_racing_starters_claim_each_record_exactly_once(activity_deps: HostDeps) -> None:
    d = activity_deps
    for n in range(12):
        _submit(d, f"a:race-{n}")
    clients = [RecordingClient(), RecordingClient(), RecordingClient()]
    barrier = threading.Barrier(len(clients))
    errors: list[BaseException] = []

    def starter(client: RecordingClient) -> None:
        try:
            barrier.wait()
            run_starter_pass(
                states=d.states,
                client=client,
                clock=d.clock,
                starter=d.settings.starter,
                steps=d.settings.steps,
                scans=d.settings.scans,
                queue_names=d.settings.queues,
                response_queue="r-q1",
                capacity=50,
            )
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=starter, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    started = [i for c in clients for i in c.started]
    assert sorted(started) == sorted(f"a:race-{n}:1" for n in range(12))
    for n in range(12):
        record = d.states.get(f"a:race-{n}").item
        assert (record.process_state, record.attempt, record.locked_by) == (
            ProcessState.PROCESSING,
            1,
            f"a:race-{n}:1",
        )


def test_a_stale_attempt_changes_nothing_after_requeue(activity_deps: HostDeps) -> None:
    d = activity_deps
    clock = d.clock
    assert isinstance(clock, FakeClock)
    _submit(d, "a:stale-1")
    client = RecordingClient()
    run_starter_pass(
        states=d.states,
        client=client,
        clock=clock,
        starter=d.settings.starter,
        steps=d.settings.steps,
        scans=d.settings.scans,
        queue_names=d.settings.queues,
        response_queue="r-q1",
        capacity=5,
    )
    assert client.started == ["a:stale-1:1"]
    clock.advance(31)  # the claim's completeBy passes; nothing ran
    report = run_sweep(
        states=d.states,
        queues=d.queues,
        clock=clock,
        supervisor=d.settings.supervisor,
        scans=d.settings.scans,
        host_id=d.settings.queues.HOST_ID,
    )
    assert report.requeued == ["a:stale-1"]
    requeued = d.states.get("a:stale-1")

    late_start = start_step(
        StartStepInput(
            order_id="a:stale-1",
            instance_id="a:stale-1:1",
            workflow_version=ORDER_V1.version,
            step="reserve_inventory",
            timeout_s=8,
            response_queue="r-q1",
        ).to_payload(),
        d,
    )
    late_finish = finish_order(
        FinishOrderInput(
            order_id="a:stale-1",
            instance_id="a:stale-1:1",
            workflow_version=ORDER_V1.version,
            outcome=Outcome.PROCESSED,
        ).to_payload(),
        d,
    )
    assert late_start["outcome"] == "fenced"
    assert late_finish["outcome"] == "fenced"
    after = d.states.get("a:stale-1")
    assert after.etag == requeued.etag
    assert (after.item.process_state, after.item.locked_by, after.item.failure_count) == (
        ProcessState.PENDING,
        None,
        1,
    )
    assert d.queues.queue(d.settings.queues.agent_queue("inventory")).approximate_count() == 0

    # The next attempt owns the record; the stale one still cannot finish it.
    clock.advance(6)
    run_starter_pass(
        states=d.states,
        client=client,
        clock=clock,
        starter=d.settings.starter,
        steps=d.settings.steps,
        scans=d.settings.scans,
        queue_names=d.settings.queues,
        response_queue="r-q1",
        capacity=5,
    )
    assert client.started == ["a:stale-1:1", "a:stale-1:2"]
    claimed = d.states.get("a:stale-1")
    again = finish_order(
        FinishOrderInput(
            order_id="a:stale-1",
            instance_id="a:stale-1:1",
            workflow_version=ORDER_V1.version,
            outcome=Outcome.PROCESSED,
        ).to_payload(),
        d,
    )
    assert again["outcome"] == "fenced"
    assert d.states.get("a:stale-1").etag == claimed.etag
