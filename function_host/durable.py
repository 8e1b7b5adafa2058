"""The workflow-context adapter for Azure Durable Functions (azure-functions-durable 1.x, Python).

Maps :class:`orchestrators.context.WorkflowContext` onto
``azure.durable_functions.DurableOrchestrationContext`` so the Azure host runs the same
:func:`orchestrators.workflow.order_workflow` body as the local host (docs/design.md §1); its
counterpart for the local host is :mod:`devhost.durabletask_adapter`. Only the scheduler's blueprint
(:mod:`function_host.blueprints.orchestrators`) uses it. It implements the orchestrators role's port,
:mod:`orchestrators.context`, which is the one role module a host support module imports.

Facts about the SDK (azure-functions-durable 1.7.0) this adapter relies on:

- A failed activity is thrown into the orchestrator generator as a plain ``Exception`` instance (exact
  type, never a subclass) built as ``Exception(f"{Reason} \\n {Details}")`` from the ``TaskFailed``
  event (``models/TaskOrchestrationExecutor.py``, ``set_task_value``); a ``call_activity_with_retry`` that
  ran out of attempts throws the same instance of its last failure (``models/Task.py``,
  ``RetryAbleTask``). Nothing else is thrown at a ``yield``.
- A cancelled timer is not a new action: ``TimerTask.cancel()`` sets ``is_cancelled`` on the timer's
  ``CreateTimerAction``, which is then emitted with ``"isCanceled": true`` (``models/Task.py``,
  ``models/actions/CreateTimerAction.py``).
- ``RetryOptions`` carries only ``first_retry_interval_in_milliseconds`` and ``max_number_of_attempts``
  (``models/RetryOptions.py``); the extension applies its defaults for the rest (backoff coefficient 1,
  no maximum interval), so retries on Durable Functions wait a fixed interval.
- ``current_utc_datetime`` is the ``Timestamp`` of an ``OrchestratorStarted`` event parsed by
  ``dateutil``: aware (``tzutc()``) when the text ends in ``Z``, naive otherwise.
- A raised event's payload reaches the orchestrator one JSON level deeper than it was raised:
  ``DurableOrchestrationClient.raise_event`` posts ``json=json.dumps(event_data)``, so aiohttp encodes
  the payload's JSON text once more; the extension parses the body once and stores the string it finds
  as the event's ``Input``, which the SDK decodes to that text
  (:meth:`DurableFunctionsWorkflowContext.task_result` decodes it again).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Generator, Sequence
from datetime import UTC, datetime
from typing import Any

from azure.durable_functions import DurableOrchestrationContext, RetryOptions

from orchestrators.context import ActivityRetry, WorkflowContext, WorkflowGenerator, WorkflowTask, drive

DfOrchestratorFunction = Callable[[DurableOrchestrationContext], Generator[WorkflowTask, Any, dict[str, Any]]]
"""What ``df.Orchestrator.create`` and ``@bp.orchestration_trigger`` accept: a generator function."""


class DurableFunctionsWorkflowContext:
    """A :class:`WorkflowContext` over a Durable Functions orchestration context.

    Tasks are the SDK's own ``TaskBase`` objects; the workflow only yields them, compares them by identity
    and reads them through :meth:`task_result`.
    """

    def __init__(self, ctx: DurableOrchestrationContext) -> None:
        """Wrap ``ctx``, the context the Functions host (or ``df.Orchestrator``) passes the orchestrator."""
        self._ctx = ctx

    @property
    def instance_id(self) -> str:
        """The orchestration instance id (``{orderId}:{attempt}``)."""
        return str(self._ctx.instance_id)

    @property
    def current_utc_datetime(self) -> datetime:
        """Replay-safe current time as an aware ``datetime`` in :data:`datetime.UTC`.

        The SDK's value is naive or aware depending on the history's timestamp text (module docstring);
        both mean UTC. The result is normalised to ``UTC`` so deadlines serialise identically whatever the
        host sent.
        """
        now: datetime = self._ctx.current_utc_datetime
        return now.replace(tzinfo=UTC) if now.tzinfo is None else now.astimezone(UTC)

    @property
    def is_replaying(self) -> bool:
        """True while the SDK replays history."""
        return bool(self._ctx.is_replaying)

    def set_custom_status(self, status: str) -> None:
        """Set the instance's custom status (emitted as ``customStatus`` with this episode's actions)."""
        self._ctx.set_custom_status(status)

    def call_activity(
        self, name: str, payload: dict[str, Any], *, retry: ActivityRetry | None = None
    ) -> WorkflowTask:
        """Schedule activity ``name``: a ``CallActivity`` action, or ``CallActivityWithRetry`` with ``retry``.

        Args:
            name: The registered activity name.
            payload: JSON-able input.
            retry: Retry options; mapped by :func:`retry_options_for` (fixed interval on this runtime).

        Returns:
            The SDK task; yielding it throws a plain ``Exception`` when the activity failed for good.
        """
        if retry is None:
            return self._ctx.call_activity(name, payload)
        return self._ctx.call_activity_with_retry(name, retry_options_for(retry), payload)

    def create_timer(self, fire_at: datetime) -> WorkflowTask:
        """A durable timer firing at ``fire_at``.

        The SDK compares ``fire_at`` with its own ``current_utc_datetime`` (long-timer splitting, replay
        schema V3), so the value is converted to UTC and given the same naive/aware form as the SDK's
        clock; comparing a naive with an aware ``datetime`` would raise ``TypeError``. The SDK writes
        ``fireAt`` with a literal ``Z``, which is correct only for UTC values.

        Args:
            fire_at: When the timer fires; an aware datetime in any zone, or naive meaning UTC.

        Returns:
            The SDK timer task (cancellable through :meth:`cancel_timer`).
        """
        utc = fire_at.replace(tzinfo=UTC) if fire_at.tzinfo is None else fire_at.astimezone(UTC)
        sdk_now: datetime = self._ctx.current_utc_datetime
        return self._ctx.create_timer(utc.replace(tzinfo=None) if sdk_now.tzinfo is None else utc)

    def wait_for_external_event(self, name: str) -> WorkflowTask:
        """A task completed by the next ``EventRaised`` named ``name`` (its payload is the task's result)."""
        return self._ctx.wait_for_external_event(name)

    def when_any(self, tasks: Sequence[WorkflowTask]) -> WorkflowTask:
        """``task_any``: completes with the first child task to complete (the child task itself)."""
        return self._ctx.task_any(list(tasks))

    def cancel_timer(self, timer: WorkflowTask) -> None:
        """Cancel a timer that lost a race, so the instance can complete without waiting for it.

        ``TimerTask.cancel()`` marks the timer's ``CreateTimer`` action ``isCanceled``; it raises
        ``ValueError`` for a timer that already fired, which the workflow never cancels (it only cancels
        the loser of a race it just observed).
        """
        timer.cancel()

    def task_result(self, task: WorkflowTask) -> Any:
        """The result of a completed SDK task: the workflow reads event payloads through it.

        A payload raised through the Durable Functions client arrives as its own JSON text (module
        docstring), so a string result is decoded once more; an object (a history that holds the payload
        encoded once) and a string that is no JSON are returned as they are. Deterministic: it depends on
        the history only.
        """
        result = task.result
        if isinstance(result, str):
            try:
                return json.loads(result)
            except ValueError:
                return result
        return result


def retry_options_for(retry: ActivityRetry) -> RetryOptions:
    """Map :class:`ActivityRetry` onto the SDK's ``RetryOptions``.

    ``RetryOptions`` in azure-functions-durable 1.x has no backoff coefficient or maximum interval, so
    ``backoff`` and ``max_interval_s`` cannot be expressed: every retry waits ``first_interval_s``. With
    the workflow's state-write policy (1 s, 4 attempts, backoff 2, cap 4 s) retries therefore wait
    1 + 1 + 1 = 3 s in total on Durable Functions against 1 + 2 + 4 = 7 s on durabletask. The attempt
    count, the part the protocol depends on, is identical.

    Args:
        retry: The workflow's retry options.

    Returns:
        ``RetryOptions(first_retry_interval_in_milliseconds, max_number_of_attempts)``; the interval is
        rounded to whole milliseconds and at least 1 ms (the SDK rejects 0).
    """
    first_ms = max(1, round(retry.first_interval_s * 1000))
    return RetryOptions(
        first_retry_interval_in_milliseconds=first_ms, max_number_of_attempts=retry.max_attempts
    )


def durable_functions_orchestrator(
    body: Callable[[WorkflowContext, dict[str, Any]], WorkflowGenerator],
) -> DfOrchestratorFunction:
    """Wrap a workflow body as a Durable Functions orchestrator function.

    The returned generator function reads the input with ``context.get_input()`` and runs ``body`` under
    :func:`orchestrators.context.drive`, which turns the SDK's task-failure exception into
    :class:`orchestrators.context.ActivityFailed`. Register it with
    ``@bp.orchestration_trigger(context_name="context", orchestration=ORDER_WORKFLOW)`` (its parameter is
    named ``context``) or call ``df.Orchestrator.create(fn)``.

    Args:
        body: The workflow generator function, e.g. :func:`orchestrators.workflow.order_workflow`.

    Returns:
        A generator function ``(context) -> Generator`` named like ``body``.
    """

    def orchestrator(context: DurableOrchestrationContext) -> Generator[WorkflowTask, Any, dict[str, Any]]:
        payload: dict[str, Any] = context.get_input()
        return (yield from drive(body(DurableFunctionsWorkflowContext(context), payload), is_task_failure))

    orchestrator.__name__ = getattr(body, "__name__", "orchestrator")
    orchestrator.__qualname__ = orchestrator.__name__
    return orchestrator


def is_task_failure(exc: BaseException) -> bool:
    """True for the exception the SDK throws into the orchestrator when a yielded task failed.

    The SDK throws a plain ``Exception`` (exact type) for a failed activity, retried activity or
    sub-orchestration. Testing the exact type keeps every programming error (``TypeError``,
    ``KeyError``, pydantic's ``ValidationError``, orderflow's own errors, all subclasses) out of
    :class:`ActivityFailed`.
    """
    return type(exc) is Exception
