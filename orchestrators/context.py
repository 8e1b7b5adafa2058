"""The workflow-context interface: the small part of a durable orchestration runtime the workflow uses.

The order workflow is written once against :class:`WorkflowContext`. Two thin adapters map it onto a
runtime, each in its host: :mod:`devhost.durabletask_adapter` (Microsoft's durabletask SDK: the local
host and the tests) and :mod:`function_host.durable` (Durable Functions: the Azure host). Tasks are the
runtime's own task objects, opaque to the workflow: it yields them, compares the winner of
:meth:`WorkflowContext.when_any` by identity, and reads results through
:meth:`WorkflowContext.task_result`.

Orchestrator code must be deterministic (docs/design.md §7): it reads time only from
``current_utc_datetime`` and does no I/O; everything else happens in activities.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from orderflow.errors import ErrorKind, kind_of

WorkflowTask = Any
"""A runtime task (durabletask ``Task``, Durable Functions ``TaskBase``): opaque to the workflow."""

WorkflowGenerator = Generator[WorkflowTask, Any, dict[str, Any]]
"""What a workflow body is: a generator that yields tasks and returns a small JSON-able summary."""


@dataclass(frozen=True)
class ActivityRetry:
    """Retry options for an activity that failed by raising (transient store or queue faults).

    Attributes:
        first_interval_s: Delay before the first retry, seconds.
        max_attempts: Total attempts including the first.
        backoff: Multiplier of the delay per retry.
        max_interval_s: Largest delay, seconds.
    """

    first_interval_s: float = 1.0
    max_attempts: int = 4
    backoff: float = 2.0
    max_interval_s: float = 8.0


class ActivityFailed(Exception):
    """An activity raised (after its retries). ``kind`` is recovered from the error text when present."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.kind: ErrorKind | None = kind_of(message)


class WorkflowContext(Protocol):
    """What the workflow may do. Every method is deterministic under replay."""

    @property
    def instance_id(self) -> str:
        """The orchestration instance id (``{orderId}:{attempt}``)."""
        ...

    @property
    def current_utc_datetime(self) -> datetime:
        """The replay-safe current time (UTC, aware)."""
        ...

    @property
    def is_replaying(self) -> bool:
        """True while the runtime replays history (suppress side effects such as logs)."""
        ...

    def set_custom_status(self, status: str) -> None:
        """Publish a short status readable by clients (the step the instance waits on)."""
        ...

    def call_activity(
        self, name: str, payload: dict[str, Any], *, retry: ActivityRetry | None = None
    ) -> WorkflowTask:
        """Schedule activity ``name`` with a JSON-able payload."""
        ...

    def create_timer(self, fire_at: datetime) -> WorkflowTask:
        """A durable timer that fires at ``fire_at`` (UTC)."""
        ...

    def wait_for_external_event(self, name: str) -> WorkflowTask:
        """A task that completes when external event ``name`` is raised on this instance."""
        ...

    def when_any(self, tasks: Sequence[WorkflowTask]) -> WorkflowTask:
        """A task that completes with the first of ``tasks`` to complete (the winner task itself)."""
        ...

    def cancel_timer(self, timer: WorkflowTask) -> None:
        """Cancel a durable timer that lost a race, so the instance can complete now (docs/design.md §7)."""
        ...

    def task_result(self, task: WorkflowTask) -> Any:
        """The result of a completed task."""
        ...


def drive(
    body: WorkflowGenerator, is_failure: Callable[[BaseException], bool]
) -> Generator[WorkflowTask, Any, dict[str, Any]]:
    """Run a workflow body under an adapter, translating the runtime's task failures.

    The adapter's orchestrator function is this generator: it passes each task the body yields to the
    runtime, sends results back, and throws :class:`ActivityFailed` into the body where the runtime
    raised its own failure type, so the body handles one exception type on every runtime.

    Args:
        body: The workflow generator.
        is_failure: True for the runtime's task-failure exception type.

    Returns:
        The body's return value.
    """
    to_send: Any = None
    to_throw: BaseException | None = None
    while True:
        try:
            task = body.throw(to_throw) if to_throw is not None else body.send(to_send)
        except StopIteration as stop:
            result: dict[str, Any] = stop.value
            return result
        try:
            to_send = yield task
            to_throw = None
        except Exception as exc:
            if not is_failure(exc):
                raise
            to_send = None
            to_throw = ActivityFailed(str(exc))
