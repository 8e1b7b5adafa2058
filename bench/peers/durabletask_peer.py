"""Peer: the order saga as a bare durabletask orchestration (no state store, no supervisor, no queues).

An orchestrator calls the three step activities in order; each activity calls a demo service over httpx
with the step's idempotency key. A step that fails undoes the completed reversible ones in reverse
order (activity ``undo_step``) and the orchestration returns ``Compensated``; otherwise ``Processed``.

Processes, as ``python -m bench.peers.durabletask_peer``:

- ``backend --port P``: durabletask's in-memory backend (``durabletask.testing``), a gRPC server, in a
  process of its own (it then shares no interpreter lock with the worker);
- ``worker --address localhost:P --services-url URL``: the worker with the orchestrator and activities
  (``ConcurrencyOptions`` at their defaults).

Each prints a line with ``ready`` once serving and runs until SIGTERM or SIGINT. The client side,
:func:`run_durabletask_load`, runs in the benchmark's process.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections import Counter, deque
from collections.abc import Generator, Mapping, Sequence
from datetime import UTC, datetime
from types import FrameType
from typing import Annotated, Any

import typer
from durabletask import client as dt_client
from durabletask import task as dt_task
from durabletask import worker as dt_worker
from durabletask.testing import create_test_backend

from bench.load import TIMED_OUT, LoadResult
from bench.peers.saga import COMPENSATED, PROCESSED, SAGA_STEPS, CompletedStep, SagaServices
from devhost.durabletask_adapter import quiet_local_cancel

ORCHESTRATOR = "order_saga"
RUN_STEP = "run_step"
UNDO_STEP = "undo_step"
"""Registered names: durabletask names an orchestrator or activity after its function."""

WAITERS = 4
"""Client threads waiting on completions. Each blocking wait holds one of the backend's ten gRPC
threads, so waiting on every outstanding order at once would starve the worker's own calls."""


def backend_timestamp(at: datetime) -> float:
    """POSIX seconds of a time the durabletask client reports: UTC, without a zone (never local time)."""
    return (at if at.tzinfo is not None else at.replace(tzinfo=UTC)).timestamp()


def order_saga(ctx: dt_task.OrchestrationContext, order: dict[str, Any]) -> Generator[Any, Any, str]:
    """The orchestrator: the steps in order; on a failure, undo the completed ones in reverse."""
    done: list[dict[str, Any]] = []
    try:
        for step in SAGA_STEPS:
            result = yield ctx.call_activity(RUN_STEP, input={"step": step.name, "order": order})
            done.append({"step": step.name, "result": result})
    except dt_task.TaskFailedError:
        for entry in reversed(done):
            yield ctx.call_activity(UNDO_STEP, input={"done": entry, "orderId": order["orderId"]})
        return COMPENSATED
    return PROCESSED


def register(worker: dt_worker.TaskHubGrpcWorker, services: SagaServices) -> None:
    """Register the orchestrator and its two activities on ``worker``."""

    def run_step(_ctx: dt_task.ActivityContext, data: dict[str, Any]) -> dict[str, str]:
        return services.run_step(str(data["step"]), data["order"])

    def undo_step(_ctx: dt_task.ActivityContext, data: dict[str, Any]) -> dict[str, str]:
        done = data["done"]
        return services.undo_step(CompletedStep(done["step"], dict(done["result"])), str(data["orderId"]))

    worker.add_orchestrator(order_saga)  # type: ignore[arg-type]
    worker.add_activity(run_step)
    worker.add_activity(undo_step)


def run_durabletask_load(
    address: str,
    orders: Sequence[Mapping[str, Any]],
    *,
    concurrency: int,
    timeout_s: float,
) -> LoadResult:
    """Schedule one orchestration per order, keeping ``concurrency`` outstanding, and time each.

    A submitter thread schedules orchestrations; :data:`WAITERS` threads wait for them to complete,
    oldest first. An order's latency runs from just before it was scheduled to the completion time the
    backend recorded (``last_updated_at``, wall clock): exact even when a waiter notices it late.

    Args:
        address: The backend, ``host:port``.
        orders: Order messages (camelCase), each the orchestration's input.
        concurrency: Orchestrations scheduled and not yet seen complete.
        timeout_s: Give up waiting this many seconds after the first schedule.

    Raises:
        ValueError: ``concurrency`` is less than 1.
    """
    if concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    client = dt_client.TaskHubGrpcClient(host_address=address, logger=logging.getLogger("durabletask.client"))
    completions = _Completions(client, concurrency, deadline=time.monotonic() + timeout_s)
    # Daemons: after an interruption they are not waited for (see _Completions.stop).
    threads = [
        threading.Thread(target=completions.wait, name=f"dt-wait-{n}", daemon=True) for n in range(WAITERS)
    ]
    for thread in threads:
        thread.start()
    interrupted = True
    try:
        submitted = completions.schedule(orders)
        interrupted = False
    finally:
        completions.stop(threads, interrupted=interrupted)
    bounds = completions.bounds
    elapsed = max(bounds) - min(bounds) if bounds else 0.0
    return LoadResult(submitted, completions.latencies, elapsed, dict(completions.outcomes))


class _Completions:
    """The orchestrations of one load: scheduled while a slot of ``concurrency`` is free, waited for by
    the :data:`WAITERS` threads (oldest first) until ``deadline`` (:func:`time.monotonic` seconds), and
    what the waiters saw of them."""

    def __init__(self, client: dt_client.TaskHubGrpcClient, concurrency: int, *, deadline: float) -> None:
        self.client = client
        self.deadline = deadline
        self.slots = threading.Semaphore(concurrency)
        self.outstanding: deque[tuple[str, float]] = deque()
        self.ready = threading.Condition()
        self.lock = threading.Lock()
        self.latencies: list[float] = []
        self.outcomes: Counter[str] = Counter()
        self.bounds: list[float] = []
        self.submitting = True

    def schedule(self, orders: Sequence[Mapping[str, Any]]) -> int:
        """Schedule one orchestration per order while a slot frees up before the deadline; how many were
        scheduled."""
        submitted = 0
        for order in orders:
            if not self.slots.acquire(timeout=max(0.0, self.deadline - time.monotonic())):
                break
            started = time.time()
            instance_id = self.client.schedule_new_orchestration(
                ORCHESTRATOR, input=dict(order), instance_id=str(order["orderId"])
            )
            submitted += 1
            with self.ready:
                self.outstanding.append((instance_id, started))
                self.ready.notify()
        return submitted

    def wait(self) -> None:
        """A waiter thread: wait for the oldest outstanding orchestration until none is left to wait for."""
        while True:
            with self.ready:
                while not self.outstanding and self.submitting:
                    self.ready.wait(0.1)
                if not self.outstanding:
                    return
                instance_id, started = self.outstanding.popleft()
            state = None
            left = self.deadline - time.monotonic()
            if left > 0:
                try:
                    state = self.client.wait_for_orchestration_completion(instance_id, timeout=left)
                except TimeoutError:
                    state = None
            self._record(started, state)
            self.slots.release()

    def _record(self, started: float, state: dt_client.OrchestrationState | None) -> None:
        with self.lock:
            if state is None:
                self.outcomes[TIMED_OUT] += 1
            else:
                ended = backend_timestamp(state.last_updated_at)
                self.latencies.append(ended - started)
                self.bounds.extend((started, ended))
                output = state.get_output(str) if state.serialized_output else None
                self.outcomes[output or state.runtime_status.name] += 1

    def stop(self, threads: Sequence[threading.Thread], *, interrupted: bool) -> None:
        """Tell the waiters nothing more is scheduled; unless ``interrupted``, wait for them and close
        the client."""
        with self.ready:
            self.submitting = False
            if interrupted:
                self.outstanding.clear()  # nobody will read the results
            self.ready.notify_all()
        if not interrupted:
            for thread in threads:
                thread.join()
            self.client.close()
        # Interrupted (Ctrl-C, SIGTERM) or failed: a waiter may block until the run's deadline, which
        # must not hold up the clean-up that stops the backend and worker; its channel closes with the
        # process.


def _wait_for_signal() -> None:
    stop = threading.Event()

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    stop.wait()


cli = typer.Typer(add_completion=False)


@cli.command()
def backend(port: Annotated[int, typer.Option(help="gRPC port to listen on.")]) -> None:
    """Run durabletask's in-memory backend until SIGTERM."""
    logging.basicConfig(level=logging.WARNING)
    server = create_test_backend(port=port)
    print(f"durabletask backend ready on {port}", flush=True)
    _wait_for_signal()
    server.stop(grace=1.0)


@cli.command()
def worker(
    address: Annotated[str, typer.Option(help="The backend, host:port.")],
    services_url: Annotated[str, typer.Option(help="Base URL of the demo services.")],
) -> None:
    """Run the saga's worker until SIGTERM."""
    logging.basicConfig(level=logging.WARNING)
    for noisy in ("durabletask", "durabletask-worker", "httpx"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    services = SagaServices(services_url)
    dt = dt_worker.TaskHubGrpcWorker(host_address=address, logger=logging.getLogger("durabletask.worker"))
    register(dt, services)
    dt.start()  # type: ignore[no-untyped-call]
    print("durabletask worker ready", flush=True)
    _wait_for_signal()
    with quiet_local_cancel():
        dt.stop()  # type: ignore[no-untyped-call]
    services.close()


if __name__ == "__main__":
    cli()
