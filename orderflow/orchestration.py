"""The port to the orchestration runtime: what the starter and the response listener ask of it.

Implemented by ``devhost.durabletask_adapter.DurableTaskClient`` (durabletask, locally) and by
``function_host.durable_client.DurableFunctionsClient`` (the Durable Functions client binding, on Azure).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


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
