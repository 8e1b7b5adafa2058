"""The roles' orchestration client on Azure: :class:`~orderflow.orchestration.OrchestrationClient` over
the Durable Functions client binding (``@bp.durable_client_input``), for the starter and the response
listener."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

from azure.durable_functions.models.OrchestrationRuntimeStatus import OrchestrationRuntimeStatus

from orderflow.errors import TransientError
from orderflow.orchestration import InstanceStatus

_T = TypeVar("_T")


class DurableClientLike(Protocol):
    """The async methods of ``azure.durable_functions.DurableOrchestrationClient`` used here."""

    async def start_new(
        self, orchestration_function_name: str, instance_id: str | None = None, client_input: Any = None
    ) -> str: ...

    async def get_status(self, instance_id: str) -> Any: ...

    async def raise_event(self, instance_id: str, event_name: str, event_data: Any = None) -> None: ...

    async def purge_instance_history_by(
        self,
        created_time_from: datetime | None = None,
        created_time_to: datetime | None = None,
        runtime_status: list[OrchestrationRuntimeStatus] | None = None,
    ) -> Any: ...


_RUNNING = frozenset({"Running", "Pending", "Suspended", "ContinuedAsNew"})

_ENDED = [
    OrchestrationRuntimeStatus.Completed,
    OrchestrationRuntimeStatus.Failed,
    OrchestrationRuntimeStatus.Terminated,
]
"""Statuses of instances that ended: the ones whose history the retention pass deletes."""

PURGE_FROM = datetime(2000, 1, 1, tzinfo=UTC)
"""``created_time_from`` of the purge by time range (the SDK requires one): before any orderflow instance."""


class DurableFunctionsClient:
    """:class:`~orderflow.orchestration.OrchestrationClient` and
    :class:`~orderflow.orchestration.OrchestrationHistories` over the Durable Functions client binding.

    The client's methods are coroutines bound to the worker's event loop (the SDK shares one aiohttp
    session per process). The roles are synchronous, so an ``async`` trigger runs the role function
    in a thread (``asyncio.to_thread``) and this adapter submits each coroutine back to the trigger's
    loop and waits for it. Never call it on the loop's own thread: it would wait on itself.

    Args:
        client: The ``DurableOrchestrationClient`` from the binding.
        loop: The trigger's running loop; None runs each call on a private loop (scripts and tests).
        timeout_s: Longest wait for one call, seconds.
    """

    def __init__(
        self,
        client: DurableClientLike,
        loop: asyncio.AbstractEventLoop | None = None,
        *,
        timeout_s: float = 30.0,
    ) -> None:
        self._client = client
        self._loop = loop
        self._timeout_s = timeout_s

    def _run(self, coroutine: Coroutine[Any, Any, _T]) -> _T:
        if self._loop is None:
            return asyncio.run(coroutine)
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(self._timeout_s)

    def start(self, name: str, instance_id: str, payload: dict[str, Any]) -> bool:
        """Start the instance unless it exists: ``start_new`` would silently replace an existing one
        (Durable Functions Python 1.x, docs/design.md §7)."""
        if self.get_status(instance_id) is not None:
            return False
        self._run(self._client.start_new(name, instance_id, payload))
        return True

    def get_status(self, instance_id: str) -> InstanceStatus | None:
        """The instance's status, or None when the extension knows no such instance (HTTP 404).

        The SDK's ``get_status`` hides the HTTP status: it returns a status object for a 500 too, built
        from the extension's error document and without a runtime status. Only the 404, which has no
        body (``DurableOrchestrationStatus(message="")``), means "no such instance".

        Raises:
            TransientError: the extension answered with an error instead of a status.
        """
        status = self._run(self._client.get_status(instance_id))
        runtime = getattr(status, "runtime_status", None)
        if runtime is None:
            if status is None or getattr(status, "message", None) == "":
                return None
            detail = getattr(status, "ExceptionMessage", None) or getattr(status, "Message", None)
            raise TransientError(f"the status query of {instance_id} failed: {detail or 'no status'}")
        value = getattr(runtime, "value", str(runtime))
        custom = getattr(status, "custom_status", None)
        return InstanceStatus(
            running=value in _RUNNING, custom_status=custom if isinstance(custom, str) else None
        )

    def raise_event(self, instance_id: str, name: str, payload: dict[str, Any]) -> None:
        """Raise an external event (the extension answers 410 for a finished instance: raised)."""
        self._run(self._client.raise_event(instance_id, name, payload))

    def purge_ended_before(self, created_before: datetime) -> int:
        """Delete the history of every instance created before ``created_before`` (UTC) that completed,
        failed or was terminated: ``purge_instance_history_by``, which the extension serves as
        ``DELETE instances/?createdTimeFrom=...&createdTimeTo=...&runtimeStatus=...``.

        Raises:
            TransientError: the extension answered anything but 200 or 404 (the SDK raises a bare
                ``Exception`` then, its text the only detail).
        """
        # The SDK formats the times without an offset: they must be UTC already.
        until = created_before.astimezone(UTC)
        try:
            result = self._run(
                self._client.purge_instance_history_by(
                    created_time_from=PURGE_FROM, created_time_to=until, runtime_status=list(_ENDED)
                )
            )
        except Exception as exc:  # the SDK's only failure type here; re-raised as the kind it is
            raise TransientError(f"the history purge failed: {exc}") from exc
        return int(getattr(result, "instances_deleted", 0) or 0)
