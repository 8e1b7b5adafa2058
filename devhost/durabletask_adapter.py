"""The local host's durabletask adapters (Microsoft's durabletask SDK): the workflow context and the client.

:class:`DurableTaskWorkflowContext` maps :class:`orchestrators.context.WorkflowContext` onto
``durabletask.task.OrchestrationContext``, so the devhost runs the same workflow body as the Azure host
(whose adapter is :mod:`function_host.durable`); :class:`DurableTaskClient` is the starter's and the
listener's :class:`~orderflow.orchestration.OrchestrationClient` over the durabletask gRPC client;
:func:`register_order_workflow` puts the order workflow and every activity on a worker, and
:func:`quiet_local_cancel` keeps the worker's own stop out of the warnings. The devhost and the tests use
them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
from durabletask import client as dt_client
from durabletask import task as dt
from durabletask import worker as dt_worker

from activities.sections import ActivitySections
from activities.table import ACTIVITIES, Activity
from orchestrators.context import ActivityRetry, WorkflowContext, WorkflowGenerator, WorkflowTask, drive
from orchestrators.workflow import order_workflow
from orderflow.contracts import ORDER_WORKFLOW
from orderflow.dependencies import Dependencies
from orderflow.errors import TransientError
from orderflow.orchestration import InstanceStatus


class DurableTaskWorkflowContext:
    """A :class:`WorkflowContext` over a durabletask orchestration context."""

    def __init__(self, ctx: dt.OrchestrationContext) -> None:
        self._ctx = ctx

    @property
    def instance_id(self) -> str:
        """The orchestration instance id."""
        return str(self._ctx.instance_id)

    @property
    def current_utc_datetime(self) -> datetime:
        """Replay-safe current time, made timezone-aware (durabletask returns naive UTC)."""
        now: datetime = self._ctx.current_utc_datetime
        return now if now.tzinfo is not None else now.replace(tzinfo=UTC)

    @property
    def is_replaying(self) -> bool:
        """True while replaying history."""
        return bool(self._ctx.is_replaying)

    def set_custom_status(self, status: str) -> None:
        """Set the instance's custom status."""
        self._ctx.set_custom_status(status)

    def call_activity(
        self, name: str, payload: dict[str, Any], *, retry: ActivityRetry | None = None
    ) -> WorkflowTask:
        """Schedule an activity by its registered name."""
        policy = None
        if retry is not None:
            policy = dt.RetryPolicy(
                first_retry_interval=timedelta(seconds=retry.first_interval_s),
                max_number_of_attempts=retry.max_attempts,
                backoff_coefficient=retry.backoff,
                max_retry_interval=timedelta(seconds=retry.max_interval_s),
            )
        return self._ctx.call_activity(name, input=payload, retry_policy=policy)

    def create_timer(self, fire_at: datetime) -> WorkflowTask:
        """A durable timer; durabletask expects naive UTC or aware datetimes alike."""
        return self._ctx.create_timer(fire_at)

    def wait_for_external_event(self, name: str) -> WorkflowTask:
        """Wait for external event ``name``."""
        return self._ctx.wait_for_external_event(name)

    def when_any(self, tasks: Sequence[WorkflowTask]) -> WorkflowTask:
        """First of ``tasks`` to complete."""
        return dt.when_any(list(tasks))

    def cancel_timer(self, timer: WorkflowTask) -> None:
        """Cancel a losing timer (durabletask timers are cancellable tasks)."""
        cancel = getattr(timer, "cancel", None)
        if callable(cancel):
            cancel()

    def task_result(self, task: WorkflowTask) -> Any:
        """The completed task's result."""
        return task.get_result()


def _untold(_instance_id: str) -> None:
    """An orchestration's end, told to nobody."""


def durabletask_orchestrator(
    body: Callable[[WorkflowContext, dict[str, Any]], WorkflowGenerator],
    on_end: Callable[[str], None] = _untold,
) -> Callable[[dt.OrchestrationContext, Any], Generator[WorkflowTask, Any, dict[str, Any]]]:
    """Wrap a workflow body as a durabletask orchestrator function.

    Args:
        body: The workflow generator function, e.g. :func:`orchestrators.workflow.order_workflow`.
        on_end: Told the instance id when the body returns or raises: in the orchestration's last
            episode (perhaps again, when the worker runs that episode again), never in an episode that
            ends waiting (the runtime then closes the generator).

    Returns:
        A function to register with ``TaskHubGrpcWorker.add_named_orchestrator``.
    """

    def orchestrator(
        ctx: dt.OrchestrationContext, payload: Any
    ) -> Generator[WorkflowTask, Any, dict[str, Any]]:
        try:
            result = yield from drive(body(DurableTaskWorkflowContext(ctx), payload), _is_task_failure)
        except Exception:
            on_end(ctx.instance_id)
            raise
        on_end(ctx.instance_id)
        return result

    orchestrator.__name__ = getattr(body, "__name__", "orchestrator")
    return orchestrator


def _is_task_failure(exc: BaseException) -> bool:
    return isinstance(exc, dt.TaskFailedError)


_RUNNING_STATUSES = frozenset(
    {
        dt_client.OrchestrationStatus.RUNNING,
        dt_client.OrchestrationStatus.PENDING,
        dt_client.OrchestrationStatus.SUSPENDED,
    }
)

_ENDED_STATUSES = (
    dt_client.OrchestrationStatus.COMPLETED,
    dt_client.OrchestrationStatus.FAILED,
    dt_client.OrchestrationStatus.TERMINATED,
)
"""Statuses of instances that ended: the ones whose history the retention pass deletes."""


class DurableTaskClient:
    """:class:`orderflow.orchestration.OrchestrationClient` and
    :class:`~orderflow.orchestration.OrchestrationHistories` over a durabletask ``TaskHubGrpcClient``."""

    def __init__(self, client: dt_client.TaskHubGrpcClient) -> None:
        self._client = client

    def start(self, name: str, instance_id: str, payload: dict[str, Any]) -> bool:
        """Schedule an instance; ``ALREADY_EXISTS`` from the backend means it was started before."""
        try:
            self._client.schedule_new_orchestration(name, input=payload, instance_id=instance_id)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.ALREADY_EXISTS:
                return False
            raise
        return True

    def get_status(self, instance_id: str) -> InstanceStatus | None:
        """Runtime status and custom status, or None for an unknown instance."""
        state = self._client.get_orchestration_state(instance_id, fetch_payloads=True)
        if state is None:
            return None
        custom: str | None = None
        if state.serialized_custom_status:
            decoded = json.loads(state.serialized_custom_status)
            custom = decoded if isinstance(decoded, str) else None
        return InstanceStatus(running=state.runtime_status in _RUNNING_STATUSES, custom_status=custom)

    def raise_event(self, instance_id: str, name: str, payload: dict[str, Any]) -> None:
        """Raise an external event."""
        self._client.raise_orchestration_event(instance_id, name, data=payload)

    def raise_event_if_exists(self, instance_id: str, name: str, payload: dict[str, Any]) -> bool:
        """Raise an external event without reading the status first
        (:class:`~orderflow.orchestration.UncheckedEventRaiser`).

        The backend answers ``NOT_FOUND`` for an unknown instance (False), keeps an event raised on a
        finished instance without ever dispatching it, and buffers one a running instance does not wait
        on until a wait of that name, which takes it once.

        Raises:
            grpc.RpcError: any other answer (the backend is unreachable: retry the message).
        """
        try:
            self._client.raise_orchestration_event(instance_id, name, data=payload)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:
                return False
            raise
        return True

    def purge_ended_before(self, created_before: datetime) -> int:
        """Delete every ended instance created before ``created_before`` (UTC), with its history
        (:class:`~orderflow.orchestration.OrchestrationHistories`): the backend's purge by filter.

        Raises:
            TransientError: the backend did not answer.
        """
        try:
            result = self._client.purge_orchestrations_by(
                created_time_to=created_before.astimezone(UTC),
                runtime_status=list(_ENDED_STATUSES),
                recursive=True,
            )
        except grpc.RpcError as exc:
            raise TransientError(f"the orchestration backend refused the purge: {exc.code()}") from exc
        return int(result.deleted_instance_count)


DURABLETASK_WORKER_LOGGER = "durabletask.worker"
"""The logger the host gives its durabletask worker."""


class _LocalCancelNoise(logging.Filter):
    """Drops the worker's warning about its own work-item stream being cancelled by ``worker.stop()``.

    durabletask 1.12 logs ``Error in work item stream: ... CANCELLED "Locally cancelled by application!"``
    at WARNING on every stop, then recognises the cancellation as a shutdown ("Disconnected"). The
    filter is attached only while the host stops the worker, and matches only that gRPC status and
    detail: any other stream error is still logged.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not (
            message.startswith("Error in work item stream")
            and "StatusCode.CANCELLED" in message
            and "Locally cancelled by application!" in message
        )


@contextmanager
def quiet_local_cancel(logger_name: str = DURABLETASK_WORKER_LOGGER) -> Iterator[None]:
    """While stopping a durabletask worker that logs to ``logger_name``, drop its benign warning about
    the stream the stop itself cancelled (:class:`_LocalCancelNoise`)."""
    target = logging.getLogger(logger_name)
    noise = _LocalCancelNoise()
    target.addFilter(noise)
    try:
        yield
    finally:
        target.removeFilter(noise)


def _durabletask_activity(
    activity: Activity[Any, Any], deps: Dependencies, sections: ActivitySections
) -> Any:
    """A durabletask activity under ``activity``'s contract name that runs it with ``deps`` and
    ``sections``."""

    def run(_ctx: Any, payload: dict[str, Any]) -> dict[str, Any]:
        return activity.run(payload, deps, sections)

    run.__name__ = activity.name
    return run


def register_order_workflow(
    worker: dt_worker.TaskHubGrpcWorker,
    deps: Dependencies,
    sections: ActivitySections,
    on_end: Callable[[str], None] = _untold,
) -> None:
    """Register the order orchestrator and every activity of :data:`activities.table.ACTIVITIES` (by its
    contract name, run with ``deps`` and the activities' ``sections``) on a worker; ``on_end`` is told
    each orchestration's end (:func:`durabletask_orchestrator`)."""
    orchestrator = durabletask_orchestrator(order_workflow, on_end)
    orchestrator.__name__ = ORDER_WORKFLOW
    worker.add_orchestrator(orchestrator)  # type: ignore[arg-type]
    for activity in ACTIVITIES:
        worker.add_activity(_durabletask_activity(activity, deps, sections))
