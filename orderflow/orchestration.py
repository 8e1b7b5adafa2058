"""The port to the orchestration runtime: what the starter and the response listener ask of it.

Implemented by ``devhost.durabletask_adapter.DurableTaskClient`` (durabletask, locally) and by
``function_host.durable_client.DurableFunctionsClient`` (the Durable Functions client binding, on Azure).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class InstanceStatus:
    """What the runtime knows of an orchestration instance.

    Attributes:
        running: False once the instance completed, failed or was terminated.
        custom_status: The workflow's custom status (the step it waits on), if set.
    """

    running: bool
    custom_status: str | None = None


class OrchestrationClient(Protocol):
    """The durable client operations the roles use (durabletask locally, Durable Functions on Azure)."""

    def start(self, name: str, instance_id: str, payload: dict[str, Any]) -> bool:
        """Schedule a new instance.

        Returns:
            True if started now, False if an instance with this id already existed (not an error).
        """
        ...

    def get_status(self, instance_id: str) -> InstanceStatus | None:
        """The instance's status, or None if no such instance exists."""
        ...

    def raise_event(self, instance_id: str, name: str, payload: dict[str, Any]) -> None:
        """Raise external event ``name`` on the instance."""
        ...


@runtime_checkable
class UncheckedEventRaiser(Protocol):
    """A client whose runtime lets the listener raise a response without reading the status first.

    Offered only where a raise is exactly as safe without the read (docs/design.md §7): the runtime
    refuses a raise on an unknown instance with an answer of its own, drops one on a finished instance,
    and holds an event an instance does not wait on as it holds one whose raise raced a change of status
    (the read and the raise are never atomic, so the workflow already copes with that). durabletask does
    (locally); Durable Functions answers a raise on an unknown instance with an error the caller cannot
    tell from an outage (a bare ``Exception``, its text the only difference), so its client does not
    offer it.
    """

    def raise_event_if_exists(self, instance_id: str, name: str, payload: dict[str, Any]) -> bool:
        """Raise external event ``name`` on the instance.

        Returns:
            False (nothing raised) when the runtime knows no such instance; True otherwise.
        """
        ...


class OrchestrationHistories(Protocol):
    """The runtime's purge of instance history, for the retention pass (docs/data.md).

    Implemented by ``devhost.durabletask_adapter.DurableTaskClient`` (durabletask's purge by filter) and
    ``function_host.durable_client.DurableFunctionsClient`` (``purge_instance_history_by``).
    """

    def purge_ended_before(self, created_before: datetime) -> int:
        """Delete the history of every instance created before ``created_before`` (aware, UTC) that has
        ended: completed, failed or terminated. Running, pending and suspended instances stay.

        Returns:
            The number of instances deleted.

        Raises:
            TransientError: the runtime is unavailable.
        """
        ...
